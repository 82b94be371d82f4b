"""Parse one trace.dat or bundle into a run of the Parquet dataset.

The dataset layout (docs/dataset-format.md): DATASET/<table>/run_id=<run_id>/part-<n>.parquet.
A run is staged in a work directory inside the dataset and committed only when
every table is complete (dataset/commit.py: a journaled, crash-safe commit with
`runs` last): readers never see a half-written run, and an interrupted or failed
parse leaves the dataset as it was. Inputs are untrusted (parsers/sources.py).

Decoding runs in a forked child process. libtraceevent parses the file's formats
with C code that trusts the file more than kmemscope's own page decoder does;
should it ever crash on a corrupt file, the child dies, not the command, and the
parent reports the failure as an error about that file. The child dies with its
parent (PR_SET_PDEATHSIG), so a killed parse leaves no decoder running.
"""
import hashlib
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from kmemscope.capture.tracefs import parse_cpu_stats
from kmemscope.dataset import commit as commit_mod
from kmemscope.dataset import digests
from kmemscope.dataset import ingested
from kmemscope.dataset import format as dataset_format
from kmemscope.dataset import run_metrics as metrics_store
from kmemscope.dataset.commit import RUNS_TABLE
from kmemscope.common.errors import KmemscopeError, TraceFileError
from kmemscope.parsers import benchmark_results
from kmemscope.parsers.ingest_key import ingest_key
from kmemscope.parsers.sources import open_source, read_manifest
# Snappy: about 20% larger files than zstd level 1 on page-allocator tables, but
# 40% less CPU to write them, and writing is half of what parsing costs.
PARQUET_COMPRESSION = "snappy"


def delta_encoded(schema):
    """The columns an event table's parts store with DELTA_BINARY_PACKED: its 64-bit
    integers (ts, pfn, addresses, flags). ts rises and pfns cluster, so their deltas
    pack into a few bits where snappy finds little to squeeze in the plain bytes: half
    the size of a page-allocator table's parts, and a tenth less CPU to write them.
    Readers: pyarrow, DuckDB, Spark 3.3 and later."""
    import pyarrow as pa

    return {f.name: "DELTA_BINARY_PACKED" for f in schema
            if pa.types.is_integer(f.type) and f.type.bit_width == 64}


@dataclass
class RunSummary:
    run_id: str
    source: str
    events: int
    tables: dict = field(default_factory=dict)   # table -> rows
    lost_events: int = 0
    # a flight bundle's events outside its window (parsers/flight_window.py), not in the run
    trimmed_events: int = 0
    unknown_events: int = 0     # records whose event id has no format in the file
    seconds: float = 0.0
    replaced: bool = False
    concurrent: bool = False    # another parse of the same trace committed it first
    # the dataset holds this input already, parsed with the same options: not decoded again
    # (an s3:// dataset: its run is there already, dataset/s3_commit.py)
    skipped: bool = False
    # labels given at parse that replaced the bundle's own: [(key, bundle's value, new value)]
    label_overrides: list = field(default_factory=list)
    # what this parse's recovery did with what dead parses left (commit.recover)
    recovered: list = field(default_factory=list)
    # what the run keeps out or cannot vouch for (procfs samples without headers or outside the trace)
    notes: list = field(default_factory=list)
    # the staged Parquet files' footers (digests.staged_footers), for the run's record
    footers: dict = field(default_factory=dict)


# ---------------------------------------------------------------- inputs

def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


def run_id_for(sha256):
    """A run is named by its content, so parsing the same trace twice replaces it."""
    return sha256[:16]


# ---------------------------------------------------------------- staging (runs in the child)

class _PartSink:
    """One worker thread's Parquet writers, one file per table, each made in the stage's
    folder handle (dataset.safefs.Dir.create: O_EXCL, no link followed)."""

    def __init__(self, staging, index, rows_by_table, lock):
        import pyarrow.parquet as pq

        self.pq = pq
        self.staging, self.index = staging, index
        self.writers, self.files = {}, []
        self.rows, self.lock = rows_by_table, lock
        self.canonical = dataset_format.Canonicalizer()

    def __call__(self, table, batch):
        # Known columns at their canonical types, whatever the kernel (dataset format 2).
        batch = self.canonical(table, batch)
        writer = self.writers.get(table)
        if writer is None:
            f = _staged_file(self.staging, table, f"part-{self.index}.parquet")
            self.files.append(f)
            writer = self.writers[table] = self.writer(f, batch.schema)
        writer.write_batch(batch)
        with self.lock:
            self.rows[table] = self.rows.get(table, 0) + batch.num_rows

    def writer(self, f, schema):
        return self.pq.ParquetWriter(
            f, schema,
            compression=PARQUET_COMPRESSION, use_dictionary=["comm"],
            column_encoding=delta_encoded(schema) or None,
            # Min/max statistics cost a fifth of the write time; only ts's
            # help readers skip row groups (time-window queries).
            write_statistics=["ts"],
            write_page_checksum=True)     # a flipped byte is an error, not a wrong answer

    def close(self):
        for w in self.writers.values():
            w.close()
        for f in self.files:
            f.close()


class _TableSink(_PartSink):
    """A whole table streamed in batches into part-0 (the procfs tables), written as
    _write_table writes one: every column's dictionary and statistics."""

    def __init__(self, staging, rows_by_table, lock):
        super().__init__(staging, 0, rows_by_table, lock)

    def writer(self, f, schema):
        return self.pq.ParquetWriter(f, schema, compression=PARQUET_COMPRESSION,
                                     write_page_checksum=True)


def _staged_file(staging, table, name):
    """A new file `name` in the stage's table folder (made if missing), opened for writing."""
    with staging.sub_or_make(table, "a staged table folder") as d:
        return d.create(name)


def _write_table(staging, table, pa_table):
    import pyarrow.parquet as pq

    pa_table = dataset_format.to_canonical(table, pa_table)
    with _staged_file(staging, table, "part-0.parquet") as f:
        pq.write_table(pa_table, f, compression=PARQUET_COMPRESSION, write_page_checksum=True)


def _folder(folder):
    """A dataset.safefs.Dir for a folder given as a Dir or as a path (made if missing)."""
    from kmemscope.dataset.safefs import Dir

    if not isinstance(folder, Dir):
        Path(folder).mkdir(parents=True, exist_ok=True)
    return Dir.of(folder)


def stage_run(source, staging, labels=None, events=None, threads=None, progress=None,
              scratch=None, whole_bundle=False, snapshots=None):
    """Decode `source` into `staging`; returns the RunSummary (run_id set).

    staging, scratch: folders as dataset.safefs.Dir handles (or paths, opened here): every
    file is made relative to them. scratch: where a packed bundle is unpacked (default:
    `staging`'s parent). snapshots: a Snapshots (parsers/snapshots.py) taken beside a bare trace.
    A run whose known tables do not fit the dataset (dataset/format.py
    unfit_reason) is refused in one line naming the table and field.
    """
    for key, value in sorted((labels or {}).items()):
        if not (_utf8(key) and _utf8(value)):
            raise KmemscopeError(f"label {_printable(key)}={_printable(value)} is not valid "
                                 "UTF-8 text", "give labels as text")
    try:
        return _stage_run(source, staging, labels, events, threads, progress, scratch,
                          whole_bundle, snapshots)
    except dataset_format.UnfitTable as exc:
        raise TraceFileError(f"{source}: {exc}") from None
    except RecursionError:
        raise TraceFileError(f"{source}: a JSON file of the bundle (manifest.json or "
                             "metrics.json) is nested too deeply") from None
    except UnicodeEncodeError:
        raise TraceFileError(f"{source}: the bundle's manifest holds text that is not valid "
                             "UTF-8 (a lone surrogate escape)") from None


def _utf8(text):
    try:
        str(text).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _printable(text, limit=40):
    text = "".join(ch if ch.isprintable() and _utf8(ch) else "?" for ch in str(text))
    return text if len(text) <= limit else text[:limit] + "..."


def _known_events_once(trace, event_ids):
    """Refuse a trace where two systems have an event of a name kmemscope's analyses read:
    one table would hide the other's (or the real) events."""
    from kmemscope.dataset.schema import TABLE_COLUMNS

    systems: dict = {}
    for t in trace.tables.values():
        if t.event in TABLE_COLUMNS and (event_ids is None or t.event_id in event_ids):
            systems.setdefault(t.event, []).append(t.system)
    for event, found in sorted(systems.items()):
        if len(found) > 1:
            shown = ", ".join(sorted("".join(c if c.isprintable() else "?" for c in s)[:40]
                                     for s in found))
            raise dataset_format.UnfitTable(
                f"{len(found)} events are named {event} (systems {shown})",
                "the trace's event formats are altered: the run is refused")


# Test hook: every decode appends its input's path, one line, to this file (the ingest tests
# count decodes with it, whichever process decoded).
_DECODE_LOG = "KMEMSCOPE_TEST_DECODE_LOG"


def _stage_run(source, staging, labels, events, threads, progress, scratch, whole_bundle=False,
               snapshots=None):
    started = time.monotonic()
    if os.environ.get(_DECODE_LOG):
        with open(os.environ[_DECODE_LOG], "a", encoding="utf-8") as log:
            log.write(f"{source}\n")
    if scratch is None:
        if hasattr(staging, "fd"):
            raise ValueError("a stage given as a folder handle needs its scratch folder too")
        scratch = Path(staging).parent      # never inside the stage: its folders are tables
    with _folder(staging) as staging, _folder(scratch) as scratch:
        return _stage(source, staging, scratch, labels, events, threads, progress, whole_bundle,
                      started, snapshots)


def _stage(source, staging, scratch, labels, events, threads, progress, whole_bundle, started,
           snapshots=None):
    import threading

    from kmemscope.parsers import flight_window
    from kmemscope.parsers.tracedat import TraceFile, helper_thread

    with open_source(source, scratch) as (trace_path, bundle):
        manifest = read_manifest(bundle)      # a bad manifest fails before decoding
        window = None if whole_bundle else flight_window.window_of(manifest, source)
        bench = benchmark_results.read_bundle_metrics(bundle)     # and so does a bad metrics.json
        sha_box: dict = {}

        def hash_trace():
            try:
                sha_box["sha"] = file_sha256(trace_path)
            except BaseException as exc:    # raised again below, where errors are reported
                sha_box["error"] = exc

        hasher = helper_thread(hash_trace, "kmemscope-sha256")
        trace = TraceFile(trace_path)
        if progress:
            progress(("total", trace.data_bytes()))
        event_ids = trace.select(events)
        if events and not event_ids:
            raise KmemscopeError(f"no event in {source} matches {', '.join(events)}",
                                 "list a trace's events with `trace-cmd report --events`")
        _known_events_once(trace, event_ids)
        rows: dict = {}
        lock = threading.Lock()
        sinks = []

        def make_sink(index):
            sink = _PartSink(staging, index, rows, lock)
            with lock:
                sinks.append(sink)
            return sink

        # the flight recorder's heartbeats are ftrace print events: found while decoding
        beat_table = next((t.table for eid, t in trace.tables.items()
                           if (t.system, t.event) == ("ftrace", "print")
                           and (event_ids is None or eid in event_ids)), None)
        kept = flight_window.Kept(window, make_sink, beat_table)
        try:
            stats = trace.decode(kept.make_sink, event_ids=event_ids, threads=threads,
                                 progress=(lambda n: progress(("bytes", n))) if progress else None)
        finally:
            for sink in sinks:
                sink.close()
        hasher.join()
        if "error" in sha_box:
            raise sha_box["error"]
        sha = sha_box["sha"]
        run_id = run_id_for(sha)
        ts_range = kept.ts_range(stats)
        lost = kept.lost([s for st in stats for s in st["lost"]])
        _stage_trace_tables(staging, trace, lost, rows, overruns=window is None)
        procfs_notes: list = []
        if bundle is not None:
            procfs_notes += _stage_procfs(source, bundle, staging, rows, lock, ts_range,
                                          (manifest or {}).get("clock_ticks_per_s"))
        elif snapshots is not None:
            snapshots.check_trace(source, trace.metadata()["host"], *ts_range)
            procfs_notes += _stage_procfs(source, snapshots.sample_files(*ts_range), staging,
                                          rows, lock, ts_range)
        if bench:
            _write_table(staging, metrics_store.TABLE, metrics_store.metrics_table(bench, "bundle"))
            rows[metrics_store.TABLE] = len(bench)

        trimmed = kept.trimmed
        total_events = sum(st["events"] for st in stats) - trimmed
        unknown = sum(st["unknown_events"] for st in stats)
        merged_labels, overrides = _merged_labels(manifest, labels)
        missed = sum(m for _, _, _, m in lost if m > 0)
        missed += kept.dropped(trace.layout.cpustats, trace.layout.cpu_count, parse_cpu_stats)
        manifest = kept.manifest(manifest, missed, source)
        runs = _runs_table(trace, source, trace_path, sha, ts_range, total_events, missed,
                           merged_labels, manifest, unknown)
        _write_table(staging, RUNS_TABLE, runs)
        rows[RUNS_TABLE] = 1
    event_rows = {t: n for t, n in rows.items()}
    return RunSummary(run_id=run_id, source=str(source), events=total_events, tables=event_rows,
                      lost_events=missed, unknown_events=unknown, trimmed_events=trimmed,
                      seconds=time.monotonic() - started, label_overrides=overrides,
                      notes=procfs_notes, footers=digests.staged_footers(staging))


def _stage_trace_tables(staging, trace, lost, rows, overruns):
    """The tables the trace file itself gives beside its events: lost_events (overruns:
    the capture's per-CPU overrun counters count, as they do but for a flight bundle, whose
    overruns were all before its window), print_flags and event_tables."""
    for name, table in (("lost_events", _lost_events_table(lost, trace.layout.cpustats, overruns)),
                        ("print_flags", _print_flags_table(trace.print_flags)),
                        ("event_tables", _event_tables_table(trace.tables.values(), rows))):
        _write_table(staging, name, table)
        rows[name] = table.num_rows


def _merged_labels(manifest, labels):
    """The run's labels: the manifest's, then --label's over them -> (labels, [(key, the
    manifest's value, --label's)] for each one --label changed)."""
    merged = dict((manifest or {}).get("labels") or {})
    overrides = [(k, merged[k], v) for k, v in sorted((labels or {}).items())
                 if k in merged and merged[k] != v]
    merged.update(labels or {})
    return merged, overrides


def _lost_events_table(lost, cpustats, overruns=True):
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
            if stat.get(key) and (overruns or key != "overrun"):
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

    cols: list = list(zip(*rows)) if rows else [[]] * 7
    return pa.table({
        "system": pa.array(cols[0], pa.string()),
        "event": pa.array(cols[1], pa.string()),
        "field": pa.array(cols[2], pa.string()),
        "kind": pa.array(cols[3], pa.string()),
        "name": pa.array(cols[4], pa.string()),
        "value": pa.array(cols[5], pa.uint64()),
        "expression": pa.array(cols[6], pa.string()),
    })


def _event_tables_table(tables, rows):
    """Which table holds which recorded event: names from the trace are kept here verbatim."""
    import pyarrow as pa

    tables = sorted(tables, key=lambda t: t.event_id)
    return pa.table({
        "event_id": pa.array([t.event_id for t in tables], pa.int32()),
        "system": pa.array([t.system for t in tables], pa.string()),
        "event": pa.array([t.event for t in tables], pa.string()),
        "table": pa.array([t.table for t in tables], pa.string()),
        "rows": pa.array([rows.get(t.table, 0) for t in tables], pa.int64()),
    })


def _stage_procfs(source, bundle, staging, rows, lock, ts_range, ticks_per_s=None):
    """Stream the bundle's procfs samples (or {name: sample file bytes}) into the stage;
    returns the notes on them. ticks_per_s: the unit of the CPU time samples."""
    from kmemscope.parsers import procfs

    notes: list[str] = []
    sink = _TableSink(staging, rows, lock)
    try:
        times = procfs.stream_bundle_procfs(bundle, sink, notes, source, ticks_per_s)
    finally:
        sink.close()
    return notes + procfs.sample_window_notes(times, *ts_range)


def _runs_table(trace, source, trace_path, sha, ts_range, events, missed, labels, manifest,
                unknown_events=0):
    import pyarrow as pa

    from kmemscope.parsers import flight_window

    meta = trace.metadata()
    man = manifest or {}
    uname_man = man.get("uname") or {}
    row = {
        "host": man.get("host") or meta["host"],
        "kernel_release": uname_man.get("release") or meta["kernel_release"],
        "kernel_version": uname_man.get("version"),
        "arch": uname_man.get("machine") or meta["arch"],
        "cpus": meta["cpus"],
        "trace_clock": flight_window.trace_clock(man, meta["trace_clock"]),
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


# ---------------------------------------------------------------- ingest (runs in the parent)

def writable_dataset(dataset):
    """Create the dataset directory if needed; raise one line when it cannot be written.

    Returns the directories it created, the outermost first (a failed parse
    removes them again).
    """
    dataset = Path(dataset)
    missing, p = [], dataset
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        dataset.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KmemscopeError(f"cannot create dataset {dataset}: {exc.strerror}") from None
    if not dataset.is_dir():
        raise KmemscopeError(f"dataset {dataset} is not a directory", "choose another -o")
    if not os.access(dataset, os.W_OK):
        raise KmemscopeError(f"dataset {dataset} is not writable", "check its permissions")
    return missing[::-1]


def ingest(source, dataset, labels=None, events=None, threads=None, progress=None, isolate=True,
           whole_bundle=False, snapshots=None, force=False):
    """Parse `source` into `dataset`; returns a RunSummary. Raises KmemscopeError on bad input.

    An input whose ingest key (parsers/ingest_key.py: its content and these options) a
    committed run records is not decoded again (summary.skipped) unless `force`; one that a
    live parse is decoding is waited for (dataset/ingested.py).
    snapshots: a Snapshots (parsers/snapshots.py) of /proc taken before and after a bare trace
    (such a parse has no ingest key: it is always decoded).
    A parse that fails leaves the dataset as it found it: a path that did not
    exist is gone again, and an existing dataset gets no lock file it lacked.
    """
    if snapshots is not None:
        from kmemscope.parsers.snapshots import refuse_a_bundle

        refuse_a_bundle(source)
    dataset = Path(dataset)
    created = writable_dataset(dataset)
    had_lock = os.path.lexists(dataset / commit_mod.LOCK_NAME)
    try:
        return _ingest(source, dataset, labels, events, threads, progress, isolate, whole_bundle,
                       snapshots, force)
    except BaseException:
        _leave_as_found(dataset, created, had_lock)
        raise


def _ingest(source, dataset, labels, events, threads, progress, isolate, whole_bundle=False,
            snapshots=None, force=False):
    started_ns = time.time_ns()
    dataset_format.read_format(dataset)     # a newer format is refused before decoding
    key = None if snapshots is not None else ingest_key(source, labels, events, whole_bundle)
    recovered: list = []
    try:
        while True:
            with commit_mod.dataset_lock(dataset):
                recovered += commit_mod.recover(dataset)
                commit_mod.check_layout(dataset)     # a linked table folder fails before decoding
                if key is not None and not force:
                    run_id = ingested.committed_keys(dataset).get(key)
                    if run_id is not None:
                        return RunSummary(run_id=run_id, source=str(source), events=0,
                                          skipped=True, recovered=recovered)
                    busy = ingested.live_claim(dataset, key)
                else:
                    busy = None
                if busy is None:
                    work = commit_mod.WorkDir(dataset)
                    if key is not None:
                        try:
                            ingested.write_claim(work.dir, key)
                        except BaseException:
                            work.remove()
                            raise
                    break
            # Another parse is decoding this very input: its run, once committed, is ours.
            ingested.wait_for_owner(dataset, busy)
    except OSError as exc:
        raise KmemscopeError(f"writing {dataset}: {exc.strerror or exc}",
                             _disk_hint(exc)) from None
    committed, child = False, None
    try:
        if isolate:
            summary, child = _stage_in_child(source, work, labels, events, threads, progress,
                                             whole_bundle, snapshots)
        else:
            summary = stage_run(source, work.stage_dir, labels, events, threads, progress,
                                scratch=work.scratch_dir, whole_bundle=whole_bundle,
                                snapshots=snapshots)
        summary.recovered = recovered
        with commit_mod.dataset_lock(dataset):
            if commit_mod.committed_since(dataset, summary.run_id, started_ns):
                summary.concurrent = True      # the same trace, committed while this parse ran
            else:
                dataset_format.ensure_format(dataset)
                summary.replaced = commit_mod.commit(work, summary.run_id, summary.footers,
                                                     ingest_key=key)
        committed = True
        return summary
    except OSError as exc:
        raise KmemscopeError(f"writing {dataset}: {exc.strerror or exc}",
                             _disk_hint(exc)) from None
    finally:
        if child is not None:
            child.join()
        if committed:
            work.remove()
        else:
            work.abandon()          # a commit cut short mid-way stays for the next parse


def _leave_as_found(dataset, created, had_lock):
    """After a failed parse: remove the lock file it made, and the directories it created."""
    if had_lock and not created:
        return
    lock = dataset / commit_mod.LOCK_NAME
    try:
        if os.path.lexists(lock):
            with commit_mod.dataset_lock(dataset):
                # Held while it goes: a parse waiting for it takes the next one.
                if not created or os.listdir(dataset) == [commit_mod.LOCK_NAME]:
                    os.unlink(lock)
        for path in reversed(created):
            os.rmdir(path)              # only while empty: what another parse wrote stays
    except (OSError, KmemscopeError):
        pass


def _disk_hint(exc):
    return "free some disk space or choose another -o" if exc.errno == 28 else "check the dataset"


def _stage_in_child(source, work, labels, events, threads, progress, whole_bundle=False,
                    snapshots=None):
    """Stage the run in a forked decoder child; returns (RunSummary, the child process),
    which the caller joins once it has done what does not need the child gone."""
    from kmemscope.parsers.forked import ForkedChild

    # The child inherits the work folder's handles: it makes every file relative to them.
    proc = ForkedChild(_child_main, (os.getpid(), source, work.stage_dir, work.scratch_dir,
                                     labels, events, threads, whole_bundle, snapshots))
    result = None
    try:
        while True:
            try:
                kind, payload = proc.recv()
            except EOFError:
                break
            if kind == "progress":
                if progress:
                    progress(payload)
            else:
                result = (kind, payload)
                break
        if result is None or result[0] != "ok":
            proc.join()
    except BaseException:
        proc.kill()            # its partial output goes with the work directory
        proc.join()
        raise
    if result is None:
        code = proc.exitcode
        how = f"signal {signal.Signals(-code).name}" if code and code < 0 else f"exit status {code}"
        said = _last_log_line(work.scratch_dir.anchored(DECODER_LOG))
        raise TraceFileError(f"{source}: the trace decoder died ({how}) on this file; "
                             f"it is corrupt or of a kind kmemscope cannot read{_memory_limit_hint()}"
                             + (f" (the decoder said: {said})" if said else ""))
    kind, payload = result
    if kind == "ok":
        # Its files are closed: the child's exit (unmapping a few hundred MB)
        # runs beside the commit, and the caller joins it afterwards.
        return payload, proc
    if kind == "error":
        cls, message = payload
        raise cls(message)
    raise KmemscopeError(payload)


# libtraceevent may report failures on stderr, past its log level:
# the decoder child's stderr goes here, so the command still says one line.
DECODER_LOG = "decoder.log"


def _last_log_line(path, limit=4096):
    """The last line the decoder child wrote to its log, printable and short."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            f.seek(max(0, st.st_size - limit))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return None
    if not lines:
        return None
    text = "".join(ch if ch.isprintable() else "?" for ch in lines[-1])
    return text[:160]


def _memory_limit_hint():
    """Under an address-space limit, libraries die on allocation failures too: say so."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return ""
    return f", or memory ran out (address space limited to {soft >> 20} MiB)"


class _Unimportable:
    """An import hook under which importing one of `names` fails as if it were not installed."""

    def __init__(self, names):
        self.names = tuple(names)

    def find_spec(self, name, path=None, target=None):
        if name.split(".", 1)[0] in self.names:
            raise ImportError(f"{name} is not used while parsing")
        return None


def _die_with_parent(parent_pid):
    """Have the kernel kill this process when the parse that forked it dies."""
    from kmemscope.parsers import _tracedat

    try:
        _tracedat.kill_with_parent()
    except OSError:
        pass
    if os.getppid() != parent_pid:     # it died before prctl took effect
        os._exit(1)


def _child_main(conn, parent_pid, source, staging, scratch, labels, events, threads,
                whole_bundle=False, snapshots=None):
    import faulthandler
    import gc
    import resource

    _die_with_parent(parent_pid)
    # No cyclic collection here: on the medium trace the collector ran 140 times
    # for 77 ms (one full pass over every object of pyarrow's and the parent's
    # imports: 38 ms), to free under a thousand objects. The process ends soon.
    gc.disable()
    # The parent's handlers raise exceptions that a thread pool would outlive:
    # here a signal ends the process at once.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    # If libtracecmd crashes on a corrupt file, the parent reports it in one
    # line: no Python fault dump on stderr and no core file left behind.
    faulthandler.disable()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:      # O_EXCL: a file or link put in its place is an error, never written through
        log = os.open(DECODER_LOG, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                      | os.O_CLOEXEC, 0o600, dir_fd=scratch.fd)
    except OSError as exc:
        conn.send(("error", (KmemscopeError, f"{source}: cannot make the decoder's log in "
                             f"{scratch.path}: {exc.strerror}")))
        conn.close()
        return
    os.dup2(log, 2)
    os.close(log)
    # pyarrow imports pandas (a third of a second) the first time it converts a
    # Python list, only to ask whether the list is a DataFrame, and numpy (half
    # of its own import time, held under the GIL while the decoder threads wait
    # to hand over their first batches). The child never sees pandas or numpy
    # objects, and pyarrow runs without both, so it is told they are not there.
    missing = [name for name in ("pandas", "numpy") if name not in sys.modules]
    if missing:
        sys.meta_path.insert(0, _Unimportable(missing))
    # If numpy was imported before the fork, its OpenBLAS pool spins before it
    # sleeps: a tenth of a CPU-second taken from the decoder threads.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # Arrow's default pool (mimalloc) takes the Parquet writers' scratch memory in
    # transparent huge pages: 150 MB of them on a 1.4 M-event trace, each zeroed
    # whole when first touched. malloc's pool writes the same files as fast with
    # a quarter less peak memory (docs/benchmarks.md). Read when pyarrow first
    # allocates, after this.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    def progress(msg):
        conn.send(("progress", msg))
        if pause and msg[0] == "bytes":
            time.sleep(float(pause))       # tests: hold the decoder mid-trace

    # Test hook: the kill tests stop a parse while its decoder threads work.
    pause = os.environ.get("KMEMSCOPE_TEST_PAUSE_DECODER_S")
    try:
        summary = stage_run(source, staging, labels, events, threads,
                            progress=progress, scratch=scratch, whole_bundle=whole_bundle,
                            snapshots=snapshots)
        conn.send(("ok", summary))
    except KmemscopeError as exc:
        conn.send(("error", (type(exc), str(exc))))
    except OSError as exc:
        conn.send(("error", (KmemscopeError, f"{source}: {exc.strerror or exc}"
                             + (" (free some disk space)" if exc.errno == 28 else ""))))
    except MemoryError:
        conn.send(("error", (KmemscopeError, f"{source}: out of memory while parsing "
                             "(raise the memory limit, or parse with fewer --threads)")))
    except Exception as exc:  # an unexpected bug: keep the traceback for --debug
        conn.send(("crash", f"{source}: internal error: {exc!r}\n{traceback.format_exc()}"))
    finally:
        conn.close()
