"""The figures of `kmemscope report`, one call each, for notebooks and scripts.

    import kmemscope
    from kmemscope import plots

    ds = kmemscope.open("DATASET")
    plots.stall_cdf(ds, by="kernel")                    # a line per side
    plots.order_histogram(ds, run=["0a1b2c3d"])        # a bar per run
    cmp = ds.compare(by="kernel")
    cmp.plot("compaction_success_pct")                  # one point per run, each side's statistic
    plots.comparison(cmp).savefig("compare.png")        # every metric, a panel each

Every figure function takes a Dataset and the same keywords:

    by        a label whose values are the sides: a colour per side (baseline first, then
              the others sorted, as `compare` orders them), a marker per run; without it, a
              colour per run
    baseline  the side coloured first
    run       run ids or unique prefixes to draw (default: every run)
    label     "key=value" filters a run must match

and returns a `Figure`: a matplotlib Figure that a notebook shows (with the
numbers drawn, folded, and notes on what is left out) and a script saves with
`savefig`. A side's bars and matrices are per run (its runs' sum divided by
their number), never a sum over sides. A figure whose analysis returns no rows
for the runs is `empty` and says what is missing (`fig.notes[0]`); any other
failure is raised as a kmemscope error.

The tables of a comparison (`comparison_table`, `summary`, ...) return `Html`
that a notebook displays.
"""
try:
    import matplotlib  # noqa: F401
except ImportError:
    from kmemscope.common.errors import KmemscopeError

    raise KmemscopeError("kmemscope.plots needs matplotlib",
                         "install the report extra: pip install 'kmemscope[report]'") from None

from .figure import Figure, Html, Missing
from .scope import Scope

__all__ = ["Figure", "Html", "FIGURES", "ANALYSES", "order_histogram", "atomic_orders", "pollution",
           "event_rates", "highatomic", "free_by_migratetype", "free_pageblocks", "hot_pfns",
           "compaction_timeline", "vmstat_rates", "over_time", "free_pages", "stall_cdf",
           "alloc_origins", "comparison", "summary", "comparison_table", "highatomic_table",
           "hot_pfns_table", "vmstat_table", "time_spent", "free_pages_blocks"]


def _draw(name, draw, ds, by, baseline, run, label, **params):
    """draw(scope, **params) -> Figure; Missing (no rows) becomes the empty figure that says so."""
    scope = Scope.of(ds, run, label, by, baseline)
    try:
        return draw(scope, **params)
    except Missing as exc:
        return Figure.nothing(name, str(exc))


def order_histogram(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """Allocation attempts per order and, hatched beside them, the failed ones (log scale): a bar
    per run, or per side per run. From `atomic_orders.orders`."""
    from .runs import order_histogram as draw

    return _draw("orders", draw, ds, by, baseline, run, label)


def atomic_orders(ds, *, by=None, baseline=None, run=None, label=None, each_run=False) -> Figure:
    """Non-blocking allocations per order, a panel for the high-atomic-eligible ones and one for
    the others: a bar per run, or per side per run (each_run=True: a bar per run in its side's
    colour); the order bands per run in a table under it. From `atomic_orders`."""
    from .runs import atomic_orders as draw

    return _draw("atomic_orders", draw, ds, by, baseline, run, label, each_run=each_run)


def pollution(ds, *, by=None, baseline=None, run=None, label=None, each_run=False) -> Figure:
    """Migratetype fallbacks: the type asked for (row) against the type of the block the page
    came from (column), a matrix per run (up to four), or per side per run (each_run=True: a
    matrix per run, titled in its side's colour), on one colour scale. From
    `fallback_pollution`."""
    from .runs import pollution as draw

    return _draw("pollution", draw, ds, by, baseline, run, label, each_run=each_run)


def event_rates(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """Events per second of the six busiest event types, per whole second of each capture, a line
    per run (a second without events is 0)."""
    from .runs import event_rates as draw

    return _draw("event_rates", draw, ds, by, baseline, run, label)


def highatomic(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """HighAtomic pageblocks in all zones per pagetypeinfo sample, a line per run. From
    `highatomic.blocks`."""
    from .runs import highatomic_over_time as draw

    return _draw("highatomic", draw, ds, by, baseline, run, label)


def free_by_migratetype(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """Free pages and pageblocks per migratetype over time, a pair of panels per run (up to four).
    From `fragmentation.pageblocks`."""
    from .runs import free_by_migratetype as draw

    return _draw("free_by_migratetype", draw, ds, by, baseline, run, label)


def free_pageblocks(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """Free pageblock-order blocks (order 9 on x86-64) per migratetype over time: a panel per
    migratetype, a line per run in its side's colour. Where a kernel's free huge-page-sized
    blocks sit (HighAtomic or Movable) shows here. From `fragmentation.pageblocks`."""
    from .runs import free_pageblocks as draw

    return _draw("free_pageblocks", draw, ds, by, baseline, run, label)


def hot_pfns(ds, *, by=None, baseline=None, run=None, label=None, top_n=50) -> Figure:
    """Allocations of the `top_n` most-allocated page frames by rank, and how soon freed frames
    are allocated again, a line per run; the five hottest per run in a table. From `hot_pfns`
    and `pfn_reuse.histogram`."""
    from .runs import hot_pfns as draw

    return _draw("hot_pfns", draw, ds, by, baseline, run, label, top_n=top_n)


def compaction_timeline(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """The end of each compaction run, direct or kcompactd, by end status: a lane per side (or
    run), a marker per run. From the `compaction_runs` view."""
    from .runs import compaction_timeline as draw

    return _draw("compaction_timeline", draw, ds, by, baseline, run, label)


def vmstat_rates(ds, *, by=None, baseline=None, run=None, label=None, top=20) -> Figure:
    """The `top` fastest-moving vmstat event counters, per minute of each capture, a bar per run.
    From `vmstat_rates`."""
    from .runs import vmstat_rates as draw

    return _draw("vmstat_rates", draw, ds, by, baseline, run, label, top=top)


def over_time(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """Per interval of the procfs samples: compaction successes and failures per second and THP
    fault success (vmstat), and the time tasks stalled in direct compaction and direct reclaim
    per second (`stalls.each`); a line per run in its side's colour."""
    from .timeseries import over_time as draw

    return _draw("over_time", draw, ds, by, baseline, run, label)


def free_pages(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """Free pages per order over time (buddyinfo, every zone summed): a heatmap per run, up to two
    per side, on one logarithmic colour scale. From `fragmentation.orders`."""
    from .timeseries import free_pages_heatmap as draw

    return _draw("free_pages", draw, ds, by, baseline, run, label)


def stall_cdf(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """The cumulative distribution of stall latencies, a panel per kind and order, a line per side
    (all its runs' stalls) or per run. From `stalls.each`."""
    from .timeseries import stall_cdfs as draw

    return _draw("stall_cdfs", draw, ds, by, baseline, run, label)


def free_pages_blocks(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """vmstat nr_free_pages (solid) and nr_free_pages_blocks (dashed: free pages in free
    pageblocks, kernels 6.15+) over time, a pair of lines per run in its side's colour; runs of
    older kernels are left out and counted. From the `vmstat` samples."""
    from .cost import free_pages_blocks as draw

    return _draw("free_pages_blocks", draw, ds, by, baseline, run, label)


def alloc_origins(ds, *, by=None, baseline=None, run=None, label=None) -> Figure:
    """Who makes the non-blocking allocations of order 1 and above: an icicle of their kernel
    stacks per run (up to four). Needs stacks (`kmemscope record --preset atomic-origins`).
    From `alloc_origins.folded`."""
    from .origins import nonblocking_icicles as draw

    return _draw("nonblocking_icicles", draw, ds, by, baseline, run, label)


# ---------------------------------------------------------------- a comparison's figures and tables

def _sides(cmp):
    from .sides import ComparisonFigures

    return ComparisonFigures(cmp)


def comparison(cmp, metrics=None) -> Figure:
    """A panel per metric of Comparison `cmp` (default: every row but the vmstat ones): one point
    per run (a marker per run, the side's colour), the side's statistic (the comparison's) as a bar
    with its 95% interval cut to what the quantity can take. `cmp.plot(metric)` is one panel."""
    try:
        return _sides(cmp).distributions(None if metrics is None else
                                         [metrics] if isinstance(metrics, str) else list(metrics))
    except Missing as exc:
        return Figure.nothing("distributions", str(exc))


def time_spent(cmp) -> Figure:
    """Where the time went, per side of Comparison `cmp`: the time allocating tasks waited in
    direct compaction and direct reclaim (the trace) and the CPU time of kcompactd, kswapd and
    khugepaged (samples) stacked, system CPU beside them in a panel of its own scale; each segment the side's statistic of
    its cost row. Needs the cost rows (`ds.compare(by, metrics=["cost"])`); `fig.drawn` holds
    the seconds drawn per side."""
    from .cost import time_spent as draw

    try:
        return draw(cmp)
    except Missing as exc:
        return Figure.nothing("time_spent", str(exc))


def _table(make):
    try:
        out = make()
    except Missing as exc:
        return Html(f'<p class="kmemscope-nodata"><i>{_esc(exc)}</i></p>', str(exc))
    return out


def _esc(text):
    import html

    return html.escape(str(text))


def summary(cmp) -> Html:
    """The headline metrics of `cmp`: each side's statistic and the verdict against the baseline,
    with the colour of each side in every figure."""
    return _table(_sides(cmp).summary)


def comparison_table(cmp) -> Html:
    """Every row of `cmp` but the vmstat ones: per side the statistic and the range of the runs,
    the change against the baseline and the p-values; then the mmtests layout and the notes."""
    return _table(_sides(cmp).table)


def highatomic_table(cmp) -> Html:
    """The rows a high-atomic reserve change is judged by, per side: the comparison's statistic and
    the range per run."""
    from .figure import table_html

    def make():
        sentence, table = _sides(cmp).highatomic_study()
        return Html(f"<p>{_esc(sentence)}</p>" + table_html(table), sentence)

    return _table(make)


def hot_pfns_table(cmp, runs_per_side=3) -> Html:
    """The five most-allocated page frames of each run (up to `runs_per_side` per side)."""
    return _table(lambda: _sides(cmp).pcp_study(runs_per_side))


def vmstat_table(cmp) -> Html:
    """The vmstat rows of `cmp` as a kernel A/B table: per side the statistic and its stddev, the
    change against the baseline, and the p of the permutation test of the means."""
    return _table(_sides(cmp).vmstat_table)


def _hot_pfns_from(ds, *, top_n=50, **where):
    return hot_pfns(ds, top_n=int(top_n), **where)     # the analysis' parameter, as given


# analysis -> the figure that draws it: Result.plot() of `ds.query(name)`
ANALYSES = {"stalls": stall_cdf, "stalls.each": stall_cdf, "atomic_orders": atomic_orders,
            "atomic_orders.orders": order_histogram, "fallback_pollution": pollution,
            "fragmentation.pageblocks": free_pageblocks, "fragmentation.orders": free_pages,
            "highatomic": highatomic, "highatomic.blocks": highatomic, "hot_pfns": _hot_pfns_from,
            "vmstat_rates": vmstat_rates, "alloc_origins.folded": alloc_origins}

# name -> function: the figures docs/plots.md lists (tools/gen_plots.py draws each)
FIGURES = {f.__name__: f for f in (order_histogram, atomic_orders, pollution, event_rates, highatomic,
                                   free_by_migratetype, free_pageblocks, hot_pfns, compaction_timeline,
                                   vmstat_rates, over_time, free_pages, free_pages_blocks, stall_cdf,
                                   alloc_origins)}
