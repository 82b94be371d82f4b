"""Benchmark results beside the trace: the per-run `run_metrics` table.

A kernel comparison argues from the workload's own numbers (netperf
throughput, pgbench TPS, kbuild time) next to the allocator's. They reach a
dataset two ways:

- a bundle's `metrics.json` (`kmemscope record --metrics FILE` copies the file
  the workload wrote), loaded by parse with source 'bundle';
- `kmemscope metrics import DATASET FILE` (CSV or JSON), with source 'import',
  where each row names its run by run id, a unique prefix of one, or a host
  with a single run.

Every row is checked before anything is written: a file with one bad row
imports nothing. Re-importing a metric replaces that metric's values of the
runs it names; re-parsing a run keeps what was imported for it (the dataset layer's commit
calls run_metrics.keep_imported() under the dataset lock, just before the commit).

The files are untrusted: sizes, row counts and text lengths are bounded, names
are plain printable text (they are data in SQL, never identifiers or paths).
"""
import csv
import io
import json
import math
import os
import re
import stat
from pathlib import Path

from kmemscope.dataset.run_metrics import read_partition, write_partition
from kmemscope.common.errors import KmemscopeError

FILE_MAX_BYTES = 16 << 20
ROWS_MAX = 200_000
NAME_MAX = 128
UNIT_MAX = 32
BETTER = ("higher", "lower")
COLUMNS = ("run", "metric", "value", "unit", "better")
# Names the comparison gives its own metrics and groups: an imported metric may not take them.
RESERVED_PREFIXES = ("vmstat.", "stalls.", "frag.", "cost.", "mthp.", "shifted.", "workload.")
RESERVED_NAMES = ("headline", "vmstat", "stalls", "frag", "cost", "mthp", "shifted", "workload",
                  "benchmark")
# A value written as text: ASCII decimal only (float() would also take `1_000` and the
# digits of every script, which no benchmark writes and a reader would not see as a number).
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


class MetricsError(KmemscopeError):
    """A metrics file that cannot be imported (nothing was written)."""


# ---------------------------------------------------------------- reading files

def read_text_file(path, what):
    """The text of a regular file (no FIFO, device or symlink), at most FILE_MAX_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise MetricsError(f"{what} {path} does not exist") from None
    except OSError as exc:
        if exc.errno == 40:    # ELOOP: the path is a symlink
            raise MetricsError(f"{what} {path} is a symbolic link",
                               "kmemscope reads a regular file, not a link") from None
        raise MetricsError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise MetricsError(f"{what} {path} is not a regular file")
        if st.st_size > FILE_MAX_BYTES:
            raise MetricsError(f"{what} {path} is {st.st_size} bytes, more than {FILE_MAX_BYTES}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(FILE_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > FILE_MAX_BYTES:
        raise MetricsError(f"{what} {path} is larger than {FILE_MAX_BYTES} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MetricsError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from None


def _json_rows(text, where):
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise MetricsError(f"{where}: not JSON: {exc}") from None
    except RecursionError:
        raise MetricsError(f"{where}: JSON nested too deeply") from None
    if isinstance(doc, dict) and set(doc) == {"metrics"}:
        doc = doc["metrics"]
    if not isinstance(doc, list):
        raise MetricsError(f"{where}: expected a list of objects or {{\"metrics\": [...]}}")
    for i, row in enumerate(doc, 1):
        if not isinstance(row, dict):
            raise MetricsError(f"{where}: entry {i} is not an object")
    return [(i, row) for i, row in enumerate(doc, 1)]


def _csv_rows(text, where):
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in ("run", "metric", "value", "better") if c not in header]
    if missing:
        raise MetricsError(f"{where}: the CSV header lacks {', '.join(missing)}",
                           "columns: " + ",".join(COLUMNS))
    reader.fieldnames = header
    rows = []
    try:
        for row in reader:
            if None in row:
                raise MetricsError(f"{where}: line {reader.line_num} has more fields than the header")
            rows.append((reader.line_num, row))
            if len(rows) > ROWS_MAX:
                break
    except csv.Error as exc:
        raise MetricsError(f"{where}: line {reader.line_num}: {exc}") from None
    return rows


def _text(value, what, where, limit, required=True):
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise MetricsError(f"{where}: {what} is missing")
        return ""
    if not isinstance(value, str):
        raise MetricsError(f"{where}: {what} must be text, not {type(value).__name__}")
    value = value.strip()
    if len(value) > limit:
        raise MetricsError(f"{where}: {what} is longer than {limit} characters")
    if not value.isprintable():
        raise MetricsError(f"{where}: {what} {value!r} holds control characters")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise MetricsError(f"{where}: {what} holds a lone surrogate")
    return value


def _number(value, where):
    if isinstance(value, bool):
        raise MetricsError(f"{where}: value must be a number, not {str(value).lower()}")
    if isinstance(value, str):
        if value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise MetricsError(f"{where}: value must be a finite number, not {value.strip()}")
        if not _DECIMAL.fullmatch(value.strip()):
            raise MetricsError(f"{where}: value {value.strip()[:40]!r} is not a number",
                               "write it in ASCII decimal digits, like 12.5 or 1e6")
        value = float(value.strip())
    if not isinstance(value, (int, float)):
        raise MetricsError(f"{where}: value must be a number, not {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:           # a JSON integer of hundreds of digits
        raise MetricsError(f"{where}: value must be a finite number, not one of "
                           f"{len(str(value))} digits") from None
    if not math.isfinite(value):
        raise MetricsError(f"{where}: value must be a finite number, not {value}")
    return value


def check_row(row, where, with_run=True):
    """One metrics record -> (run, metric, value, unit, better), or MetricsError naming `where`."""
    extra = sorted(set(row) - set(COLUMNS if with_run else COLUMNS[1:]))
    if extra:
        raise MetricsError(f"{where}: unknown field {extra[0]!r}",
                           "fields: " + ",".join(COLUMNS if with_run else COLUMNS[1:]))
    run = _text(row.get("run"), "run", where, NAME_MAX) if with_run else None
    metric = _text(row.get("metric"), "metric", where, NAME_MAX)
    if metric.startswith(RESERVED_PREFIXES):
        raise MetricsError(f"{where}: metric {metric!r} starts with a prefix kmemscope uses for its "
                           f"own metrics ({', '.join(RESERVED_PREFIXES)})", "rename the metric")
    if metric in RESERVED_NAMES:
        raise MetricsError(f"{where}: metric {metric!r} is the name of a group of kmemscope's "
                           "metrics", "rename the metric")
    value = _number(row.get("value"), where)
    unit = _text(row.get("unit"), "unit", where, UNIT_MAX, required=False)
    better = _text(row.get("better"), "better", where, 8)
    if better not in BETTER:
        raise MetricsError(f"{where}: better must be 'higher' or 'lower', not {better!r}")
    return run, metric, value, unit, better


def read_metrics_file(path, fmt=None):
    """The records of a CSV or JSON metrics file: [(where, run, metric, value, unit, better)]."""
    text = read_text_file(path, "metrics file")
    fmt = fmt or ("json" if str(path).lower().endswith(".json") else
                  "csv" if str(path).lower().endswith(".csv") else
                  "json" if text.lstrip()[:1] in ("[", "{") else "csv")
    if fmt not in ("csv", "json"):
        raise MetricsError(f"unknown metrics format {fmt!r}", "csv or json")
    rows = _json_rows(text, str(path)) if fmt == "json" else _csv_rows(text, str(path))
    if not rows:
        raise MetricsError(f"{path}: no metrics in the file")
    if len(rows) > ROWS_MAX:
        raise MetricsError(f"{path}: more than {ROWS_MAX} rows")
    what = "entry" if fmt == "json" else "line"
    return [(f"{path} {what} {n}", *check_row(row, f"{path} {what} {n}")) for n, row in rows]


def read_bundle_metrics(bundle):
    """A bundle's metrics.json as [(metric, value, unit, better)], or None when it has none."""
    if bundle is None:
        return None
    path = Path(bundle) / "metrics.json"
    if not os.path.lexists(path):
        return None
    text = read_text_file(path, "bundle metrics")
    rows = _json_rows(text, str(path))
    if len(rows) > ROWS_MAX:
        raise MetricsError(f"{path}: more than {ROWS_MAX} metrics")
    out, seen = [], set()
    for n, row in rows:
        _, metric, value, unit, better = check_row(row, f"{path} entry {n}", with_run=False)
        if metric in seen:
            raise MetricsError(f"{path} entry {n}: metric {metric!r} appears twice",
                               "one value per metric and run")
        seen.add(metric)
        out.append((metric, value, unit, better))
    return out


# ---------------------------------------------------------------- import

# A runs partition kmemscope writes is a few KiB; its host at most a few hundred bytes.
RUNS_FILE_MAX_BYTES = 8 << 20
HOST_MAX = 256


def _dataset_runs(ref, notes=None):
    """{run_id: host} of the committed runs (those with a `runs` partition) of the dataset of
    handle `ref`.

    Only the runs the readers list (reader.table_runs: kmemscope's own names, no links); a
    host longer than HOST_MAX, or a runs file larger than RUNS_FILE_MAX_BYTES, is not read
    (the run is then named by its id only)."""
    import pyarrow.parquet as pq

    parts = ref.listing.get("runs", {})     # a link or FIFO in the layout: one line
    out = {}
    for run, files in sorted(parts.items()):
        host = None
        for f in files:
            try:
                pf = pq.ParquetFile(f)
                col = pf.schema_arrow.get_field_index("host")
                size = sum(pf.metadata.row_group(i).column(col).total_uncompressed_size
                           for i in range(pf.metadata.num_row_groups)) if col >= 0 else 0
                if col < 0 or size > min(RUNS_FILE_MAX_BYTES, HOST_MAX * 4 + 1024):
                    continue
                t = pf.read(columns=["host"])
                value = t.column(0)[0].as_py() if t.num_rows else None
                host = value if isinstance(value, str) and len(value) <= HOST_MAX else None
            except Exception:       # an old or damaged runs file: no host to match by
                host = None
        out[run] = host
    if not out:
        raise MetricsError(f"{ref.location} holds no runs", "parse bundles into it first")
    return out


def resolve_run(name, runs):
    """The run id that `name` designates: an id, a unique id prefix, or a host with one run."""
    if name in runs:
        return name
    by_prefix = [r for r in runs if r.startswith(name)]
    if len(by_prefix) == 1:
        return by_prefix[0]
    by_host = sorted(r for r, h in runs.items() if h == name)
    if len(by_host) == 1:
        return by_host[0]
    if len(by_prefix) > 1:
        raise MetricsError(f"run {name!r} is ambiguous: {len(by_prefix)} runs start with it",
                           "give more of the run id")
    if len(by_host) > 1:
        raise MetricsError(f"host {name!r} has {len(by_host)} runs ({', '.join(by_host[:3])}...)",
                           "name the run by its id")
    raise MetricsError(f"no run {name!r} in the dataset (neither a run id, a prefix nor a host)",
                       "kmemscope info DATASET lists the runs")


def import_metrics(dataset, path, fmt=None, reserved=()):
    """Import a metrics file into `dataset`; returns {run_id: [metric names]} that were written.

    Every row is checked and every run resolved first: a bad row imports nothing.
    reserved: names of the comparison's own metrics (the caller knows them), refused
    like the reserved prefixes: one name, two different rows, is what they would give.
    """
    from kmemscope.dataset import commit as commit_mod
    from kmemscope.dataset.handle import DatasetRef

    records = read_metrics_file(path, fmt)
    ref = DatasetRef.of(dataset)          # a path, or the handle of Dataset.import_metrics
    dataset = Path(ref.location)
    if not dataset.is_dir():
        raise MetricsError(f"dataset {dataset} does not exist or is not a directory")
    with commit_mod.dataset_lock(dataset):
        try:
            commit_mod.check_layout(dataset)     # no table folder that links out of the dataset
        except commit_mod.UnsafeEntry as exc:
            raise MetricsError(f"{dataset}: {exc}", "nothing was imported") from None
        runs = _dataset_runs(ref.renewed())      # listed under the lock
        by_run: dict = {}
        seen: dict = {}
        for where, run, metric, value, unit, better in records:
            if metric in reserved:
                raise MetricsError(f"{where}: metric {metric!r} is the name of one of kmemscope's "
                                   "own metrics (kmemscope compare shows it already)",
                                   "rename the metric; nothing was imported")
            try:
                run_id = resolve_run(run, runs)
            except MetricsError as exc:
                raise MetricsError(f"{where}: {exc.args[0]}", exc.hint) from None
            if (run_id, metric) in seen:
                raise MetricsError(f"{where}: run {run_id} has metric {metric!r} already "
                                   f"({seen[(run_id, metric)]})",
                                   "one value per run and metric: average iterations first")
            seen[(run_id, metric)] = where
            by_run.setdefault(run_id, []).append((metric, value, unit, better, "import"))
        try:
            # Every partition is read (and so checked: no link, no other kind of file)
            # before the first is written.
            merged = {}
            for run_id, rows in sorted(by_run.items()):
                names = {r[0] for r in rows}
                kept = [r for r in read_partition(dataset, run_id) if r[0] not in names]
                merged[run_id] = sorted(kept + rows)
            for run_id, rows in merged.items():
                write_partition(dataset, run_id, rows)
        except commit_mod.UnsafeEntry as exc:
            raise MetricsError(exc.args[0], "nothing was imported; " + (exc.hint or "remove it")) \
                from None
    return {run_id: sorted({r[0] for r in rows}) for run_id, rows in by_run.items()}
