"""Parsing an input into an s3:// dataset: the run's claim, a local parse into a private
staging dataset, and its publication (the protocol is dataset/s3_commit.py's; decoding is
parsers/ingest.py's, so that the files are byte for byte a local parse's)."""
import time
from pathlib import Path

from kmemscope.common.errors import KmemscopeError
from kmemscope.common.scratch import ScratchFolder
from kmemscope.dataset.s3_commit import (CLAIMS, WAIT_FOR_OTHER_S, Bucket, claim_ttl, committed,
                                         ensure_format, local_run_files, publish, try_claim)
from kmemscope.dataset.safefs import Dir
from kmemscope.parsers.ingest import RunSummary, file_sha256, ingest, run_id_for
from kmemscope.parsers.sources import open_source


def trace_digest(source):
    """The sha256 of the trace inside `source` (a trace.dat, a bundle folder or a packed
    bundle, unpacked into a private scratch folder), as the local parse computes it."""
    with ScratchFolder("kmemscope-s3-digest-") as scratch, Dir.of(Path(scratch)) as d:
        with open_source(source, d) as (trace_path, _bundle):
            return file_sha256(trace_path)


def ingest_s3(source, dataset, force=False, wait_s=None, **parse_options):
    """Parse `source` into the s3 dataset `dataset` -> RunSummary (skipped=True when the run
    was already in the dataset). parse_options: those of parsers.ingest.ingest."""
    b = Bucket(dataset)
    ttl = claim_ttl()
    ensure_format(b)           # a dataset this kmemscope cannot add to fails before decoding
    run_id = run_id_for(trace_digest(source))

    def skipped():
        return RunSummary(run_id=run_id, source=str(source), events=0, skipped=True)

    if not force and committed(b, run_id):
        return skipped()
    deadline = time.monotonic() + (WAIT_FOR_OTHER_S if wait_s is None else wait_s)
    pause = 0.05
    while True:
        claim = try_claim(b, run_id, ttl)
        if claim is not None:
            break
        if committed(b, run_id) and not force:
            return skipped()             # the other ingester's run is in
        if time.monotonic() > deadline:
            raise KmemscopeError(f"{source}: run {run_id} is being added by another ingester "
                                 f"(its claim {CLAIMS}/{run_id} is live)", "try again later")
        time.sleep(pause)
        pause = min(pause * 2, 1.0)
    try:
        if not force and committed(b, run_id):
            return skipped()             # added by the claim's previous holder
        with ScratchFolder("kmemscope-s3-stage-") as scratch:
            local = Path(scratch) / "ds"
            summary = ingest(source, local, **parse_options)
            if summary.run_id != run_id:
                raise KmemscopeError(f"{source}: its trace changed while it was parsed",
                                     "parse it again once it is complete")
            summary.replaced = publish(b, run_id, local_run_files(local, run_id), claim)
        return summary
    finally:
        claim.release()
