"""Parse one trace.dat or bundle into a run of the Parquet dataset.

The dataset layout is DESIGN.md's: DATASET/<table>/run_id=<run_id>/part-<n>.parquet.
A run is written to a staging directory inside the dataset and moved into place
only when every table is complete, with `runs` moved last: readers never see a
half-written run, and an interrupted or failed parse leaves the dataset as it was.

Decoding runs in a forked child process. libtracecmd parses the file's metadata
with C code that trusts the file more than kmemscope's own page decoder does;
should it ever crash on a corrupt file, the child dies, not the command, and the
parent reports the failure as an error about that file.
"""
import hashlib
import json
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kmemscope.capture.tracefs import parse_cpu_stats
from kmemscope.errors import KmemscopeError, TraceFileError

RUNS_TABLE = "runs"
# Snappy: about 20% larger files than zstd level 1 on page-allocator tables, but
# 40% less CPU to write them, and writing is half of what parsing costs.
PARQUET_COMPRESSION = "snappy"


@dataclass
class RunSummary:
    run_id: str
    source: str
    events: int
    tables: dict = field(default_factory=dict)   # table -> rows
    lost_events: int = 0
    unknown_events: int = 0     # records whose event id has no format in the file
    seconds: float = 0.0
    replaced: bool = False


# ---------------------------------------------------------------- inputs

@contextmanager
def open_source(path):
    """Yield (trace_path, bundle_dir or None) for a trace.dat, a bundle, or a packed bundle."""
    p = Path(path)
    if not p.exists():
        raise TraceFileError(f"{path}: no such file or directory", "check the path")
    if p.is_dir():
        trace = p / "trace.dat"
        if not trace.is_file():
            raise TraceFileError(f"{path}: directory has no trace.dat",
                                 "give a bundle written by `kmemscope record` or a trace.dat")
        yield trace, p
        return
    name = p.name
    if name.endswith((".tar.gz", ".tgz", ".tar.zst", ".tar.zstd")):
        with tempfile.TemporaryDirectory(prefix="kmemscope-bundle-") as tmp:
            _unpack(p, Path(tmp))
            found = sorted(Path(tmp).rglob("trace.dat"))
            if not found:
                raise TraceFileError(f"{path}: packed bundle has no trace.dat")
            yield found[0], found[0].parent
        return
    yield p, None


def _unpack(archive, dest):
    import subprocess

    try:
        if archive.name.endswith((".tar.zst", ".tar.zstd")):
            if shutil.which("zstd") is None:
                raise TraceFileError(f"{archive}: unpacking .tar.zst needs the zstd tool",
                                     "install zstd, or unpack the bundle yourself")
            proc = subprocess.run(["tar", "--zstd", "-xf", str(archive), "-C", str(dest)],
                                  capture_output=True, text=True)
            if proc.returncode:
                raise TraceFileError(f"{archive}: cannot unpack: {proc.stderr.strip()}")
        else:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise TraceFileError(f"{archive}: cannot unpack: {exc}") from None


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


def run_id_for(sha256):
    """A run is named by its content, so parsing the same trace twice replaces it."""
    return sha256[:16]


def read_manifest(bundle):
    if bundle is None:
        return None
    path = Path(bundle) / "manifest.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TraceFileError(f"{path}: unreadable manifest: {exc}") from None


# ---------------------------------------------------------------- staging (runs in the child)

class _PartSink:
    """One worker thread's Parquet writers, one file per table."""

    def __init__(self, staging, index, rows_by_table, lock):
        import pyarrow.parquet as pq

        self.pq = pq
        self.staging, self.index = staging, index
        self.writers = {}
        self.rows, self.lock = rows_by_table, lock

    def __call__(self, table, batch):
        writer = self.writers.get(table)
        if writer is None:
            d = self.staging / table
            d.mkdir(parents=True, exist_ok=True)
            writer = self.writers[table] = self.pq.ParquetWriter(
                str(d / f"part-{self.index}.parquet"), batch.schema,
                compression=PARQUET_COMPRESSION, use_dictionary=["comm"],
                # Min/max statistics cost a fifth of the write time; only ts's
                # help readers skip row groups (time-window queries).
                write_statistics=["ts"])
        writer.write_batch(batch)
        with self.lock:
            self.rows[table] = self.rows.get(table, 0) + batch.num_rows

    def close(self):
        for w in self.writers.values():
            w.close()


def _write_table(staging, table, pa_table):
    import pyarrow.parquet as pq

    d = staging / table
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa_table, str(d / "part-0.parquet"), compression=PARQUET_COMPRESSION)


def stage_run(source, staging, labels=None, events=None, threads=None, progress=None):
    """Decode `source` into `staging`; returns the RunSummary (run_id set)."""
    import threading

    import pyarrow as pa

    from kmemscope.parsers.tracedat import TraceFile

    started = time.monotonic()
    with open_source(source) as (trace_path, bundle):
        sha_box = {}
        hasher = threading.Thread(target=lambda: sha_box.update(sha=file_sha256(trace_path)))
        hasher.start()
        trace = TraceFile(trace_path)
        if progress:
            progress(("total", trace.data_bytes()))
        event_ids = trace.select(events)
        if events and not event_ids:
            raise KmemscopeError(f"no event in {source} matches {', '.join(events)}",
                                 "list a trace's events with `trace-cmd report --events`")
        rows, lock = {}, threading.Lock()
        sinks = []

        def make_sink(index):
            sink = _PartSink(staging, index, rows, lock)
            with lock:
                sinks.append(sink)
            return sink

        try:
            stats = trace.decode(make_sink, event_ids=event_ids, threads=threads,
                                 progress=(lambda n: progress(("bytes", n))) if progress else None)
        finally:
            for sink in sinks:
                sink.close()
        hasher.join()
        sha = sha_box["sha"]
        firsts = [st["min_ts"] for st in stats if st["min_ts"] is not None]
        lasts = [st["max_ts"] for st in stats if st["max_ts"] is not None]
        ts_range = (min(firsts) if firsts else None, max(lasts) if lasts else None)
        run_id = run_id_for(sha)
        manifest = read_manifest(bundle)

        lost = [s for st in stats for s in st["lost"]]
        lost_table = _lost_events_table(lost, trace.layout.cpustats)
        _write_table(staging, "lost_events", lost_table)
        rows["lost_events"] = lost_table.num_rows
        pf = _print_flags_table(trace.print_flags)
        _write_table(staging, "print_flags", pf)
        rows["print_flags"] = pf.num_rows
        if bundle is not None:
            for table, t in _procfs_tables(bundle).items():
                _write_table(staging, table, t)
                rows[table] = t.num_rows

        total_events = sum(st["events"] for st in stats)
        unknown = sum(st["unknown_events"] for st in stats)
        merged_labels = dict((manifest or {}).get("labels") or {})
        merged_labels.update(labels or {})
        missed = sum(m for _, _, _, m in lost if m > 0)
        runs = _runs_table(trace, source, trace_path, sha, ts_range, total_events, missed,
                           merged_labels, manifest, unknown)
        _write_table(staging, RUNS_TABLE, runs)
        rows[RUNS_TABLE] = 1
    event_rows = {t: n for t, n in rows.items()}
    return RunSummary(run_id=run_id, source=str(source), events=total_events, tables=event_rows,
                      lost_events=missed, unknown_events=unknown,
                      seconds=time.monotonic() - started)


def _lost_events_table(lost, cpustats):
    """Missed-event markers from the pages, plus the per-CPU counters trace-cmd saved."""
    import pyarrow as pa

    buffers, cpus, ts, missed, source = [], [], [], [], []
    for name, cpu, t, m in lost:
        buffers.append(name)
        cpus.append(cpu)
        ts.append(t)
        # The kernel flags a page with -1 when it knows events were lost but not how many.
        missed.append(m if m > 0 else None)
        source.append("ring_buffer_marker")
    for text in cpustats:
        stat = parse_cpu_stats(text)
        for key, name in (("overrun", "cpustat_overrun"), ("dropped_events", "cpustat_dropped")):
            if stat.get(key):
                buffers.append("")
                cpus.append(stat.get("cpu", -1))
                ts.append(None)
                missed.append(stat[key])
                source.append(name)
    return pa.table({
        "buffer": pa.array(buffers, pa.string()),
        "cpu": pa.array(cpus, pa.int32()),
        "ts": pa.array(ts, pa.int64()),
        "missed": pa.array(missed, pa.int64()),
        "source": pa.array(source, pa.string()),
    })


def _print_flags_table(rows):
    import pyarrow as pa

    cols = list(zip(*rows)) if rows else [[]] * 7
    return pa.table({
        "system": pa.array(cols[0], pa.string()),
        "event": pa.array(cols[1], pa.string()),
        "field": pa.array(cols[2], pa.string()),
        "kind": pa.array(cols[3], pa.string()),
        "name": pa.array(cols[4], pa.string()),
        "value": pa.array(cols[5], pa.uint64()),
        "expression": pa.array(cols[6], pa.string()),
    })


def _procfs_tables(bundle):
    try:
        from kmemscope.parsers import procfs
    except ImportError:
        return {}
    if not hasattr(procfs, "read_bundle_procfs"):
        return {}
    return procfs.read_bundle_procfs(bundle)


def _runs_table(trace, source, trace_path, sha, ts_range, events, missed, labels, manifest,
                unknown_events=0):
    import pyarrow as pa

    meta = trace.metadata()
    man = manifest or {}
    uname_man = man.get("uname") or {}
    row = {
        "host": man.get("host") or meta["host"],
        "kernel_release": uname_man.get("release") or meta["kernel_release"],
        "kernel_version": uname_man.get("version"),
        "arch": uname_man.get("machine") or meta["arch"],
        "cpus": meta["cpus"],
        "trace_clock": meta["trace_clock"],
        "first_ts": ts_range[0],
        "last_ts": ts_range[1],
        "events": events,
        "lost_events": missed,
        "unknown_events": unknown_events,
        "source_file": str(Path(trace_path).resolve()),
        "source": str(source),
        "sha256": sha,
        "file_version": meta["file_version"],
        "compression": meta["compression"],
        "tracecmd_version": meta["tracecmd_version"],
        "long_size": meta["long_size"],
        "page_size": meta["page_size"],
        "pageblock_order": man.get("pageblock_order"),
        "migratetypes": man.get("migratetypes"),
        "manifest": json.dumps(manifest, sort_keys=True) if manifest is not None else None,
    }
    schema = pa.schema([
        ("host", pa.string()), ("kernel_release", pa.string()), ("kernel_version", pa.string()),
        ("arch", pa.string()), ("cpus", pa.int32()), ("trace_clock", pa.string()),
        ("first_ts", pa.int64()), ("last_ts", pa.int64()), ("events", pa.int64()),
        ("lost_events", pa.int64()), ("unknown_events", pa.int64()), ("source_file", pa.string()), ("source", pa.string()),
        ("sha256", pa.string()), ("file_version", pa.int32()), ("compression", pa.string()),
        ("tracecmd_version", pa.string()), ("long_size", pa.int32()), ("page_size", pa.int32()),
        ("pageblock_order", pa.int32()), ("migratetypes", pa.list_(pa.string())),
        ("manifest", pa.string()), ("labels", pa.map_(pa.string(), pa.string())),
    ])
    row["labels"] = sorted(labels.items())
    return pa.Table.from_pylist([row], schema=schema)


# ---------------------------------------------------------------- commit (runs in the parent)

def commit_run(dataset, staging, run_id):
    """Move a staged run into the dataset, replacing any earlier parse of the same trace."""
    dataset = Path(dataset)
    part = f"run_id={run_id}"
    trash = dataset / f".trash-{uuid.uuid4().hex[:8]}"
    replaced = False
    # Hide the old run first (runs table), then retire its other tables.
    old_runs = dataset / RUNS_TABLE / part
    if old_runs.exists():
        trash.mkdir(exist_ok=True)
        os.rename(old_runs, trash / RUNS_TABLE)
        replaced = True
    for table_dir in sorted(p for p in dataset.iterdir() if p.is_dir() and not p.name.startswith(".")):
        old = table_dir / part
        if old.exists():
            trash.mkdir(exist_ok=True)
            os.rename(old, trash / table_dir.name)
            replaced = True
    staged = sorted(p for p in Path(staging).iterdir() if p.is_dir())
    staged.sort(key=lambda p: p.name == RUNS_TABLE)  # runs last: the run appears when complete
    for table in staged:
        dest = dataset / table.name
        dest.mkdir(exist_ok=True)
        os.rename(table, dest / part)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(trash, ignore_errors=True)
    return replaced


def ingest(source, dataset, labels=None, events=None, threads=None, progress=None, isolate=True):
    """Parse `source` into `dataset`; returns a RunSummary. Raises KmemscopeError on bad input."""
    dataset = Path(dataset)
    try:
        dataset.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KmemscopeError(f"cannot create dataset {dataset}: {exc.strerror}") from None
    if not os.access(dataset, os.W_OK):
        raise KmemscopeError(f"dataset {dataset} is not writable", "check its permissions")
    staging = dataset / f".staging-{uuid.uuid4().hex[:12]}"
    staging.mkdir()
    try:
        if isolate:
            summary = _stage_in_child(source, staging, labels, events, threads, progress)
        else:
            summary = stage_run(source, staging, labels, events, threads, progress)
        summary.replaced = commit_run(dataset, staging, summary.run_id)
        return summary
    except OSError as exc:
        raise KmemscopeError(f"writing {dataset}: {exc.strerror or exc}",
                             "free some disk space or choose another -o") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _stage_in_child(source, staging, labels, events, threads, progress):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(child_end, source, staging, labels, events, threads),
                       name="kmemscope-parse", daemon=True)
    proc.start()
    child_end.close()
    result = None
    try:
        while True:
            try:
                kind, payload = parent_end.recv()
            except EOFError:
                break
            if kind == "progress":
                if progress:
                    progress(payload)
            else:
                result = (kind, payload)
                break
        proc.join()
    except BaseException:
        proc.terminate()
        proc.join()
        raise
    if result is None:
        code = proc.exitcode
        how = f"signal {signal.Signals(-code).name}" if code and code < 0 else f"exit status {code}"
        raise TraceFileError(f"{source}: the trace decoder died ({how}) on this file; "
                             "it is corrupt or of a kind kmemscope cannot read")
    kind, payload = result
    if kind == "ok":
        return payload
    if kind == "error":
        cls, message = payload
        raise cls(message)
    raise KmemscopeError(payload)


class _WithoutPandas:
    """An import hook under which `import pandas` fails as if it were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError(f"{name} is not used while parsing")
        return None


def _child_main(conn, source, staging, labels, events, threads):
    import faulthandler
    import resource

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # If libtracecmd crashes on a corrupt file, the parent reports it in one
    # line: no Python fault dump on stderr and no core file left behind.
    faulthandler.disable()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # pyarrow imports pandas (a third of a second) the first time it converts a
    # Python list, only to ask whether the list is a DataFrame. The child never
    # sees pandas objects, so it tells pyarrow that pandas is not installed.
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _WithoutPandas())
    try:
        summary = stage_run(source, Path(staging), labels, events, threads,
                            progress=lambda msg: conn.send(("progress", msg)))
        conn.send(("ok", summary))
    except KmemscopeError as exc:
        conn.send(("error", (type(exc), str(exc))))
    except OSError as exc:
        conn.send(("error", (KmemscopeError, f"{source}: {exc.strerror or exc}"
                             + (" (free some disk space)" if exc.errno == 28 else ""))))
    except Exception as exc:  # an unexpected bug: keep the traceback for --debug
        conn.send(("crash", f"{source}: internal error: {exc!r}\n{traceback.format_exc()}"))
    finally:
        conn.close()
