"""Figures and tables for the report notebooks, one function per section.

Each function takes a Scope (dataset + run selection) and returns a matplotlib
Figure, a pandas DataFrame, or a tuple of them. When the runs lack what a
section needs (no procfs samples, no extfrag events) it raises Missing with a
sentence the notebook prints instead of the figure. Figures are plain
matplotlib Figure objects (not pyplot), rendered to PNG by `show`, so nothing
depends on the notebook's backend and nothing loads JavaScript.

No figure adds runs (or sides) together: a matrix or a bar chart is drawn once
per group of runs (a run in the overview, a side in the comparison), on one
shared scale, and `Drawn` puts the numbers each panel shows under the figure
as a table that tests (and readers) can check.

SQL here is built only from constants and quote_ident() of table names found
on disk; values go in as bound parameters. Names read from a trace (event
tables, labels) never reach SQL text unquoted.
"""
import html
import io
from dataclasses import dataclass, field

import kmemscope
from kmemscope.common.errors import KmemscopeError
from kmemscope.api import EngineSpec

from .style import legend_outside

MAX_LINES = 12           # legend entries before a figure drops its legend
MAX_PANELS = 4           # per-run panels before the rest are left out (with a sentence)
NOT_EVENTS = {"runs", "print_flags", "lost_events", "vmstat", "pagetypeinfo_free",
              "pagetypeinfo_blocks", "buddyinfo", "zoneinfo", "event_tables"}
# The migratetypes that fallbacks move between on every kernel: always rows/columns of the matrix.
FALLBACK_TYPES = (0, 1, 2)


class Missing(Exception):
    """The selected runs lack the data of a section; str() is the sentence to print."""


@dataclass
class Scope:
    dataset: str
    runs: list = field(default_factory=list)      # run ids or prefixes; empty: all runs
    labels: list = field(default_factory=list)    # "k=v" filters
    engine: EngineSpec = field(default_factory=EngineSpec)   # which engine runs the SQL
    color_by: str = ""        # a label whose values are the sides: a colour per side, else per run
    baseline: str = ""        # the side coloured first (as `compare` orders them)
    _opened: object = field(default=None, init=False, repr=False, compare=False)
    _palette: object = field(default=None, init=False, repr=False, compare=False)

    def open(self):
        """The dataset, opened once per scope."""
        if self._opened is None:
            self._opened = kmemscope.open(self.dataset, self.engine)
        return self._opened

    def narrowed(self, runs):
        """The same dataset, engine and colours over other runs."""
        out = Scope(self.dataset, list(runs), [], self.engine, self.color_by, self.baseline)
        out._palette = self._palette
        return out

    def palette(self):
        """The report's colours: a colour per value of `color_by` (baseline first, then sorted,
        as compare orders sides), a marker per run; without color_by, a colour per run."""
        from .style import Palette

        if self._palette is None:
            runs = self.query_runs()
            if self.color_by:
                groups: dict = {}
                for r in runs.itertuples():
                    value = _label_value(r.labels, self.color_by)
                    groups.setdefault(value if value is not None else "(no label)", []).append(r.run_id)
                order = sorted(groups, key=lambda v: (v != self.baseline, v == "(no label)", v))
                self._palette = Palette({v: groups[v] for v in order})
            else:
                names = self.run_names()
                self._palette = Palette({names[r]: [r] for r in sorted(names)})
        return self._palette

    def use_palette(self, palette):
        self._palette = palette
        return self

    def query(self, name, **params):
        """A named analysis as a DataFrame (labels flattened to "k=v,...")."""
        df = self.open().query(name, run=self.runs or None,
                               label=self.labels or None, **params).df()
        if "labels" in df:
            df["labels"] = df["labels"].map(_labels_text)
        return df

    def sql(self, text, tables=None, params=None):
        """Ad-hoc SQL over the selected runs, with run_facts; values bound from `params`."""
        return self.open().sql(text, params, run=self.runs or None,
                                                label=self.labels or None).df()

    def run_names(self):
        """run_id -> short legend name: id prefix and labels."""
        df = self.query_runs()
        return {r.run_id: f"{r.run_id[:8]} {r.labels}".strip() for r in df.itertuples()}

    def query_runs(self):
        return self.sql("SELECT r.run_id, r.labels, r.host, r.kernel_release, "
                        "round(f.duration_s, 2) AS seconds, r.events, r.lost_events "
                        "FROM runs r JOIN run_facts f USING (run_id) ORDER BY r.run_id",
                        ["runs"]).assign(labels=lambda d: d["labels"].map(_labels_text))

    def selected(self):
        """The run ids this scope selects (all runs when it names none)."""
        return self.open().run_ids(self.runs or None, self.labels or None)

    def runs_with(self, table):
        """The selected runs that have rows in `table` (its partitions on disk)."""
        return self.open().table_runs().get(table, set()) & set(self.selected())

    def recorded(self):
        """table -> the selected runs whose trace carries that event's format (recorded, maybe 0 events).

        None for a dataset parsed before runs listed their event tables: then
        "no events" cannot be told from "not recorded".
        """
        if "event_tables" not in self.open().table_runs():
            return None
        df = self.sql('SELECT DISTINCT run_id, "table" FROM event_tables', ["event_tables", "runs"])
        out: dict = {}
        for run, table in zip(df["run_id"], df["table"]):
            out.setdefault(table, set()).add(run)
        return out


def _label_value(text, key):
    """The value of `key` in a "k=v,k2=v2" labels text (None: not there)."""
    for item in (text or "").split(","):
        k, sep, v = item.partition("=")
        if sep and k == key:
            return v
    return None


def _labels_text(m):
    if m is None:
        return ""
    items: list
    if isinstance(m, dict):
        items = list(m.items())
    else:
        items = [tuple(x) if not isinstance(x, dict) else (x["key"], x["value"]) for x in m]
    return ",".join(f"{k}={v}" for k, v in items)


# ---------------------------------------------------------------- wording and tables

def plural(n, word, many=None):
    """'1 run', '2 runs', '1,234 events'."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def md_text(text):
    """Text from a trace or a label, safe inside Markdown/HTML (no tags, no emphasis)."""
    return html.escape(str(text)).replace("*", "&#42;").replace("_", "&#95;").replace("`", "&#96;")


def fig_text(text):
    """Text from a trace or a label, safe in a matplotlib label ('$' would start mathtext)."""
    return str(text).replace("$", r"\$")


def hex_pfn(p):
    """A page frame number as trace-cmd and perf print it."""
    if p is None or p != p:       # None or NaN
        return ""
    return f"0x{int(p):x}"


def _is_pfn_column(name):
    return isinstance(name, str) and (name == "pfn" or name.endswith("_pfn"))


def tidy_table(df):
    """A frame as shown: index folded into columns, no axis names, pfns in hex."""
    if any(n is not None for n in df.index.names):
        df = df.reset_index()     # a named index is a real column; a row counter says nothing
    else:
        df = df.reset_index(drop=True)
    df.columns = [str(c) if not isinstance(c, str) else c for c in df.columns]
    df.columns.name = None
    for col in df.columns:
        if _is_pfn_column(col) and df[col].dtype.kind in "iuf":
            df[col] = df[col].map(hex_pfn)
    return df


@dataclass
class Drawn:
    """The numbers a figure drew, panel by panel, read back from its artists.

    Shown under the figure as a folded table; every cell carries its value in a
    data-value attribute and every table names its figure and panel, so a test
    can compare the report's figure with a recount of the data.
    """
    figure: str
    panels: dict                       # panel name -> DataFrame (rows x columns), or None: nothing drawn
    caption: str = "Numbers drawn"

    def html(self):
        parts = [f"<details><summary>{html.escape(self.caption)}</summary>"]
        for name, frame in self.panels.items():
            attrs = (f'class="kmemscope-drawn" data-figure="{html.escape(self.figure, quote=True)}" '
                     f'data-panel="{html.escape(str(name), quote=True)}"')
            if frame is None:
                parts.append(f"<p {attrs} data-empty=\"1\"><b>{html.escape(str(name))}</b>: nothing drawn</p>")
                continue
            head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
            rows = []
            for idx, row in frame.iterrows():
                cells = "".join(f'<td data-column="{html.escape(str(c), quote=True)}" '
                                f'data-value="{_num(v)}">{_cell(v)}</td>' for c, v in row.items())
                rows.append(f'<tr data-row="{html.escape(str(idx), quote=True)}">'
                            f"<th>{html.escape(str(idx))}</th>{cells}</tr>")
            parts.append(f"<p><b>{html.escape(str(name))}</b></p><table {attrs}>"
                         f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
        parts.append("</details>")
        return "".join(parts)


def _num(v):
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)


def _cell(v):
    f = float(v)
    return f"{int(f):,}" if f.is_integer() else f"{f:,.3g}"


def show(make, *args, **kwargs):
    """Display what `make` returns (figures as PNG, frames as tables), or the sentence of Missing."""
    from IPython.display import HTML, Image, Markdown, display

    try:
        result = make(*args, **kwargs)
    except Missing as exc:
        display(Markdown(f"*{exc}*"))
        return
    except KmemscopeError as exc:   # a table the analysis requires is absent from these runs
        display(Markdown(f"*Not available for these runs: {md_text(exc)}*"))
        return
    for item in result if isinstance(result, tuple) else (result,):
        if item is None:
            continue
        if isinstance(item, str):
            display(Markdown(item))
        elif isinstance(item, Drawn):
            display(HTML(item.html()))
        elif hasattr(item, "to_html") and hasattr(item, "columns"):
            display(HTML(tidy_table(item).to_html(index=False)))
        elif hasattr(item, "savefig"):
            display(HTML(figure_html(item, getattr(make, "__name__", "figure"))))
        else:
            display(item)


def figure_html(fig, name):
    """A figure as an inline PNG with alt text from its own titles and labels, and the record
    of the colours it gave each side and run (style.record_html)."""
    import base64

    from .style import alt_text, record_html

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    alt = html.escape(alt_text(fig), quote=True)
    return (f'<img class="kmemscope-figure" data-figure="{html.escape(name, quote=True)}" '
            f'alt="{alt}" src="data:image/png;base64,{data}">' + record_html(name, fig))


def _figure(nrows=1, ncols=1, height=3.2, width=11):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _legend(ax, n):
    if 0 < n <= MAX_LINES:
        ax.legend(fontsize=7, loc="best")


def no_negative_axes(fig, x=False):
    """Counts never go below 0: where every plotted value is >= 0, the value axis starts at 0.

    Matplotlib pads an all-zero series to [-0.05, 0.05]; that reads as negative
    counts. Image axes (heatmaps) are left alone.
    """
    for ax in fig.axes:
        if ax.images or not (ax.lines or ax.collections or ax.patches):
            continue
        lim = ax.dataLim
        lo, hi = (lim.x0, lim.x1) if x else (lim.y0, lim.y1)
        get, put = (ax.get_xlim, ax.set_xlim) if x else (ax.get_ylim, ax.set_ylim)
        if lo >= 0 and get()[0] < 0:
            top = get()[1]
            put(0, top if hi > 0 else 1)
    return fig


# ---------------------------------------------------------------- overview sections

def runs_table(scope):
    return scope.query_runs()


def event_counts_per_second(scope):
    """Events per second of every event table, per run and whole second since the run's first event.

    Zero-filled: every second of a run's capture from 0 to its last (partial)
    second has a row for every event type the run holds, 0 where no event came.
    The last second is partial: its count is divided by the part of it the
    capture covered.
    """
    import numpy as np
    import pandas as pd
    from kmemscope.common.text import quote_ident

    parts = scope.open().table_runs()
    chosen = set(scope.selected())
    recorded = scope.recorded()
    # only tables with rows in the selected runs: the others would be column-less stand-ins
    events = [t for t, runs in parts.items()
              if t not in NOT_EVENTS and not t.startswith("_") and chosen & set(runs)
              and (recorded is None or t in recorded)]
    if not events:
        raise Missing("The selected runs hold no event tables.")
    # Table names come from the dataset (a trace's event names): only quote_ident() of them
    # enters the SQL text; the event name itself is a bound parameter.
    union = " UNION ALL ".join("SELECT run_id, ? AS event, ts FROM " + quote_ident(t) for t in events)
    counts = scope.sql(
        "SELECT e.run_id, e.event, CAST(floor((e.ts - f.first_ts) / 1e9) AS BIGINT) AS second, "
        "count(*) AS n FROM (" + union + ") e JOIN run_facts f USING (run_id) "
        "GROUP BY 1, 2, 3", events + ["runs"], params=list(events))
    if counts.empty:
        raise Missing("No events in the selected runs.")
    spans = scope.sql("SELECT run_id, (last_ts - first_ts) / 1e9 AS span_s FROM run_facts", ["runs"])
    span = dict(zip(spans.run_id, spans.span_s))
    # a run whose trace recorded the event but holds none of it: a line of zeros, not no line
    pairs = {(r, e) for r, e in zip(counts.run_id, counts.event)}
    if recorded is not None:
        silent = [(r, e) for e in events for r in sorted(recorded.get(e, set()) & chosen)
                  if (r, e) not in pairs]
        if silent:
            counts = pd.concat([counts, pd.DataFrame({"run_id": [r for r, _ in silent],
                                                      "event": [e for _, e in silent],
                                                      "second": 0, "n": 0})], ignore_index=True)
    frames = []
    for (run, event), g in counts.groupby(["run_id", "event"], sort=True):
        s = span.get(run) or 0.0
        last = max(int(np.floor(s)), int(g["second"].max()))
        full = pd.DataFrame({"second": np.arange(0, last + 1)})
        full = full.merge(g[["second", "n"]], on="second", how="left")
        full["n"] = full["n"].fillna(0).astype("int64")
        covered = np.clip(s - full["second"], 0.001, 1.0)
        full["events"] = full["n"] / covered
        full.insert(0, "event", event)
        full.insert(0, "run_id", run)
        frames.append(full)
    return pd.concat(frames, ignore_index=True)


def event_rates(scope):
    """Events per second over time, one panel per event type (the busiest six), a line per run."""
    df = event_counts_per_second(scope)
    top = df.groupby("event")["n"].sum().sort_values(ascending=False).index[:6]
    from matplotlib.ticker import MaxNLocator

    names = scope.run_names()
    pal = scope.palette()
    fig, axes = _figure((len(top) + 1) // 2, 2, height=2.6)
    for ax, event in zip(axes.flat, top):
        sub = df[df.event == event]
        for run, g in sub.groupby("run_id"):
            ax.plot(g["second"], g["events"], markersize=3, **pal.run(run),
                    label=fig_text(names.get(run, run)))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(fig_text(event), fontsize=9)
        ax.set_xlabel("s since the run's first event", fontsize=8)
        ax.set_ylabel("events/s", fontsize=8)
    for ax in list(axes.flat)[len(top):]:
        ax.set_visible(False)
    if df.run_id.nunique() <= MAX_LINES:
        legend_outside(fig)
    return no_negative_axes(fig)


def _bars(ax, per, colors=None, gids=None, hatches=None):
    """Grouped bars: per is a frame (x values as index, one column per group)."""
    n = per.shape[1]
    width = 0.8 / max(n, 1)
    xs = range(len(per.index))
    for i, group in enumerate(per.columns):
        bars = ax.bar([x + i * width - 0.4 + width / 2 for x in xs], per[group], width,
                      label=fig_text(group), color=None if colors is None else colors[i],
                      hatch=None if hatches is None else hatches[i], edgecolor="white")
        if gids:
            for patch in bars.patches:
                patch.set_gid(gids[i])
    ax.set_xticks(list(xs), [fig_text(x) for x in per.index])


def _read_bars(ax):
    """The bar heights an axes drew: DataFrame (x tick labels x legend labels)."""
    import pandas as pd

    ticks = [t.get_text() for t in ax.get_xticklabels()]
    cols = {}
    for cont in ax.containers:
        cols[cont.get_label()] = [p.get_height() for p in cont.patches]
    return pd.DataFrame(cols, index=ticks[:len(next(iter(cols.values()), []))])


def _with_data(scope, groups, table):
    """(groups to draw, a sentence on the others): a group is drawn when one of its runs has `table`
    rows or recorded the event (then its bars are honest zeros)."""
    have = scope.runs_with(table)
    recorded = scope.recorded()
    rec = None if recorded is None else recorded.get(table, set())
    shown = {g: runs for g, runs in groups.items() if have & set(runs) or (rec is not None and rec & set(runs))}
    lacking = [g for g in groups if g not in shown]
    if not lacking:
        return shown, None
    why = "not recorded" if rec is not None else "no events (not recorded, or none happened)"
    return shown, f"*{table} in {', '.join(md_text(g) for g in lacking)}: {why}; no bars.*"


def order_counts(scope, groups, per_run=False):
    """(attempts, failures) per order of each group of runs: frames (order x group); groups without
    mm_page_alloc left out. per_run: each group's sums divided by its number of runs."""
    import pandas as pd

    df = scope.sql('SELECT run_id, "order", count(*) AS attempts, count(*) FILTER (WHERE failed) '
                   "AS failures FROM page_allocs GROUP BY 1, 2", ["mm_page_alloc", "runs"])
    shown, note = _with_data(scope, groups, "mm_page_alloc")
    orders = sorted(df["order"].unique())
    out = []
    for col in ("attempts", "failures"):
        per = pd.DataFrame({g: df[df.run_id.isin(runs)].groupby("order")[col].sum()
                            .reindex(orders, fill_value=0) / (len(runs) if per_run else 1)
                            for g, runs in shown.items()}).fillna(0).sort_index()
        out.append(per if per_run else per.astype("int64"))
    return out[0], out[1], note


def order_histogram(scope, groups=None, title=None, per_run=False):
    """Allocation attempts per order (every mm_page_alloc) and, hatched beside them, the failed ones;
    a bar per group of runs (default: per run), log scale. per_run: a side's bars are per run."""
    names = scope.run_names()
    pal = scope.palette()
    if groups is None:
        groups = {names.get(r, r): [r] for r in sorted(names)}
        styles = {g: pal.run(runs[0]) for g, runs in groups.items()}
    else:
        styles = {g: pal.side(g) for g in groups}
    attempts, failures, note = order_counts(scope, groups, per_run)
    if attempts.empty:
        raise Missing("No mm_page_alloc events in these runs: no allocation orders.")
    fig, axes = _figure(height=3.4)
    ax = axes[0, 0]
    n = attempts.shape[1]
    width = 0.8 / max(2 * n, 1)
    xs = list(range(len(attempts.index)))
    for i, g in enumerate(attempts.columns):
        st = styles[g]
        left = [x - 0.4 + (2 * i) * width + width / 2 for x in xs]
        ax.bar(left, attempts[g], width, color=st["color"], gid=st["gid"], label=f"{fig_text(g)}: attempts")
        ax.bar([x + width for x in left], failures[g], width, color="white", edgecolor=st["color"],
               hatch="////", label=f"{fig_text(g)}: failed")
    ax.set_xticks(xs, [fig_text(x) for x in attempts.index])
    ax.set_yscale("log")
    ax.set_xlabel("allocation order (2^order pages)")
    unit = "allocations per run (side total / its runs)" if per_run else "allocations"
    ax.set_ylabel(unit)
    if title:
        ax.set_title(fig_text(title), fontsize=10)
    if n <= MAX_LINES:
        legend_outside(fig)
    fig._kmemscope_alt = "Bar chart of allocation attempts and failures per order, log scale"
    drawn = {"allocations": attempts.round(3) if per_run else attempts,
             "failed": failures.round(3) if per_run else failures}
    return fig, Drawn("orders", drawn), note


NONBLOCKING_CLASSES = ("highatomic_eligible", "other_nonblocking")


def atomic_orders_by(scope, groups, group_title="run", per_run=False):
    """Non-blocking allocations per order, a panel per class, a bar per group of runs (never summed
    across groups). per_run: a group's bars are its sum divided by its number of runs."""
    import pandas as pd

    df = scope.query("atomic_orders")
    shown, note = _with_data(scope, groups, "mm_page_alloc")
    if not shown:
        raise Missing("No mm_page_alloc events in these runs: no atomic allocations.")
    nb = df[df.alloc_class.isin(NONBLOCKING_CLASSES)]
    orders = sorted(nb["order"].unique()) or [0]
    fig, axes = _figure(1, len(NONBLOCKING_CLASSES), height=3.0)
    panels = {}
    pal = scope.palette()
    styles = {g: (pal.side(g) if group_title == "side" else pal.run(runs[0])) for g, runs in shown.items()}
    cols = [styles[g]["color"] for g in shown]
    gids = [styles[g]["gid"] for g in shown]
    # runs of one side share its colour: a hatch per run tells them apart
    hatches = [None if group_title == "side" else pal.hatch(runs[0]) for g, runs in shown.items()]
    for ax, cls in zip(axes.flat, NONBLOCKING_CLASSES):
        per = pd.DataFrame({g: nb[(nb.alloc_class == cls) & nb.run_id.isin(runs)]
                            .groupby("order")["allocs"].sum().reindex(orders, fill_value=0)
                            / (len(runs) if per_run else 1)
                            for g, runs in shown.items()}).fillna(0)
        per = per.round(3) if per_run else per.astype("int64")
        _bars(ax, per, cols, gids, hatches)
        if not per.values.any():
            ax.text(0.5, 0.5, "none on any " + group_title, ha="center", va="center", fontsize=9,
                    color="0.4", transform=ax.transAxes)
        ax.set_title(cls.replace("_", " "), fontsize=10)
        ax.set_xlabel("allocation order")
        # linear from 0: a log axis hid a 10% gap as 10x
        ax.set_ylabel("allocations per run" if per_run or group_title == "run" else "allocations")
        panels[cls] = _read_bars(ax)
    if len(shown) <= MAX_LINES:
        legend_outside(fig, axes[0, 0])
    no_negative_axes(fig)
    return fig, Drawn("atomic_orders", panels), note


def atomic_orders(scope):
    """Non-blocking allocations by order band and reserve eligibility: a table and a bar chart per run."""
    df = scope.query("atomic_orders.costly")
    table = df.pivot_table(index=["run_id", "labels", "alloc_class"], columns="order_band",
                           values="allocs", aggfunc="sum", fill_value=0).reset_index()
    table.columns.name = None
    nb = df[df.alloc_class != "blocking"]
    if nb.empty:
        return table, "*No non-blocking allocations in these runs.*"
    names = scope.run_names()
    groups = {names.get(r, r): [r] for r in sorted(df.run_id.unique())[:MAX_LINES]}
    fig, drawn, note = atomic_orders_by(scope, groups)
    return table, fig, note


def _migratetype_order(scope):
    """Migratetype name -> its smallest number in the selected runs (for a stable axis order)."""
    mts = scope.sql("SELECT name, min(migratetype) AS migratetype FROM migratetype_names GROUP BY name",
                    ["runs"])
    return dict(zip(mts["name"], mts["migratetype"]))


def pollution_matrices(scope, groups):
    """{group: DataFrame (requested type x fallback type, extfrag events)} or None for a group without events.

    Every matrix has the same rows and columns: the types fallbacks move
    between (Unmovable, Movable, Reclaimable by the runs' own names) and every
    type seen in any group. Keyed by name, not number: the numbers differ
    across kernels.
    """
    import pandas as pd
    from kmemscope.common.errors import DatasetError

    try:
        df = scope.query("fallback_pollution")
    except DatasetError as exc:
        raise Missing("No migratetype fallbacks (mm_page_alloc_extfrag) in these runs, "
                      f"or the event was not recorded: no pollution matrix ({md_text(exc)}).") from None
    recorded = scope.recorded()
    rec = None if recorded is None else recorded.get("mm_page_alloc_extfrag", set())
    order = _migratetype_order(scope)
    base = [n for n, num in order.items() if num in FALLBACK_TYPES]
    names = set(base) | set(df["alloc_type"]) | set(df["fallback_type"])
    axis = sorted(names, key=lambda n: (order.get(n, 99), n))
    out = {}
    for group, runs in groups.items():
        sub = df[df.run_id.isin(runs)]
        if sub.empty:
            # recorded but no fallback: a matrix of zeros; not recorded (or cannot tell): nothing
            recorded_here = rec is not None and rec & set(runs)
            out[group] = (pd.DataFrame(0, index=axis, columns=axis, dtype="int64")
                          if recorded_here else None)
            continue
        m = sub.pivot_table(index="alloc_type", columns="fallback_type", values="events",
                            aggfunc="sum", fill_value=0)
        out[group] = m.reindex(index=axis, columns=axis, fill_value=0).astype("int64")
    return out, df


def pollution_figure(matrices, titles, empty_text="no mm_page_alloc_extfrag events\n(not recorded, or no fallback)",
                     title_colors=None, per_run=False):
    """One heatmap per group, side by side, on one colour scale; -> (Figure, Drawn read back from it).
    title_colors: {group: colour} for each panel's title (the side's). per_run: the matrices are
    per run of their group (floats)."""
    import numpy as np
    import pandas as pd

    groups = list(matrices)
    n = len(groups)
    vmax = max([float(m.values.max()) for m in matrices.values() if m is not None] + [1])
    some = next(m for m in matrices.values() if m is not None)
    side = max(3.2, 0.75 * len(some) + 1.6)
    fig, axes = _figure(1, n, height=side, width=min(5.2 * n + 1.2, 16))
    im = None
    for ax, group in zip(axes.flat, groups):
        m = matrices[group]
        ax.set_title(fig_text(titles.get(group, group)), fontsize=10,
                     color=(title_colors or {}).get(group, "black"))
        if m is None:
            ax.set_axis_off()
            ax.text(0.5, 0.5, empty_text,
                    ha="center", va="center", fontsize=9, transform=ax.transAxes, color="0.35")
            continue
        im = ax.imshow(m.values, cmap="Reds", vmin=0, vmax=vmax)
        ax.set_xticks(range(len(m.columns)), [fig_text(c) for c in m.columns], rotation=35, ha="right",
                      fontsize=9)
        ax.set_yticks(range(len(m.index)), [fig_text(i) for i in m.index], fontsize=9)
        ax.set_xlabel("fallback (block) migratetype", fontsize=9)
        ax.set_ylabel("requested migratetype", fontsize=9)
        for (i, j), v in np.ndenumerate(m.values):
            ax.text(j, i, f"{v:,.3g}" if per_run else f"{v:,}", ha="center", va="center", fontsize=9,
                    color="white" if v > 0.6 * vmax else ("black" if v else "0.6"))
    if im is not None:
        fig.colorbar(im, ax=list(axes.flat), label="extfrag events per run" if per_run else "extfrag events",
                     shrink=0.8)
    drawn: dict = {}
    for ax, group in zip(axes.flat, groups):
        if not ax.images:
            drawn[group] = None
            continue
        arr = np.asarray(ax.images[0].get_array())
        drawn[group] = pd.DataFrame(arr.astype("float64").round(3) if per_run else arr.astype("int64"),
                                    index=[t.get_text() for t in ax.get_yticklabels()],
                                    columns=[t.get_text() for t in ax.get_xticklabels()])
    return fig, Drawn("pollution", drawn, "Numbers drawn (extfrag events" + (" per run" if per_run else "")
                      + ", requested type by row)")


def pollution_by(scope, groups, what="run"):
    """The pollution matrix of each group of runs, side by side, and the fragmenting/ownership split per group."""
    matrices, df = pollution_matrices(scope, groups)
    if all(m is None for m in matrices.values()):
        raise Missing("No migratetype fallbacks (mm_page_alloc_extfrag) in these runs, "
                      "or the event was not recorded: no pollution matrix.")
    recorded = scope.recorded()
    known = recorded is not None
    rec = set() if recorded is None else recorded.get("mm_page_alloc_extfrag", set())
    titles = {}
    for g, runs in groups.items():
        within = f" in {plural(len(runs), 'run')}" if what == "side" else ""
        if matrices[g] is None:
            titles[g] = f"{g}: {'extfrag not recorded' if known else 'no extfrag events'}{within}"
            continue
        titles[g] = f"{g}: {plural(int(matrices[g].values.sum()), 'fallback')}{within}"
        if what == "side" and len(runs) > 1:
            titles[g] += f", {matrices[g].values.sum() / len(runs):,.3g} per run"
        unrecorded = [r for r in runs if r not in rec] if known else []
        if unrecorded:
            titles[g] += f"\n({len(unrecorded)} of {plural(len(runs), 'run')} did not record extfrag)"
    empty = ("mm_page_alloc_extfrag was not recorded" if known else
             "no mm_page_alloc_extfrag events\n(not recorded, or no fallback)")
    pal = scope.palette()
    colors = {g: (pal.color(g) if what == "side" and g in pal.groups else pal.run(runs[0])["color"])
              for g, runs in groups.items()}
    # a side's matrix is per run: sides may differ in run count
    per_run = what == "side"
    shown = {g: (m / len(groups[g]) if per_run and m is not None else m) for g, m in matrices.items()}
    fig, drawn = pollution_figure(shown, titles, empty, colors, per_run)
    side_of = {r: g for g, runs in groups.items() for r in runs}
    df = df[df.run_id.isin(side_of)].assign(**{what: lambda d: d.run_id.map(side_of)})
    frag = (df.groupby([what, "fragmenting", "ownership_meaning"], sort=False)["events"].sum()
            .reset_index())
    return fig, drawn, frag


def pollution_heatmap(scope):
    """extfrag fallbacks: requested migratetype x the block type it fell back to, a matrix per run."""
    names = scope.run_names()
    have = scope.runs_with("mm_page_alloc_extfrag")
    recorded = scope.recorded()
    rec = set(names) if recorded is None else recorded.get("mm_page_alloc_extfrag", set()) & set(names)
    runs = sorted(have) + sorted(rec - have)          # runs with fallbacks first, then recorded zeros
    shown = runs[:MAX_PANELS] or sorted(names)[:MAX_PANELS]
    fig, drawn, frag = pollution_by(scope, {names[r]: [r] for r in shown})
    notes = []
    if len(runs) > len(shown):
        notes.append(f"Showing {len(shown)} of {plural(len(runs), 'run')}; pick runs with `--run`.")
    if recorded is not None and set(names) - rec:
        notes.append("Not recorded (no mm_page_alloc_extfrag format in the trace): "
                     + ", ".join(md_text(names[r]) for r in sorted(set(names) - rec)) + ".")
    return fig, drawn, frag, ("*" + " ".join(notes) + "*" if notes else None)


def _procfs_query(scope, name):
    """A procfs analysis; runs without procfs samples (bare trace.dat) make an empty frame."""
    from kmemscope.common.errors import DatasetError

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
    pal = scope.palette()
    fig, axes = _figure(height=2.8)
    ax = axes[0, 0]
    for run, g in per.groupby("run_id"):
        ax.step(g["t_s"], g["highatomic_pageblocks"], where="post", markersize=4, **pal.run(run),
                label=fig_text(names.get(run, run)))
    ax.set_xlabel("s since the first sample")
    ax.set_ylabel("HighAtomic pageblocks")
    if per.run_id.nunique() <= MAX_LINES:
        legend_outside(fig)
    return no_negative_axes(fig)


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
    # a colour means a side in every figure: migratetypes differ by marker and line style instead
    types = sorted(set(free.migratetype) | set(blocks.migratetype))
    look = {mt: {"color": "0.15", "marker": "osD^vPX*"[i % 8], "linestyle": ("-", "--", ":", "-.")[i % 4],
                 "markersize": 4} for i, mt in enumerate(types)}
    for row, run in zip(axes, shown):
        for mt, g in free[free.run_id == run].groupby("migratetype"):
            g = g.sort_values("t_s")
            row[0].plot(g["t_s"], g["free_pages"], label=fig_text(mt), **look[mt])
        for mt, g in blocks[blocks.run_id == run].groupby("migratetype"):
            g = g.sort_values("t_s")
            row[1].plot(g["t_s"], g["pageblocks"], label=fig_text(mt), **look[mt])
        row[0].set_title(f"{fig_text(names.get(run, run))}: free pages", fontsize=9)
        row[1].set_title(f"{fig_text(names.get(run, run))}: pageblocks by type", fontsize=9)
        for ax in row:
            ax.set_yscale("symlog")
            ax.set_xlabel("s", fontsize=8)
        row[0].set_ylabel("free pages", fontsize=8)
        row[1].set_ylabel("pageblocks", fontsize=8)
    legend_outside(fig, title="migratetype")
    no_negative_axes(fig)
    note = None
    if len(runs) > len(shown):
        note = f"*Showing {len(shown)} of {plural(len(runs), 'run')}; pick runs with `--run`.*"
    return fig, note


def hot_pfns(scope, top_n=50):
    """Allocations of the most-allocated page frames by rank, and how soon freed frames come back."""
    hot = scope.query("hot_pfns", top_n=top_n)
    if hot.empty:
        raise Missing("No successful allocations in these runs.")
    names = scope.run_names()
    pal = scope.palette()
    fig, axes = _figure(1, 2, height=3.2)
    for run, g in hot.groupby("run_id"):
        axes[0, 0].plot(g["rank"], g["allocs"], markersize=3, **pal.run(run),
                        label=fig_text(names.get(run, run)))
    axes[0, 0].set_xlabel("rank of the page frame")
    axes[0, 0].set_ylabel("allocations")
    axes[0, 0].set_title(f"the {top_n} hottest pfns per run", fontsize=10)
    try:
        hist = scope.query("pfn_reuse.histogram")
    except KmemscopeError:
        hist = None
    if hist is not None and not hist.empty:
        for run, g in hist.groupby("run_id"):
            axes[0, 1].plot(g["bucket_hi_ns"] / 1e6, g["cumulative_pct"], markersize=3, **pal.run(run),
                            label=fig_text(names.get(run, run)))
        axes[0, 1].set_xscale("log")
        axes[0, 1].set_xlabel("free -> reallocation interval, ms")
        axes[0, 1].set_ylabel("cumulative % of reuses")
        axes[0, 1].set_ylim(0, 100)
    else:
        axes[0, 1].set_visible(False)
    if hot.run_id.nunique() <= MAX_LINES:
        legend_outside(fig)
    no_negative_axes(fig)
    top = hot[hot["rank"] <= 5][["run_id", "labels", "rank", "pfn", "allocs", "cpus"]].reset_index(drop=True)
    top["pfn"] = top["pfn"].map(hex_pfn)
    return fig, top


def compaction_timeline(scope):
    """Each compaction run's end on a time line: direct or kcompactd, by end status."""
    try:
        # compaction_runs: one row per mm_compaction_end, its kind told in lib/compaction.sql
        df = scope.sql("""
            SELECT e.run_id, (e.end_ts - f.first_ts) / 1e9 AS t_s, e.kind,
                   coalesce(n.name, CAST(e.status AS VARCHAR)) AS status
            FROM compaction_runs e JOIN run_facts f USING (run_id)
            LEFT JOIN compaction_status_names n ON n.run_id = e.run_id AND n.status = e.status
            ORDER BY 1, 2""", ["mm_compaction_begin", "mm_compaction_end", "print_flags", "runs"])
    except Exception as exc:
        raise Missing("No compaction events were recorded in these runs.") from exc
    if df.empty:
        raise Missing("No compaction ran during these captures (no mm_compaction_end events).")
    names = scope.run_names()
    pal = scope.palette()
    df["row"] = df["kind"] + ": " + df["status"]
    rows = sorted(df["row"].unique())
    lanes = [side for side in pal.sides if set(pal.groups[side]) & set(df.run_id)]
    fig, axes = _figure(len(lanes), 1, height=max(1.6, 0.4 * len(rows) + 0.9))
    for ax, side in zip(axes[:, 0], lanes):
        for run, g in df[df.run_id.isin(pal.groups[side])].groupby("run_id"):
            st = pal.run_marker(run)
            ax.scatter(g["t_s"], [rows.index(r) for r in g["row"]], s=60, color=st["color"], gid=st["gid"],
                       marker="|" if len(pal.groups[side]) == 1 else st["marker"], alpha=0.8,
                       label=fig_text(names.get(run, run)))
        ax.set_yticks(range(len(rows)), [fig_text(r) for r in rows], fontsize=8)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_title(fig_text(side), fontsize=10, color=pal.color(side), loc="left")
        ax.set_xlabel("s since the run's first event", fontsize=8)
        ax.set_xlim(0, max(df.t_s.max(), 0.001) * 1.02)     # every lane on one time axis
    if df.run_id.nunique() <= MAX_LINES:
        legend_outside(fig)
    fig._kmemscope_alt = "Timeline of compaction run ends by kind and end status, one lane per side"
    counts = df.groupby(["run_id", "kind", "status"]).size().rename("compactions").reset_index()
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
    pal = scope.palette()
    fig, axes = _figure(height=max(2.5, 0.28 * len(piv) * max(1, piv.shape[1] / 2) + 1))
    ax = axes[0, 0]
    shown = piv.iloc[::-1]
    n = shown.shape[1]
    h = 0.8 / max(n, 1)
    for i, run in enumerate(shown.columns):
        st = pal.run(run)
        ax.barh([y - 0.4 + h * (n - 1 - i) + h / 2 for y in range(len(shown))], shown[run], h,
                color=st["color"], gid=st["gid"], hatch=pal.hatch(run), edgecolor="white",
                label=fig_text(names.get(run, run)))
    ax.set_yticks(range(len(shown)), [fig_text(x) for x in shown.index], fontsize=8)
    ax.set_xscale("symlog")
    ax.set_xlabel("counter increase per minute (symlog)")
    if n <= MAX_LINES:
        legend_outside(fig)
    return no_negative_axes(fig, x=True)


def lost_events(scope):
    """Lost events per run, and per CPU where the ring buffer said."""
    runs = scope.query_runs()[["run_id", "labels", "events", "lost_events"]]
    total = int(runs["lost_events"].fillna(0).sum())
    sentence = ("No events were lost in any selected run." if total == 0 else
                f"**{plural(total, 'event')} {'was' if total == 1 else 'were'} lost**: "
                "rates and counts in the affected runs are lower bounds.")
    per_cpu = scope.sql("SELECT run_id, cpu, count(*) AS markers, sum(missed) AS missed "
                        "FROM lost_events GROUP BY 1, 2 ORDER BY 1, 2", ["lost_events", "runs"])
    return sentence, runs, (per_cpu if not per_cpu.empty else None)
