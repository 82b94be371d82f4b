"""Every row a comparison can show has a direction and the reason for it, written in one place.

No data: the metric definitions themselves (queries/metrics.py), every kind of row a table can
hold. Oracles: the issue's list of rows that are no gain or loss by themselves (the workload's
demand, the background threads' runs), stated here by name, and the rows that the kernel's
own counters make one quantity (pgscan_kswapd as a rate and as a count).
"""
import pytest

from kmemscope.queries import metrics as m

DIRECTIONS = {"higher", "lower", "none"}


def every_metric():
    """One Metric of each name a table can show: every summary column, every vmstat row of the
    kernel A/B table (and its rate), a counter no one reviewed, every stall statistic of every
    kind, every cost row (and its rate), every mTHP counter named and one not, every
    fragmentation column, and imported rows of each direction."""
    out = list(m.SUMMARY.values())
    counters = [c for _t, c in m.MMTESTS_VMSTAT] + list(m.VMSTAT_DIRECTIONS) + ["pgfault"]
    out += [m.vmstat_metric(c, per_min) for c in counters for per_min in (False, True)]
    out += [m.stall_metric(kind, stat) for kind in m.STALL_KINDS for stat in m.STALL_STATS]
    out += [m.cost_metric(name, per_min) for name, row in m.COST.items()
            for per_min in ((False,) if row.unit == "%" else (False, True))]
    out += [m.mthp_metric(64, c) for c in [*m.MTHP_BETTER, *m.MTHP_GAUGES, "zswpout"]]
    out += [m.frag_metric(c) for c in m.FRAG_METRICS]
    imported, _units = m._imported_metrics(
        [{"metric": "tps", "better": "higher", "unit": "tx/s"},
         {"metric": "latency_us", "better": "lower", "unit": "us"}])
    return out + list(imported.values())


@pytest.mark.parametrize("metric", every_metric(), ids=lambda x: x.name)
def test_every_row_has_a_direction_and_a_reason(metric):
    assert metric.better in DIRECTIONS
    assert metric.reason.strip(), f"{metric.name}: no reason beside its direction"


def test_demand_and_background_runs_have_no_direction():
    for name in ("eligible_allocs_order_1_3", "eligible_allocs_order_4_plus", "allocs"):
        assert m.SUMMARY[name].better == "none" and "demand" in m.SUMMARY[name].reason
    for kind in m.THREAD_KINDS:
        runs = m.stall_metric(kind, "stalls")
        assert runs.name == f"stalls.{kind}.runs" and runs.better == "none"
        assert f"cost.{kind}_cpu_s" in runs.reason         # where its cost is
        assert m.cost_metric(f"{kind}_cpu_s").better == "lower"
    # what a task waits in keeps its direction
    assert m.stall_metric("direct_compaction", "stalls").better == "lower"
    assert m.stall_metric("direct_reclaim", "total_ms").better == "lower"
    # a counter nobody reviewed claims no direction, and says so
    assert m.vmstat_metric("pgfault").better == "none"
    assert m.vmstat_metric("pgfault").reason == m.VMSTAT_UNREVIEWED


def test_one_quantity_in_two_blocks_names_the_other_row_both_ways():
    seen = set()
    for names, what in m.SAME_QUANTITY:
        assert what and len(names) > 1
        for name in names:
            assert name not in seen, f"{name} in two groups"
            seen.add(name)
            m.parse_name(name)                  # a name a comparison accepts
            others, said = m.same_quantity(name)
            assert set(others) == set(names) - {name} and said == what
    assert "vmstat.pgscan_kswapd" in m.SUMMARY["pgscan_kswapd_per_min"].same_quantity[0]
    assert m.vmstat_metric("pgscan_kswapd").same_quantity[0][0] == "pgscan_kswapd_per_min"
    assert m.vmstat_metric("pgfault").same_quantity == ((), None)
