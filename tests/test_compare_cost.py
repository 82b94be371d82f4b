"""`kmemscope compare`'s cost block, mTHP rows per size and fleet totals (`--stat sum`).

The dataset: three real example bundles and one bare trace.dat, with synthetic cost
samples (psi_memory, cpu_stat, kthread_cpu, mthp_stats: tests/cost_data.py) committed
for the three bundles' runs. Synthetic because the committed examples were recorded
before kmemscope sampled these files. Oracles: the cost and mTHP values recounted from
the rows written, in plain Python (cost_data.expected); the vmstat counters from the
bundles' procfs/vmstat text; the trace-timed rows against the stalls analysis's own
per-run totals (tests/test_stalls.py checks those against trace-cmd report).
"""
import json
import math
import sys

import pytest
from conftest import EXAMPLES, PROJECT_ROOT
from kmrun import kmemscope, rows_of

import cost_data

sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))
import fleet_dataset  # noqa: E402

AB = EXAMPLES / "ab-defrag-mode"
# (input, side, seed of its cost samples or None: no samples)
RUNS = [(AB / "run1-defrag0", "a", 1), (EXAMPLES / "kmem-compaction", "a", 2),
        (AB / "run1-defrag1", "b", 3), (AB / "run2-defrag1" / "trace.dat", "b", None)]
COST_NAMES = ["cost.psi_some_ms", "cost.psi_full_ms", "cost.system_cpu_s", "cost.kswapd_cpu_s",
              "cost.kcompactd_cpu_s", "cost.khugepaged_cpu_s", "cost.direct_compaction_ms",
              "cost.direct_reclaim_ms", "cost.kcompactd_compaction_ms",
              "cost.background_compaction_share_pct"]
SAMPLED = COST_NAMES[:6]
TRACED = ("cost.direct_compaction_ms", "cost.direct_reclaim_ms", "cost.kcompactd_compaction_ms",
          "cost.background_compaction_share_pct")


def _run_ids(ds):
    return {p.name[len("run_id="):] for p in (ds / "runs").iterdir()}


@pytest.fixture(scope="module")
def costds(tmp_path_factory):
    ds = tmp_path_factory.mktemp("cost") / "ds"
    runs = {}
    for source, side, seed in RUNS:
        before = _run_ids(ds) if ds.exists() else set()
        kmemscope("parse", "-q", source, "-o", ds, "--label", f"kernel={side}")
        (run_id,) = _run_ids(ds) - before
        # the kernel threads' CPU in schedstat's ns on two runs, in ticks (an older bundle) on one
        rows = (cost_data.add_cost_samples(ds, run_id, seed, schedstat=seed != 2)
                if seed is not None else None)
        runs[run_id] = {"side": side, "rows": rows, "source": source}
    kmemscope("verify", ds)          # the samples were committed with their digests
    stalls = rows_of(kmemscope("query", "stalls.per_run", ds, "--format", "json"))
    for r in stalls["rows"] if isinstance(stalls, dict) else stalls:
        runs[r["run_id"]].setdefault("stalls", {})[r["kind"]] = r["total_ms"]
    return ds, runs


def _rows(doc):
    return doc["rows"] if isinstance(doc, dict) else doc


def per_run(ds, metrics, *args):
    """{(run_id, metric): value} from compare --over run."""
    doc = json.loads(kmemscope("compare", ds, "--by", "kernel", "--metrics", ",".join(metrics),
                               "--over", "run", "--format", "json", *args).stdout)
    return {(r["run_id"], r["metric"]): r["value"] for r in _rows(doc)}


def test_cost_rows_equal_the_samples_recounted(costds):
    ds, runs = costds
    got = per_run(ds, COST_NAMES + [n + "/min" for n in SAMPLED])
    for run_id, run in runs.items():
        stalls = run.get("stalls", {})
        # time over time, both from the trace: a bare trace has it too
        share = cost_data.background_share(stalls.get("kcompactd"), stalls.get("direct_compaction"))
        if share is not None:
            assert got[(run_id, "cost.background_compaction_share_pct")] == pytest.approx(
                share, rel=1e-9)
        if run["rows"] is None:
            for name in SAMPLED:
                assert got[(run_id, name)] is None, name
            continue
        want = cost_data.expected(run["rows"])
        for name in SAMPLED:
            assert got[(run_id, name)] == pytest.approx(want[name], rel=1e-9), name
            assert got[(run_id, name + "/min")] == pytest.approx(want[name] / want["window_min"],
                                                                 rel=1e-9)
    assert any(cost_data.background_share(run.get("stalls", {}).get("kcompactd"),
                                          run.get("stalls", {}).get("direct_compaction"))
               for run in runs.values() if run["rows"] is None)


def test_trace_timed_rows_stay_for_a_bare_trace_and_equal_the_stall_totals(costds):
    ds, runs = costds
    got = per_run(ds, ["cost.direct_compaction_ms", "cost.direct_reclaim_ms"])
    bare = [r for r, run in runs.items() if run["rows"] is None]
    assert bare
    for run_id, run in runs.items():
        for name, kind in (("cost.direct_compaction_ms", "direct_compaction"),
                           ("cost.direct_reclaim_ms", "direct_reclaim")):
            want = run.get("stalls", {}).get(kind)
            if want is None:
                continue
            assert got[(run_id, name)] == pytest.approx(want, rel=1e-12)
    for run_id in bare:          # the defrag captures time both kinds
        assert got[(run_id, "cost.direct_compaction_ms")] > 0


def test_json_has_every_cost_row_with_source_unit_and_direction_and_its_reason(costds):
    ds, _runs = costds
    proc = kmemscope("compare", ds, "--by", "kernel", "--format", "json")
    doc = json.loads(proc.stdout)
    recs = {(r["metric"], r["side"]): r for r in _rows(doc)}
    for name in COST_NAMES:
        rec = recs[(name, "a")]
        assert rec["block"] == "cost"
        assert rec["direction"] in (("none",) if name == "cost.kcompactd_compaction_ms"
                                    else ("higher", "lower"))
        assert rec["direction_reason"] and rec["unit"] in ("ms", "s", "%")
        assert rec["source"] == ("trace" if name in TRACED else "procfs sample"), name
    notes = doc["notes"] if isinstance(doc, dict) else []
    assert any("n/a for 1 run without cost samples" in n and "no tracepoint" in n for n in notes)


def test_mmtests_layout_prints_the_cost_block_with_trace_rows_marked(costds):
    ds, _runs = costds
    out = kmemscope("compare", ds, "--by", "kernel", "--format", "mmtests", "--metrics",
                    "cost").stdout
    block = out[out.index("\ncost ("):]
    for title in ("Memory pressure some (PSI) ms", "kswapd CPU s", "Background compaction share %"):
        assert title in block
    assert "Direct compaction time ms [trace]" in block


def test_mthp_rows_for_every_size_that_moved(costds):
    ds, runs = costds
    doc = json.loads(kmemscope("compare", ds, "--by", "kernel", "--metrics", "mthp",
                               "--format", "json").stdout)
    names = {r["metric"] for r in _rows(doc)}
    moved = {f"mthp.{s}kB.{c}" for s in (64, 256) for c in cost_data.MTHP_COUNTERS}
    assert names == moved | {f"mthp.{s}kB.anon_fault_success_pct" for s in (64, 256)}
    assert not any(n.startswith("mthp.2048kB") for n in names)
    got = per_run(ds, sorted(names))
    for run_id, run in runs.items():
        for size in (64, 256):
            if run["rows"] is None:
                assert got[(run_id, f"mthp.{size}kB.anon_fault_alloc")] is None
                continue
            deltas = cost_data.expected(run["rows"])["mthp"]
            for counter in cost_data.MTHP_COUNTERS:
                assert got[(run_id, f"mthp.{size}kB.{counter}")] == deltas[(size, counter)]
            alloc, fb = deltas[(size, "anon_fault_alloc")], deltas[(size, "anon_fault_fallback")]
            want = 100.0 * alloc / (alloc + fb) if alloc + fb else None
            assert got[(run_id, f"mthp.{size}kB.anon_fault_success_pct")] == pytest.approx(want)


def vmstat_per_min(bundle, counter):
    """A counter's increase per minute of the sampling window, from procfs/vmstat's text."""
    samples = []
    for line in (bundle / "procfs" / "vmstat").read_text().splitlines():
        if line.startswith("#kmemscope-sample"):
            ts = int(line.split("mono_ns=")[1].split()[0])
            samples.append([ts, {}])
        elif line.strip() and samples:
            name, value = line.split()
            samples[-1][1][name] = int(value)
    (t0, first), (t1, last) = samples[0], samples[-1]
    return 60e9 * (last[counter] - first[counter]) / (t1 - t0)


def test_stat_sum_per_host_is_the_total_of_the_host_values(costds, tmp_path):
    """Copies of the runs under new hosts (benchmarks/fleet_dataset.py): 12 runs, host hNNN each;
    --unit copy_of makes every unit three copies of one source run."""
    ds, runs = costds
    sources = [r for r in sorted(runs) if runs[r]["rows"] is not None]   # bundles: vmstat too
    made = fleet_dataset.build(ds, tmp_path / "fleet", 12, sources, keep_labels=True)
    metrics = ["vmstat.pgscan_kswapd/min", "cost.kswapd_cpu_s", "cost.psi_some_ms"]
    value_of = {}
    for src in sources:
        want = cost_data.expected(runs[src]["rows"])
        value_of[src] = {"vmstat.pgscan_kswapd/min": vmstat_per_min(runs[src]["source"],
                                                                    "pgscan_kswapd"),
                         "cost.kswapd_cpu_s": want["cost.kswapd_cpu_s"],
                         "cost.psi_some_ms": want["cost.psi_some_ms"]}
    for unit in ("host", "copy_of"):
        doc = json.loads(kmemscope("compare", tmp_path / "fleet", "--by", "kernel", "--unit", unit,
                                   "--stat", "sum", "--metrics", ",".join(metrics),
                                   "--format", "json").stdout)
        for rec in _rows(doc):
            side_runs = [src for _new, src in made if runs[src]["side"] == rec["side"]]
            if unit == "host":         # one run per host: each host's value is its run's
                want = math.fsum(value_of[s][rec["metric"]] for s in side_runs)
            else:                      # a unit per source run: the mean of its copies, once
                want = math.fsum(value_of[s][rec["metric"]] for s in set(side_runs))
            assert rec["statistic"] == "Sum"
            assert rec["value"] == pytest.approx(want, rel=1e-9), (unit, rec["metric"], rec["side"])


def test_time_spent_figure_draws_each_sides_mean_of_the_recounted_values(costds):
    import matplotlib  # noqa: F401  (the [report] extra, which make setup installs)
    import kmemscope
    from kmemscope import plots

    ds, runs = costds
    fig = plots.time_spent(kmemscope.open(ds).compare("kernel", metrics=["cost"]))
    assert not fig.empty
    frame = fig.drawn.panels["time per run, s"]
    for side in ("a", "b"):
        mine = [r for r in runs.values() if r["side"] == side and r["rows"] is not None]
        for name, column in (("cost.kswapd_cpu_s", "kswapd CPU, s"),
                             ("cost.system_cpu_s", "system CPU (every CPU), s")):
            want = math.fsum(cost_data.expected(r["rows"])[name] for r in mine) / len(mine)
            assert frame.loc[side, column] == pytest.approx(want, rel=1e-9)
        timed = [r["stalls"]["direct_compaction"] for r in runs.values()
                 if r["side"] == side and "direct_compaction" in r.get("stalls", {})]
        want = math.fsum(timed) / len(timed) / 1000.0 if timed else None
        got = frame.loc[side, "direct compaction (tasks waiting), s"]
        assert (math.isnan(got) if want is None else got == pytest.approx(want, rel=1e-9))


def test_free_pages_blocks_figure_draws_the_vmstat_samples(costds):
    import matplotlib  # noqa: F401  (the [report] extra, which make setup installs)
    import kmemscope
    from kmemscope import plots

    ds, runs = costds
    fig = plots.free_pages_blocks(kmemscope.open(ds), by="kernel")
    assert not fig.empty
    for run_id, run in runs.items():
        if run["rows"] is None:          # the bare trace has no vmstat samples: not drawn
            assert run_id[:8] not in fig.drawn.panels["nr_free_pages"].columns
            continue
        values = {"nr_free_pages": [], "nr_free_pages_blocks": []}
        for line in (run["source"] / "procfs" / "vmstat").read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in values:
                values[parts[0]].append(int(parts[1]))
        for name, want in values.items():
            got = fig.drawn.panels[name][run_id[:8]].dropna().tolist()
            assert got == want and want, name


def test_an_all_bare_dataset_asked_for_mthp_gives_na_rows_with_the_reason(tmp_path):
    """Bare traces have no per-size mTHP samples: `--metrics cost,mthp` shows the cost rows
    (the trace-timed ones with values) and the PMD size's mTHP rows n/a, with the reason,
    instead of an error that hid the cost rows too."""
    ds = tmp_path / "ds"
    for side, run in (("a", "run1-defrag0"), ("b", "run1-defrag1")):
        kmemscope("parse", "-q", AB / run / "trace.dat", "-o", ds, "--label", f"kernel={side}")
    doc = json.loads(kmemscope("compare", ds, "--by", "kernel", "--metrics", "cost,mthp",
                               "--format", "json").stdout)
    recs = {(r["metric"], r["side"]): r for r in _rows(doc)}
    assert recs[("cost.direct_compaction_ms", "a")]["value"] > 0
    for counter in ("anon_fault_alloc", "anon_fault_fallback", "anon_fault_success_pct"):
        assert recs[(f"mthp.2048kB.{counter}", "a")]["value"] is None
    assert any(n.startswith("mthp.*: no selected run has per-size mTHP samples") and
               "a bare trace gives none" in n for n in doc["notes"])
