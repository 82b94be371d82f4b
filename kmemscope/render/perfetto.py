"""One run as a Perfetto trace: what kmemscope derives from it, on Perfetto's timeline.

Perfetto's UI (https://ui.perfetto.dev, which loads the file in the browser
and sends it nowhere) cannot read trace.dat, and KernelShark shows raw
events. This module writes the run's stalls, compaction runs, THP fault
outcomes, migratetype fallbacks and procfs samples as TracePackets built with
the `perfetto` package's protobuf classes and StreamingTraceProtoBuilder:

  a track per task      its direct compaction and direct reclaim stalls as slices
                        (kcompactdN and kswapdN: their runs), with order and
                        result as arguments (the `stalls.each` analysis)
  instants              THP fault attempts (huge page or fallback) on the
                        faulting task's track; mm_page_alloc_extfrag fallbacks
  counters              free pages per order (buddyinfo, every zone summed) and
                        per-second rates of the allocator's vmstat counters

Timestamps are the run's own (CLOCK_MONOTONIC nanoseconds, as trace-cmd
report prints them), so a slice can be found again in the raw trace.
The trace says what wrote it: a `kmemscope` track whose one instant, `kmemscope export`
at the run's first timestamp, carries schema_version, kmemscope_version, kind
("perfetto") and run_id as arguments (render/schemas/perfetto.schema.json).
Everything is read through the public Dataset (named analyses and SQL with
bound parameters); nothing from the trace becomes a path or SQL text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kmemscope.common.errors import KmemscopeError, QueryError
from kmemscope.common.version import __version__

# One writer, one sequence: Perfetto needs a non-zero id on every packet it did not make itself.
SEQUENCE_ID = 1
# The vmstat counters that tell what the allocator did between two samples: their rates are counters.
VMSTAT_RATES = ("compact_stall", "compact_fail", "compact_success", "compact_migrate_scanned",
                "compact_free_scanned", "compact_daemon_wake", "thp_fault_alloc",
                "thp_fault_fallback", "pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd",
                "pgsteal_direct", "allocstall_normal", "allocstall_movable", "pgmigrate_success",
                "pgmigrate_fail")
# The stall kinds drawn as slices (all four of the stalls analysis), by their slice names.
SLICE_NAMES = {"direct_compaction": "direct compaction", "direct_reclaim": "direct reclaim",
               "kcompactd": "kcompactd run", "kswapd": "kswapd awake"}
# The instants' names.
THP_SUCCESS, THP_FALLBACK, EXTFRAG = "THP fault: huge page", "THP fault: fallback", "migratetype fallback"
# The instant that says what wrote the trace, on a track of this name.
METADATA_TRACK = "kmemscope"
METADATA_EVENT = "kmemscope export"


def metadata(run_id):
    """What the trace says of itself (perfetto.schema.json); the schema version is every
    machine-readable output's (writers.SCHEMA_VERSION)."""
    from kmemscope.render.writers import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "kmemscope_version": __version__,
            "kind": "perfetto", "run_id": run_id}


@dataclass
class ExportSummary:
    """What went into the trace: counts per kind, for the command line's last line and for tests."""

    run_id: str
    path: Path
    slices: dict = field(default_factory=dict)       # slice name -> slices
    instants: dict = field(default_factory=dict)     # instant name -> instants
    counters: dict = field(default_factory=dict)     # counter track name -> samples
    tasks: int = 0
    notes: list = field(default_factory=list)


def _text(value) -> str:
    """A name from the trace as valid UTF-8 for a protobuf string (lone surrogates replaced)."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


def _rows(ds, run, sql, params=()):
    """Rows of SQL over one run as dicts; a table the run lacks gives no rows."""
    try:
        return ds.sql(sql, list(params), run=run).rows()
    except QueryError:
        return []


class _Writer:
    """Tracks and events onto a StreamingTraceProtoBuilder, one uuid per track."""

    def __init__(self, stream):
        from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

        self.builder = StreamingTraceProtoBuilder(stream)
        self.next_uuid = 1
        self.first = True

    def _packet(self, ts=None):
        p = self.builder.create_packet()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        if self.first:       # the sequence starts clean: Perfetto keeps no state from elsewhere
            from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        if ts is not None:
            p.timestamp = int(ts)
        return p

    def _uuid(self):
        self.next_uuid += 1
        return self.next_uuid

    def thread_track(self, pid, comm):
        uuid = self._uuid()
        p = self._packet()
        p.track_descriptor.uuid = uuid
        p.track_descriptor.thread.pid = int(pid)
        p.track_descriptor.thread.tid = int(pid)
        p.track_descriptor.thread.thread_name = _text(comm)
        self.builder.write_packet(p)
        return uuid

    def named_track(self, name, counter=False, unit=None):
        uuid = self._uuid()
        p = self._packet()
        p.track_descriptor.uuid = uuid
        p.track_descriptor.name = _text(name)
        if counter:
            p.track_descriptor.counter.SetInParent()
            if unit:
                p.track_descriptor.counter.unit_name = unit
        self.builder.write_packet(p)
        return uuid

    def event(self, track, ts, kind, name=None, args=None):
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

        p = self._packet(ts)
        e = p.track_event
        e.track_uuid = track
        e.type = getattr(TrackEvent, kind)
        if name is not None:
            e.name = _text(name)
        for key, value in (args or {}).items():
            if value is None:
                continue
            a = e.debug_annotations.add()
            a.name = key
            if isinstance(value, bool):
                a.bool_value = value
            elif isinstance(value, int):
                a.int_value = value
            elif isinstance(value, float):
                a.double_value = value
            else:
                a.string_value = _text(value)
        self.builder.write_packet(p)

    def counter(self, track, ts, value):
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

        p = self._packet(ts)
        p.track_event.track_uuid = track
        p.track_event.type = TrackEvent.TYPE_COUNTER
        p.track_event.double_counter_value = float(value)
        self.builder.write_packet(p)


def _stalls(ds, run):
    """Every stall of the run (stalls.each) with its result: the compaction status of its
    last run's end, or the pages direct reclaim took back."""
    try:
        stalls = ds.query("stalls.each", run=run).rows()
    except KmemscopeError:       # the run recorded none of the stall events
        return []
    status = {(r["pid"], r["ts"]): r["name"] for r in _rows(ds, run, """
        SELECT e.pid, e.ts, coalesce(n.name, CAST(e.status AS VARCHAR)) AS name
        FROM mm_compaction_end e
        LEFT JOIN compaction_status_names n ON n.run_id = e.run_id AND n.status = e.status""")}
    reclaimed = {(r["pid"], r["ts"]): r["nr_reclaimed"] for r in _rows(ds, run, """
        SELECT pid, ts, nr_reclaimed FROM mm_vmscan_direct_reclaim_end""")}
    for s in stalls:
        key = (s["pid"], s["end_ts"])
        if s["kind"] in ("direct_compaction", "kcompactd"):
            s["result"] = status.get(key)
        elif s["kind"] == "direct_reclaim":
            s["result"] = None if reclaimed.get(key) is None else f"{reclaimed[key]} pages reclaimed"
        else:
            s["result"] = None
    return stalls


def _slice_events(stalls):
    """(ts, is_begin, stall) in the order Perfetto nests them: by time, and at one instant a
    task's slice ends before the next begins."""
    out = []
    for s in stalls:
        out.append((s["begin_ts"], 1, s))
        out.append((s["end_ts"], 0, s))
    out.sort(key=lambda e: (e[0], e[1], e[2]["pid"]))
    return out


def export_run(dataset, run: str, output, *, engine=None) -> ExportSummary:
    """Write run `run` (an id or a unique prefix) of `dataset` as a Perfetto trace to `output`.

    The file is written beside `output` and renamed into place: a reader never
    sees half a trace. Returns what went in."""
    try:
        import perfetto.trace_builder.proto_builder  # noqa: F401
    except ImportError:
        raise KmemscopeError("kmemscope export perfetto needs the perfetto package",
                             "install the report extra: pip install 'kmemscope[report]'") from None
    from kmemscope.api import Dataset

    ds = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
    if engine is not None and str(engine) != "duckdb":
        raise KmemscopeError("export perfetto runs on DuckDB", "drop --engine")
    chosen = ds.run_ids([run])
    if len(chosen) != 1:
        raise KmemscopeError(f"{run!r} selects {len(chosen)} runs", "give one run id (kmemscope info lists them)")
    run_id = chosen[0]
    out = Path(output)
    if out.is_dir():
        raise KmemscopeError(f"{out} is a directory", "give a file name such as run.pftrace")
    if not out.parent.is_dir():
        raise KmemscopeError(f"no directory {out.parent}", "create it first")
    summary = ExportSummary(run_id, out)
    from kmemscope.common.outfile import NewFile

    with NewFile(out, 0o600) as stream:
        _write(ds, run_id, _Writer(stream), summary)
    return summary


def _write(ds, run_id, w, summary):
    first = _rows(ds, run_id, "SELECT first_ts FROM runs")
    w.event(w.named_track(METADATA_TRACK), (first[0]["first_ts"] if first else None) or 0,
            "TYPE_INSTANT", METADATA_EVENT, metadata(run_id))
    stalls = _stalls(ds, run_id)
    thp = _rows(ds, run_id, "SELECT ts, pid, comm, failed, is_retry, thp_order FROM thp_fault_attempts "
                            "ORDER BY ts, pid")
    extfrag = _rows(ds, run_id, """
        SELECT ts, pid, comm, alloc_order, fallback_order, alloc_migratetype, fallback_migratetype,
               change_ownership
        FROM mm_page_alloc_extfrag ORDER BY ts, pid""")

    # a track per task that stalled or faulted: named after its comm at its first event
    tasks: dict = {}
    for pid, comm in ([(s["pid"], s["comm"]) for s in stalls] + [(t["pid"], t["comm"]) for t in thp]):
        tasks.setdefault(pid, comm)
    track = {pid: w.thread_track(pid, comm) for pid, comm in sorted(tasks.items())}
    summary.tasks = len(track)

    for ts, is_begin, s in _slice_events(stalls):
        name = SLICE_NAMES[s["kind"]]
        if is_begin:
            w.event(track[s["pid"]], ts, "TYPE_SLICE_BEGIN", name,
                    {"order": s["order"], "result": s["result"], "stalled_ms": s["duration_ms"]})
            summary.slices[name] = summary.slices.get(name, 0) + 1
        else:
            w.event(track[s["pid"]], ts, "TYPE_SLICE_END")

    for t in thp:
        name = THP_FALLBACK if t["failed"] else THP_SUCCESS
        w.event(track[t["pid"]], t["ts"], "TYPE_INSTANT", name,
                {"order": t["thp_order"], "retry": bool(t["is_retry"])})
        summary.instants[name] = summary.instants.get(name, 0) + 1
    if extfrag:
        fallbacks = w.named_track("migratetype fallbacks (mm_page_alloc_extfrag)")
        for e in extfrag:
            w.event(fallbacks, e["ts"], "TYPE_INSTANT", EXTFRAG,
                    {"task": f"{e['comm']} {e['pid']}", "alloc_order": e["alloc_order"],
                     "fallback_order": e["fallback_order"],
                     "alloc_migratetype": e["alloc_migratetype"],
                     "fallback_migratetype": e["fallback_migratetype"],
                     "change_ownership": e["change_ownership"]})
        summary.instants[EXTFRAG] = len(extfrag)

    _counters(ds, run_id, w, summary)
    if not stalls:
        summary.notes.append("no stalls in this run (or the stall events were not recorded)")


def free_pages_per_order(ds, run_id):
    """{order: [(ts, free pages)]}: buddyinfo's free blocks of each order times 2^order,
    every node and zone summed, per sample."""
    out: dict = {}
    for r in _rows(ds, run_id, """
            SELECT "order", ts, sum(count * (CAST(1 AS BIGINT) << "order")) AS pages
            FROM buddyinfo GROUP BY 1, 2 ORDER BY 1, 2"""):
        out.setdefault(int(r["order"]), []).append((r["ts"], int(r["pages"])))
    return out


def vmstat_rates(ds, run_id, names=VMSTAT_RATES):
    """{counter: [(ts, per second since the previous sample)]} for the counters that moved."""
    out: dict = {}
    rows = _rows(ds, run_id, """
        SELECT name, ts, value - lag(value) OVER w AS delta, (ts - lag(ts) OVER w) / 1e9 AS dt_s
        FROM vmstat WHERE list_contains(?, name)
        WINDOW w AS (PARTITION BY name ORDER BY ts) ORDER BY name, ts""", [list(names)])
    for r in rows:
        if r["delta"] is None or not r["dt_s"]:
            continue
        out.setdefault(r["name"], []).append((r["ts"], r["delta"] / r["dt_s"]))
    return {n: v for n, v in out.items() if any(x for _, x in v)}


def _counters(ds, run_id, w, summary):
    tracks = [(f"free pages, order {order} (buddyinfo)", "pages", samples)
              for order, samples in sorted(free_pages_per_order(ds, run_id).items())]
    tracks += [(f"vmstat {counter} /s", "/s", samples)
               for counter, samples in sorted(vmstat_rates(ds, run_id).items())]
    for name, unit, samples in tracks:
        uuid = w.named_track(name, counter=True, unit=unit)
        for ts, value in samples:
            w.counter(uuid, ts, value)
        summary.counters[name] = len(samples)
