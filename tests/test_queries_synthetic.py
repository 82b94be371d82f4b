"""Analyses whose inputs no capture on this machine can produce, on synthetic datasets.

SYNTHETIC DATA: this machine runs 6.18 only, has no procfs samples yet (capture
is being written) and does not reach kswapd/direct-reclaim pressure on demand.
The datasets here are written row by row by tests/kmdata.py in the contract
layout, with the formats and gfp bit positions of the named kernels taken from
queries/KERNEL-ERAS.md (sections 1-3). Expected values are
written out by hand from the kernel rules, not computed by the code under test.
"""
import pytest

from kmemscope.common.errors import DatasetError, QueryError
from kmemscope.queries import catalog, eras, runner

import kmdata as K

SEC = 1_000_000_000


def by(rows, *keys):
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r for r in rows}


def run(name, ds, **kw):
    return runner.run_query(name, ds, **kw).to_pylist()


# ---------------------------------------------------------------- kernel eras

def _era_allocs(era):
    """The allocations whose class differs between the two eligibility rules."""
    g = lambda *n: K.gfp(era, *n)  # noqa: E731
    rows = [
        # plain GFP_ATOMIC at order 2: eligible in both eras (era B: HIGH, no DIRECT)
        dict(ts=1, order=2, gfp_flags=g("__GFP_HIGH", "__GFP_ATOMIC", "__GFP_KSWAPD_RECLAIM"), pfn=100),
        # bare __GFP_HIGH nowait at order 1: only era B
        dict(ts=2, order=1, gfp_flags=g("__GFP_HIGH", "__GFP_KSWAPD_RECLAIM"), pfn=200),
        # __GFP_ATOMIC without __GFP_HIGH at order 3: only era A
        dict(ts=3, order=3, gfp_flags=g("__GFP_ATOMIC"), pfn=300),
        # GFP_ATOMIC | __GFP_NOMEMALLOC (page_frag refill) at order 3: never
        dict(ts=4, order=3, gfp_flags=g("__GFP_HIGH", "__GFP_ATOMIC", "__GFP_NOMEMALLOC"), pfn=400),
        # GFP_ATOMIC at order 0: never (order > 0 only)
        dict(ts=5, order=0, gfp_flags=g("__GFP_HIGH", "__GFP_ATOMIC"), pfn=500),
        # GFP_KERNEL at order 4: blocking
        dict(ts=6, order=4, gfp_flags=g("__GFP_DIRECT_RECLAIM", "__GFP_KSWAPD_RECLAIM", "__GFP_IO",
                                        "__GFP_FS"), pfn=600),
        # GFP_ATOMIC at order 5, failed: eligible attempt, counted as failed
        dict(ts=7, order=5, gfp_flags=g("__GFP_HIGH", "__GFP_ATOMIC"), pfn=K.FAILED_PFN),
    ]
    for r in rows:
        r.update(cpu=0, pid=1, comm="t", migratetype=0)
        r["ts"] *= SEC // 10
    return rows


@pytest.fixture
def era_dataset(tmp_path):
    """Runs on 5.10 (era A), 6.1.50 (era A), 6.1.120 (era B, backport), 5.15.171 (era B)
    and 4.19 (era A, reshuffled gfp bits), each with the same allocations."""
    ds = tmp_path / "ds"
    for run_id, kernel, gfp_era in (("k510", "5.10.89", "5.10"), ("k61old", "6.1.50", "6.1"),
                                    ("k61new", "6.1.120", "6.1"), ("k515", "5.15.171", "5.10"),
                                    ("k419", "4.19.0", "4.19")):
        K.write_run(ds, run_id, kernel=kernel, last_ts=SEC, labels={"kernel": kernel})
        K.write_events(ds, "mm_page_alloc", run_id, _era_allocs(gfp_era), kernel=kernel)
        K.write_other(ds, "print_flags", run_id, K.gfp_print_flags(gfp_era))
    return ds


def test_highatomic_era_follows_kernel_release():
    assert eras.highatomic_era("5.10.89")[0] == "A"
    assert eras.highatomic_era("5.15.170")[0] == "A"
    assert eras.highatomic_era("5.15.171")[0] == "B"
    assert eras.highatomic_era("6.1.72")[0] == "A"
    assert eras.highatomic_era("6.1.116")[0] == "B"
    assert eras.highatomic_era("6.2.16")[0] == "A"
    assert eras.highatomic_era("6.3.0")[0] == "B"
    assert eras.highatomic_era("6.18.44-fc-v657")[0] == "B"
    assert "not pinned" in eras.highatomic_era("6.1.90")[1]
    assert eras.extfrag_era("5.10.89") == "4.19-6.9"
    assert eras.extfrag_era("6.12.19") == "6.10-6.14"
    assert eras.extfrag_era("6.15.0") == "6.15+"


def test_atomic_orders_applies_each_runs_era(era_dataset):
    got = run("atomic_orders", era_dataset)
    eligible = {}
    for r in got:
        if r["alloc_class"] == "highatomic_eligible":
            eligible.setdefault(r["run_id"], {})[r["order"]] = (r["allocs"], r["failed"])
    # era A: GFP_ATOMIC order 2, ATOMIC-without-HIGH order 3, failed GFP_ATOMIC order 5
    era_a = {2: (1, 0), 3: (1, 0), 5: (1, 1)}
    # era B: GFP_ATOMIC order 2, bare HIGH order 1, failed order 5
    era_b = {1: (1, 0), 2: (1, 0), 5: (1, 1)}
    assert eligible["k510"] == era_a
    assert eligible["k61old"] == era_a
    assert eligible["k419"] == era_a          # 4.19 bit positions, read from print_flags
    assert eligible["k61new"] == era_b
    assert eligible["k515"] == era_b          # 5.15.171 backport
    eras_seen = {r["run_id"]: r["highatomic_era"] for r in got}
    assert eras_seen == {"k510": "A", "k61old": "A", "k419": "A", "k61new": "B", "k515": "B"}
    blocking = {(r["run_id"], r["order"]) for r in got if r["alloc_class"] == "blocking"}
    assert {o for rid, o in blocking if rid == "k510"} == {4}


def test_atomic_orders_era_can_be_forced(era_dataset):
    got = run("atomic_orders", era_dataset, run_ids="k510", params={"era": "B"})
    eligible = {r["order"] for r in got if r["alloc_class"] == "highatomic_eligible"}
    assert eligible == {1, 2, 5}
    with pytest.raises(QueryError, match="must be one of auto, A, B"):
        run("atomic_orders", era_dataset, params={"era": "C"})


def test_atomic_orders_costly_bands(era_dataset):
    got = run("atomic_orders.costly", era_dataset, run_ids="k510")
    bands = {(r["alloc_class"], r["order_band"]): r["allocs"] for r in got}
    assert bands[("highatomic_eligible", "1-3")] == 2
    assert bands[("highatomic_eligible", "4+")] == 1
    assert bands[("blocking", "4+")] == 1


def test_summary_eligible_counts_by_era(era_dataset):
    got = by(run("summary", era_dataset), "run_id")
    assert got["k510"]["eligible_allocs_order_1_3"] == 2      # orders 2 and 3
    assert got["k61new"]["eligible_allocs_order_1_3"] == 2    # orders 1 and 2
    assert got["k510"]["eligible_allocs_order_4_plus"] == 1
    assert got["k510"]["highatomic_era"] == "A"


def test_label_and_run_selection(era_dataset):
    got = run("atomic_orders", era_dataset, labels=["kernel=6.1.120"])
    assert {r["run_id"] for r in got} == {"k61new"}
    assert all(dict(r["labels"]) == {"kernel": "6.1.120"} for r in got)
    got = run("atomic_orders", era_dataset, run_ids=["k41"])   # unique prefix
    assert {r["run_id"] for r in got} == {"k419"}
    with pytest.raises(QueryError, match="2 runs matching 'k51'"):
        run("atomic_orders", era_dataset, run_ids="k51")
    with pytest.raises(QueryError, match="no run has label kernel=9.9"):
        run("atomic_orders", era_dataset, labels={"kernel": "9.9"})
    with pytest.raises(QueryError, match="no run 'nope'"):
        run("atomic_orders", era_dataset, run_ids="nope")


# -------------------------------------------------- extfrag and zone_locked eras

@pytest.fixture
def extfrag_dataset(tmp_path):
    ds = tmp_path / "ds"
    ev = [  # alloc_mt, fallback_mt, fallback_order, change_ownership
        (0, 1, 3, 0), (0, 1, 3, 0), (0, 1, 9, 1), (2, 1, 2, 1), (1, 0, 10, 1),
    ]
    for run_id, kernel, pbo in (("k510", "5.10.89", 9), ("k612", "6.12.19", 9),
                                ("k618", "6.18.44", None)):
        K.write_run(ds, run_id, kernel=kernel, last_ts=2 * SEC, pageblock_order=pbo,
                    manifest={"migratetype_names": ["Unmovable", "Movable", "Reclaimable",
                                                    "HighAtomic", "CMA", "Isolate"]}
                    if run_id == "k612" else None)
        K.write_events(ds, "mm_page_alloc_extfrag", run_id, [
            dict(ts=(i + 1) * SEC // 4, pfn=1000 + i, alloc_order=0, fallback_order=fo,
                 alloc_migratetype=am, fallback_migratetype=fm, change_ownership=co)
            for i, (am, fm, fo, co) in enumerate(ev)], kernel=kernel)
        K.write_events(ds, "mm_page_alloc", run_id, [
            dict(ts=i * 1000, pfn=i, order=0, gfp_flags=0, migratetype=1) for i in range(1000)]
            + [dict(ts=5000, pfn=K.FAILED_PFN, order=0, gfp_flags=0, migratetype=1)], kernel=kernel)
        K.write_events(ds, "mm_page_alloc_zone_locked", run_id, [
            dict(ts=1, pfn=1, order=1, migratetype=3, percpu_refill=1),
            dict(ts=2, pfn=2, order=1, migratetype=3, percpu_refill=0),
            dict(ts=3, pfn=3, order=0, migratetype=3, percpu_refill=1),
            dict(ts=4, pfn=4, order=0, migratetype=1, percpu_refill=1)], kernel=kernel)
        K.write_events(ds, "mm_page_pcpu_drain", run_id, [
            dict(ts=1, pfn=8, order=0, migratetype=1), dict(ts=2, pfn=16, order=3, migratetype=0)],
            kernel=kernel)
        K.write_other(ds, "print_flags", run_id, K.gfp_print_flags("6.1"))
    return ds


def test_fallback_pollution_labels_change_ownership_by_era(extfrag_dataset):
    got = run("fallback_pollution", extfrag_dataset)
    meaning = {(r["run_id"], r["change_ownership"]): r["ownership_meaning"] for r in got}
    assert "not traced" in meaning[("k510", 0)]                 # 4.19-6.9: undercounted
    assert "each later one traced" in meaning[("k612", 0)]      # 6.10-6.14 hygiene
    assert "compaction capture" in meaning[("k618", 0)]         # 6.15+
    assert meaning[("k618", 1)].startswith("claim (__rmqueue_claim)")
    cell = by([r for r in got if r["run_id"] == "k510"],
              "alloc_migratetype", "fallback_migratetype", "fragmenting", "change_ownership")
    assert cell[(0, 1, True, 0)]["events"] == 2
    assert cell[(0, 1, False, 1)]["events"] == 1            # fallback_order 9 == pageblock order
    assert cell[(1, 0, False, 1)]["events"] == 1
    assert cell[(0, 1, True, 0)]["events_per_1000_allocs"] == pytest.approx(2.0)   # 1000 ok allocs
    assert cell[(0, 1, True, 0)]["events_per_s"] == pytest.approx(1.0)
    assert cell[(0, 1, True, 0)]["alloc_type"] == "Unmovable"
    assert cell[(0, 1, True, 0)]["fallback_type"] == "Movable"


def test_fallback_pollution_notes_assumed_pageblock_order(extfrag_dataset):
    t = runner.run_query("fallback_pollution", extfrag_dataset, run_ids="k618")
    assert any("pageblock_order assumed" in n for n in runner.notes_of(t))
    assert any("upstream enum" in n for n in runner.notes_of(t))


def test_fallback_pollution_over_time(extfrag_dataset):
    got = run("fallback_pollution.over_time", extfrag_dataset, run_ids="k510", params={"bucket_s": "0.5"})
    assert [(r["bucket_start_s"], r["events"]) for r in got] == [(0.0, 1), (0.5, 2), (1.0, 2)]


def test_highatomic_served_needs_the_5_19_format(extfrag_dataset):
    got = by(run("highatomic.served", extfrag_dataset), "run_id", "order")
    # 5.10: zone_locked has no percpu_refill and reports the requested type
    assert got[("k510", None)]["freelist_known"] is False
    assert got[("k510", None)]["events"] is None
    assert got[("k612", 1)]["events"] == 2
    assert got[("k612", 1)]["percpu_refill_events"] == 1
    assert got[("k612", 0)]["events"] == 1
    assert got[("k612", 0)]["pct_of_zone_locked"] == pytest.approx(25.0)


def test_pcp_counts_pages(extfrag_dataset):
    got = by(run("pcp", extfrag_dataset, run_ids="k612"), "order", "migratetype")
    assert got[(3, 0)]["pages"] == 8 and got[(3, 0)]["migratetype_name"] == "Unmovable"
    assert got[(0, 1)]["pages"] == 1


# ------------------------------------------------------------- procfs analyses

@pytest.fixture
def procfs_dataset(tmp_path):
    """One run with vmstat and pagetypeinfo samples (as `kmemscope record` writes them)
    and one bare-trace run without."""
    ds = tmp_path / "ds"
    for run_id in ("rec", "bare"):
        K.write_run(ds, run_id, kernel="6.18.44", first_ts=10 * SEC, last_ts=130 * SEC)
        K.write_events(ds, "mm_page_alloc", run_id, [
            dict(ts=11 * SEC, pfn=K.FAILED_PFN, order=9, gfp_flags=0, migratetype=1),
            dict(ts=12 * SEC, pfn=512, order=9, gfp_flags=0, migratetype=1),
            dict(ts=13 * SEC, pfn=1024, order=9, gfp_flags=0, migratetype=1),
            dict(ts=14 * SEC, pfn=7, order=0, gfp_flags=0, migratetype=1)])
        K.write_other(ds, "print_flags", run_id, K.gfp_print_flags("6.18"))
    first = dict(thp_fault_alloc=100, thp_fault_fallback=50, thp_fault_fallback_charge=10,
                 compact_stall=40, compact_success=10, compact_migrate_scanned=1000,
                 compact_free_scanned=4000, pgscan_kswapd=5000, nr_free_pages=900)
    last = dict(thp_fault_alloc=160, thp_fault_fallback=70, thp_fault_fallback_charge=10,
                compact_stall=60, compact_success=15, compact_migrate_scanned=3000,
                compact_free_scanned=9000, pgscan_kswapd=65000, nr_free_pages=600)
    vm = [dict(ts=10 * SEC, name=k, value=v) for k, v in first.items()]
    vm += [dict(ts=70 * SEC, name=k, value=(v + last[k]) // 2) for k, v in first.items()]
    vm += [dict(ts=130 * SEC, name=k, value=v) for k, v in last.items()]
    K.write_other(ds, "vmstat", "rec", vm)
    blocks = []
    for ts, ha in ((10 * SEC, 1), (70 * SEC, 300), (130 * SEC, 312)):
        for zone, total in (("DMA32", 1000), ("Normal", 30000)):
            n = ha if zone == "Normal" else 0
            for mt, b in (("Unmovable", 100), ("Movable", total - 100 - n), ("Reclaimable", 0),
                          ("HighAtomic", n), ("Isolate", 0)):
                blocks.append(dict(ts=ts, node=0, zone=zone, migratetype=mt, blocks=b))
    K.write_other(ds, "pagetypeinfo_blocks", "rec", blocks)
    return ds


def test_thp_rates_from_vmstat_deltas(procfs_dataset):
    got = by(run("thp", procfs_dataset), "run_id")
    rec = got["rec"]
    assert rec["vmstat_window_s"] == pytest.approx(120.0)
    assert rec["thp_fault_alloc"] == 60 and rec["thp_fault_fallback"] == 20
    assert rec["thp_fault_success_pct"] == pytest.approx(75.0)          # 60 / 80
    assert rec["thp_fault_alloc_success_pct"] == pytest.approx(75.0)    # charge delta 0
    assert rec["compaction_success_pct"] == pytest.approx(25.0)         # 5 / 20
    assert rec["compact_scan_ratio"] == pytest.approx(2000 / 5000)
    assert rec["order_attempts"] == 3 and rec["order_failures"] == 1
    assert rec["order_success_pct"] == pytest.approx(200 / 3)
    assert got["bare"]["thp_fault_success_pct"] is None
    assert got["bare"]["order_attempts"] == 3


def test_vmstat_rates_per_minute(procfs_dataset):
    got = by(run("vmstat_rates", procfs_dataset, params={"name_like": "pgscan%"}), "name")
    assert set(got) == {"pgscan_kswapd"}
    assert got["pgscan_kswapd"]["per_min"] == pytest.approx(30000.0)    # 60000 over 2 min
    t = runner.run_query("vmstat_rates", procfs_dataset)
    assert any("run bare has no procfs tables" in n for n in runner.notes_of(t))
    with pytest.raises(DatasetError, match=r"run bare has no procfs tables .*kmemscope record"):
        runner.run_query("vmstat_rates", procfs_dataset, run_ids="bare")


def test_highatomic_blocks_over_time(procfs_dataset):
    got = run("highatomic", procfs_dataset)
    normal = [(r["t_s"], r["highatomic_pageblocks"]) for r in got if r["zone"] == "Normal"]
    assert normal == [(0.0, 1), (60.0, 300), (120.0, 312)]
    last = [r for r in got if r["zone"] == "Normal"][-1]
    assert last["total_pageblocks"] == 30000
    assert last["highatomic_pct"] == pytest.approx(100 * 312 / 30000)


def test_summary_uses_procfs_where_present(procfs_dataset):
    got = by(run("summary", procfs_dataset), "run_id")
    assert got["rec"]["highatomic_pageblocks_max"] == 312
    assert got["rec"]["pgscan_kswapd_per_min"] == pytest.approx(30000.0)
    assert got["rec"]["thp_fault_success_pct"] == pytest.approx(75.0)
    assert got["rec"]["compaction_success_pct"] == pytest.approx(25.0)
    assert got["bare"]["highatomic_pageblocks_max"] is None


# ------------------------------------------------------- reclaim and compaction

@pytest.fixture
def reclaim_dataset(tmp_path):
    ds = tmp_path / "ds"
    r = "r"
    K.write_run(ds, r, kernel="6.18.44", last_ts=10 * SEC)
    K.write_other(ds, "print_flags", r, K.gfp_print_flags("6.18") + K.compaction_status_flags())
    K.write_events(ds, "mm_vmscan_wakeup_kswapd", r, [
        dict(ts=1, nid=0, zid=2, order=0, gfp_flags=0),                       # boost wake
        dict(ts=2, nid=0, zid=2, order=0, gfp_flags=K.gfp("6.18", "__GFP_HIGH")),
        dict(ts=3, nid=0, zid=2, order=9, gfp_flags=K.gfp("6.18", "__GFP_HIGH"))])
    K.write_events(ds, "mm_compaction_kcompactd_wake", r, [
        dict(ts=4, nid=0, order=-1, highest_zoneidx=2), dict(ts=5, nid=0, order=9, highest_zoneidx=2)])
    K.write_events(ds, "mm_vmscan_direct_reclaim_begin", r, [
        dict(ts=100, pid=10, order=0, gfp_flags=0), dict(ts=200, pid=11, order=3, gfp_flags=0),
        dict(ts=1000, pid=10, order=0, gfp_flags=0), dict(ts=5000, pid=12, order=0, gfp_flags=0)])
    K.write_events(ds, "mm_vmscan_direct_reclaim_end", r, [
        dict(ts=400, pid=10, nr_reclaimed=32), dict(ts=900, pid=11, nr_reclaimed=64),
        dict(ts=1100, pid=10, nr_reclaimed=8)])          # pid 12 never ends
    K.write_events(ds, "mm_compaction_try_to_compact_pages", r, [
        dict(ts=1, order=9, gfp_mask=0, prio=2), dict(ts=2, order=9, gfp_mask=0, prio=2),
        dict(ts=3, order=3, gfp_mask=0, prio=1)])
    K.write_events(ds, "mm_compaction_begin", r, [
        dict(ts=10, pid=10, comm="cc1"), dict(ts=20, pid=77, comm="kcompactd0"),
        dict(ts=50, pid=10, comm="cc1")])
    K.write_events(ds, "mm_compaction_end", r, [
        dict(ts=30, pid=10, comm="cc1", status=8), dict(ts=120, pid=77, comm="kcompactd0", status=5),
        dict(ts=60, pid=10, comm="cc1", status=7), dict(ts=5, pid=99, comm="cc2", status=6)])
    K.write_events(ds, "mm_compaction_deferred", r, [
        dict(ts=1, nid=0, idx=2, order=9, considered=1, defer_shift=2, order_failed=9)])
    K.write_events(ds, "mm_compaction_defer_reset", r, [
        dict(ts=2, nid=0, idx=2, order=9, considered=0, defer_shift=0, order_failed=10)])
    K.write_events(ds, "mm_page_alloc", r, [dict(ts=1, pfn=1, order=0, gfp_flags=0, migratetype=0)])
    return ds


def test_reclaim_wakes_by_source_and_order(reclaim_dataset):
    got = by(run("reclaim_wakes", reclaim_dataset), "source", "order")
    assert got[("wakeup_kswapd", 0)]["wakes"] == 2
    assert got[("wakeup_kswapd", 0)]["boost_wakes"] == 1
    assert got[("wakeup_kswapd", 9)]["wakes"] == 1
    assert got[("kcompactd_wake", -1)]["wakes"] == 1          # proactive
    assert got[("kcompactd_wake", -1)]["boost_wakes"] is None


def test_direct_reclaim_pairs_begin_and_end_per_task(reclaim_dataset):
    got = by(run("reclaim_wakes.direct_reclaim", reclaim_dataset), "order")
    assert got[0]["stalls"] == 3 and got[0]["timed_stalls"] == 2
    assert got[0]["duration_max_ns"] == 300 and got[0]["total_duration_ns"] == 400
    assert got[0]["nr_reclaimed"] == 40
    assert got[3]["duration_p50_ns"] == 700


def test_compaction_pairs_runs_and_names_status(reclaim_dataset):
    got = by(run("compaction", reclaim_dataset), "kind")
    assert got["direct"]["runs"] == 3 and got["direct"]["timed_runs"] == 2
    assert got["direct"]["successes"] == 1
    assert got["direct"]["duration_max_ns"] == 20
    assert got["kcompactd"]["runs"] == 1 and got["kcompactd"]["duration_max_ns"] == 100
    status = by(run("compaction.status", reclaim_dataset), "kind", "status_name")
    assert status[("direct", "contended")]["runs"] == 1
    assert status[("direct", "partial_skipped")]["runs"] == 1
    tries = by(run("compaction.try", reclaim_dataset), "order", "prio")
    assert tries[(9, 2)]["attempts"] == 2 and tries[(9, 2)]["prio_name"] == "async"
    defer = by(run("compaction.deferrals", reclaim_dataset), "order")
    assert (defer[9]["deferred"], defer[9]["defer_armed"], defer[9]["defer_reset"]) == (1, 0, 1)


# ------------------------------------------------------------------ the engine

def test_list_queries_names_every_analysis():
    names = {n for n, _ in catalog.list_queries()}
    for n in ("hot_pfns", "pfn_reuse", "atomic_orders", "highatomic", "fallback_pollution",
              "compaction", "thp", "vmstat_rates", "reclaim_wakes", "pcp", "summary"):
        assert n in names
    assert all(desc for _, desc in catalog.list_queries())


def test_errors_are_typed_and_clear(tmp_path, reclaim_dataset):
    with pytest.raises(QueryError, match="unknown query 'nope'.*kmemscope queries"):
        runner.run_query("nope", reclaim_dataset)
    with pytest.raises(QueryError, match="has no section 'zzz'"):
        runner.run_query("pfn_reuse.zzz", reclaim_dataset)
    with pytest.raises(DatasetError, match="does not exist"):
        runner.run_query("summary", tmp_path / "missing")
    with pytest.raises(DatasetError, match="dataset has no mm_page_alloc_extfrag events"):
        runner.run_query("fallback_pollution", reclaim_dataset)
    with pytest.raises(QueryError, match="has no parameter 'x'"):
        runner.run_query("hot_pfns", reclaim_dataset, params={"x": "1"})
    with pytest.raises(QueryError, match="top_n of hot_pfns must be integer"):
        runner.run_query("hot_pfns", reclaim_dataset, params={"top_n": "ten"})


def test_parameters_are_bound_not_pasted(reclaim_dataset):
    hostile = "%' OR 1=1; DROP TABLE runs; --"
    K.write_other(reclaim_dataset, "vmstat", "r", [dict(ts=0, name="a", value=1),
                                                   dict(ts=SEC, name="a", value=2)])
    assert run("vmstat_rates", reclaim_dataset, params={"name_like": hostile}) == []
    assert len(run("vmstat_rates", reclaim_dataset)) == 1


def test_every_result_starts_with_run_id_and_labels(reclaim_dataset):
    for name, _ in catalog.list_queries():
        try:
            t = runner.run_query(name, reclaim_dataset)
        except DatasetError:
            continue
        assert t.column_names[:2] == ["run_id", "labels"], name
