"""THP fault and direct compaction success from the trace, checked two ways.

1. Against a plain-Python recount of the same model over the parsed Parquet rows
   (pyarrow only, no SQL, no code shared with queries/): the THP fault model
   (first local-node try, retry after a failed try that may reclaim) and the
   direct compaction model (stall unless every zone was skipped; success when
   a defer_reset follows that is the allocation's, not the one try_to_compact_pages
   logs for a zone that reported success), and compaction outcomes by order.
2. Against the kernel's own counters: vmstat's thp_fault_alloc /
   (thp_fault_alloc + thp_fault_fallback) and compact_success / compact_stall
   over the same window must agree within 1 percentage point.

Real captures from the 6.18 test machine: examples/thp-faults (the high-order preset,
THP faults with retries and fallbacks, direct compaction, hugetlb pages at the
same order), examples/memory-pressure (compaction preset: direct compaction
without mm_page_alloc) and examples/kmem-compaction (its 64 MiB mappings are
shared anonymous memory, i.e. shmem with huge pages off: no THP fault at all,
which both sources must say).
"""
import csv
import io
import shutil
from collections import Counter, defaultdict

import pyarrow.dataset as pads
import pytest

import requirements

from conftest import EXAMPLES
from kmrun import kmemscope

THP_BUNDLE = EXAMPLES / "thp-faults"
PRESSURE_BUNDLE = EXAMPLES / "memory-pressure"
SQUEEZE_BUNDLE = EXAMPLES / "kmem-compaction"
FAILED = {2 ** 64 - 1, 2 ** 32 - 1}


def _parse(tmp, bundle, name, *labels):
    if not bundle.is_dir():
        requirements.skip("setup", f"the committed example {bundle} is missing")
    ds = tmp / name
    args = ["parse", "-q", bundle, "-o", ds]
    for label in labels:
        args += ["--label", label]
    kmemscope(*args)
    return ds


@pytest.fixture(scope="module")
def thp_ds(tmp_path_factory):
    return _parse(tmp_path_factory.mktemp("thp"), THP_BUNDLE, "ds")


@pytest.fixture(scope="module")
def pressure_ds(tmp_path_factory):
    return _parse(tmp_path_factory.mktemp("pressure"), PRESSURE_BUNDLE, "ds")


@pytest.fixture(scope="module")
def squeeze_ds(tmp_path_factory):
    return _parse(tmp_path_factory.mktemp("squeeze"), SQUEEZE_BUNDLE, "ds")


@pytest.fixture(scope="module")
def bare_thp_ds(tmp_path_factory):
    """examples/thp-faults without its /proc samples: what plain trace-cmd gives."""
    tmp = tmp_path_factory.mktemp("bare")
    if not THP_BUNDLE.is_dir():
        requirements.skip("setup", f"the committed example {THP_BUNDLE} is missing")
    bare = tmp / "bundle"
    shutil.copytree(THP_BUNDLE, bare, ignore=shutil.ignore_patterns("procfs"))
    return _parse(tmp, bare, "ds")


def rows(ds, table, columns=None):
    path = ds / table
    if not path.exists():
        return []
    return pads.dataset(str(path), format="parquet", partitioning="hive").to_table(columns=columns).to_pylist()


def query(ds, name):
    out = kmemscope("query", name, ds, "--format", "csv").stdout
    return list(csv.DictReader(io.StringIO(out)))


def num(text):
    return None if text in (None, "") else float(text)


# ---- the oracle: the same models, written again in plain Python ----

def gfp_values(ds):
    flags = [r for r in rows(ds, "print_flags")
             if r["event"] == "mm_page_alloc" and r["field"] == "gfp_flags" and r["kind"] == "flags"]
    by_name = {}
    for r in flags:
        single = r["value"] and not (r["value"] & (r["value"] - 1))
        if r["name"] == "GFP_TRANSHUGE_LIGHT" or single:
            by_name.setdefault(r["name"], r["value"])
    return by_name


def vmstat_window(ds):
    samples = rows(ds, "vmstat", ["ts"])
    if not samples:
        return None
    lo, hi = min(r["ts"] for r in samples), max(r["ts"] for r in samples)
    return (lo, hi) if hi > lo else None


def vmstat_delta(ds, name):
    samples = sorted((r["ts"], r["value"]) for r in rows(ds, "vmstat") if r["name"] == name)
    return samples[-1][1] - samples[0][1] if samples else None


def thp_faults_oracle(ds, window=None):
    """(faults, successes, kinds Counter) by walking each task's huge-order attempts in time order."""
    g = gfp_values(ds)
    light, thisnode, reclaim = g["GFP_TRANSHUGE_LIGHT"], g["__GFP_THISNODE"], g["__GFP_DIRECT_RECLAIM"]
    allocs = rows(ds, "mm_page_alloc", ["ts", "pid", "comm", "order", "gfp_flags", "pfn"])
    is_thp = [a for a in allocs if a["gfp_flags"] & light == light]
    local_orders = Counter(a["order"] for a in is_thp if a["gfp_flags"] & thisnode and a["order"] > 0)
    run = rows(ds, "runs", ["pageblock_order"])[0]
    order = local_orders.most_common(1)[0][0] if local_orders else run["pageblock_order"]
    kinds = Counter()
    per_task = defaultdict(list)
    for a in allocs:
        if a["order"] != order:
            continue
        if a["gfp_flags"] & light != light:
            kinds["other"] += 1
        elif a["comm"] == "khugepaged":
            kinds["khugepaged"] += 1
        else:
            kinds["fault"] += 1
            per_task[a["pid"]].append(a)
    faults = successes = 0
    for attempts in per_task.values():
        waiting_retry = False
        for a in sorted(attempts, key=lambda a: a["ts"]):
            ok = a["pfn"] not in FAILED
            local = bool(a["gfp_flags"] & thisnode)
            retry = waiting_retry and not local
            waiting_retry = local and not ok and bool(a["gfp_flags"] & reclaim)
            if window and not window[0] <= a["ts"] <= window[1]:
                continue
            faults += not retry
            successes += ok
    return faults, successes, kinds, order


def direct_compaction_oracle(ds, window=None):
    """{order: [tries, stalls, successes]} by replaying each task's events after every try.

    A try's first defer_reset is try_to_compact_pages' own (a zone reported
    success; no page yet) when the zone's deferral state is left uncleared, when
    an end with status success came before it, or when no deferred, suitable or
    finished event of its zone or a lower zone of its node came before it and no
    run ended contended. Any other defer_reset is the allocation's: a success."""
    status = {r["value"]: r["name"] for r in rows(ds, "print_flags")
              if r["event"] == "mm_compaction_end" and r["field"] == "status"}
    tries = rows(ds, "mm_compaction_try_to_compact_pages", ["ts", "pid", "order"])
    pids = {t["pid"] for t in tries}
    has_alloc = bool(rows(ds, "mm_page_alloc", ["ts"]))
    stream = defaultdict(list)
    for t in tries:
        stream[t["pid"]].append((t["ts"], 0, "try", t))
    zone = ["ts", "pid", "order", "nid", "idx"]
    for table, kind, rank, columns in (
            ("mm_compaction_deferred", "deferred", 1, zone),
            ("mm_compaction_suitable", "suitable", 1, zone),
            ("mm_compaction_finished", "finished", 1, zone),
            ("mm_compaction_end", "end", 2, ["ts", "pid", "status"]),
            ("mm_compaction_defer_reset", "reset", 3, zone + ["considered", "defer_shift"]),
            ("mm_vmscan_direct_reclaim_begin", "reclaim", 4, ["ts", "pid"]),
            ("mm_page_alloc", "alloc", 4, ["ts", "pid", "order", "pfn"])):
        for r in rows(ds, table, columns):
            if r["pid"] in pids and (kind != "alloc" or r["order"] > 0):
                stream[r["pid"]].append((r["ts"], rank, kind, r))
    out = defaultdict(lambda: [0, 0, 0])

    def close(cur):
        if cur is None or (window and not window[0] <= cur["ts"] <= window[1]):
            return
        stalled = cur["deferred"] + cur["ends"] + cur["resets"] > 0
        ok = cur["resets"] > cur["loop_resets"] and (not has_alloc or cur["alloc_ok"] is True)
        o = out[cur["order"]]
        o[0] += 1
        o[1] += stalled
        o[2] += stalled and ok

    for events in stream.values():
        cur = None
        for ts, _, kind, r in sorted(events, key=lambda e: (e[0], e[1])):
            if kind == "try":
                close(cur)
                cur = {"ts": ts, "order": r["order"], "open": True, "deferred": 0, "ends": 0,
                       "resets": 0, "loop_resets": 0, "alloc_ok": None, "reached": set(),
                       "contended": False, "success": False}
                continue
            if cur is None or not cur["open"]:
                continue
            if kind == "reclaim" or (kind == "alloc" and r["order"] == cur["order"]):
                cur["open"] = False
                cur["alloc_ok"] = r["pfn"] not in FAILED if kind == "alloc" else None
                continue
            if kind in ("deferred", "suitable", "finished", "reset") and r["order"] != cur["order"]:
                cur["open"] = False
                continue
            if kind in ("deferred", "suitable", "finished"):
                cur["reached"].add((r["nid"], r["idx"]))
                cur["deferred"] += kind == "deferred"
            elif kind == "end":
                name = status.get(r["status"])
                cur["ends"] += 1
                cur["contended"] |= name == "contended"
                cur["success"] |= name == "success"
            elif kind == "reset":
                if cur["resets"] == 0:
                    passed = any(nid == r["nid"] and idx <= r["idx"] for nid, idx in cur["reached"])
                    cur["loop_resets"] = int(r["considered"] > 0 or r["defer_shift"] > 0
                                             or cur["success"]
                                             or (not passed and not cur["contended"]))
                cur["resets"] += 1
        close(cur)
    return dict(out)


def outcomes_oracle(ds):
    """Counter of (kind, order, status) over compaction runs; order from the run's last finished."""
    events = defaultdict(list)
    for r in rows(ds, "mm_compaction_begin", ["ts", "pid", "comm"]):
        events[r["pid"]].append((r["ts"], 1, "begin", r))
    for r in rows(ds, "mm_compaction_finished", ["ts", "pid", "order"]):
        events[r["pid"]].append((r["ts"], 0, "finished", r))
    for r in rows(ds, "mm_compaction_end", ["ts", "pid", "comm", "status"]):
        events[r["pid"]].append((r["ts"], 0, "end", r))
    out = Counter()
    for evs in events.values():
        began, last_order = False, None
        for _, _, kind, r in sorted(evs, key=lambda e: (e[0], -e[1])):
            if kind == "begin":
                began, last_order = True, None
            elif kind == "finished":
                last_order = r["order"] if began else None
            else:
                who = "kcompactd" if r["comm"].startswith("kcompactd") else "direct"
                out[(who, last_order if began else None, r["status"])] += 1
                began, last_order = False, None
    return out


# ---- the tests ----

def test_thp_faults_equal_the_recount(thp_ds):
    window = vmstat_window(thp_ds)
    faults, successes, kinds, order = thp_faults_oracle(thp_ds, window)
    got = query(thp_ds, "thp")[0]
    assert got["trace_window"] == "vmstat"
    assert int(got["thp_order"]) == order == 9
    assert int(got["trace_thp_faults"]) == faults
    assert int(got["trace_thp_fault_successes"]) == successes
    assert num(got["trace_thp_fault_success_pct"]) == pytest.approx(100.0 * successes / faults)
    # The capture has THP faults that failed, retries, and hugetlb pages at the same order.
    assert faults > 100 and successes < faults and kinds["other"] > 0
    retries = sum(int(r["attempts"]) for r in query(thp_ds, "thp.allocs") if r["attempt"] == "retry")
    assert retries > 0


def test_thp_allocs_by_kind_equal_the_recount(thp_ds):
    _, _, kinds, _ = thp_faults_oracle(thp_ds)
    got = Counter()
    for r in query(thp_ds, "thp.allocs"):
        got[r["kind"]] += int(r["attempts"])
    assert got == kinds


def test_thp_fault_success_agrees_with_vmstat_within_one_point(thp_ds):
    alloc, fallback = vmstat_delta(thp_ds, "thp_fault_alloc"), vmstat_delta(thp_ds, "thp_fault_fallback")
    assert alloc + fallback > 100
    got = query(thp_ds, "thp")[0]
    vm = 100.0 * alloc / (alloc + fallback)
    assert num(got["thp_fault_success_pct"]) == pytest.approx(vm)
    assert abs(num(got["trace_thp_fault_success_pct"]) - vm) <= 1.0
    # the counts themselves agree to within 2% (stray faults at the window's edges)
    assert abs(int(got["trace_thp_faults"]) - (alloc + fallback)) <= 0.02 * (alloc + fallback)


@pytest.mark.parametrize("which", ["thp", "pressure"])
def test_direct_compaction_equals_the_recount_and_agrees_with_vmstat(which, thp_ds, pressure_ds):
    ds = thp_ds if which == "thp" else pressure_ds
    window = vmstat_window(ds)
    expected = direct_compaction_oracle(ds, window)
    got = query(ds, "thp")[0]
    stalls = sum(v[1] for v in expected.values())
    successes = sum(v[2] for v in expected.values())
    assert int(got["trace_compact_stalls"]) == stalls
    assert int(got["trace_compact_successes"]) == successes
    stall_vm, success_vm = vmstat_delta(ds, "compact_stall"), vmstat_delta(ds, "compact_success")
    assert stall_vm > 50
    assert abs(100.0 * successes / stalls - 100.0 * success_vm / stall_vm) <= 1.0
    assert abs(stalls - stall_vm) <= 0.02 * stall_vm


@pytest.mark.parametrize("which", ["thp", "pressure"])
def test_compaction_direct_by_order_equals_the_recount(which, thp_ds, pressure_ds):
    ds = thp_ds if which == "thp" else pressure_ds
    expected = direct_compaction_oracle(ds)
    got = {int(r["order"]): [int(r["tries"]), int(r["stalls"]), int(r["successes"])]
           for r in query(ds, "compaction.direct")}
    assert got == expected and expected


@pytest.mark.parametrize("which", ["thp", "pressure", "squeeze"])
def test_compaction_outcomes_by_order_equal_the_recount(which, thp_ds, pressure_ds, squeeze_ds):
    ds = {"thp": thp_ds, "pressure": pressure_ds, "squeeze": squeeze_ds}[which]
    expected = outcomes_oracle(ds)
    got = Counter()
    for r in query(ds, "compaction.outcomes"):
        order = None if r["order"] == "" else int(r["order"])
        got[(r["kind"], order, int(r["status"]))] += int(r["runs"])
    assert got == expected and expected


def test_example_without_thp_faults_says_so_both_ways(squeeze_ds):
    # Its workload maps 64 MiB with mmap(-1, ...): MAP_SHARED, i.e. shmem, and shmem THP is off.
    got = query(squeeze_ds, "thp")[0]
    assert vmstat_delta(squeeze_ds, "thp_fault_alloc") == 0
    assert int(got["trace_thp_faults"]) == 0 == thp_faults_oracle(squeeze_ds)[0]
    assert got["trace_thp_fault_success_pct"] == ""


def test_summary_takes_vmstat_when_the_run_has_it(thp_ds):
    got = query(thp_ds, "summary")[0]
    assert got["thp_fault_success_source"] == "vmstat"
    assert got["compaction_success_source"] == "vmstat"
    alloc, fallback = vmstat_delta(thp_ds, "thp_fault_alloc"), vmstat_delta(thp_ds, "thp_fault_fallback")
    assert num(got["thp_fault_success_pct"]) == pytest.approx(100.0 * alloc / (alloc + fallback))


def test_summary_falls_back_to_the_trace_without_vmstat(bare_thp_ds):
    assert not rows(bare_thp_ds, "vmstat")
    faults, successes, _, _ = thp_faults_oracle(bare_thp_ds)
    per_order = direct_compaction_oracle(bare_thp_ds)
    stalls = sum(v[1] for v in per_order.values())
    ok = sum(v[2] for v in per_order.values())
    got = query(bare_thp_ds, "summary")[0]
    assert got["thp_fault_success_source"] == "trace"
    assert num(got["thp_fault_success_pct"]) == pytest.approx(100.0 * successes / faults)
    assert got["compaction_success_source"] == "trace"
    assert num(got["compaction_success_pct"]) == pytest.approx(100.0 * ok / stalls)
    thp = query(bare_thp_ds, "thp")[0]
    assert thp["trace_window"] == "capture" and thp["thp_fault_success_pct"] == ""


def test_compare_notes_sources(tmp_path):
    if not (THP_BUNDLE.is_dir() and PRESSURE_BUNDLE.is_dir()):
        requirements.skip("setup", "the committed examples are missing")
    bare = tmp_path / "bare"
    shutil.copytree(THP_BUNDLE, bare, ignore=shutil.ignore_patterns("procfs"))
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", bare, "-o", ds, "--label", "side=a")
    kmemscope("parse", "-q", PRESSURE_BUNDLE, "-o", ds, "--label", "side=b")
    proc = kmemscope("compare", ds, "--by", "side", "--metrics", "compaction_success_pct,thp_fault_success_pct")
    # the notes end the comparison's own text
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    mixed = [n for n in notes if n.split("note: ", 1)[1].startswith("compaction_success_pct:")]
    assert len(mixed) == 1 and "different sources" in mixed[0]
    assert "a: 1 from trace" in mixed[0] and "b: 1 from vmstat" in mixed[0]
    thp = [n for n in notes if n.split("note: ", 1)[1].startswith("thp_fault_success_pct: from")]
    assert len(thp) == 1 and "from the trace" in thp[0] and "a: 1 from trace" in thp[0]
