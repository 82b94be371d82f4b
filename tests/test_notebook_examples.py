"""The example notebooks (notebooks/examples/) run, and every figure they draw shows the data of
the analysis it names.

Each notebook's code cells run here in order, as a kernel would run them (the parameter cell
replaced by the test's values), and the value of each cell's last expression is kept: every
kmemscope.plots.Figure among them is read back from its artists (points, lines, bars, images,
their colours) and compared with the rows of the analysis it draws, fetched again through the
public API, and with the side order of the comparison model (a side's colour is its place in
`Dataset.compare(...).sides`). The slow test executes the notebooks in a real kernel with
papermill, as the docs build does.
"""
import ast
import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import requirements
from conftest import EXAMPLES, PROJECT_ROOT

NOTEBOOKS = PROJECT_ROOT / "notebooks" / "examples"
AB_BUNDLES = sorted(p for p in (EXAMPLES / "ab-defrag-mode").iterdir() if p.is_dir()) \
    if (EXAMPLES / "ab-defrag-mode").is_dir() else []


@pytest.fixture(scope="module")
def ab_dataset(tmp_path_factory):
    """The eight bundles of examples/ab-defrag-mode parsed once (kernel=defrag0|defrag1)."""
    from kmrun import kmemscope

    if len(AB_BUNDLES) != 8:
        requirements.skip("setup", "examples/ab-defrag-mode/ lacks its eight bundles")
    ds = tmp_path_factory.mktemp("ab-defrag") / "ds"
    for bundle in AB_BUNDLES:
        kmemscope("parse", "-q", bundle, "-o", ds)
    return ds


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    from kmrun import kmemscope

    ds = tmp_path_factory.mktemp("one-run") / "ds"
    kmemscope("parse", "-q", EXAMPLES / "ab-defrag-mode" / "run4-defrag0", "-o", ds)
    return ds


def run_notebook(name, params):
    """Run the code cells of notebook `name` in one namespace -> [(cell source, value of its last
    expression)], the parameter cell's assignments replaced by `params`."""
    nb = json.loads((NOTEBOOKS / name).read_text())
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), \
        f"{name}: outputs are committed (they are stripped in git)"
    space = {"__name__": "__notebook__"}
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        if "parameters" in cell["metadata"].get("tags", []):
            defaults = {}
            exec(compile(source, name, "exec"), defaults)
            assert set(params) <= set(defaults), f"{name}: no parameter {set(params) - set(defaults)}"
            source += "\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, name, "exec"), space)
        value = eval(compile(ast.Expression(last.value), name, "eval"), space) if last else None
        out.append((source, value))
    return out, space


def figures(values):
    from kmemscope.plots import Figure

    return [(src, v) for src, v in values if isinstance(v, Figure)]


# ---------------------------------------------------------------- reading figures back

def hex_color(c):
    from matplotlib.colors import to_hex

    return to_hex(c, keep_alpha=False)


def side_colors(sides):
    """A side's colour is its place in the comparison's side order."""
    from kmemscope.plots.style import SIDE_COLORS

    return {s: SIDE_COLORS[i % len(SIDE_COLORS)] for i, s in enumerate(sides)}


def artist_sides(fig):
    """(side, colour) of every artist that names a side or a run (gid side=X or run=X/id)."""
    out = []
    for ax in fig.axes:
        for a in list(ax.lines) + list(ax.collections) + list(ax.patches):
            gid = a.get_gid() or ""
            if gid.startswith("side="):
                side = gid[len("side="):]
            elif gid.startswith("run="):
                side = gid[len("run="):].rsplit("/", 1)[0]
            else:
                continue
            if type(a).__name__ == "Line2D":
                color = a.get_color()
            else:
                fc = a.get_facecolor()
                fc = fc[0] if getattr(fc, "ndim", 1) == 2 and len(fc) else fc
                color = fc if len(fc) and fc[3] > 0 else (a.get_edgecolor()[0]
                                                          if getattr(a.get_edgecolor(), "ndim", 1) == 2
                                                          else a.get_edgecolor())
            out.append((side, hex_color(color)))
    return out


def assert_side_colours(fig, sides):
    want = side_colors(sides)
    seen = artist_sides(fig)
    if fig.name == "pollution":       # a matrix per side: its title is in the side's colour
        seen = [(ax.get_title().split(":")[0], hex_color(ax.title.get_color()))
                for ax in fig.axes if ax.images]
    assert seen, f"{fig.name}: no artist names a side or run"
    for side, color in seen:
        assert side in want, (fig.name, side, list(want))
        assert color == want[side].lower(), (fig.name, side, color, want[side])


def runs_of(ds, label, value):
    return [r["run_id"] for r in ds.runs.rows() if dict(r["labels"]).get(label) == value]


def check_comparison_panels(fig, cmp):
    """Per panel: one point per run at the run's value, in its side's colour; the side's bar at
    the model's statistic; the interval within what the quantity can take."""
    by_title = {r.metric.title: r for r in cmp.rows}
    colours = side_colors(cmp.sides.sides)
    panels = 0
    for ax in fig.axes:
        if not ax.get_visible() or not ax.get_title():
            continue
        row = by_title[ax.get_title().split("\n")[0]]
        points = defaultdict(list)
        for coll in ax.collections:
            gid = coll.get_gid() or ""
            if gid.startswith("run=") and type(coll).__name__ == "PathCollection":
                side = gid[4:].rsplit("/", 1)[0]
                points[side] += [y for _, y in coll.get_offsets()]
                assert hex_color(coll.get_facecolor()[0]) == colours[side].lower()
        values = cmp.sides.values(row.metric.name)
        for side in cmp.sides.sides:
            runs = [v for v in values[side] if v is not None and not (isinstance(v, float) and math.isnan(v))]
            assert sorted(points[side]) == pytest.approx(sorted(runs)), (row.metric.name, side)
            bars = [c for c in ax.collections if c.get_gid() == f"side={side}"]
            stat = row.stats[side].mean
            if stat is None:
                assert not bars
                continue
            (bar,) = bars
            ys = {round(float(y), 9) for seg in bar.get_segments() for _, y in seg}
            assert ys == {round(float(stat), 9)}, (row.metric.name, side, ys, stat)
            for ci in [c for c in ax.collections if c.get_gid() == f"ci={side}"]:
                lo, hi = sorted(y for seg in ci.get_segments() for _, y in seg)
                if row.metric.unit == "%":
                    assert 0 <= lo <= hi <= 100, (row.metric.name, side, lo, hi)
                elif row.metric.unit in ("count", "/min", "ms"):
                    assert lo >= 0, (row.metric.name, side, lo)
        panels += 1
    assert panels


def check_stall_cdf(fig, ds, by, sides):
    """Each side's line in a panel steps through the sorted latencies of its runs' stalls of that
    kind and order (`stalls.each`), from 0% to 100%."""
    stalls = ds.query("stalls.each").df()
    groups = {s: set(runs_of(ds, by, s)) for s in sides}
    checked = 0
    for ax in fig.axes:
        if not ax.get_visible() or not ax.lines:
            continue
        head = ax.get_title().split("\n")[0]
        kind_title, order_text = head.rsplit(", ", 1)
        for line in ax.lines:
            side = (line.get_gid() or "")[len("side="):]
            sub = stalls[stalls.run_id.isin(groups[side]) & (stalls.duration_ms > 0)]
            kinds = {"direct compaction": "direct_compaction", "direct reclaim": "direct_reclaim",
                     "kcompactd run": "kcompactd", "kswapd awake": "kswapd"}
            sub = sub[sub.kind == kinds[kind_title]]
            if order_text == "no order":       # NULL, or -1 (kcompactd and kswapd without a wake)
                sub = sub[sub["order"].isna() | (sub["order"] == -1)]
            else:
                sub = sub[sub["order"] == int(order_text.split()[1])]
            xs = list(line.get_xdata())[1:]
            assert xs == pytest.approx(sorted(sub.duration_ms)), (head, side)
            ys = list(line.get_ydata())
            assert ys[0] == 0 and ys[-1] == pytest.approx(100)
            checked += 1
    assert checked


def check_free_pageblocks(fig, ds):
    """A run's line in a migratetype's panel is the sum over zones of `fragmentation.pageblocks`'
    free_pageblocks at each sample."""
    rows = ds.query("fragmentation.pageblocks").df()
    want = rows.groupby(["run_id", "migratetype", "t_s"])["free_pageblocks"].sum()
    checked = 0
    for ax in fig.axes:
        if not ax.get_visible() or not ax.lines:
            continue
        mt = ax.get_title().split(": ")[0]
        for line in ax.lines:
            run = line.get_gid().rsplit("/", 1)[1]
            series = want.loc[(run, mt)]
            assert list(line.get_xdata()) == pytest.approx(list(series.index)), (mt, run)
            assert list(line.get_ydata()) == pytest.approx(list(series.values)), (mt, run)
            checked += 1
    assert checked


def check_order_histogram(fig, ds, by, sides):
    """A side's bars: its runs' allocations per order (`atomic_orders.orders`) over its number of
    runs; the hatched bars the failed ones."""
    rows = ds.query("atomic_orders.orders").df()
    (ax,) = [a for a in fig.axes if a.get_visible() and a.patches]
    ticks = [int(t.get_text()) for t in ax.get_xticklabels()]
    bars = defaultdict(list)
    for p in sorted(ax.patches, key=lambda p: p.get_x()):
        bars[p.get_gid()].append(p.get_height())
    for side in sides:
        runs = runs_of(ds, by, side)
        mine = rows[rows.run_id.isin(runs)].groupby("order")[["allocs", "failed"]].sum()
        attempts = [mine["allocs"].get(o, 0) / len(runs) for o in ticks]
        assert bars[f"side={side}"] == pytest.approx(attempts, abs=1e-3), side
        failed = [mine["failed"].get(o, 0) / len(runs) for o in ticks]
        assert bars[f"failed side={side}"] == pytest.approx(failed, abs=1e-3), side
        # a point per run over the side's bar: the run's own attempts at each order
        for run in runs:
            (points,) = [c for c in ax.collections if c.get_gid() == f"run={side}/{run}"]
            own = rows[rows.run_id == run].groupby("order")["allocs"].sum()
            ys = [y for _, y in points.get_offsets().filled(float("nan"))] \
                if hasattr(points.get_offsets(), "filled") else [y for _, y in points.get_offsets()]
            assert [y for y in ys if y == y] == [own.get(o, 0) for o in ticks if own.get(o, 0) > 0], run


def check_pollution(fig, ds, by, sides):
    """A side's matrix: its runs' fallbacks (`fallback_pollution`) per requested and fallback
    type, over its number of runs."""
    rows = ds.query("fallback_pollution").df()
    for side in sides:
        runs = runs_of(ds, by, side)
        m = fig.drawn.panels[side]
        mine = rows[rows.run_id.isin(runs)].groupby(["alloc_type", "fallback_type"])["events"].sum()
        got = {(r, c): m.loc[r, c] for r in m.index for c in m.columns if m.loc[r, c]}
        assert got == {k: pytest.approx(round(v / len(runs), 3)) for k, v in mine.items() if v}, side
        # and the image holds those numbers
        (ax,) = [a for a in fig.axes if a.images and a.get_title().startswith(f"{side}:")]
        assert (ax.images[0].get_array() == m.values).all()


# ---------------------------------------------------------------- the notebooks

def test_ab_notebook_figures_draw_the_analyses(ab_dataset, tmp_path):
    import kmemscope

    values, space = run_notebook("ab-defrag-mode.ipynb", {"dataset": str(ab_dataset)})
    ds = kmemscope.open(ab_dataset)
    cmp = space["cmp"]
    sides = ds.compare(by="kernel", baseline="defrag0").sides.sides
    assert sides == ["defrag0", "defrag1"] and cmp.sides.sides == sides
    drawn = figures(values)
    names = [f.name for _, f in drawn]
    assert names == ["distributions", "distributions", "stall_cdfs", "free_pageblocks", "pollution",
                     "orders"], names
    for src, fig in drawn:
        assert not fig.empty, (src, fig.notes)
        assert_side_colours(fig, sides)
        assert "<img" in fig._repr_html_()
        if fig.name == "distributions":
            check_comparison_panels(fig, cmp)
            # one point per run: the eight runs in every panel
            for ax in fig.axes:
                if ax.get_visible() and ax.get_title():
                    pts = sum(len(c.get_offsets()) for c in ax.collections
                              if (c.get_gid() or "").startswith("run="))
                    metric = next(r for r in cmp.rows if r.metric.title == ax.get_title().split("\n")[0])
                    assert pts == sum(x.n for x in metric.stats.values())
        elif fig.name == "stall_cdfs":
            check_stall_cdf(fig, ds, "kernel", sides)
        elif fig.name == "free_pageblocks":
            check_free_pageblocks(fig, ds)
        elif fig.name == "orders":
            check_order_histogram(fig, ds, "kernel", sides)
        elif fig.name == "pollution":
            check_pollution(fig, ds, "kernel", sides)
    # the saved figure is a PNG file
    (png,) = (Path(ab_dataset).parent / "compaction_success.png",)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fleet_notebook_simulates_distinct_hosts_and_no_significance_from_copies(ab_dataset, tmp_path):
    """The fleet notebook's hosts are copies of the eight real runs: its verdicts on measured
    rows count the real runs (copy_of), and each host's own numbers are simulated, seeded,
    distinct and labelled so. Oracles: the real runs' summary (their mean and standard
    deviation per side, in plain Python) and numpy's generator of the notebook's seed, drawn
    again here in the notebook's order; statistics' pstdev of the values a side."""
    import math
    import statistics as stats

    import numpy as np

    import kmemscope

    hosts, seed = 24, 7
    values, space = run_notebook("fleet.ipynb", {"dataset": str(ab_dataset), "hosts": hosts,
                                                 "seed": seed, "scratch": str(tmp_path),
                                                 "benchmarks": str(PROJECT_ROOT / "benchmarks")})
    text = " ".join("".join(c["source"]) for c in json.loads((NOTEBOOKS / "fleet.ipynb").read_text())["cells"]
                    if c["cell_type"] == "markdown")
    assert "Simulated data" in text and "would give" not in text and "sixty" not in text
    # the real runs: the copies folded back, four a side, and no verdict the runs cannot hold
    real = space["real_cmp"]
    for r in real.records:
        assert r.n == 4 and r.n_of == "copy_ofs", r
    comp = next(r for r in real.records if r.metric == "compaction_success_pct" and not r.is_baseline)
    assert comp.verdict not in ("better", "worse") and not comp.significant
    # the simulated numbers: one per host and metric, distinct, seeded, labelled
    sim = space["simulated"]
    assert len(sim) == hosts * 3 and sim.value.nunique() == len(sim)
    assert all(u.endswith("(simulated)") for u in sim.unit) and all(m.startswith("sim_") for m in sim.metric)
    summary = {r["run_id"]: r for r in kmemscope.open(ab_dataset).query("summary").rows()}
    setting = {r["run_id"]: dict(r["labels"])["kernel"] for r in kmemscope.open(ab_dataset).runs.rows()}
    copy_of = {r["run_id"]: dict(r["labels"])["copy_of"] for r in space["ds"].runs.rows()}
    rng = np.random.default_rng(seed)
    for row in sim.itertuples():
        name = row.metric[len("sim_"):]
        side = setting[copy_of[row.run]]
        real_values = [summary[r][name] for r in sorted(setting) if setting[r] == side]
        if name.endswith("_pct"):       # a normal on the logit scale, back to a percentage
            z = [math.log(v / (100.0 - v)) for v in real_values]
            want = 100.0 / (1.0 + math.exp(-rng.normal(stats.fmean(z), stats.stdev(z))))
        else:                           # a normal on the log scale
            z = [math.log(v) for v in real_values]
            want = math.exp(rng.normal(stats.fmean(z), stats.stdev(z)))
        assert row.value == pytest.approx(want, rel=1e-12), (row.run, name)
    cmp = space["cmp"]
    assert cmp.sides.sides == ["defrag0", "defrag1"]
    assert {s: len(r) for s, r in cmp.sides.runs.items()} == {"defrag0": 12, "defrag1": 12}
    assert all(r.unit.endswith("(simulated)") for r in cmp.records)
    drawn = figures(values)
    assert [f.name for _, f in drawn] == ["distributions", "distributions", "stall_cdfs"]
    for _, fig in drawn:
        assert not fig.empty
        assert_side_colours(fig, ["defrag0", "defrag1"])
    for _, fig in drawn[:2]:
        check_comparison_panels(fig, cmp)
    # the stalls are the real runs', not their copies'
    check_stall_cdf(drawn[2][1], space["real_ds"], "kernel", ["defrag0", "defrag1"])
    rows = space["ds"].runs.rows()
    assert all(setting[copy_of[r["run_id"]]] == dict(r["labels"])["kernel"] for r in rows)
    assert len({r["host"] for r in rows}) == len(rows) == hosts


def test_one_run_notebook_follows_the_run(one_run):
    import kmemscope

    values, space = run_notebook("one-run-over-time.ipynb", {"dataset": str(one_run)})
    ds = kmemscope.open(one_run)
    (run,) = ds.run_ids()
    drawn = dict((f.name, f) for _, f in figures(values))
    assert set(drawn) == {"free_pages", "free_pageblocks", "over_time", "compaction_timeline",
                          "stall_cdfs", "pollution"}
    for fig in drawn.values():
        assert not fig.empty, (fig.name, fig.notes)
    check_free_pageblocks(drawn["free_pageblocks"], ds)
    # the compaction timeline: a mark per mm_compaction_end of the run (recounted from Parquet)
    import pyarrow.parquet as pq

    ends = pq.read_table(Path(one_run) / "mm_compaction_end" / f"run_id={run}").num_rows
    marks = sum(len(c.get_offsets()) for ax in drawn["compaction_timeline"].axes for c in ax.collections)
    assert marks == ends > 0
    # the free pages heatmap: each sample's pages per order are the buddyinfo counts x 2^order
    orders = ds.query("fragmentation.orders", run=run).df()
    (ax,) = [a for a in drawn["free_pages"].axes if a.collections and a.get_label() != "<colorbar>"]
    grid = ax.collections[0].get_array()
    want = orders.assign(pages=orders.free_blocks * 2 ** orders["order"]).pivot_table(
        index="order", columns="ts", values="pages", aggfunc="sum")
    assert grid.shape == want.shape
    assert [float(v) for v in grid.filled(0).ravel()] == pytest.approx(
        [float(v) for v in want.to_numpy().ravel()])
    # the indices are a frame with the rows of the analysis
    assert len(space["indices"]) == len(ds.query("fragmentation.over_time", run=run))


@pytest.mark.slow   # three notebooks in a real kernel: about a minute of CPU
@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_examples_execute_headless(name, ab_dataset, one_run, tmp_path):
    import importlib.util

    if importlib.util.find_spec("papermill") is None:
        requirements.skip("setup", "papermill is in the report extra: pip install -e '.[report]'")
    import papermill
    params = {"examples": str(EXAMPLES), "dataset": str(one_run if name.startswith("one-run") else ab_dataset)}
    if name == "fleet.ipynb":
        params.update(benchmarks=str(PROJECT_ROOT / "benchmarks"), hosts=16,
                      scratch=str(tmp_path / "fleet-scratch"))
    nb = papermill.execute_notebook(str(NOTEBOOKS / name), str(tmp_path / name), parameters=params,
                                    kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    html = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "text/html" in o.get("data", {})]
    assert any('<img class="kmemscope-figure"' in h for h in html), name
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


def test_committed_notebooks_have_no_outputs():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")) + sorted((PROJECT_ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            assert not cell.get("outputs") and cell.get("execution_count") is None, path.name


def test_report_notebooks_call_only_the_public_api():
    """Every cell of the report's notebooks imports kmemscope and kmemscope.plots only, and names
    no private member (a user can copy the cell)."""
    for path in sorted((PROJECT_ROOT / "notebooks").glob("*.ipynb")) + sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            tree = ast.parse("".join(cell["source"]))
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                    for mod in mods:
                        if mod.startswith("kmemscope"):
                            assert mod in ("kmemscope", "kmemscope.plots") or (
                                isinstance(node, ast.ImportFrom) and mod == "kmemscope"
                                and all(a.name == "plots" for a in node.names)), (path.name, mod)
                if isinstance(node, ast.Attribute):
                    assert not node.attr.startswith("_"), (path.name, node.attr)


def test_fleet_totals_add_hosts_not_runs(ab_dataset):
    """The high-atomic table's total across a side's hosts: each host's mean over its runs,
    summed over hosts (the eight A/B runs come from one machine: four runs are one host's)."""
    import kmemscope
    from kmemscope import plots
    from kmemscope.plots.sides import _si

    ds = kmemscope.open(ab_dataset)
    cmp = ds.compare(by="kernel", baseline="defrag0")
    runs = {r["run_id"]: r for r in ds.runs.rows()}
    summary = {r["run_id"]: r["pgscan_kswapd_per_min"] for r in ds.query("summary").rows()}
    html = plots.highatomic_table(cmp).html
    for side in ("defrag0", "defrag1"):
        per_host = defaultdict(list)
        for run, row in runs.items():
            if dict(row["labels"])["kernel"] == side and summary.get(run) is not None:
                per_host[row["host"] or run].append(summary[run])
        assert per_host and max(len(v) for v in per_host.values()) > 1, "runs on one host needed"
        total = sum(sum(v) / len(v) for v in per_host.values())
        n = len(per_host)
        assert f"{_si(total)} over {n} host{'s' if n != 1 else ''}" in html, side
