"""Rows from a trace that lost events are never exact.

Real captures (examples/ab-defrag-mode-cost) with a lost-event count planted in one side's
runs' records, as a run whose ring buffer overflowed carries it (the trace itself is the
capture's, whole: what changes is only what kmemscope may claim of it). Times paired from
begin and end events are then no bound either way (a capture that lost 155 M events gave
18.6 times its span of direct reclaim): n/a with a note. Counts from the trace are lower
bounds. Samples (vmstat, the cost samples) are not the trace's and stay exact. The other
side, which lost nothing, keeps its values: the stalls analysis's own totals.
"""
import json

import pytest
from conftest import EXAMPLES
from kmrun import kmemscope, rows_of

import requirements

SET = EXAMPLES / "ab-defrag-mode-cost"
LOST = 155_000_000
TIMED = ("cost.direct_compaction_ms", "cost.direct_reclaim_ms", "cost.kcompactd_compaction_ms",
         "cost.background_compaction_share_pct", "stalls.direct_compaction.total_ms",
         "stalls.direct_reclaim.stalls")


def _plant_lost(ds, run_id, lost):
    """Set the run's lost-event count in its record (runs table), its digest recorded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kmemscope.dataset.digests import update_digests
    from kmemscope.dataset.safefs import RUN_PREFIX, Dir

    (part,) = (ds / "runs" / f"{RUN_PREFIX}{run_id}").glob("*.parquet")
    table = pq.read_table(part)
    i = table.schema.get_field_index("lost_events")
    table = table.set_column(i, table.schema.field(i), pa.array([lost] * table.num_rows, pa.int64()))
    with Dir.root(ds) as root:
        with root.walk(["runs", RUN_PREFIX + run_id], "a runs folder") as folder:
            folder.write_atomic(part.name, lambda f: pq.write_table(table, f))
            update_digests(root, "runs", run_id, folder)


def _new_run(ds, *args):
    before = {p.name for p in (ds / "runs").iterdir()} if (ds / "runs").exists() else set()
    kmemscope("parse", "-q", *args, "-o", ds)
    (name,) = {p.name for p in (ds / "runs").iterdir()} - before
    return name.split("=", 1)[1]


@pytest.fixture(scope="module")
def lostds(tmp_path_factory):
    if not (SET / "run1-defrag0").is_dir():
        requirements.skip("setup", f"the committed example {SET} is missing")
    ds = tmp_path_factory.mktemp("lost") / "ds"
    runs = {
        # a bare trace and a bundle with samples that lost events; a bare trace that did not
        "bare_lost": _new_run(ds, SET / "run1-defrag0" / "trace.dat", "--label", "kernel=a"),
        "full_lost": _new_run(ds, SET / "run2-defrag0", "--label", "kernel=c"),
        "bare_whole": _new_run(ds, SET / "run1-defrag1" / "trace.dat", "--label", "kernel=b"),
    }
    for key in ("bare_lost", "full_lost"):
        _plant_lost(ds, runs[key], LOST)
    return ds, runs


def _over_run(ds, metrics):
    doc = json.loads(kmemscope("compare", ds, "--by", "kernel", "--over", "run", "--format",
                               "json", "--metrics", ",".join(metrics)).stdout)
    return {(r["run_id"], r["metric"]): r for r in doc["rows"]}, doc["notes"]


def test_paired_times_are_na_with_a_note_where_the_trace_lost_events(lostds):
    ds, runs = lostds
    got, notes = _over_run(ds, TIMED)
    stalls = rows_of(kmemscope("query", "stalls.per_run", ds, "--format", "json"))
    whole = {r["kind"]: r for r in stalls if r["run_id"] == runs["bare_whole"]}
    for name in TIMED:
        for key in ("bare_lost", "full_lost"):
            assert got[(runs[key], name)]["value"] is None, (key, name)
    # the run that lost nothing keeps the stalls analysis's own totals
    assert got[(runs["bare_whole"], "cost.direct_reclaim_ms")]["value"] == pytest.approx(
        whole["direct_reclaim"]["total_ms"], rel=1e-12)
    assert got[(runs["bare_whole"], "cost.direct_compaction_ms")]["value"] == pytest.approx(
        whole["direct_compaction"]["total_ms"], rel=1e-12)
    note = next(n for n in notes if "cost.direct_reclaim_ms" in n and "lost" in n)
    assert "n/a for 2 runs" in note and f"{LOST:,}" in note


def _sides(ds, metrics):
    """{(side, metric): record} of compare's json: one run a side (a: bare_lost, b: bare_whole,
    c: full_lost)."""
    doc = json.loads(kmemscope("compare", ds, "--by", "kernel", "--format", "json",
                               "--metrics", ",".join(metrics)).stdout)
    return {(r["side"], r["metric"]): r for r in doc["rows"]}, doc["notes"]


def test_counts_from_a_lossy_trace_are_lower_bounds_and_samples_stay_exact(lostds):
    ds, _runs = lostds
    names = ["vmstat.thp_fault_alloc", "vmstat.compact_stall", "vmstat.pgsteal_kswapd",
             "thp_fault_success_pct", "allocs", "lost_events", "cost.psi_some_ms"]
    got, notes = _sides(ds, names)
    for name in names[:3]:
        rec = got[("a", name)]
        assert (rec["source"], rec["exactness"]) == ("trace", "lower bound"), name
        assert rec["bound_low"] is None and rec["bound_high"] is None, name
        assert (got[("c", name)]["source"], got[("c", name)]["exactness"]) == ("vmstat", "exact")
    # the bare trace that lost nothing: its exact rows stay exact, its model rows models
    assert got[("b", "vmstat.compact_stall")]["exactness"] == "exact"
    assert got[("b", "vmstat.thp_fault_alloc")]["exactness"] == "model"
    assert got[("a", "thp_fault_success_pct")]["value"] is None
    assert got[("b", "thp_fault_success_pct")]["value"] is not None
    assert (got[("a", "allocs")]["source"], got[("a", "allocs")]["exactness"]) == \
        ("trace", "lower bound")
    assert got[("b", "allocs")]["exactness"] == "exact"
    assert (got[("a", "lost_events")]["value"], got[("a", "lost_events")]["exactness"]) == \
        (LOST, "exact")
    assert got[("c", "cost.psi_some_ms")]["value"] > 0
    assert got[("c", "cost.psi_some_ms")]["exactness"] == "exact"
    assert any("lower bounds for 1 run" in n for n in notes)
    assert any("thp_fault_success_pct" in n and "n/a for 2 runs" in n for n in notes)
