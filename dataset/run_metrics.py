"""The per-run `run_metrics` table's storage: one Parquet file per run partition.

Benchmark results (parsed from a bundle's metrics.json or imported from a CSV
or JSON file by kmemscope.parsers.run_metrics) live here beside the trace's
tables. Values with source 'import' outlive a re-parse of their run: commit()
calls keep_imported() under the dataset lock before it commits the run.
"""
import os
import uuid
from pathlib import Path

from kmemscope.errors import DatasetError

from .digests import update_digests
from .safefs import RUN_PREFIX

TABLE = "run_metrics"
PART = "part-0.parquet"


def metrics_table(rows, source):
    """An Arrow table of run_metrics rows [(metric, value, unit, better)] (run_id from the partition)."""
    import pyarrow as pa

    return pa.table({
        "metric": pa.array([r[0] for r in rows], pa.string()),
        "value": pa.array([r[1] for r in rows], pa.float64()),
        "unit": pa.array([r[2] for r in rows], pa.string()),
        "better": pa.array([r[3] for r in rows], pa.string()),
        "source": pa.array([source] * len(rows), pa.string()),
    })


def read_partition(part_dir):
    """The rows of a run's run_metrics partition: [(metric, value, unit, better, source)]."""
    out = []
    if not part_dir.is_dir() or part_dir.is_symlink():
        return out          # the usual case at commit: no import to keep, and no pyarrow to load
    import pyarrow.parquet as pq

    for f in sorted(part_dir.glob("*.parquet")):
        if f.is_symlink() or not f.is_file():
            raise DatasetError(f"{f} is not a regular file", "remove it from the dataset")
        try:
            t = pq.read_table(f, columns=["metric", "value", "unit", "better", "source"],
                              page_checksum_verification=True)
        except Exception as exc:
            raise DatasetError(f"cannot read {f}: {str(exc).splitlines()[0]}",
                               "remove the file, then import the run's metrics again") from None
        out += [tuple(r.values()) for r in t.to_pylist()]
    return out


def write_partition(part_dir, rows):
    """Replace the partition's file with `rows` (atomically: written aside, then renamed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "metric": pa.array([r[0] for r in rows], pa.string()),
        "value": pa.array([r[1] for r in rows], pa.float64()),
        "unit": pa.array([r[2] for r in rows], pa.string()),
        "better": pa.array([r[3] for r in rows], pa.string()),
        "source": pa.array([r[4] for r in rows], pa.string()),
    })
    part_dir.mkdir(parents=True, exist_ok=True)
    tmp = part_dir / f".{PART}.{uuid.uuid4().hex[:8]}.tmp"
    pq.write_table(table, tmp, write_page_checksum=True)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    for old in part_dir.glob("*.parquet"):
        if old.name != PART:
            old.unlink()
    os.replace(tmp, part_dir / PART)
    update_digests(part_dir)       # a committed run's recorded digests follow an import


def keep_imported(dataset, stage, run_id):
    """Before a run is (re)committed: carry its imported metrics into the staged partition.

    The bundle's own values (source 'bundle') are the staged ones; a metric
    that was imported replaces the bundle's value of the same name.
    """
    imported = [r for r in read_partition(Path(dataset) / TABLE / (RUN_PREFIX + run_id))
                if r[4] == "import"]
    if not imported:
        return
    staged_dir = Path(stage) / TABLE
    staged = read_partition(staged_dir) if staged_dir.is_dir() else []
    names = {r[0] for r in imported}
    rows = [r for r in staged if r[0] not in names] + imported
    write_partition(staged_dir, sorted(rows))
