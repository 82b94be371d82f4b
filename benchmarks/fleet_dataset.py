#!/usr/bin/env python3
"""Build a many-run dataset from the three real example bundles, for the fleet benchmark.

    fleet_dataset.py --runs N -o DATASET [--source DIR]

The example bundles (examples/kmem-compaction, thp-faults, memory-pressure) are
parsed once with `kmemscope parse`. The N runs of DATASET are RE-LABELLED COPIES
of those three real runs, not N distinct captures: run i copies source run
i mod 3 (every table's `run_id=<id>` partition, hard-linked where the file
system allows, else copied) under a new 16-hex-digit run id, and its `runs` row
gets host hNNN and the labels kernel=a|b (alternating), host=hNNN and
copy_of=<source run id> (with --keep-labels: the source run's own labels, host=hNNN and
copy_of, so an A/B dataset's sides stay its sides, docs/compare.md's 60-host example). Run 0's id is all digits (0123456789012345), so a
reader that guesses partition types would turn it into a number and lose it.
Derived tables (DATASET/_derived) are not copied: the first query builds them;
the format file (_kmemscope.json) and each run's record of its files
(runs/run_id=<id>/_files.json) are.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [ROOT / "examples" / n for n in ("kmem-compaction", "thp-faults", "memory-pressure")]
DIGIT_ID = "0123456789012345"
FORMAT_FILE = "_kmemscope.json"


def kmemscope_command():
    script = Path(sys.executable).with_name("kmemscope")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kmemscope.cli"]


def parse_sources(out, bundles=EXAMPLES):
    """Parse each bundle into dataset `out`; return the run ids in bundle order."""
    from kmemscope.dataset import reader as ds
    ids = []
    for bundle in bundles:
        before = set(ds.table_runs(out).get("runs", {})) if Path(out).is_dir() and any(
            Path(out).iterdir()) else set()
        subprocess.run([*kmemscope_command(), "parse", str(bundle), "-o", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        after = set(ds.table_runs(out)["runs"])
        new = after - before
        # parsing the same trace again keeps its id: find it by its source then
        ids.append(new.pop() if new else _run_of(out, bundle))
    return ids


def _run_of(dataset, bundle):
    from kmemscope.dataset import reader as ds
    for run, files in ds.table_runs(dataset)["runs"].items():
        row = pq.read_table(files[0]).to_pylist()[0]
        if Path(row["source_file"]).resolve().parent == Path(bundle).resolve():
            return run
    raise SystemExit(f"fleet_dataset: no run of {bundle} in {dataset}")


def fleet_run_id(i):
    """Run i's id: 16 hex digits; run 0's is all digits."""
    if i == 0:
        return DIGIT_ID
    return hashlib.sha256(f"kmemscope-fleet-{i}".encode()).hexdigest()[:16]


def fleet_labels(i, source_run, own=None):
    """Run i's labels: kernel a|b alternating, or the source run's own labels (`own`)."""
    first = dict(own) if own is not None else {"kernel": "a" if i % 2 == 0 else "b"}
    return {**first, "host": f"h{i:03d}", "copy_of": source_run}


def _labels_of(files):
    """The labels of a source run, from its runs table."""
    return dict(pq.read_table(files[0], columns=["labels"]).to_pylist()[0]["labels"] or [])


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _relabelled_runs(files, host, labels):
    """The runs table of a source run with host and labels replaced (same schema)."""
    table = pq.read_table(files[0]) if len(files) == 1 else pa.concat_tables(
        pq.read_table(f) for f in files)
    cols = {name: table.column(name) for name in table.column_names}
    n = table.num_rows
    cols["host"] = pa.array([host] * n, table.schema.field("host").type)
    cols["labels"] = pa.array([list(labels.items())] * n, table.schema.field("labels").type)
    return pa.table(cols, schema=table.schema)


def _copy_record(src_part, dest_part, new):
    """The source run's record of its files (digests, rows, schemas: _files.json), as a
    parse writes it, for the copy: its own run id, and its rewritten runs file's entry."""
    import json

    from kmemscope.dataset import digests

    doc = digests.read_digests(src_part / digests.DIGESTS)
    if doc is None:
        return
    doc["run_id"] = new
    (dest_part / digests.DIGESTS).write_text(json.dumps(doc, sort_keys=True, indent=0))
    from kmemscope.dataset.safefs import Dir

    # the runs file was rewritten for the copy: its entry follows (through no-follow folders)
    with Dir.root(dest_part.parent.parent) as root, \
            root.walk([dest_part.parent.name, dest_part.name], "the copy's runs folder") as part:
        digests.update_digests(root, dest_part.parent.name, new, part)


def build(source, dest, n, source_runs=None, keep_labels=False):
    """Write N re-labelled copies of the runs of dataset `source` into `dest`.

    Returns [(new run id, source run id)]. `dest` must not exist yet.
    """
    from kmemscope.dataset import reader as ds
    parts = ds.table_runs(source)
    source_runs = list(source_runs or sorted(parts["runs"]))
    dest = Path(dest)
    dest.mkdir(parents=True)
    fmt = Path(source) / FORMAT_FILE
    if fmt.is_file():
        # the copies are of the same dataset format as their source
        shutil.copy2(fmt, dest / FORMAT_FILE)
    made = []
    for i in range(n):
        src = source_runs[i % len(source_runs)]
        new = fleet_run_id(i)
        for table, byrun in parts.items():
            if table == "runs" or src not in byrun:
                continue
            d = dest / table / f"run_id={new}"
            d.mkdir(parents=True)
            for f in byrun[src]:
                _link_or_copy(f, d / f.name)
        # the runs partition last: readers see a run once it is in place
        d = dest / "runs" / f"run_id={new}"
        d.mkdir(parents=True)
        own = _labels_of(parts["runs"][src]) if keep_labels else None
        pq.write_table(_relabelled_runs(parts["runs"][src], f"h{i:03d}", fleet_labels(i, src, own)),
                       d / "part-0.parquet")
        _copy_record(Path(parts["runs"][src][0]).parent, d, new)
        made.append((new, src))
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, required=True, metavar="N")
    ap.add_argument("-o", "--output", type=Path, required=True, help="new dataset directory")
    ap.add_argument("--keep-labels", action="store_true",
                    help="keep each source run's labels (an A/B dataset keeps its sides)")
    ap.add_argument("--source", type=Path,
                    help="dataset of the parsed examples (default: parsed into OUTPUT.source)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.output.exists():
        ap.error(f"{args.output} exists")
    source = args.source
    runs = None
    if source is None:
        source = args.output.with_name(args.output.name + ".source")
        runs = parse_sources(source)
    made = build(source, args.output, args.runs, runs, args.keep_labels)
    print(f"{args.output}: {len(made)} runs, re-labelled copies of the {len(set(s for _, s in made))} "
          f"real runs in {source}")


if __name__ == "__main__":
    main()
