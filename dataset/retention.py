"""Retiring runs from a local dataset: by age, by id, by label (`kmemscope prune`).

A fleet dataset grows every day and keeps a window of history. Runs are removed under the
commit lock, whole: each run's partition of every table (`runs` first, so readers stop
listing it before anything else moves) and every derived cache of it (`_derived/*/run_id=`),
through a journaled removal that the next writer finishes if it is cut short
(dataset/commit.py retire_runs). A reader that listed a run before keeps its answer: it
reads the files it holds open (dataset/snapshot.py). What remains passes `verify`: every
recorded file is still there, and nothing a removed run had is left.

A run's age is from its recorded start: the bundle manifest's `start` (wall clock, taken by
`kmemscope record` when tracing began). A bare trace.dat has no such record; --older-than
keeps those runs and says so.
"""
import json
import os
import re
import time
from dataclasses import dataclass, field

from kmemscope.common.errors import DatasetError

from . import commit
from .handle import DatasetRef

_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text):
    """Seconds of an age such as 30d, 12h, 90m, 3600s or 2w (a bare number is seconds)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        m = _AGE.fullmatch(str(text))
        if not m:
            raise DatasetError(f"{text!r} is not an age", "give e.g. 30d, 12h, 90m or 3600s")
        seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds < 0:
        raise DatasetError(f"{text!r} is not an age", "give e.g. 30d, 12h, 90m or 3600s")
    return seconds


@dataclass
class PrunedRun:
    run_id: str
    started_ns: int | None          # the recorded start (Unix ns), None when not recorded
    labels: dict
    paths: list                     # what it had, relative to the dataset


@dataclass
class Pruned:
    runs: list = field(default_factory=list)      # [PrunedRun], by run id
    dry_run: bool = False
    notes: list = field(default_factory=list)
    kept: int = 0                                 # runs the dataset keeps

    @property
    def paths(self):
        return [p for r in self.runs for p in r.paths]


def started_ns(manifest_text):
    """The recorded start of a run (Unix ns) from its manifest column's JSON, or None."""
    try:
        start = json.loads(manifest_text).get("start") if manifest_text else None
    except (ValueError, RecursionError, AttributeError):
        return None
    value = start.get("realtime_ns") if isinstance(start, dict) else None
    return value if type(value) is int and value > 0 else None


def run_facts(ref, run_ids):
    """{run_id: (recorded start ns or None, labels)} read from the runs' files of the listing."""
    import pyarrow.parquet as pq

    out = {}
    runs = ref.listing.get(commit.RUNS_TABLE, {})
    for run in run_ids:
        start, labels = None, {}
        for f in runs.get(run, []):
            table = pq.read_table(os.fspath(f), columns=["manifest", "labels"])
            if table.num_rows:
                row = table.slice(0, 1).to_pylist()[0]
                start = started_ns(row["manifest"])
                labels = dict(row["labels"] or [])
        out[run] = (start, labels)
    return out


def prune(dataset, choose=None, older_than=None, dry_run=False, now=None):
    """Remove (or, dry_run, list) the runs of the local `dataset` that `choose(ref)` gives
    (default: every run) and, with older_than (seconds), that started longer ago than that
    before `now` (Unix seconds, default this moment). -> Pruned. Holds the commit lock for
    the choice and the removal; the removed files are deleted after it is let go."""
    ref = DatasetRef.of(dataset)
    if ref.is_s3:
        raise DatasetError("prune removes runs of a local dataset, not an s3:// one")
    path = ref.location
    if not path.is_dir() or not (path / commit.RUNS_TABLE).is_dir():
        raise DatasetError(f"dataset {path} does not exist or holds no runs",
                           "give the directory that `kmemscope parse -o` wrote")
    cut_ns = None
    if older_than is not None:
        cut_ns = int(((time.time() if now is None else now) - older_than) * 1e9)
    out = Pruned(dry_run=dry_run)
    work = None
    try:
        with commit.dataset_lock(path):
            if not dry_run:
                commit.recover(path)               # a dead parse's or removal's leftovers
            ref = DatasetRef(path)                 # listed under the lock: what is committed
            every = sorted(ref.listing.get(commit.RUNS_TABLE, {}))
            chosen = sorted(choose(ref) if choose is not None else every)
            facts = run_facts(ref, chosen)
            undated = []
            if cut_ns is not None:
                undated = [r for r in chosen if facts[r][0] is None]
                chosen = [r for r in chosen if facts[r][0] is not None and facts[r][0] < cut_ns]
            paths = commit.run_paths(path, chosen)
            out.runs = [PrunedRun(r, facts[r][0], facts[r][1], paths[r]) for r in chosen]
            out.kept = len(every) - len(chosen)
            if undated:
                out.notes.append(f"{len(undated)} run(s) have no recorded start (a bare trace.dat, "
                                 f"e.g. {undated[0]}) and are kept; remove them with --run")
            if chosen and not dry_run:
                work = commit.retire_runs(path, chosen)
            ref.snapshot.close()                   # the listing's fds, before the files go
    except OSError as exc:
        raise DatasetError(f"removing runs from {path}: {exc.strerror or exc}") from None
    if work is not None:
        work.remove()            # the removed files, after the lock: readers list meanwhile
    return out
