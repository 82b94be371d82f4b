"""The per-run `run_metrics` table's storage: one Parquet file per run partition.

Benchmark results (parsed from a bundle's metrics.json or imported from a CSV
or JSON file by kmemscope.parsers.benchmark_results) live here beside the trace's
tables. Values with source 'import' outlive a re-parse of their run: commit()
calls keep_imported() under the dataset lock before it commits the run.

Every read and write goes through folders opened without following links from
the dataset (or stage) folder down (safefs.Dir): a `run_metrics` or `run_id=`
folder that is a link or not a folder is refused in one line naming it, and
the new file is written and renamed inside the opened partition folder.
"""
from kmemscope.common.errors import DatasetError

from .digests import update_digests
from .safefs import RUN_PREFIX, Dir, is_data_file

TABLE = "run_metrics"
PART = "part-0.parquet"
COLUMNS = ["metric", "value", "unit", "better", "source"]
# A run_metrics file kmemscope writes holds at most 200,000 short rows (parsers.run_metrics).
PART_MAX_BYTES = 64 << 20


def metrics_table(rows, source):
    """An Arrow table of run_metrics rows [(metric, value, unit, better)] (run_id from the partition)."""
    return _table([(*r, source) for r in rows])


def _table(rows):
    import pyarrow as pa

    return pa.table({
        "metric": pa.array([r[0] for r in rows], pa.string()),
        "value": pa.array([r[1] for r in rows], pa.float64()),
        "unit": pa.array([r[2] for r in rows], pa.string()),
        "better": pa.array([r[3] for r in rows], pa.string()),
        "source": pa.array([r[4] for r in rows], pa.string()),
    })


def _open_partition(base, run_id, make=False):
    """The run's run_metrics folder under the folder `base` (a Dir), or None when missing."""
    return base.walk([TABLE, RUN_PREFIX + run_id], "a run_metrics folder", make=make)


def _read(part):
    """The rows of the partition folder `part` (a Dir): [(metric, value, unit, better, source)]."""
    import pyarrow.parquet as pq

    out = []
    for entry in part.entries():
        if not is_data_file(entry.name):
            continue
        shown = part.path / entry.name
        with part.open_file(entry.name, "a Parquet file") as f:
            import os

            size = os.fstat(f.fileno()).st_size
            if size > PART_MAX_BYTES:
                raise DatasetError(f"{shown} is {size} bytes, more than a run_metrics file "
                                   f"kmemscope writes ({PART_MAX_BYTES})", "remove it")
            try:
                t = pq.read_table(f, columns=COLUMNS, page_checksum_verification=True)
            except Exception as exc:
                raise DatasetError(f"cannot read {shown}: {str(exc).splitlines()[0]}",
                                   "remove the file, then import the run's metrics again") from None
        out += [tuple(r.values()) for r in t.to_pylist()]
    return out


def _write(part, rows):
    """Replace the partition's files with one file of `rows` (written aside, then renamed)."""
    import pyarrow.parquet as pq

    table = _table(rows)
    part.write_atomic(PART, lambda f: pq.write_table(table, f, write_page_checksum=True))
    for entry in part.entries():
        if is_data_file(entry.name) and entry.name != PART:
            part.unlink(entry.name)


def read_partition(dataset, run_id):
    """The rows of the run's run_metrics partition in `dataset` ([] when it has none)."""
    with Dir.root(dataset) as root:
        part = _open_partition(root, run_id)
        if part is None:
            return []
        with part:
            return _read(part)


def write_partition(dataset, run_id, rows):
    """Replace the run's run_metrics partition of `dataset` by `rows`; the run's recorded
    digests follow (dataset/digests.py)."""
    with Dir.root(dataset) as root:
        with _open_partition(root, run_id, make=True) as part:
            _write(part, rows)
            update_digests(root, TABLE, run_id, part)


def keep_imported(dataset, stage, run_id):
    """Before a run is (re)committed: carry its imported metrics into the staged partition.

    The bundle's own values (source 'bundle') are the staged ones; a metric
    that was imported replaces the bundle's value of the same name.
    """
    imported = [r for r in read_partition(dataset, run_id) if r[4] == "import"]
    if not imported:
        return
    with Dir.of(stage) as st:
        staged = []
        if st.lstat(TABLE) is not None:
            with st.sub(TABLE, "a staged table folder") as d:
                staged = _read(d)
        names = {r[0] for r in imported}
        rows = [r for r in staged if r[0] not in names] + imported
        with st.sub_or_make(TABLE, "a staged table folder") as d:
            _write(d, sorted(rows))
