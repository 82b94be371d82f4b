"""Figures of runs, and of sides drawn per run: allocation orders, atomic orders, migratetype
pollution, the HighAtomic reserve, free pageblocks per migratetype, hot pfns, the compaction
timeline, vmstat rates, event rates.

Each function takes a Scope and returns a Figure (figure.py), or raises Missing
with the sentence to show when the selected runs have no rows for it. No figure
adds runs (or sides) together: a matrix or a bar chart is drawn once per group
of runs (a run, or a side whose bars are per run), on one shared scale, and
`Drawn` carries the numbers each panel shows, read back from the artists.

The data comes from named analyses and the helper views through the public
API (scope.py). The one figure over raw event tables, event_rates, builds its
SQL only from quote_ident() of table names found on disk; values are bound.
"""

from .figure import (MAX_LINES, Drawn, Missing, fig_text, finish, hex_pfn, new_figure,
                     no_negative_axes, plural)
from .style import legend_outside

MAX_PANELS = 4           # per-run panels before the rest are left out (with a sentence)
NOT_EVENTS = {"runs", "print_flags", "lost_events", "vmstat", "pagetypeinfo_free",
              "pagetypeinfo_blocks", "buddyinfo", "zoneinfo", "event_tables"}
# The migratetypes that fallbacks move between on every kernel: always rows/columns of the matrix.
FALLBACK_TYPES = (0, 1, 2)


def event_counts_per_second(scope):
    """Events per second of every event table, per run and whole second since the run's first event.

    Zero-filled: every second of a run's capture from 0 to its last (partial)
    second has a row for every event type the run holds, 0 where no event came.
    The last second is partial: its count is divided by the part of it the
    capture covered.
    """
    import numpy as np
    import pandas as pd
    from kmemscope.dataset.reader import quote_ident

    parts = scope.ds.table_runs()
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
        "GROUP BY 1, 2, 3", params=list(events))
    if counts.empty:
        raise Missing("No events in the selected runs.")
    span = scope.spans()
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
    fig, axes = new_figure("event_rates", (len(top) + 1) // 2, 2, height=2.6)
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
    fig._kmemscope_alt = "Line charts of events per second of the busiest event types, a line per run"
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


def run_points(ax, xs, values, pal):
    """Each run's value over its side's bar: values {run: [y at each of xs]}, a marker per run in
    its side's colour (a side's bar is the mean of these points: the points show how many runs
    make it and how far apart they lie)."""
    for run, ys in values.items():
        st = pal.run_marker(run)
        ax.scatter(xs, ys, s=14, zorder=3, edgecolor="black", linewidth=0.4, **st)


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
    return shown, f"{table} in {', '.join(str(g) for g in lacking)}: {why}; no bars."


def order_counts(scope, groups, per_run=False):
    """(attempts, failures, a sentence on groups left out, the rows per run and order): frames
    (order x group); groups without mm_page_alloc left out. per_run: each group's sums divided
    by its number of runs."""
    import pandas as pd

    df = scope.analysis("atomic_orders.orders", "allocation orders")
    df = (df.groupby(["run_id", "order"], as_index=False)[["allocs", "failed"]].sum()
          .rename(columns={"allocs": "attempts", "failed": "failures"}))
    shown, note = _with_data(scope, groups, "mm_page_alloc")
    orders = sorted(df["order"].unique())
    out = []
    for col in ("attempts", "failures"):
        per = pd.DataFrame({g: df[df.run_id.isin(runs)].groupby("order")[col].sum()
                            .reindex(orders, fill_value=0) / (len(runs) if per_run else 1)
                            for g, runs in shown.items()}).fillna(0).sort_index()
        out.append(per if per_run else per.astype("int64"))
    return out[0], out[1], note, df


def order_histogram(scope):
    """Allocation attempts per order (every mm_page_alloc) and, hatched beside them, the failed ones;
    a bar per run, or per side (its runs' sums divided by their number), log scale."""
    pal = scope.palette()
    groups = scope.groups()
    per_run = bool(scope.by)
    if per_run:
        styles = {g: pal.side(g) for g in groups}
        title = "allocations per order, per run of each side (attempts, failed hatched)"
    else:
        styles = {g: pal.run(runs[0]) for g, runs in groups.items()}
        title = None
    attempts, failures, note, df = order_counts(scope, groups, per_run)
    fig, axes = new_figure("orders", height=3.4)
    ax = axes[0, 0]
    n = attempts.shape[1]
    width = 0.8 / max(2 * n, 1)
    xs = list(range(len(attempts.index)))
    for i, g in enumerate(attempts.columns):
        st = styles[g]
        left = [x - 0.4 + (2 * i) * width + width / 2 for x in xs]
        ax.bar(left, attempts[g], width, color=st["color"], gid=st["gid"], label=f"{fig_text(g)}: attempts")
        ax.bar([x + width for x in left], failures[g], width, color="white", edgecolor=st["color"],
               hatch="////", label=f"{fig_text(g)}: failed", gid=f"failed {st['gid']}")
        if per_run:
            per = df.pivot_table(index="order", columns="run_id", values="attempts", aggfunc="sum")
            per = per.reindex(index=attempts.index, fill_value=0).fillna(0)
            # a log axis: a run with none at an order has no point there (its bar says 0)
            run_points(ax, left, {r: [v if v > 0 else float("nan") for v in per[r]] if r in per
                                  else [float("nan")] * len(left) for r in groups[g]}, pal)
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
    return finish(fig, Drawn("orders", drawn), [note])


NONBLOCKING_CLASSES = ("highatomic_eligible", "other_nonblocking")


def atomic_orders_by(scope, groups, group_title="run", per_run=False):
    """Non-blocking allocations per order, a panel per class, a bar per group of runs (never summed
    across groups). per_run: a group's bars are its sum divided by its number of runs."""
    import pandas as pd

    df = scope.analysis("atomic_orders", "atomic allocations")
    shown, note = _with_data(scope, groups, "mm_page_alloc")
    nb = df[df.alloc_class.isin(NONBLOCKING_CLASSES)]
    orders = sorted(nb["order"].unique()) or [0]
    fig, axes = new_figure("atomic_orders", 1, len(NONBLOCKING_CLASSES), height=3.0)
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
        if per_run:
            width = 0.8 / max(per.shape[1], 1)
            for i, (g, runs) in enumerate(shown.items()):
                xs = [x + i * width - 0.4 + width / 2 for x in range(len(per.index))]
                mine = (nb[nb.alloc_class == cls].pivot_table(index="order", columns="run_id",
                                                              values="allocs", aggfunc="sum")
                        .reindex(index=per.index).fillna(0))
                run_points(ax, xs, {r: list(mine[r]) if r in mine else [0] * len(xs) for r in runs},
                           pal)
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
    fig._kmemscope_alt = "Bar charts of non-blocking allocations per order, by reserve eligibility"
    return finish(fig, Drawn("atomic_orders", panels), [note])


def atomic_orders(scope, each_run=False):
    """Non-blocking allocations by order and reserve eligibility: a bar per run, or per side (its
    runs' sum divided by their number) unless each_run; under it, the allocations per run by
    order band."""
    by_side = bool(scope.by) and not each_run
    if by_side:
        groups = scope.groups()
    else:
        names = scope.run_names()
        groups = {names[r]: [r] for r in sorted(names)}
    shown = dict(list(groups.items())[:MAX_LINES])
    fig = atomic_orders_by(scope, shown, group_title="side" if by_side else "run", per_run=by_side)
    df = scope.query("atomic_orders.costly")
    table = df.pivot_table(index=["run_id", "labels", "alloc_class"], columns="order_band",
                           values="allocs", aggfunc="sum", fill_value=0).reset_index()
    table.columns.name = None
    fig.tables.append(table)
    if not by_side:      # the numbers of a bar per run, apart from a side's (per run of the side)
        fig.drawn.figure = "atomic_orders_per_run"
    if len(groups) > len(shown):
        fig.notes.append(scope.shown_note(len(shown), len(groups), "side" if by_side else "run"))
    return fig


def _migratetype_order(scope):
    """Migratetype name -> its smallest number in the selected runs (for a stable axis order)."""
    mts = scope.sql("SELECT name, min(migratetype) AS migratetype FROM migratetype_names GROUP BY name")
    return dict(zip(mts["name"], mts["migratetype"]))


def pollution_matrices(scope, groups):
    """{group: DataFrame (requested type x fallback type, extfrag events)} or None for a group without events.

    Every matrix has the same rows and columns: the types fallbacks move
    between (Unmovable, Movable, Reclaimable by the runs' own names) and every
    type seen in any group. Keyed by name, not number: the numbers differ
    across kernels.
    """
    import pandas as pd

    df = scope.analysis("fallback_pollution", "pollution matrix")
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
    fig, axes = new_figure("pollution", 1, n, height=side, width=min(5.2 * n + 1.2, 16))
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
    fig._kmemscope_alt = "Heatmaps of migratetype fallbacks, requested type by row, one per group of runs"
    return finish(fig, Drawn("pollution", drawn, "Numbers drawn (extfrag events"
                             + (" per run" if per_run else "") + ", requested type by row)"))


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
    fig = pollution_figure(shown, titles, empty, colors, per_run)
    side_of = {r: g for g, runs in groups.items() for r in runs}
    df = df[df.run_id.isin(side_of)].assign(**{what: lambda d: d.run_id.map(side_of)})
    frag = (df.groupby([what, "fragmenting", "ownership_meaning"], sort=False)["events"].sum()
            .reset_index())
    if what == "side" and scope.by:
        frag = frag.rename(columns={"side": scope.by})
    fig.tables.append(frag)
    return fig


def pollution(scope, each_run=False):
    """extfrag fallbacks: requested migratetype x the block type it fell back to, a matrix per run,
    or per side (its runs' events divided by their number) unless each_run."""
    if scope.by and not each_run:
        return pollution_by(scope, scope.groups(), what="side")
    names = scope.run_names()
    have = scope.runs_with("mm_page_alloc_extfrag")
    recorded = scope.recorded()
    rec = set(names) if recorded is None else recorded.get("mm_page_alloc_extfrag", set()) & set(names)
    runs = sorted(have) + sorted(rec - have)          # runs with fallbacks first, then recorded zeros
    shown = runs[:MAX_PANELS] or sorted(names)[:MAX_PANELS]
    fig = pollution_by(scope, {names[r]: [r] for r in shown})
    fig.notes.append(scope.shown_note(len(shown), len(runs)))
    if recorded is not None and set(names) - rec:
        fig.notes.append("Not recorded (no mm_page_alloc_extfrag format in the trace): "
                         + ", ".join(names[r] for r in sorted(set(names) - rec)) + ".")
    fig.notes = [n for n in fig.notes if n]
    return fig


def highatomic_over_time(scope):
    """HighAtomic pageblocks (all zones) per pagetypeinfo sample, a line per run."""
    df = scope.analysis("highatomic.blocks", "HighAtomic reserve over time")
    per = df.groupby(["run_id", "t_s"])["highatomic_pageblocks"].sum().reset_index()
    names = scope.run_names()
    pal = scope.palette()
    fig, axes = new_figure("highatomic", height=2.8)
    ax = axes[0, 0]
    for run, g in per.groupby("run_id"):
        ax.step(g["t_s"], g["highatomic_pageblocks"], where="post", markersize=4, **pal.run(run),
                label=fig_text(names.get(run, run)))
    ax.set_xlabel("s since the first sample")
    ax.set_ylabel("HighAtomic pageblocks")
    if per.run_id.nunique() <= MAX_LINES:
        legend_outside(fig)
    fig._kmemscope_alt = "Step chart of HighAtomic pageblocks per pagetypeinfo sample, a line per run"
    return no_negative_axes(fig)


def _pageblocks(scope, what):
    """fragmentation.pageblocks summed over nodes and zones: per run, sample and migratetype."""
    df = scope.analysis("fragmentation.pageblocks", what)
    return (df.groupby(["run_id", "t_s", "migratetype"], as_index=False)
            [["pageblocks", "free_pages", "free_pageblocks"]].sum(min_count=1))


def free_by_migratetype(scope):
    """Free pages and pageblocks per migratetype over time (pagetypeinfo), a panel pair per run."""
    df = _pageblocks(scope, "free pages per migratetype")
    names = scope.run_names()
    runs = sorted(df.run_id.unique())
    shown = runs[:MAX_PANELS]
    fig, axes = new_figure("free_by_migratetype", len(shown), 2, height=2.6)
    # a colour means a side in every figure: migratetypes differ by marker and line style instead
    types = sorted(set(df.migratetype))
    look = {mt: {"color": "0.15", "marker": "osD^vPX*"[i % 8], "linestyle": ("-", "--", ":", "-.")[i % 4],
                 "markersize": 4} for i, mt in enumerate(types)}
    for row, run in zip(axes, shown):
        for mt, g in df[df.run_id == run].groupby("migratetype"):
            g = g.sort_values("t_s")
            row[0].plot(g["t_s"], g["free_pages"], label=fig_text(mt), **look[mt])
            row[1].plot(g["t_s"], g["pageblocks"], label=fig_text(mt), **look[mt])
        row[0].set_title(f"{fig_text(names.get(run, run))}: free pages", fontsize=9)
        row[1].set_title(f"{fig_text(names.get(run, run))}: pageblocks by type", fontsize=9)
        for ax in row:
            ax.set_yscale("symlog")
            ax.set_xlabel("s since the first sample", fontsize=8)
        row[0].set_ylabel("free pages", fontsize=8)
        row[1].set_ylabel("pageblocks", fontsize=8)
    legend_outside(fig, title="migratetype")
    no_negative_axes(fig)
    fig._kmemscope_alt = "Line charts of free pages and pageblocks per migratetype over time, per run"
    return finish(fig, notes=[scope.shown_note(len(shown), len(runs))])


def free_pageblocks(scope):
    """Free pageblock-order blocks per migratetype over time: a panel per migratetype, a line per
    run in its side's colour (pagetypeinfo; a block of a higher order counts as the pageblocks it
    holds). Where the reserve of a kernel keeps its free order-9 blocks shows here."""
    import pandas as pd

    df = _pageblocks(scope, "free pageblocks per migratetype")
    df = df.dropna(subset=["free_pageblocks"])
    busy = df.groupby("migratetype")["free_pageblocks"].max()
    types = [mt for mt in sorted(busy.index) if busy[mt] > 0]
    if not types:
        raise Missing("No free pageblock-order block on any migratetype in any sample of the "
                      "selected runs.")
    names = scope.run_names()
    pal = scope.palette()
    cols = min(3, len(types))
    fig, axes = new_figure("free_pageblocks", (len(types) + cols - 1) // cols, cols, height=2.6)
    panels = {}
    for ax, mt in zip(axes.flat, types):
        table = {}
        for run, g in df[df.migratetype == mt].groupby("run_id"):
            g = g.sort_values("t_s")
            ax.step(g["t_s"], g["free_pageblocks"], where="post", markersize=3, **pal.run(run),
                    label=fig_text(names.get(run, run)))
            y = g["free_pageblocks"]
            table[names.get(run, run)] = {"samples": len(g), "first": y.iloc[0], "last": y.iloc[-1],
                                          "max": y.max()}
        ax.set_title(f"{fig_text(mt)}: free pageblocks", fontsize=9)
        ax.set_xlabel("s since the first sample", fontsize=8)
        ax.set_ylabel("free pageblocks", fontsize=8)
        panels[mt] = pd.DataFrame(table).T
    zero = sorted(set(busy.index) - set(types))
    for ax in list(axes.flat)[len(types):]:
        ax.set_visible(False)
    if df.run_id.nunique() <= MAX_LINES:
        legend_outside(fig)
    no_negative_axes(fig)
    fig._kmemscope_alt = ("Step charts of free pageblock-order blocks per migratetype over time, "
                          "a line per run coloured by side")
    note = f"No free pageblock in any sample, so no panel: {', '.join(zero)}." if zero else None
    return finish(fig, Drawn("free_pageblocks", panels, "Numbers drawn (free pageblocks per run)"),
                  [note])


def hot_pfns(scope, top_n=50):
    """Allocations of the most-allocated page frames by rank, and how soon freed frames come back."""
    hot = scope.analysis("hot_pfns", "hot page frames", top_n=top_n)
    names = scope.run_names()
    pal = scope.palette()
    fig, axes = new_figure("hot_pfns", 1, 2, height=3.2)
    for run, g in hot.groupby("run_id"):
        axes[0, 0].plot(g["rank"], g["allocs"], markersize=3, **pal.run(run),
                        label=fig_text(names.get(run, run)))
    axes[0, 0].set_xlabel("rank of the page frame")
    axes[0, 0].set_ylabel("allocations")
    axes[0, 0].set_title(f"the {top_n} hottest pfns per run", fontsize=10)
    try:
        hist = scope.analysis("pfn_reuse.histogram", "reuse intervals")
    except Missing as exc:
        hist, no_reuse = None, str(exc)
    if hist is not None:
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
    fig._kmemscope_alt = "Allocations of the hottest page frames by rank, and the reuse interval CDF, a line per run"
    top = hot[hot["rank"] <= 5][["run_id", "labels", "rank", "pfn", "allocs", "cpus"]].reset_index(drop=True)
    return finish(fig, notes=[None if hist is not None else no_reuse], tables=[top])


def compaction_timeline(scope):
    """Each compaction run's end on a time line: direct or kcompactd, by end status."""
    if not scope.runs_with("mm_compaction_end"):
        raise Missing("No mm_compaction_end events in these runs: no compaction timeline.")
    # compaction_runs: the helper view of every compaction run that ended in the capture
    df = scope.sql("""
        SELECT c.run_id, (c.end_ts - f.first_ts) / 1e9 AS t_s, c.kind,
               coalesce(n.name, CAST(c.status AS VARCHAR)) AS status
        FROM compaction_runs c JOIN run_facts f USING (run_id)
        LEFT JOIN compaction_status_names n ON n.run_id = c.run_id AND n.status = c.status
        ORDER BY 1, 2""")
    if df.empty:
        raise Missing("No compaction ran during these captures (no mm_compaction_end events).")
    names = scope.run_names()
    pal = scope.palette()
    df["row"] = df["kind"] + ": " + df["status"]
    rows = sorted(df["row"].unique())
    lanes = [side for side in pal.sides if set(pal.groups[side]) & set(df.run_id)]
    fig, axes = new_figure("compaction_timeline", len(lanes), 1, height=max(1.6, 0.4 * len(rows) + 0.9))
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
    return finish(fig, tables=[counts])


def vmstat_rates(scope, top=20):
    """The fastest-moving vmstat counters, per minute, a bar per run."""
    df = scope.analysis("vmstat_rates", "vmstat rates")
    df = df[~df["name"].str.startswith("nr_")]     # gauges: their "rate" is a net change
    piv = df.pivot_table(index="name", columns="run_id", values="per_min", aggfunc="sum").fillna(0)
    piv = piv.loc[piv.abs().max(axis=1).sort_values(ascending=False).index[:top]]
    piv = piv[(piv != 0).any(axis=1)]
    if piv.empty:
        raise Missing("Every vmstat event counter stood still during these captures.")
    names = scope.run_names()
    pal = scope.palette()
    fig, axes = new_figure("vmstat_rates", height=max(2.5, 0.28 * len(piv) * max(1, piv.shape[1] / 2) + 1))
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
    fig._kmemscope_alt = "Bar chart of the fastest-moving vmstat counters per minute, a bar per run"
    return no_negative_axes(fig, x=True)
