"""stalls: time stalled per kind, order, task and callsite, and the costly-stalls preset.

Every number is checked against an independent recount of begin/end pairs in the
text of `trace-cmd report -t` (plain Python below, sharing no code with
kmemscope), on two real recordings:
- tests/data/stalls/costly-stalls-6.18.tar.zst, recorded on Linux 6.18 with the
  costly-stalls preset under examples/workload_stalls.py (tests/data/stalls/README.md):
  direct compaction, direct reclaim, kcompactd and kswapd. It runs wherever
  trace-cmd is installed, no root needed;
- a short recording made here with the same preset (skipped without root,
  tracefs or trace-cmd), which also shows that kernel stacks come only with the
  costly-order events (an in-kernel trigger) and that record puts back a trigger
  someone had set before it.
"""
import contextlib
import fnmatch
import json
import math
import re
import shutil
import subprocess
import sys
import tarfile
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import requirements
from conftest import PROJECT_ROOT, TRACEFS, _hold_tracing_lock
from kmrun import kmemscope, rows_of

BUNDLE = PROJECT_ROOT / "tests" / "data" / "stalls" / "costly-stalls-6.18.tar.zst"
KINDS = ("direct_compaction", "direct_reclaim", "kcompactd", "kswapd")
STATS = ["stalls", "total_ms", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms"]
# The columns `kmemscope compare` reads (queries/metrics.py) and the default section's.
# per_run: stalls as the kernel counts them, then the timed ones the latencies are over.
PER_RUN_COLUMNS = ["run_id", "labels", "kind", "stalls", "timed", "compaction_runs"] + STATS[1:]
# the default section's count is of the stalls it times ("stalls" means vmstat's count only)
DEFAULT_COLUMNS = ["run_id", "labels", "kind", "order", "comm", "callsite", "timed"] + STATS[1:]


def needs_trace_cmd():
    if shutil.which("trace-cmd") is None:
        requirements.skip("setup", "trace-cmd is not installed (run `make setup`): it is the oracle")


# ------------------------------------------------------------------ the oracle

_LINE = re.compile(r"^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+\.\d{9}):\s+"
                   r"(?P<event>\w+):\s*(?P<rest>.*)$")
_FRAME = re.compile(r"^=> (?P<fn>\S+) \([0-9a-f]+\)$")
# Events the costly-stalls preset gives a kernel stack.
STACKED = ("mm_page_alloc", "mm_compaction_try_to_compact_pages")


def report_events(trace_dat):
    """Every event of `trace-cmd report -t`, in the report's order, as dicts; kernel stacks
    attached to their events.

    A stack is written after its event on the same CPU; an interrupt during the unwind can
    nest a whole event and its stack inside. So per CPU, a kernel_stack closes the most
    recent event that can carry one (STACKED) and has none yet. Returns (events, stacks seen).
    """
    out = subprocess.run(["trace-cmd", "report", "-t", "-i", str(trace_dat)],
                         capture_output=True, text=True, check=True).stdout
    events, waiting, frames, stacks = [], defaultdict(list), None, 0
    for line in out.splitlines():
        m = _FRAME.match(line)
        if m:
            if frames is not None:
                frames.append(m.group("fn"))
            continue
        m = _LINE.match(line)
        if not m:
            continue
        cpu, event = int(m.group("cpu")), m.group("event")
        if event == "kernel_stack":
            stacks += 1
            frames = []
            if waiting[cpu]:
                waiting[cpu].pop()["stack"] = frames
            continue
        fields = dict(kv.split("=", 1) for kv in m.group("rest").split() if "=" in kv)
        ev = {"ts": int(m.group("ts").replace(".", "")), "cpu": cpu, "pid": int(m.group("pid")),
              "comm": m.group("comm").strip(), "event": event, "fields": fields, "stack": None}
        events.append(ev)
        if event in STACKED:
            waiting[cpu].append(ev)
    return events, stacks


# The frames that name no caller: tracing, the page allocator, slab and vmalloc, as the
# documentation of alloc_origins and stalls states the rule (function names; stated here
# again, not read from the SQL, so that the SQL is checked against it).
CALLSITE_SKIP = """
    trace_event_raw_event_* ftrace_raw_event_* perf_trace_* trace_event_buffer_*
    trace_buffer_unlock_commit* __ftrace_trace_stack ftrace_* __trace_stack stack_trace_save*
    arch_stack_walk
    __alloc_pages* alloc_pages* __alloc_frozen_pages* alloc_frozen_pages* get_page_from_freelist
    rmqueue* __rmqueue* __get_free_pages* get_zeroed_page* __folio_alloc* folio_alloc*
    alloc_pages_exact* __alloc_pages_bulk* alloc_page_interleave alloc_pages_preferred_many
    vma_alloc_folio*
    kmalloc* __kmalloc* ___kmalloc* kmem_cache_alloc* __kmem_cache_alloc* allocate_slab new_slab
    ___slab_alloc __slab_alloc* slab_alloc* alloc_slab_page alloc_slab_obj_exts
    __memcg_slab_post_alloc_hook memcg_slab_post_alloc_hook kvmalloc* __kvmalloc* kvzalloc*
    kzalloc* krealloc* __krealloc* kvrealloc* kmemdup*
    __vmalloc* vmalloc* vzalloc* vm_area_alloc_pages
""".split()


def callsite(frames, globs=CALLSITE_SKIP):
    """alloc_origins' rule: the first frame outside tracing, allocator, slab and vmalloc."""
    for frame in frames:
        fn = re.sub(r"([.](isra|part|constprop|cold|llvm|lto_priv)([.][0-9]+)?)+$", "", frame)
        if not any(fnmatch.fnmatchcase(fn, g) for g in globs):
            return fn
    return "(allocator)"


def _pairs(seq):
    """Begin/end pairs of one task's ('b'|'e', ts, payload) in time order:
    ([(begin, end)], ends without a begin, begins without an end)."""
    pairs, no_begin, no_end, open_ = [], [], [], None
    for what, ts, payload in seq:
        if what == "b":
            if open_ is not None:
                no_end.append(open_)
            open_ = (ts, payload)
        else:
            if open_ is None:
                no_begin.append((ts, payload))
            else:
                pairs.append((open_, (ts, payload)))
                open_ = None
    if open_ is not None:
        no_end.append(open_)
    return pairs, no_begin, no_end


def oracle(events):
    """The stalls of a trace and what was left out, recounted from the report.

    Returns (stalls, left): stalls as dicts (kind, pid, comm, order, ns, end, callsite);
    left: Counter of (kind, 'no_begin' | 'no_end' | 'no_run' | 'outside_try').
    """
    has_stacks = any(e["stack"] is not None for e in events)
    per_pid = defaultdict(list)
    for e in events:
        per_pid[e["pid"]].append(e)
    stalls, left = [], Counter()

    def add(kind, e, order, ns, end):
        stalls.append({"kind": kind, "pid": e["pid"], "comm": e["comm"], "order": order,
                       "ns": ns, "end": end, "callsite": None})

    for pid, evs in per_pid.items():
        evs.sort(key=lambda e: e["ts"])        # stable: report order within a nanosecond
        comm = evs[0]["comm"]
        # direct reclaim
        seq = [("b" if e["event"].endswith("_begin") else "e", e["ts"], e) for e in evs
               if e["event"] in ("mm_vmscan_direct_reclaim_begin", "mm_vmscan_direct_reclaim_end")]
        pairs, no_begin, no_end = _pairs(seq)
        for (b, be), (e, _) in pairs:
            add("direct_reclaim", be, int(be["fields"]["order"]), e - b, e)
        left["direct_reclaim", "no_begin"] += len(no_begin)
        left["direct_reclaim", "no_end"] += len(no_end)
        # compaction runs: begin .. next end of the task
        seq = [("b" if e["event"] == "mm_compaction_begin" else "e", e["ts"], e) for e in evs
               if e["event"] in ("mm_compaction_begin", "mm_compaction_end")]
        pairs, no_begin, no_end = _pairs(seq)
        runs = [(b, e, "paired") for (b, _), (e, _) in pairs] + \
               [(None, ts, "no_begin") for ts, _ in no_begin] + \
               [(ts, None, "no_end") for ts, _ in no_end]
        if comm.startswith("kcompactd"):
            for b, e, status in runs:
                if status != "paired":
                    left["kcompactd", status] += 1
                    continue
                wakes = [w for w in evs if w["event"] == "mm_compaction_kcompactd_wake"
                         and w["ts"] <= b]
                done = [f for f in evs if f["event"] == "mm_compaction_finished"
                        and b <= f["ts"] <= e]
                order = int(done[-1]["fields"]["order"]) if done else \
                    int(wakes[-1]["fields"]["order"]) if wakes else None
                add("kcompactd", {"pid": pid, "comm": comm}, order, e - b, e)
        else:
            # direct compaction: a try owns the runs that begin after it, until the task's
            # next try, direct reclaim or allocation at the try's order
            stream = [(e["ts"], 0, "try", e) for e in evs
                      if e["event"] == "mm_compaction_try_to_compact_pages"]
            stream += [(e["ts"], 1, "stop", e) for e in evs
                       if e["event"] in ("mm_vmscan_direct_reclaim_begin", "mm_page_alloc")]
            stream += [(b if b is not None else e, 2, "run", (b, e, status)) for b, e, status in runs]
            stream.sort(key=lambda x: (x[0], x[1]))
            tries, current = [], None
            for ts, _, what, item in stream:
                if what == "try":
                    current = {"ev": item, "order": int(item["fields"]["order"]), "runs": []}
                    tries.append(current)
                elif what == "stop":
                    if current and (item["event"] != "mm_page_alloc" or
                                    int(item["fields"]["order"]) == current["order"]):
                        current = None
                elif current is not None:
                    current["runs"].append(item)
                else:
                    status = item[2]
                    left["direct_compaction", "outside_try" if status == "paired" else status] += 1
            for t in tries:
                statuses = {status for _, _, status in t["runs"]}
                if not t["runs"]:
                    left["direct_compaction", "no_run"] += 1
                elif "no_end" in statuses:
                    left["direct_compaction", "no_end"] += 1
                elif "no_begin" in statuses:
                    left["direct_compaction", "no_begin"] += 1
                else:
                    add("direct_compaction", t["ev"], t["order"],
                        sum(e - b for b, e, _ in t["runs"]), max(e for _, e, _ in t["runs"]))
        # kswapd awake: first wake after a sleep (or of the capture) .. next sleep
        if comm.startswith("kswapd"):
            awake = None
            for e in evs:
                if e["event"] == "mm_vmscan_kswapd_wake" and awake is None:
                    awake = e
                elif e["event"] == "mm_vmscan_kswapd_sleep":
                    if awake is None:
                        left["kswapd", "no_begin"] += 1
                    else:
                        add("kswapd", awake, int(awake["fields"]["order"]), e["ts"] - awake["ts"],
                            e["ts"])
                        awake = None
            if awake is not None:
                left["kswapd", "no_end"] += 1

    # callsite: the stack of the task's first allocation at the stall's order after it
    if has_stacks:
        allocs = defaultdict(list)
        for e in events:
            if e["event"] == "mm_page_alloc":
                allocs[e["pid"], int(e["fields"]["order"])].append(e)
        for s in stalls:
            if s["kind"] not in ("direct_compaction", "direct_reclaim"):
                continue
            after = [a for a in allocs[s["pid"], s["order"]] if a["ts"] >= s["end"]]
            stack = after[0]["stack"] if after else None
            s["callsite"] = callsite(stack) if stack else "(no stack)"
    return stalls, left


def percentile_cont(values, p):
    """Linear interpolation between the two nearest ranks (SQL's percentile_cont)."""
    v = sorted(values)
    pos = (len(v) - 1) * p
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# ------------------------------------------------------------------ the recordings

LIVE_LOAD = r'''
import mmap, os, sys, tempfile
MB = 1 << 20
m = mmap.mmap(-1, 128 * MB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.madvise(mmap.MADV_HUGEPAGE)          # THP faults: order-9 allocations
m[::4096] = b"x" * (128 * MB // 4096)
fd, path = tempfile.mkstemp(dir=sys.argv[1])
os.write(fd, os.urandom(MB) * 64)       # page cache: large folios on ext4 and xfs
os.fsync(fd)
os.close(fd)
os.unlink(path)
with open("/proc/sys/vm/compact_memory", "w") as f:   # compaction runs outside any try
    f.write("1")
'''
# Set before the live recording: record must leave it as it found it.
TRIGGER_BEFORE = "traceoff:1 if order > 100"
ALLOC_TRIGGER = TRACEFS / "events" / "kmem" / "mm_page_alloc" / "trigger"
TRY_TRIGGER = TRACEFS / "events" / "compaction" / "mm_compaction_try_to_compact_pages" / "trigger"


def active_triggers(path):
    return [l.strip() for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """The committed bundle: its trace.dat (unpacked by the standard library and pyarrow's
    zstd codec) and a dataset parsed from the archive as is."""
    import pyarrow as pa

    d = tmp_path_factory.mktemp("stalls-bundle")
    with pa.input_stream(str(BUNDLE), compression="zstd") as raw, \
            tarfile.open(fileobj=raw, mode="r|") as tar:
        tar.extractall(d, filter="data")
    (trace_dat,) = d.glob("*/trace.dat")
    kmemscope("parse", "-q", BUNDLE, "-o", d / "ds", "--label", "source=committed")
    return {"trace_dat": trace_dat, "ds": d / "ds", "bundle": trace_dat.parent, "live": False,
            "source": "committed"}


@pytest.fixture(scope="module")
def live(live_tracefs, tmp_path_factory):
    """A recording made here: the costly-stalls preset around LIVE_LOAD, with a trigger of
    our own on mm_page_alloc before and after (record must put it back)."""
    d = tmp_path_factory.mktemp("stalls-live")
    load = d / "load.py"
    load.write_text(LIVE_LOAD)
    bundle = d / "bundle"
    with contextlib.contextmanager(_hold_tracing_lock)():
        with open(ALLOC_TRIGGER, "a") as f:
            f.write(TRIGGER_BEFORE)
        try:
            before = {p: active_triggers(p) for p in (ALLOC_TRIGGER, TRY_TRIGGER)}
            kmemscope("record", "-o", bundle, "--preset", "costly-stalls",
                      "--", sys.executable, load, d)
            after = {p: active_triggers(p) for p in (ALLOC_TRIGGER, TRY_TRIGGER)}
        finally:
            with open(ALLOC_TRIGGER, "a") as f:
                f.write("!traceoff")
    # Parsed beside the committed run: a short quiet recording has no kswapd sleep, so no
    # mm_vmscan_kswapd_sleep table, which stalls requires while dataset/schema.py has no
    # stand-in for it. The live run's rows are picked by its label.
    kmemscope("parse", "-q", bundle, "-o", d / "ds", "--label", "source=live")
    kmemscope("parse", "-q", BUNDLE, "-o", d / "ds", "--label", "source=committed")
    return {"trace_dat": bundle / "trace.dat", "ds": d / "ds", "bundle": bundle, "live": True,
            "source": "live", "triggers_before": before, "triggers_after": after}


# The live case records (its fixture asks for tracefs by name, at run time): marked so that
# make check leaves it out and pytest-xdist runs it on the worker that owns tracefs.
@pytest.fixture(params=["committed", pytest.param("live", marks=pytest.mark.live)])
def case(request):
    needs_trace_cmd()
    c = request.getfixturevalue(request.param)
    events, nstacks = report_events(c["trace_dat"])
    stalls, left = oracle(events)
    return dict(c, events=events, nstacks=nstacks, stalls=stalls, left=left)


def query(name, ds, source=None):
    """The rows of a query (as JSON), those of the run labelled source=SOURCE if given."""
    rows = rows_of(kmemscope("query", name, ds, "--format", "json"))
    return [r for r in rows if source is None or r["labels"].get("source") == source]


# ------------------------------------------------------------------ tests

def test_per_run_counts_totals_and_max_match_a_recount_of_report_begin_end_pairs(case):
    rows = query("stalls.per_run", case["ds"], case["source"])
    assert all(list(r) == PER_RUN_COLUMNS for r in rows)
    got = {r["kind"]: r for r in rows}
    want = defaultdict(list)
    for s in case["stalls"]:
        want[s["kind"]].append(s["ns"])
    assert set(got) == set(want)
    for kind, ns in want.items():
        r = got[kind]
        assert r["timed"] == len(ns), kind
        if kind == "direct_compaction":
            # vmstat's count needs the deferral events, which costly-stalls does not record
            assert r["stalls"] is None or r["stalls"] >= len(ns)
        else:
            assert r["stalls"] == len(ns), kind
        assert r["total_ms"] == pytest.approx(sum(ns) / 1e6, rel=1e-12, abs=1e-9), kind
        assert r["mean_ms"] == pytest.approx(sum(ns) / 1e6 / len(ns), rel=1e-12), kind
        assert r["max_ms"] == pytest.approx(max(ns) / 1e6, rel=1e-12), kind
        for col, p in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99)):
            assert r[col] == pytest.approx(percentile_cont(ns, p) / 1e6, rel=1e-12), (kind, col)
    if not case["live"]:
        # the committed recording has every kind, and enough direct compaction for its
        # percentiles to mean something
        assert set(got) == set(KINDS)
        assert got["direct_compaction"]["timed"] > 1000
        ns = sorted(want["direct_compaction"])
        n = len(ns)
        median = (ns[n // 2] if n % 2 else (ns[n // 2 - 1] + ns[n // 2]) / 2) / 1e6
        assert got["direct_compaction"]["p50_ms"] == pytest.approx(median, rel=1e-12)


def test_rows_by_kind_order_task_and_callsite_match_the_recount(case):
    rows = query("stalls", case["ds"], case["source"])
    assert all(list(r) == DEFAULT_COLUMNS for r in rows)
    want = defaultdict(list)
    for s in case["stalls"]:
        want[s["kind"], s["order"], s["comm"], s["callsite"]].append(s["ns"])
    got = {(r["kind"], r["order"], r["comm"], r["callsite"]): r for r in rows}
    assert set(got) == set(want)
    for key, ns in want.items():
        assert got[key]["timed"] == len(ns), key
        assert got[key]["total_ms"] == pytest.approx(sum(ns) / 1e6, rel=1e-12), key
        assert got[key]["p50_ms"] == pytest.approx(percentile_cont(ns, 0.5) / 1e6, rel=1e-12), key
    # a total order: within a run and kind, the longest total first, keys break ties
    keys = [(r["run_id"], r["kind"], -r["total_ms"], r["order"] is None, r["order"] or 0,
             r["comm"], r["callsite"] is None, r["callsite"] or "") for r in rows]
    assert keys == sorted(keys)
    if not case["live"]:
        # the direct stalls have their caller: hugetlb pool pages, THP faults, page cache
        sites = {r["callsite"] for r in rows if r["kind"] == "direct_compaction"}
        assert {"only_alloc_fresh_hugetlb_folio", "vma_alloc_anon_folio_pmd",
                "__filemap_get_folio"} <= sites
        assert all(r["callsite"] is None for r in rows if r["kind"] in ("kcompactd", "kswapd"))


def test_pairing_counts_what_was_left_out(case):
    rows = query("stalls.pairing", case["ds"], case["source"])
    got = {r["kind"]: r for r in rows}
    stalls = Counter(s["kind"] for s in case["stalls"])
    kinds = set(stalls) | {k for (k, _), n in case["left"].items() if n}
    assert set(got) == kinds
    for kind in kinds:
        r = got[kind]
        assert r["timed"] == stalls[kind]
        assert r["ends_without_begin"] == case["left"][kind, "no_begin"], kind
        assert r["begins_without_end"] == case["left"][kind, "no_end"], kind
        assert r["tries_without_runs"] == case["left"][kind, "no_run"], kind
        assert r["runs_outside_tries"] == case["left"][kind, "outside_try"], kind
    if case["live"]:
        # the workload's write to compact_memory compacts outside any try
        assert got["direct_compaction"]["runs_outside_tries"] > 0


def test_stacks_come_only_with_costly_order_events(case):
    """The preset's filters and triggers: order > 3 allocations and compaction attempts, each
    with its kernel stack, and no stack on anything else (a trigger without the filter's
    condition would stack every allocation the filter drops: stacks without an event)."""
    events = case["events"]
    m = json.loads((case["bundle"] / "manifest.json").read_text())
    assert m["preset"] == "costly-stalls" and m["stacktrace"] is False
    triggers = {e["event"]: e.get("trigger") for e in m["events"]}
    assert triggers["kmem:mm_page_alloc"] == "stacktrace if order > 3"
    assert triggers["compaction:mm_compaction_try_to_compact_pages"] == "stacktrace if order > 3"
    assert sum(1 for t in triggers.values() if t) == 2
    costly = [e for e in events if e["event"] in STACKED]
    assert costly and all(int(e["fields"]["order"]) > 3 for e in costly)
    assert case["nstacks"] == len(costly)
    assert all(e["stack"] for e in costly)
    assert all(e["stack"][0] == "trace_event_raw_event_" + e["event"] for e in costly)
    others = Counter(e["event"] for e in events if e["event"] not in STACKED)
    assert others["mm_compaction_begin"] > 0


def test_record_puts_back_a_trigger_it_found(live):
    before, after = live["triggers_before"], live["triggers_after"]
    assert before[ALLOC_TRIGGER] == ["traceoff:count=1 if order > 100"]
    assert after == before


def test_stalls_is_listed_and_documents_every_column(committed):
    from kmemscope.queries import catalog

    listed = kmemscope("queries").stdout
    for name in ("stalls", "stalls.per_run", "stalls.pairing", "stalls.each"):
        assert re.search(rf"^{re.escape(name)}\s+\S", listed, re.M), name
    doc = json.loads(kmemscope("queries", "stalls", "--format", "json").stdout)
    assert [s["query"] for s in doc["sections"]] == ["stalls", "stalls.per_run", "stalls.pairing", "stalls.each"]
    assert "percentile_cont" in doc["text"] and doc["caveats"]
    for sec in doc["sections"]:
        rows = query(sec["query"], committed["ds"])
        assert [c["name"] for c in sec["columns"]] == list(rows[0]), sec["query"]
        for c in sec["columns"]:
            assert c["unit"] in catalog.UNITS and c["description"], (sec["query"], c)
