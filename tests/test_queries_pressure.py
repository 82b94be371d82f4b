"""Reclaim and compaction analyses on a real capture under memory pressure.

examples/memory-pressure/ was recorded on the 6.18 test machine with the
`compaction` preset while hugetlb reservations, page cache and anonymous memory
left no free memory: it holds kswapd and kcompactd wake-ups, a direct-reclaim
stall, direct compaction with deferrals. Each analysis is checked against a
recount in plain Python over the parsed Parquet rows (read with pyarrow, no SQL).
"""
import csv
import io
from collections import Counter, defaultdict

import pyarrow.dataset as pads
import pytest

import requirements

from conftest import EXAMPLES
from kmrun import kmemscope

BUNDLE = EXAMPLES / "memory-pressure"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    if not BUNDLE.is_dir():
        requirements.skip("setup", f"the committed example {BUNDLE} is missing")
    ds = tmp_path_factory.mktemp("pressure") / "ds"
    kmemscope("parse", "-q", BUNDLE, "-o", ds)
    return ds


def rows(ds, table):
    """Every row of a table as dicts, through pyarrow alone."""
    return pads.dataset(str(ds / table), format="parquet", partitioning="hive").to_table().to_pylist()


def query(ds, name):
    out = kmemscope("query", name, ds, "--format", "csv").stdout
    return list(csv.DictReader(io.StringIO(out)))


def test_wakeups_by_source_and_order(dataset):
    expected = Counter()
    for source, table in (("wakeup_kswapd", "mm_vmscan_wakeup_kswapd"),
                          ("kswapd_wake", "mm_vmscan_kswapd_wake"),
                          ("wakeup_kcompactd", "mm_compaction_wakeup_kcompactd"),
                          ("kcompactd_wake", "mm_compaction_kcompactd_wake")):
        for r in rows(dataset, table):
            expected[(source, r["order"])] += 1
    boost = sum(1 for r in rows(dataset, "mm_vmscan_wakeup_kswapd")
                if r["order"] == 0 and r["gfp_flags"] == 0)
    got = query(dataset, "reclaim_wakes")
    assert {(r["source"], int(r["order"])): int(r["wakes"]) for r in got} == dict(expected)
    assert sum(int(r["boost_wakes"] or 0) for r in got if r["source"] == "wakeup_kswapd") == boost
    assert expected[("wakeup_kswapd", 0)] > 0 and expected[("kswapd_wake", 8)] > 0


def test_direct_reclaim_stalls_pair_begin_with_the_next_end_of_the_task(dataset):
    events = sorted([(r["ts"], r["pid"], "begin", r) for r in rows(dataset, "mm_vmscan_direct_reclaim_begin")] +
                    [(r["ts"], r["pid"], "end", r) for r in rows(dataset, "mm_vmscan_direct_reclaim_end")],
                    key=lambda e: (e[0], e[2] == "begin"))
    open_begin, stalls = {}, defaultdict(list)
    for ts, pid, kind, r in events:
        if kind == "begin":
            open_begin[pid] = r
        elif pid in open_begin:
            b = open_begin.pop(pid)
            stalls[b["order"]].append((ts - b["ts"], r["nr_reclaimed"]))
    got = {int(r["order"]): r for r in query(dataset, "reclaim_wakes.direct_reclaim")}
    assert set(got) == set(stalls) and stalls
    for order, pairs in stalls.items():
        assert int(got[order]["timed_stalls"]) == len(pairs)
        assert int(got[order]["total_duration_ns"]) == sum(d for d, _ in pairs)
        assert int(got[order]["duration_max_ns"]) == max(d for d, _ in pairs)
        assert int(got[order]["nr_reclaimed"]) == sum(n for _, n in pairs)


def test_try_to_compact_pages_by_order_and_priority(dataset):
    expected = Counter((r["order"], r["prio"]) for r in rows(dataset, "mm_compaction_try_to_compact_pages"))
    got = {(int(r["order"]), int(r["prio"])): int(r["attempts"]) for r in query(dataset, "compaction.try")}
    assert got == dict(expected) and expected


def test_deferrals_by_order(dataset):
    deferred = Counter(r["order"] for r in rows(dataset, "mm_compaction_deferred"))
    armed = Counter(r["order"] for r in rows(dataset, "mm_compaction_defer_compaction"))
    reset = Counter(r["order"] for r in rows(dataset, "mm_compaction_defer_reset"))
    got = {int(r["order"]): r for r in query(dataset, "compaction.deferrals")}
    assert set(got) == set(deferred) | set(armed) | set(reset)
    for order, r in got.items():
        assert int(r["deferred"]) == deferred[order]
        assert int(r["defer_armed"]) == armed[order]
        assert int(r["defer_reset"]) == reset[order]
    assert sum(deferred.values()) > 0


def test_compaction_runs_direct_and_kcompactd(dataset):
    status_names = {r["value"]: r["name"] for r in rows(dataset, "print_flags")
                    if r["event"] == "mm_compaction_end" and r["field"] == "status"}
    runs, successes = Counter(), Counter()
    for r in rows(dataset, "mm_compaction_end"):
        kind = "kcompactd" if r["comm"].startswith("kcompactd") else "direct"
        runs[kind] += 1
        successes[kind] += status_names.get(r["status"]) == "success"
    got = {r["kind"]: r for r in query(dataset, "compaction")}
    assert {k: int(r["runs"]) for k, r in got.items()} == dict(runs)
    assert {k: int(r["successes"]) for k, r in got.items()} == dict(successes)
    assert runs["direct"] > 0 and runs["kcompactd"] > 0
