"""Figures and tables for the report notebooks, one function per section.

Each function takes a Scope (dataset + run selection) and returns a matplotlib
Figure, a pandas DataFrame, or a tuple of them. When the runs lack what a
section needs (no procfs samples, no extfrag events) it raises Missing with a
sentence the notebook prints instead of the figure. Figures are plain
matplotlib Figure objects (not pyplot), rendered to PNG by `show`, so nothing
depends on the notebook's backend and nothing loads JavaScript.
"""
import io
from dataclasses import dataclass, field

from kmemscope.errors import KmemscopeError

MAX_LINES = 12           # legend entries before a figure drops its legend
MAX_PANELS = 4           # per-run panels before the rest are left out (with a sentence)
NOT_EVENTS = {"runs", "print_flags", "lost_events", "vmstat", "pagetypeinfo_free",
              "pagetypeinfo_blocks", "buddyinfo", "zoneinfo"}


class Missing(Exception):
    """The selected runs lack the data of a section; str() is the sentence to print."""


@dataclass
class Scope:
    dataset: str
    runs: list = field(default_factory=list)      # run ids or prefixes; empty: all runs
    labels: list = field(default_factory=list)    # "k=v" filters

    def query(self, name, **params):
        """A named analysis as a DataFrame (labels flattened to "k=v,...")."""
        from kmemscope.queries.engine import run_query

        table = run_query(name, self.dataset, run_ids=self.runs or None,
                          labels=self.labels or None, params=params or None)
        df = table.to_pandas()
        if "labels" in df:
            df["labels"] = df["labels"].map(_labels_text)
        return df

    def sql(self, text, tables):
        """Ad-hoc SQL over the selected runs, with run_facts; -> DataFrame."""
        from kmemscope.queries.engine import open_run_set

        con, chosen, _parts, _facts = open_run_set(self.dataset, self.runs or None,
                                                   self.labels or None, tables=tables)
        try:
            return con.sql(text).df()
        finally:
            con.close()

    def run_names(self):
        """run_id -> short legend name: id prefix and labels."""
        df = self.query_runs()
        return {r.run_id: f"{r.run_id[:8]} {r.labels}".strip() for r in df.itertuples()}

    def query_runs(self):
        return self.sql("SELECT r.run_id, r.labels, r.host, r.kernel_release, "
                        "round(f.duration_s, 2) AS seconds, r.events, r.lost_events "
                        "FROM runs r JOIN run_facts f USING (run_id) ORDER BY r.run_id",
                        ["runs"]).assign(labels=lambda d: d["labels"].map(_labels_text))


def _labels_text(m):
    if m is None:
        return ""
    if isinstance(m, dict):
        items = m.items()
    else:
        items = [tuple(x) if not isinstance(x, dict) else (x["key"], x["value"]) for x in m]
    return ",".join(f"{k}={v}" for k, v in items)


def show(make, *args, **kwargs):
    """Display what `make` returns (figures as PNG, frames as tables), or the sentence of Missing."""
    from IPython.display import HTML, Image, Markdown, display

    try:
        result = make(*args, **kwargs)
    except Missing as exc:
        display(Markdown(f"*{exc}*"))
        return
    except KmemscopeError as exc:   # a table the analysis requires is absent from these runs
        display(Markdown(f"*Not available for these runs: {exc}*"))
        return
    for item in result if isinstance(result, tuple) else (result,):
        if item is None:
            continue
        if isinstance(item, str):
            display(Markdown(item))
        elif hasattr(item, "to_html") and type(item.index).__name__ == "RangeIndex":
            display(HTML(item.to_html(index=False)))     # a row counter says nothing
        elif hasattr(item, "savefig"):
            buf = io.BytesIO()
            item.savefig(buf, format="png", dpi=90, bbox_inches="tight")
            display(Image(data=buf.getvalue(), format="png"))
        else:
            display(item)


def _figure(nrows=1, ncols=1, height=3.2, width=11):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _legend(ax, n):
    if 0 < n <= MAX_LINES:
        ax.legend(fontsize=7, loc="best")


# ---------------------------------------------------------------- overview sections

def runs_table(scope):
    return scope.query_runs()


def event_rates(scope):
    """Events per second over time, one panel per event type (the busiest six), a line per run."""
    from kmemscope.queries.dataset import table_runs

    parts = table_runs(scope.dataset)
    events = [t for t in parts if t not in NOT_EVENTS and not t.startswith("_")]
    if not events:
        raise Missing("The dataset holds no event tables.")
    union = " UNION ALL ".join(
        f"SELECT run_id, '{t}' AS event, ts FROM \"{t}\"" for t in events)
    df = scope.sql(f"""
        SELECT e.run_id, e.event, floor((e.ts - f.first_ts) / 1e9) AS second,
               -- the last second is partial: divide by the part of it the capture covered
               count(*) / greatest(least(1.0, (f.last_ts - f.first_ts) / 1e9 - second), 0.001) AS events
        FROM ({union}) e JOIN run_facts f USING (run_id)
        GROUP BY e.run_id, e.event, second, f.last_ts, f.first_ts ORDER BY 1, 2, 3""", events + ["runs"])
    if df.empty:
        raise Missing("No events in the selected runs.")
    top = df.groupby("event")["events"].sum().sort_values(ascending=False).index[:6]
    names = scope.run_names()
    fig, axes = _figure((len(top) + 1) // 2, 2, height=2.6)
    for ax, event in zip(axes.flat, top):
        sub = df[df.event == event]
        for run, g in sub.groupby("run_id"):
            ax.plot(g["second"], g["events"], marker=".", label=names.get(run, run))
        ax.set_title(event, fontsize=9)
        ax.set_xlabel("s since the run's first event", fontsize=8)
        ax.set_ylabel("events/s", fontsize=8)
        _legend(ax, sub.run_id.nunique())
    for ax in list(axes.flat)[len(top):]:
        ax.set_visible(False)
    return fig


def order_histogram(scope):
    """Allocations per order (every mm_page_alloc), one bar per run, log scale."""
    df = scope.query("atomic_orders")
    per = df.groupby(["run_id", "order"])["allocs"].sum().unstack(0).fillna(0)
    names = scope.run_names()
    fig, axes = _figure()
    ax = axes[0, 0]
    n = per.shape[1]
    width = 0.8 / max(n, 1)
    for i, run in enumerate(per.columns):
        ax.bar(per.index + i * width - 0.4 + width / 2, per[run], width, label=names.get(run, run))
    ax.set_yscale("log")
    ax.set_xlabel("order")
    ax.set_ylabel("allocations")
    ax.set_xticks(per.index)
    _legend(ax, n)
    return fig


def atomic_orders(scope):
    """Non-blocking allocations by order band and reserve eligibility: a table and a bar chart."""
    df = scope.query("atomic_orders.costly")
    table = df.pivot_table(index=["run_id", "labels", "alloc_class"], columns="order_band",
                           values="allocs", aggfunc="sum", fill_value=0).reset_index()
    nb = df[df.alloc_class != "blocking"]
    if nb.empty:
        return table, "*No non-blocking allocations in these runs.*"
    fig, axes = _figure()
    ax = axes[0, 0]
    agg = nb.groupby(["alloc_class", "order_band"])["allocs"].sum().unstack(1).fillna(0)
    agg.plot.bar(ax=ax, rot=0)
    ax.set_ylabel("allocations (all selected runs)")    # linear from 0: a log axis hid a 10% gap as 10x
    return table, fig


def pollution_heatmap(scope):
    """extfrag fallbacks: requested migratetype x the block type it fell back to."""
    df = scope.query("fallback_pollution")
    if df.empty or df["events"].sum() == 0:
        raise Missing("No migratetype fallbacks (mm_page_alloc_extfrag) in these runs, "
                      "or the event was not recorded: no pollution matrix.")
    m = df.pivot_table(index="alloc_type", columns="fallback_type", values="events",
                       aggfunc="sum", fill_value=0)
    fig, axes = _figure(height=3.4, width=6)
    ax = axes[0, 0]
    im = ax.imshow(m.values, cmap="Reds")
    ax.set_xticks(range(len(m.columns)), m.columns)
    ax.set_yticks(range(len(m.index)), m.index)
    ax.set_xlabel("fallback (block) migratetype")
    ax.set_ylabel("requested migratetype")
    for (i, j), v in __import__("numpy").ndenumerate(m.values):
        ax.text(j, i, f"{v:,}", ha="center", va="center", fontsize=9)
    fig.colorbar(im, ax=ax, label="extfrag events")
    frag = df.groupby(["fragmenting", "ownership_meaning"])["events"].sum().reset_index()
    return fig, frag


def _procfs_query(scope, name):
    """A procfs analysis; runs without procfs samples (bare trace.dat) make an empty frame."""
    from kmemscope.errors import DatasetError

    try:
        return scope.query(name)
    except DatasetError:
        import pandas as pd

        return pd.DataFrame()


def highatomic_over_time(scope):
    """HighAtomic pageblocks (all zones) per pagetypeinfo sample, a line per run."""
    df = _procfs_query(scope, "highatomic")
    if df.empty:
        raise Missing("No pagetypeinfo samples in these runs (bare trace.dat, or "
                      "/proc/pagetypeinfo unreadable): no HighAtomic reserve over time.")
    per = df.groupby(["run_id", "t_s"])["highatomic_pageblocks"].sum().reset_index()
    names = scope.run_names()
    fig, axes = _figure(height=2.8)
    ax = axes[0, 0]
    for run, g in per.groupby("run_id"):
        ax.step(g["t_s"], g["highatomic_pageblocks"], where="post", marker=".", label=names.get(run, run))
    ax.set_xlabel("s since the first sample")
    ax.set_ylabel("HighAtomic pageblocks")
    _legend(ax, per.run_id.nunique())
    return fig


def free_by_migratetype(scope):
    """Free pages and pageblocks per migratetype over time (pagetypeinfo), a panel pair per run."""
    try:
        free = scope.sql("""
            SELECT p.run_id, (p.ts - min(p.ts) OVER (PARTITION BY p.run_id)) / 1e9 AS t_s,
                   p.migratetype, sum(p.count * (1 << p."order")) AS free_pages
            FROM pagetypeinfo_free p GROUP BY p.run_id, p.ts, p.migratetype""",
            ["pagetypeinfo_free", "runs"])
        blocks = scope.sql("""
            SELECT run_id, (ts - min(ts) OVER (PARTITION BY run_id)) / 1e9 AS t_s,
                   migratetype, sum(blocks) AS pageblocks
            FROM pagetypeinfo_blocks GROUP BY run_id, ts, migratetype""",
            ["pagetypeinfo_blocks", "runs"])
    except Exception as exc:   # DuckDB: the view is an empty stand-in without these columns
        raise Missing("No pagetypeinfo samples in these runs: no free blocks per migratetype.") from exc
    if free.empty:
        raise Missing("No pagetypeinfo samples in these runs (bare trace.dat): "
                      "no free blocks per migratetype.")
    names = scope.run_names()
    runs = sorted(free.run_id.unique())
    shown = runs[:MAX_PANELS]
    fig, axes = _figure(len(shown), 2, height=2.6)
    for row, run in zip(axes, shown):
        for mt, g in free[free.run_id == run].groupby("migratetype"):
            g = g.sort_values("t_s")
            row[0].plot(g["t_s"], g["free_pages"], marker=".", label=mt)
        for mt, g in blocks[blocks.run_id == run].groupby("migratetype"):
            g = g.sort_values("t_s")
            row[1].plot(g["t_s"], g["pageblocks"], marker=".", label=mt)
        row[0].set_title(f"{names.get(run, run)}: free pages", fontsize=9)
        row[1].set_title(f"{names.get(run, run)}: pageblocks by type", fontsize=9)
        for ax in row:
            ax.set_yscale("symlog")
            ax.set_xlabel("s", fontsize=8)
        row[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    note = None
    if len(runs) > len(shown):
        note = f"*Showing {len(shown)} of {len(runs)} runs; pick runs with `--run`.*"
    return fig, note


def hot_pfns(scope, top_n=50):
    """Allocations of the most-allocated page frames by rank, and how soon freed frames come back."""
    hot = scope.query("hot_pfns", top_n=top_n)
    if hot.empty:
        raise Missing("No successful allocations in these runs.")
    names = scope.run_names()
    fig, axes = _figure(1, 2, height=3.2)
    for run, g in hot.groupby("run_id"):
        axes[0, 0].plot(g["rank"], g["allocs"], marker=".", label=names.get(run, run))
    axes[0, 0].set_xlabel("rank of the page frame")
    axes[0, 0].set_ylabel("allocations")
    axes[0, 0].set_title(f"the {top_n} hottest pfns per run", fontsize=9)
    _legend(axes[0, 0], hot.run_id.nunique())
    try:
        hist = scope.query("pfn_reuse.histogram")
    except KmemscopeError:
        hist = None
    if hist is not None and not hist.empty:
        for run, g in hist.groupby("run_id"):
            axes[0, 1].plot(g["bucket_hi_ns"] / 1e6, g["cumulative_pct"], marker=".",
                            label=names.get(run, run))
        axes[0, 1].set_xscale("log")
        axes[0, 1].set_xlabel("free -> reallocation interval, ms")
        axes[0, 1].set_ylabel("cumulative % of reuses")
        _legend(axes[0, 1], hist.run_id.nunique())
    else:
        axes[0, 1].set_visible(False)
    top = hot[hot["rank"] <= 5][["run_id", "labels", "rank", "pfn", "allocs", "cpus"]].copy()
    top["pfn"] = top["pfn"].map(lambda p: f"0x{int(p):x}")
    return fig, top


def compaction_timeline(scope):
    """Each compaction run's end on a time line: direct or kcompactd, by end status."""
    try:
        df = scope.sql("""
            SELECT e.run_id, (e.ts - f.first_ts) / 1e9 AS t_s,
                   CASE WHEN e.comm LIKE 'kcompactd%' THEN 'kcompactd' ELSE 'direct' END AS kind,
                   coalesce(n.name, CAST(e.status AS VARCHAR)) AS status
            FROM mm_compaction_end e JOIN run_facts f USING (run_id)
            LEFT JOIN compaction_status_names n ON n.run_id = e.run_id AND n.status = e.status
            ORDER BY 1, 2""", ["mm_compaction_end", "print_flags", "runs"])
    except Exception as exc:
        raise Missing("No compaction events were recorded in these runs.") from exc
    if df.empty:
        raise Missing("No compaction ran during these captures (no mm_compaction_end events).")
    names = scope.run_names()
    df["row"] = df["kind"] + ": " + df["status"]
    rows = sorted(df["row"].unique())
    fig, axes = _figure(height=max(1.8, 0.45 * len(rows) + 1))
    ax = axes[0, 0]
    for run, g in df.groupby("run_id"):
        ax.scatter(g["t_s"], [rows.index(r) for r in g["row"]], marker="|", s=200,
                   label=names.get(run, run))
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("s since the run's first event")
    _legend(ax, df.run_id.nunique())
    counts = df.groupby(["run_id", "kind", "status"]).size().rename("runs").reset_index()
    return fig, counts


def vmstat_rates(scope, top=20):
    """The fastest-moving vmstat counters, per minute, a bar per run."""
    df = _procfs_query(scope, "vmstat_rates")
    if df.empty:
        raise Missing("No vmstat samples in these runs (bare trace.dat): no vmstat rates.")
    df = df[~df["name"].str.startswith("nr_")]     # gauges: their "rate" is a net change
    piv = df.pivot_table(index="name", columns="run_id", values="per_min", aggfunc="sum").fillna(0)
    piv = piv.loc[piv.abs().max(axis=1).sort_values(ascending=False).index[:top]]
    piv = piv[(piv != 0).any(axis=1)]
    if piv.empty:
        raise Missing("Every vmstat event counter stood still during these captures.")
    names = scope.run_names()
    fig, axes = _figure(height=max(2.5, 0.28 * len(piv) + 1))
    piv.rename(columns=names).iloc[::-1].plot.barh(ax=axes[0, 0], legend=piv.shape[1] <= MAX_LINES)
    axes[0, 0].set_xscale("symlog")
    axes[0, 0].set_xlabel("per minute")
    axes[0, 0].set_ylabel("")
    return fig


def lost_events(scope):
    """Lost events per run, and per CPU where the ring buffer said."""
    runs = scope.query_runs()[["run_id", "labels", "events", "lost_events"]]
    total = int(runs["lost_events"].fillna(0).sum())
    sentence = ("No events were lost in any selected run." if total == 0 else
                f"**{total:,} events were lost**: rates and counts in the affected runs are lower bounds.")
    per_cpu = scope.sql("SELECT run_id, cpu, count(*) AS markers, sum(missed) AS missed "
                        "FROM lost_events GROUP BY 1, 2 ORDER BY 1, 2", ["lost_events", "runs"])
    return sentence, runs, (per_cpu if not per_cpu.empty else None)
