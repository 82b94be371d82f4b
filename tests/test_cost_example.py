"""The cost block and mTHP rows of `kmemscope compare` on a real A/B with real cost samples.

examples/ab-defrag-mode-cost/ is vm.defrag_mode 0 against 1, four captures a side, recorded on
a 2-CPU Linux 6.18 VM by examples/ab-defrag-mode.sh with the compaction preset and the
order > 0 page events (see docs/compare.md, "What it cost"). Every bundle holds the procfs
cost samples: procfs/pressure_memory, procfs/stat, procfs/kthreads and procfs/mthp.

Oracle: each sampled row recounted per run in plain Python from the bundles' raw sample text
(the first and the last sample of each file; format in capture/sampler.py), sharing no code
with kmemscope's procfs parsers, queries/cost.sql or queries/metrics.py. The trace-timed rows
are checked against the stalls analysis's own per-run totals (tests/test_stalls.py checks
those against trace-cmd report). The 2 MiB mTHP counters are checked against the vmstat THP
counters of the same captures, read from procfs/vmstat: the kernel counts both at the same
place (mm/huge_memory.c counts THP_FAULT_ALLOC beside MTHP_STAT_ANON_FAULT_ALLOC at the PMD
order, and likewise the fallbacks).
"""
import io
import json

import pytest
from conftest import EXAMPLES
from kmrun import kmemscope, rows_of

import requirements

SET = EXAMPLES / "ab-defrag-mode-cost"
BUNDLES = sorted(SET.glob("run*-defrag*"))
HEADER = "#kmemscope-sample "
SAMPLED = {  # cost.NAME -> the sample file it is recounted from
    "cost.psi_some_ms": "pressure_memory", "cost.psi_full_ms": "pressure_memory",
    "cost.system_cpu_s": "stat", "cost.kswapd_cpu_s": "kthreads",
    "cost.kcompactd_cpu_s": "kthreads", "cost.khugepaged_cpu_s": "kthreads",
}
TRACED = {"cost.direct_compaction_ms": "direct_compaction", "cost.direct_reclaim_ms": "direct_reclaim",
          "cost.kcompactd_compaction_ms": "kcompactd"}
SHARE = "cost.background_compaction_share_pct"
GAUGES = ("nr_anon", "nr_anon_partially_mapped")


# ---------------------------------------------------------------- the oracle: raw sample text

def samples(path):
    """[(mono_ns, [lines])] of one procfs sample file, in the order written."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith(HEADER):
            fields = dict(f.split("=", 1) for f in line[len(HEADER):].split())
            out.append((int(fields["mono_ns"]), []))
        elif line.strip():
            out[-1][1].append(line)
    assert len(out) >= 2, path
    return out


def psi_totals(lines):
    """{'some': total_us, 'full': total_us} of one /proc/pressure/memory sample."""
    out = {}
    for line in lines:
        kind, *fields = line.split()
        out[kind] = int(dict(f.split("=", 1) for f in fields)["total"])
    return out


def system_ticks(lines):
    """The aggregate `cpu` line's system field (the third number) of one /proc/stat sample."""
    (line,) = [x for x in lines if x.split()[0] == "cpu"]
    return int(line.split()[3])


def thread_ticks(lines):
    """{(pid, comm): utime + stime} of one kthreads sample (`PID COMM UTIME STIME`)."""
    out = {}
    for line in lines:
        pid, comm, utime, stime = line.split()
        out[(int(pid), comm)] = int(utime) + int(stime)
    return out


def mthp_values(lines):
    """{(size_kb, counter): value} of one mthp sample (`SIZE_KB COUNTER VALUE`)."""
    return {(int(s), c): int(v) for s, c, v in (line.split() for line in lines)}


def vmstat_values(lines):
    return {k: int(v) for k, v in (line.split() for line in lines)}


def window_min(series):
    return (series[-1][0] - series[0][0]) / 60e9


def recount(bundle):
    """{metric: value} of every sampled cost row and mthp.* row of one bundle, and
    {metric: window in minutes} for the cost rows' /min rates."""
    procfs = bundle / "procfs"
    ticks_per_s = json.loads((bundle / "manifest.json").read_text())["clock_ticks_per_s"]
    want, windows = {}, {}

    psi = samples(procfs / "pressure_memory")
    first, last = psi_totals(psi[0][1]), psi_totals(psi[-1][1])
    for kind in ("some", "full"):
        want[f"cost.psi_{kind}_ms"] = (last[kind] - first[kind]) / 1e3
        windows[f"cost.psi_{kind}_ms"] = window_min(psi)

    stat = samples(procfs / "stat")
    want["cost.system_cpu_s"] = (system_ticks(stat[-1][1]) - system_ticks(stat[0][1])) / ticks_per_s
    windows["cost.system_cpu_s"] = window_min(stat)

    threads = samples(procfs / "kthreads")
    first_seen, last_seen = {}, {}
    for _ts, lines in threads:
        for key, ticks in thread_ticks(lines).items():
            first_seen.setdefault(key, ticks)
            last_seen[key] = ticks
    for kind in ("kswapd", "kcompactd", "khugepaged"):
        ticks = sum(last_seen[k] - first_seen[k] for k in first_seen if k[1].startswith(kind))
        want[f"cost.{kind}_cpu_s"] = ticks / ticks_per_s
        windows[f"cost.{kind}_cpu_s"] = window_min(threads)

    mthp = samples(procfs / "mthp")
    start, end = mthp_values(mthp[0][1]), mthp_values(mthp[-1][1])
    for (size, counter), value in end.items():
        want[f"mthp.{size}kB.{counter}"] = value - start[(size, counter)]
    for size in {s for s, _c in end}:
        alloc = want.get(f"mthp.{size}kB.anon_fault_alloc")
        fallback = want.get(f"mthp.{size}kB.anon_fault_fallback")
        if alloc is not None and fallback is not None:
            want[f"mthp.{size}kB.anon_fault_success_pct"] = (
                100.0 * alloc / (alloc + fallback) if alloc + fallback else None)
    return want, windows


def moved_sizes(wants):
    """The sizes whose counters (gauges aside) moved on some run: those compare shows."""
    moved = set()
    for want in wants:
        for name, value in want.items():
            if name.startswith("mthp.") and value and not name.endswith(GAUGES + ("_pct",)):
                moved.add(name.split(".")[1])
    return moved


# ---------------------------------------------------------------- the dataset, parsed once

@pytest.fixture(scope="module")
def costex(tmp_path_factory):
    """(dataset, {run_id: (bundle, want, windows, {stall kind: total_ms})}) of the 8 bundles."""
    if len(BUNDLES) != 8:
        requirements.skip("setup", f"the committed example {SET} is missing or incomplete")
    ds = tmp_path_factory.mktemp("costex") / "ds"
    kmemscope("parse", "-q", *BUNDLES, "-o", ds)
    runs = rows_of(kmemscope("sql", ds, "SELECT run_id, source FROM runs",
                             "--format", "json"))
    by_name = {b.name: b for b in BUNDLES}
    out = {}
    for r in runs:
        bundle = by_name[r["source"].rsplit("/", 1)[-1]]
        want, windows = recount(bundle)
        out[r["run_id"]] = (bundle, want, windows, {})
    assert len(out) == 8
    stalls = rows_of(kmemscope("query", "stalls.per_run", ds, "--format", "json"))
    for r in stalls["rows"] if isinstance(stalls, dict) else stalls:
        out[r["run_id"]][3][r["kind"]] = r["total_ms"]
    return ds, out


def per_run(ds, metrics=None):
    """{(run_id, metric): value} of `compare --over run --format json` (the default rows, or
    these)."""
    args = ["--metrics", ",".join(metrics)] if metrics else []
    doc = json.loads(kmemscope("compare", ds, "--by", "kernel", "--over", "run",
                               "--format", "json", *args).stdout)
    rows = doc["rows"] if isinstance(doc, dict) else doc
    return {(r["run_id"], r["metric"]): r["value"] for r in rows}


# ---------------------------------------------------------------- the tests

def test_every_sampled_cost_row_equals_the_raw_samples_recounted(costex):
    ds, runs = costex
    got = per_run(ds, list(SAMPLED) + [n + "/min" for n in SAMPLED])
    for run_id, (bundle, want, windows, _stalls) in runs.items():
        for name in SAMPLED:
            assert got[(run_id, name)] == pytest.approx(want[name], rel=1e-12, abs=1e-12), \
                (bundle.name, name)
            assert got[(run_id, name + "/min")] == pytest.approx(
                want[name] / windows[name], rel=1e-9, abs=1e-12), (bundle.name, name)
    # the set is not all zeros: the captures put memory under pressure and compacted
    for name in ("cost.psi_some_ms", "cost.system_cpu_s", "cost.kcompactd_cpu_s"):
        assert all(want[name] > 0 for _b, want, _w, _s in runs.values()), name


def test_the_default_table_shows_the_cost_rows_and_the_mthp_sizes_that_moved(costex):
    ds, runs = costex
    got = per_run(ds)
    shown = {m for _r, m in got}
    assert set(SAMPLED) | set(TRACED) | {SHARE} <= shown
    moved = moved_sizes(want for _b, want, _w, _s in runs.values())
    assert moved, "the workload faults 64 kB, 256 kB and 2 MiB folios"
    assert {m.split(".")[1] for m in shown if m.startswith("mthp.")} == moved
    for run_id, (bundle, want, _w, _s) in runs.items():
        for name in shown:
            if name.startswith("mthp."):
                assert got[(run_id, name)] == pytest.approx(want[name], abs=1e-12), \
                    (bundle.name, name)


def test_every_mthp_counter_of_the_sizes_that_moved_equals_the_raw_samples(costex):
    ds, runs = costex
    any_want = next(iter(runs.values()))[1]
    moved = moved_sizes(want for _b, want, _w, _s in runs.values())
    names = sorted(n for n in any_want if n.startswith("mthp.") and n.split(".")[1] in moved)
    assert len(names) > 3 * len(moved)
    got = per_run(ds, names)
    for run_id, (bundle, want, _w, _s) in runs.items():
        for name in names:
            assert got[(run_id, name)] == pytest.approx(want[name], abs=1e-12), (bundle.name, name)


def kcompactd_ms(ds, run_id):
    """kcompactd's compaction time of one run in plain Python: each kcompactdN thread's
    mm_compaction_begin paired with its next mm_compaction_end (read from the dataset's own
    event tables with pyarrow, sharing no code with the stalls analysis)."""
    import pyarrow.parquet as pq

    events = []
    for table, is_begin in (("mm_compaction_begin", True), ("mm_compaction_end", False)):
        for part in sorted((ds / table / f"run_id={run_id}").glob("*.parquet")):
            for row in pq.read_table(part, columns=["ts", "pid", "comm"]).to_pylist():
                if row["comm"].startswith("kcompactd"):
                    events.append((row["pid"], row["ts"], 0 if is_begin else 1))
    total, open_at = 0, {}
    for pid, ts, kind in sorted(events):
        if kind == 0:
            open_at[pid] = ts
        elif pid in open_at:
            total += ts - open_at.pop(pid)
    return total / 1e6


def test_trace_timed_rows_equal_the_stalls_totals_and_the_share_follows(costex):
    """The background share is time over time: kcompactd's compaction time (recounted here from
    the begin and end events) over itself plus direct compaction's, both from the trace."""
    ds, runs = costex
    got = per_run(ds, list(TRACED) + [SHARE])
    for run_id, (bundle, _want, _w, stalls) in runs.items():
        for name, kind in TRACED.items():
            assert got[(run_id, name)] == pytest.approx(stalls[kind], rel=1e-12), (bundle.name, name)
        background = kcompactd_ms(ds, run_id)
        assert background > 0, bundle.name
        assert got[(run_id, "cost.kcompactd_compaction_ms")] == pytest.approx(background, rel=1e-9)
        share = 100.0 * background / (background + stalls["direct_compaction"])
        assert got[(run_id, SHARE)] == pytest.approx(share, rel=1e-9), bundle.name
        assert 0 < got[(run_id, SHARE)] < 100


def test_the_share_is_there_on_bare_traces_too(costex, tmp_path):
    """The same captures' trace.dat alone (no samples): the share and kcompactd's compaction
    time stay, the same per run as with the samples."""
    ds, runs = costex
    bare = tmp_path / "bare"
    kmemscope("parse", "-q", *(b / "trace.dat" for b in BUNDLES[:2]), "-o", bare,
              "--label", "kernel=x")
    kmemscope("parse", "-q", *(b / "trace.dat" for b in BUNDLES[2:4]), "-o", bare,
              "--label", "kernel=y")
    names = [SHARE, "cost.kcompactd_compaction_ms", "cost.kcompactd_cpu_s"]
    got, full = per_run(bare, names), per_run(ds, names)
    assert {r for r, _m in got} and {r for r, _m in got} <= set(runs)
    for run_id in {r for r, _m in got}:
        assert got[(run_id, "cost.kcompactd_cpu_s")] is None
        for name in names[:2]:
            assert got[(run_id, name)] is not None
            assert got[(run_id, name)] == pytest.approx(full[(run_id, name)], rel=1e-12)


def vmstat_delta(bundle, name):
    """A vmstat counter's (or compact_direct_*: total minus daemon) first-to-last increase."""
    series = samples(bundle / "procfs" / "vmstat")
    first, last = vmstat_values(series[0][1]), vmstat_values(series[-1][1])
    if name.startswith("compact_direct_"):
        scanner = name[len("compact_direct_"):]
        return ((last[f"compact_{scanner}"] - first[f"compact_{scanner}"])
                - (last[f"compact_daemon_{scanner}"] - first[f"compact_daemon_{scanner}"]))
    return last[name] - first[name]


def test_the_shifted_block_equals_vmstat_recounted(costex):
    """The "direct compaction shifted" block: direct and kcompactd pages scanned, migrate and
    free, per side and their change, recounted from the bundles' procfs/vmstat text. The direct
    scanners' changes are the ones docs/compare.md sets beside the posting's -64% and -80%."""
    ds, runs = costex
    doc = json.loads(kmemscope("compare", ds, "--by", "kernel", "--metrics", "shifted",
                               "--format", "json").stdout)
    recs = {(r["metric"], r["side"]): r for r in doc["rows"]}
    counters = {"shifted.direct_migrate_scanned": "compact_direct_migrate_scanned",
                "shifted.direct_free_scanned": "compact_direct_free_scanned",
                "shifted.kcompactd_migrate_scanned": "compact_daemon_migrate_scanned",
                "shifted.kcompactd_free_scanned": "compact_daemon_free_scanned"}
    assert {m for m, _s in recs} == set(counters)
    changes = {}
    for metric, counter in counters.items():
        means = {}
        for side in ("defrag0", "defrag1"):
            values = [vmstat_delta(b, counter) for b, _w, _x, _s in runs.values()
                      if b.name.endswith(side)]
            assert len(values) == 4
            means[side] = sum(values) / len(values)
            rec = recs[(metric, side)]
            assert (rec["block"], rec["source"], rec["exactness"]) == ("shifted", "vmstat", "exact")
            assert rec["value"] == pytest.approx(means[side], rel=1e-12), (metric, side)
        changes[metric] = 100.0 * (means["defrag1"] / means["defrag0"] - 1)
        assert recs[(metric, "defrag1")]["change"] == pytest.approx(changes[metric], rel=1e-9)
    assert round(changes["shifted.direct_migrate_scanned"], 1) == -61.4
    assert round(changes["shifted.direct_free_scanned"], 1) == -81.1


def test_mthp_2048kB_faults_equal_the_vmstat_thp_fault_counters(costex):
    """The kernel counts a PMD-sized anonymous fault in both places at once, and the sampler
    reads mthp right after vmstat in each pass: the first-to-last increases agree exactly."""
    _ds, runs = costex
    for bundle, want, _w, _s in runs.values():
        vmstat = samples(bundle / "procfs" / "vmstat")
        first, last = vmstat_values(vmstat[0][1]), vmstat_values(vmstat[-1][1])
        for mthp, vm in (("anon_fault_alloc", "thp_fault_alloc"),
                         ("anon_fault_fallback", "thp_fault_fallback")):
            assert want[f"mthp.2048kB.{mthp}"] == last[vm] - first[vm], (bundle.name, mthp)
        assert want["mthp.2048kB.anon_fault_alloc"] > 0


def test_a_metric_named_by_its_group_and_by_itself_is_one_row(costex):
    ds, _runs = costex
    doc = json.loads(kmemscope("compare", ds, "--by", "kernel", "--format", "json", "--metrics",
                               "cost,cost.system_cpu_s/min").stdout)
    rows = [(r["metric"], r["side"]) for r in doc["rows"]]
    assert len(rows) == len(set(rows))
    assert ("cost.system_cpu_s/min", "defrag1") in rows and ("cost.psi_some_ms", "defrag1") in rows


def test_over_run_expands_a_group_into_its_rows(costex):
    ds, runs = costex
    got = per_run(ds, ["cost"])
    assert {m for _r, m in got} == set(SAMPLED) | set(TRACED) | {SHARE}
    for run_id, (bundle, want, _w, _s) in runs.items():
        assert got[(run_id, "cost.psi_some_ms")] == pytest.approx(want["cost.psi_some_ms"]), \
            bundle.name


def test_mthp_rows_alone_say_nothing_about_the_cost_rows(costex):
    ds, _runs = costex
    proc = kmemscope("compare", ds, "--by", "kernel", "--format", "json", "--metrics",
                     "mthp.2048kB.anon_fault_alloc")
    notes = json.loads(proc.stdout)["notes"]
    assert not [n for n in notes if n.startswith("cost.")], notes


def test_time_spent_figure_draws_the_sides_means_and_labels_log_axes_in_plain_numbers(costex):
    import matplotlib  # noqa: F401  (the [report] extra, which make setup installs)
    import kmemscope
    from kmemscope import plots

    ds, runs = costex
    fig = plots.time_spent(kmemscope.open(ds).compare("kernel", metrics=["cost"]))
    frame = fig.drawn.panels["time per run, s"]
    for side in ("defrag0", "defrag1"):
        mine = [want for b, want, _w, _s in runs.values() if b.name.endswith(side)]
        assert frame.loc[side, "system CPU (every CPU), s"] == pytest.approx(
            sum(w["cost.system_cpu_s"] for w in mine) / len(mine))
    # a figure with log axes (the stall CDFs): no tick label is mathtext source
    lat = plots.stall_cdf(kmemscope.open(ds), by="kernel")
    lat.savefig(io.BytesIO(), format="png")
    labels = [t.get_text() for ax in lat.axes for axis in (ax.xaxis, ax.yaxis)
              for t in axis.get_ticklabels(which="both")]
    assert any(labels) and not [s for s in labels if "$" in s or "mathdefault" in s]
