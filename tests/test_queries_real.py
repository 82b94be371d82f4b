"""Every analysis on a real capture, checked against plain Python over the same rows.

The capture is $KMEMSCOPE_QUERIES_TRACE if set, else examples/*/trace.dat when the
repository has one; otherwise the test
records one on this machine (root + tracefs, holding the tracing lock): kmem,
compaction and vmscan events around a workload that makes tmpfs files (page
cache + reclaimable slab), madvise(MADV_HUGEPAGE) anonymous memory and a manual
compaction. Either way it goes through `kmemscope parse`.

The oracles read the parsed Parquet files with pyarrow and compute each answer
in Python: no DuckDB, no SQL, no code shared with queries/. hot_pfns is also
checked against `trace-cmd report -R` text, which shares nothing with the parser.
Events that this machine cannot produce on demand (kswapd wakes, direct reclaim,
try_to_compact_pages, procfs samples) are tested on synthetic data in
test_queries_synthetic.py.
"""
import functools
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import requirements

from kmemscope.queries import runner

from capture_helpers import wait_for
from conftest import EXAMPLES, TRACEFS, record_lock, tracefs_available

FAILED = {2 ** 64 - 1, 2 ** 32 - 1}
KMEMSCOPE = Path(sys.executable).with_name("kmemscope")

WORKLOAD = r"""
import mmap, os, shutil, sys, time
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
end = time.time() + float(sys.argv[2])
i, bufs = 0, []
while time.time() < end:
    for _ in range(2000):
        with open(f"{d}/f{i}", "wb") as f:
            f.write(b"x" * 3000)
        i += 1
    m = mmap.mmap(-1, 64 << 20)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except Exception:
        pass
    m[::4096] = b"y" * ((64 << 20) >> 12)
    bufs.append(m)
    if len(bufs) > 8:
        bufs.pop(0).close()
with open("/proc/sys/vm/compact_memory", "w") as f:
    f.write("1")
shutil.rmtree(d)
"""

EVENTS = ["kmem:mm_page_alloc", "kmem:mm_page_free", "kmem:mm_page_alloc_extfrag",
          "kmem:mm_page_alloc_zone_locked", "kmem:mm_page_pcpu_drain", "compaction",
          "vmscan:mm_vmscan_wakeup_kswapd", "vmscan:mm_vmscan_kswapd_wake",
          "vmscan:mm_vmscan_direct_reclaim_begin", "vmscan:mm_vmscan_direct_reclaim_end"]


def _record(out, workdir):
    reason = tracefs_available()
    if reason:
        requirements.skip("tracefs", f"no examples/*/trace.dat and cannot record here: {reason}")
    cmd = ["trace-cmd", "record", "-d", "--no-filter", "-C", "mono", "-o", str(out)]
    for e in EVENTS:
        cmd += ["-e", e]
    enabled = TRACEFS / "events" / "kmem" / "mm_page_alloc" / "enable"
    with record_lock():
        rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert wait_for(lambda: enabled.read_text().startswith("1") or rec.poll() is not None,
                            60) and rec.poll() is None, "trace-cmd record did not start tracing"
            subprocess.run([sys.executable, "-c", WORKLOAD, str(workdir), "3"], check=True,
                           timeout=120)
        finally:
            rec.send_signal(signal.SIGINT)
            rec.wait(timeout=120)
    if not out.exists() or out.stat().st_size == 0:
        pytest.fail("trace-cmd record wrote no trace")


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(trace.dat path, dataset path) of a real capture parsed by `kmemscope parse`."""
    tmp = tmp_path_factory.mktemp("real")
    examples = sorted(EXAMPLES.glob("*/trace.dat"))
    given = os.environ.get("KMEMSCOPE_QUERIES_TRACE")   # reuse a capture while developing
    if given:
        trace = Path(given)
    elif examples:
        trace = examples[0]
    else:
        trace = tmp / "trace.dat"
        _record(trace, Path("/dev/shm") / f"kmemscope-test-{os.getpid()}")
    ds = tmp / "ds"
    if not KMEMSCOPE.exists():
        requirements.skip("setup", "kmemscope is not installed in this environment (make setup)")
    done = subprocess.run([str(KMEMSCOPE), "parse", str(trace), "-o", str(ds)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return trace, ds


def rows(ds, table):
    """All runs' rows of `table` as {run_id: {column: [values]}} (pyarrow only)."""
    out = {}
    root = Path(ds) / table
    if not root.exists():
        return out
    for part in sorted(root.iterdir()):
        if part.name.startswith("run_id="):
            t = pq.ParquetDataset(sorted(str(p) for p in part.glob("*.parquet"))).read()
            out[part.name[len("run_id="):]] = t.to_pydict()
    return out


def one_run(ds, table):
    runs = rows(ds, table)
    assert len(runs) == 1
    return next(iter(runs.items()))


def result(name, ds, **params):
    return runner.run_query(name, ds, params=params).to_pylist()


def percentile_cont(values, q):
    """The linear-interpolation percentile of SQL's percentile_cont."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def page_sequences(ds):
    """{pfn: [(ts, is_alloc, cpu, order)]} in time order, frees before allocs at one ts."""
    _, a = one_run(ds, "mm_page_alloc")
    _, f = one_run(ds, "mm_page_free")
    seq = defaultdict(list)
    for ts, cpu, pfn, order in zip(a["ts"], a["cpu"], a["pfn"], a["order"]):
        if pfn not in FAILED:
            seq[pfn].append((ts, 1, cpu, order))
    for ts, cpu, pfn, order in zip(f["ts"], f["cpu"], f["pfn"], f["order"]):
        seq[pfn].append((ts, 0, cpu, order))
    for events in seq.values():
        events.sort(key=lambda e: (e[0], e[1]))
    return seq


@functools.lru_cache(maxsize=4)
def run_pairs(ds):
    return pairs(page_sequences(ds))


def pairs(seq):
    """(reuse pairs, alloc-free pairs): (pfn, interval, same_cpu, alloc order)."""
    reuse, lifetime = [], []
    for pfn, events in seq.items():
        for prev, cur in zip(events, events[1:]):
            if prev[1] == 0 and cur[1] == 1:
                reuse.append((pfn, cur[0] - prev[0], cur[2] == prev[2], cur[3]))
            elif prev[1] == 1 and cur[1] == 0:
                lifetime.append((pfn, cur[0] - prev[0], cur[2] == prev[2], prev[3]))
    return reuse, lifetime


def test_hot_pfns_matches_python_over_parquet(real):
    _, ds = real
    _, a = one_run(ds, "mm_page_alloc")
    counts = Counter(p for p in a["pfn"] if p not in FAILED)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:15]
    orders, cpus = defaultdict(set), defaultdict(set)
    for pfn, order, cpu in zip(a["pfn"], a["order"], a["cpu"]):
        orders[pfn].add(order)
        cpus[pfn].add(cpu)
    reuse, _ = run_pairs(ds)
    intervals = defaultdict(list)
    for pfn, interval, _, _ in reuse:
        intervals[pfn].append(interval)

    got = result("hot_pfns", ds, top_n=15)
    assert [(r["pfn"], r["allocs"]) for r in got] == top
    for r in got:
        assert r["rank"] == got.index(r) + 1
        assert r["orders"] == ",".join(str(o) for o in sorted(orders[r["pfn"]]))
        assert r["cpus"] == len(cpus[r["pfn"]])
        iv = intervals[r["pfn"]]
        assert r["reuses"] == len(iv)
        if iv:
            assert r["reuse_mean_ns"] == pytest.approx(statistics.mean(iv))
            assert r["reuse_median_ns"] == pytest.approx(statistics.median(iv))


def test_hot_pfns_matches_trace_cmd_report(real):
    trace, ds = real
    if not shutil.which("trace-cmd"):
        requirements.skip("setup", "trace-cmd is not installed (make setup)")
    text = subprocess.run(["trace-cmd", "report", "-R", "-i", str(trace)],
                          capture_output=True, text=True, check=True).stdout
    counts = Counter()
    pat = re.compile(r"\smm_page_alloc:\s+pfn=(0x[0-9a-f]+|\d+)\s")
    for m in pat.finditer(text):
        pfn = int(m.group(1), 0)
        if pfn not in FAILED:
            counts[pfn] += 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    got = result("hot_pfns", ds, top_n=10)
    assert [(r["pfn"], r["allocs"]) for r in got] == top


def test_pfn_reuse_matches_python_over_parquet(real):
    _, ds = real
    reuse, lifetime = run_pairs(ds)
    iv = [r[1] for r in reuse]
    (got,) = result("pfn_reuse", ds)
    _, f = one_run(ds, "mm_page_free")
    assert got["frees"] == len(f["ts"])
    assert got["reuse_pairs"] == len(reuse)
    for q, col in ((0.5, "reuse_p50_ns"), (0.9, "reuse_p90_ns"), (0.99, "reuse_p99_ns")):
        assert got[col] == pytest.approx(percentile_cont(iv, q))
    for ms in (1, 10, 100):
        want = 100.0 * sum(1 for x in iv if x <= ms * 1_000_000) / len(iv)
        assert got[f"reused_within_{ms}ms_pct"] == pytest.approx(want)
    assert got["reuse_same_cpu_pct"] == pytest.approx(100.0 * sum(r[2] for r in reuse) / len(reuse))
    assert got["alloc_free_pairs"] == len(lifetime)
    assert got["freed_other_cpu_pct"] == pytest.approx(
        100.0 * sum(not r[2] for r in lifetime) / len(lifetime))

    hist = Counter(-1 if x <= 0 else x.bit_length() - 1 for x in iv)
    got_hist = result("pfn_reuse.histogram", ds)
    assert {r["bucket"]: r["reuse_pairs"] for r in got_hist} == dict(hist)
    for r in got_hist:
        if r["bucket"] >= 0:
            assert r["bucket_lo_ns"] == 2 ** r["bucket"]

    by_order = defaultdict(list)
    for _, interval, same, order in lifetime:
        by_order[order].append((interval, same))
    got_x = {r["order"]: r for r in result("pfn_reuse.cross_cpu", ds)}
    assert set(got_x) == set(by_order)
    for order, items in by_order.items():
        assert got_x[order]["alloc_free_pairs"] == len(items)
        assert got_x[order]["freed_other_cpu"] == sum(1 for _, same in items if not same)
        assert got_x[order]["lifetime_p50_ns"] == pytest.approx(
            percentile_cont([i for i, _ in items], 0.5))


def _gfp_bits(ds):
    _, pf = one_run(ds, "print_flags")
    bits = {}
    for ev, field, name, value in zip(pf["event"], pf["field"], pf["name"], pf["value"]):
        if ev == "mm_page_alloc" and field == "gfp_flags" and value and value & (value - 1) == 0:
            bits[name] = value
    return bits


def test_atomic_orders_matches_python_over_parquet(real):
    _, ds = real
    _, runs = one_run(ds, "runs")
    release = runs["kernel_release"][0]
    major, minor = (int(x) for x in release.split(".")[:2])
    assert (major, minor) >= (6, 3), "this test's oracle covers era B kernels; see the synthetic tests"
    bits = _gfp_bits(ds)
    high, direct, nomem = bits["__GFP_HIGH"], bits["__GFP_DIRECT_RECLAIM"], bits["__GFP_NOMEMALLOC"]
    _, a = one_run(ds, "mm_page_alloc")
    want = Counter()
    comms = defaultdict(Counter)
    for order, gfp, pfn, comm in zip(a["order"], a["gfp_flags"], a["pfn"], a["comm"]):
        if order > 0 and gfp & high and not gfp & direct and not gfp & nomem:
            cls = "highatomic_eligible"
        elif not gfp & direct:
            cls = "other_nonblocking"
        else:
            cls = "blocking"
        want[(cls, order)] += 1
        comms[cls][comm] += 1
    got = result("atomic_orders", ds)
    assert {(r["alloc_class"], r["order"]): r["allocs"] for r in got} == dict(want)
    assert all(r["highatomic_era"] == "B" for r in got)

    top = result("atomic_orders.comms", ds, top_comms=3)
    for cls, counter in comms.items():
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        assert [(r["comm"], r["allocs"]) for r in top if r["alloc_class"] == cls] == ranked


def test_pcp_matches_python_over_parquet(real):
    _, ds = real
    _, d = one_run(ds, "mm_page_pcpu_drain")
    want = Counter(zip(d["order"], d["migratetype"]))
    got = result("pcp", ds)
    assert {(r["order"], r["migratetype"]): r["drains"] for r in got} == dict(want)
    for r in got:
        assert r["pages"] == r["drains"] * 2 ** r["order"]


def test_fallback_pollution_matches_python_over_parquet(real):
    _, ds = real
    _, e = one_run(ds, "mm_page_alloc_extfrag")
    if not e or not e["ts"]:
        requirements.skip("setup", f"{ds}: the capture has no extfrag events")
    _, runs = one_run(ds, "runs")
    pbo = runs.get("pageblock_order", [None])[0] or 9
    want = Counter(zip(e["alloc_migratetype"], e["fallback_migratetype"],
                       [fo < pbo for fo in e["fallback_order"]], e["change_ownership"]))
    _, a = one_run(ds, "mm_page_alloc")
    ok = sum(1 for p in a["pfn"] if p not in FAILED)
    got = result("fallback_pollution", ds)
    assert {(r["alloc_migratetype"], r["fallback_migratetype"], r["fragmenting"],
             r["change_ownership"]): r["events"] for r in got} == dict(want)
    for r in got:
        assert r["events_per_1000_allocs"] == pytest.approx(1000.0 * r["events"] / ok)
        assert r["extfrag_era"] == "6.15+"
        assert r["ownership_meaning"].startswith("claim" if r["change_ownership"] else "steal")


def test_compaction_matches_python_over_parquet(real):
    _, ds = real
    _, b = one_run(ds, "mm_compaction_begin")
    _, e = one_run(ds, "mm_compaction_end")
    if not e:
        requirements.skip("setup", f"{ds}: the capture has no compaction runs")
    bounds = defaultdict(list)
    for ts, pid in zip(b["ts"], b["pid"]):
        bounds[pid].append((ts, 0, None))
    for ts, pid, comm, status in zip(e["ts"], e["pid"], e["comm"], e["status"]):
        bounds[pid].append((ts, 1, (comm, status)))
    runs = []
    for pid, items in bounds.items():
        items.sort()
        prev = None
        for ts, is_end, info in items:
            if is_end:
                kind = "kcompactd" if info[0].startswith("kcompactd") else "direct"
                runs.append((kind, info[1], ts - prev[0] if prev and prev[1] == 0 else None))
            prev = (ts, is_end)
    _, pf = one_run(ds, "print_flags")
    names = {v: n for ev, fl, n, v in zip(pf["event"], pf["field"], pf["name"], pf["value"])
             if ev == "mm_compaction_end" and fl == "status"}
    got = {r["kind"]: r for r in result("compaction", ds)}
    for kind in {k for k, _, _ in runs}:
        mine = [r for r in runs if r[0] == kind]
        durations = [d for _, _, d in mine if d is not None]
        assert got[kind]["runs"] == len(mine)
        assert got[kind]["timed_runs"] == len(durations)
        assert got[kind]["successes"] == sum(1 for _, s, _ in mine if names.get(s) == "success")
        assert got[kind]["duration_max_ns"] == max(durations)
        assert got[kind]["duration_p50_ns"] == pytest.approx(percentile_cont(durations, 0.5))
        assert got[kind]["total_duration_ns"] == sum(durations)
    status = Counter((k, s) for k, s, _ in runs)
    got_s = result("compaction.status", ds)
    assert {(r["kind"], r["status"]): r["runs"] for r in got_s} == dict(status)
    assert all(r["status_name"] == names[r["status"]] for r in got_s)


def test_highatomic_served_matches_python_over_parquet(real):
    _, ds = real
    _, z = one_run(ds, "mm_page_alloc_zone_locked")
    want = Counter(o for o, mt in zip(z["order"], z["migratetype"]) if mt == 3)
    got = result("highatomic.served", ds)
    assert all(r["freelist_known"] for r in got)     # 6.18 has percpu_refill
    assert {r["order"]: r["events"] for r in got if r["order"] is not None} == dict(want)


def test_summary_matches_python_over_parquet(real):
    _, ds = real
    _, a = one_run(ds, "mm_page_alloc")
    counts = Counter(p for p in a["pfn"] if p not in FAILED)
    _, lifetime = run_pairs(ds)
    _, e = (one_run(ds, "mm_page_alloc_extfrag") if rows(ds, "mm_page_alloc_extfrag")
            else (None, {"ts": [], "fallback_order": []}))
    # only fragmenting fallbacks pollute: the page split a foreign pageblock (order < 9 here)
    fragmenting = sum(1 for o in e["fallback_order"] if o < 9)
    (got,) = result("summary", ds)
    assert got["allocs"] == len(a["ts"])
    assert got["top5_pfn_allocs"] == sorted(counts.values(), reverse=True)[:5]
    assert got["cross_cpu_free_pct"] == pytest.approx(
        100.0 * sum(not r[2] for r in lifetime) / len(lifetime))
    assert got["pollution_per_1000_allocs"] == pytest.approx(1000.0 * fragmenting / sum(counts.values()))
    assert got["thp_fault_success_pct"] is None      # bare trace.dat: no vmstat
    assert got["lost_events"] == 0


def test_thp_counts_huge_order_attempts(real):
    _, ds = real
    _, a = one_run(ds, "mm_page_alloc")
    attempts = sum(1 for o in a["order"] if o == 9)
    failures = sum(1 for o, p in zip(a["order"], a["pfn"]) if o == 9 and p in FAILED)
    (got,) = result("thp", ds)
    assert got["order_attempts"] == attempts
    assert got["order_failures"] == failures
    assert got["vmstat_window_s"] is None


def test_queries_without_their_tables_say_so(real):
    from kmemscope.common.errors import DatasetError
    _, ds = real
    with pytest.raises(DatasetError, match=r"no procfs tables .*kmemscope record"):
        runner.run_query("vmstat_rates", ds)
    with pytest.raises(DatasetError, match=r"no procfs tables"):
        runner.run_query("highatomic", ds)
    notes = runner.notes_of(runner.run_query("thp", ds))
    assert any("no procfs table vmstat" in n for n in notes)
