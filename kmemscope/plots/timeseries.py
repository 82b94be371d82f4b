"""Figures over time per side, and stall latency distributions.

Each function takes the Scope; the groups drawn are its sides ({side: [run
ids]}, or a run per group without `by`) in its Palette, so a side keeps its
colour and a run its marker. Times are seconds since each run's first event,
the same axis as the event-rate and compaction timelines.

  over_time           per interval of the procfs samples: compaction successes and
                      failures per second, THP fault success % (vmstat; for a run
                      without samples, per second of its trace: direct compactions and
                      THP fault attempts); stall time per second of direct compaction
                      and direct reclaim (stalls.each)
  free_pages_heatmap  buddyinfo (fragmentation.orders): free pages per order over time, a
                      heatmap per run
  stall_cdfs          cumulative distribution of stall latency, a panel per kind and
                      order, a line per side (its runs' stalls together)
"""
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from .figure import Drawn, Missing, fig_text, finish, new_figure, no_negative_axes, plural
from .style import legend_outside

MAX_HEATMAPS_PER_SIDE = 2
MAX_CDF_PANELS = 9
MAX_LEFT_NAMED = 4     # groups a stall_cdfs note names one by one (the rest are counted)
STALL_KINDS = {"direct_compaction": "direct compaction", "direct_reclaim": "direct reclaim",
               "kcompactd": "kcompactd run", "kswapd": "kswapd awake"}


STALL_COLUMNS = ["run_id", "kind", "order", "t_s", "duration_ms"]


def _stalls(scope):
    """stalls.each, or no rows when the selected runs recorded none of the stall events."""
    try:
        return scope.analysis("stalls.each", "stalls")
    except Missing:
        return pd.DataFrame(columns=STALL_COLUMNS)


def _vmstat_intervals(scope, names):
    """Per run, counter and sample: the increase since the previous sample and its length (the
    vmstat samples of the procfs tables; none when the runs have no samples)."""
    if not scope.runs_with("vmstat"):
        return pd.DataFrame(columns=["run_id", "name", "t_s", "delta", "dt_s"])
    return scope.sql("SELECT run_id, name, t_s, delta, dt_s FROM vmstat_intervals "
                     "WHERE list_contains(?, name)", params=[list(names)])


def _per_second(run, t_s, values, span_s):
    """(centres, sums) of `values` at times `t_s` in one-second bins over a run's span."""
    seconds = int(np.floor(span_s or 0)) + 1
    out = np.zeros(seconds)
    idx = np.clip(np.floor(np.asarray(t_s, dtype=float)).astype(int), 0, seconds - 1)
    np.add.at(out, idx, np.asarray(values, dtype=float))
    return np.arange(seconds) + 0.5, out


def _trace_series(scope, runs, span):
    """For runs without vmstat samples, the same panels per second of the trace: direct
    compaction stalls that succeeded and failed (direct_compactions, vmstat's compact_success and
    compact_fail as the trace models them) and THP fault success % (thp_fault_attempts)."""
    bare = [r for r in runs if r not in scope.runs_with("vmstat")]
    out: dict = {"success": {}, "fail": {}, "thp": {}}
    if bare and scope.runs_with("mm_compaction_try_to_compact_pages"):
        tries = scope.sql("SELECT d.run_id, (d.ts - f.first_ts) / 1e9 AS t_s, d.succeeded "
                          "FROM direct_compactions AS d JOIN run_facts AS f USING (run_id) "
                          "WHERE d.stalled AND list_contains(?, d.run_id)", params=[bare])
        for run, g in tries.groupby("run_id"):
            ok = g.succeeded.astype(bool).to_numpy()
            out["success"][run] = _per_second(run, g.t_s, ok, span.get(run))
            out["fail"][run] = _per_second(run, g.t_s, ~ok, span.get(run))
    if bare and scope.runs_with("mm_page_alloc"):
        faults = scope.sql("SELECT a.run_id, (a.ts - f.first_ts) / 1e9 AS t_s, a.failed "
                           "FROM thp_fault_attempts AS a JOIN run_facts AS f USING (run_id) "
                           "WHERE NOT a.is_retry AND list_contains(?, a.run_id)", params=[bare])
        for run, g in faults.groupby("run_id"):
            t, n = _per_second(run, g.t_s, np.ones(len(g)), span.get(run))
            _, ok = _per_second(run, g.t_s, ~g.failed.astype(bool).to_numpy(), span.get(run))
            out["thp"][run] = (t, np.where(n > 0, 100.0 * ok / np.where(n > 0, n, 1), np.nan))
    return out


def over_time(scope):
    """Compaction success and failure, THP fault success and stall time per interval, a line per run
    in its side's colour; a panel that is zero on every run is left out and named, and so is one
    that no run measured."""
    groups, pal = scope.groups(), scope.palette()
    runs = [r for rs in groups.values() for r in rs]
    names = scope.run_names()
    vm = _vmstat_intervals(scope, ["compact_success", "compact_fail", "thp_fault_alloc", "thp_fault_fallback"])
    vm = vm[vm.run_id.isin(runs) & (vm.dt_s > 0)]
    series = {}      # panel -> {run: (t, y)}

    def per_s(name):
        sub = vm[vm.name == name]
        return {run: (g.t_s.to_numpy(), (g.delta / g.dt_s).to_numpy()) for run, g in sub.groupby("run_id")}

    span = scope.spans()
    traced = _trace_series(scope, runs, span)
    mark = " or the trace's direct compactions" if traced["success"] else ""
    series[f"compaction successes per second (vmstat compact_success{mark})"] = {
        **per_s("compact_success"), **traced["success"]}
    series[f"compaction failures per second (vmstat compact_fail{mark})"] = {
        **per_s("compact_fail"), **traced["fail"]}
    thp_title = ("THP fault success % per interval (vmstat"
                 + (", or the trace's fault attempts" if traced["thp"] else "") + "; gap: no fault)")
    thp = vm[vm.name.isin(["thp_fault_alloc", "thp_fault_fallback"])].pivot_table(
        index=["run_id", "t_s"], columns="name", values="delta", aggfunc="sum").reset_index()
    if not thp.empty and {"thp_fault_alloc", "thp_fault_fallback"} <= set(thp.columns):
        faults = thp.thp_fault_alloc + thp.thp_fault_fallback
        thp["pct"] = np.where(faults > 0, 100.0 * thp.thp_fault_alloc / faults.where(faults > 0, 1), np.nan)
        series[thp_title] = {run: (g.t_s.to_numpy(), g.pct.to_numpy())
                             for run, g in thp.groupby("run_id")}
    if traced["thp"]:
        series[thp_title] = {**series.get(thp_title, {}), **traced["thp"]}
    stalls = _stalls(scope)
    stalls = stalls[stalls.run_id.isin(runs)]
    for kind in ("direct_compaction", "direct_reclaim"):
        sub = stalls[stalls.kind == kind]
        if sub.empty:
            continue
        per = {}
        for run in runs:
            seconds = int(np.floor(span.get(run) or 0)) + 1
            ms = np.zeros(seconds)
            g = sub[sub.run_id == run]
            idx = np.clip(np.floor(g.t_s.to_numpy()).astype(int), 0, seconds - 1)
            np.add.at(ms, idx, g.duration_ms.to_numpy())
            per[run] = (np.arange(seconds) + 0.5, ms)
        series[f"{STALL_KINDS[kind]} stall time, ms per second"] = per
    drawn = {k: v for k, v in series.items() if any(np.nansum(y) > 0 for _, y in v.values())}
    quiet = [k for k in series if k not in drawn and series[k]]       # measured, and zero
    if not drawn:
        if quiet:
            raise Missing("Compaction, THP faults and stalls stood still over time in these runs: "
                          f"zero on every run ({', '.join(quiet)}).")
        raise Missing("Nothing over time to draw: these runs have no vmstat samples, and their "
                      "traces no direct compaction, THP fault or stall events.")
    fig, axes = new_figure("over_time", (len(drawn) + 1) // 2, 2, height=2.6)
    for ax, (title, per) in zip(axes.flat, drawn.items()):
        for run, (t, y) in sorted(per.items()):
            ax.plot(t, y, markersize=3, **pal.run(run), label=fig_text(names.get(run, run)))
        ax.set_title(fig_text(title), fontsize=9)
        ax.set_xlabel("s since the run's first event", fontsize=8)
        ax.set_ylabel("%" if "%" in title else ("ms/s" if "ms per" in title else "per second"), fontsize=8)
        if "%" in title:
            ax.set_ylim(0, 100)
    for ax in list(axes.flat)[len(drawn):]:
        ax.set_visible(False)
    no_negative_axes(fig)
    if len(runs) <= 12:
        legend_outside(fig)
    fig._kmemscope_alt = "Line charts over time per run, coloured by side: " + ", ".join(drawn)
    note = (f"Zero on every run, so not drawn: {', '.join(quiet)}." if quiet else None)
    return finish(fig, notes=[note])


def free_pages_heatmap(scope):
    """Free pages per order over time (buddyinfo, every zone summed): a heatmap per run, up to two
    runs per side, on one logarithmic colour scale."""
    from matplotlib.colors import LogNorm

    groups, pal = scope.groups(), scope.palette()
    orders = scope.analysis("fragmentation.orders", "free pages per order over time")
    # free_blocks of an order hold 2^order pages each; the time axis is the run's trace clock
    first = scope.sql("SELECT run_id, first_ts FROM run_facts")
    orders = orders.merge(first, on="run_id")
    orders["t_s"] = (orders["ts"] - orders["first_ts"]) / 1e9
    orders["pages"] = orders["free_blocks"] * (2 ** orders["order"].astype("int64"))
    df = orders.groupby(["run_id", "t_s", "order"], as_index=False)["pages"].sum()
    shown, left = [], 0
    for side, runs in groups.items():
        have = [r for r in runs if r in set(df.run_id)]
        shown += [(side, r) for r in have[:MAX_HEATMAPS_PER_SIDE]]
        left += max(0, len(have) - MAX_HEATMAPS_PER_SIDE)
    vmax = max(1, df.pages.max())
    fig, axes = new_figure("free_pages", len(shown), 1, height=2.2)
    names = scope.run_names()
    mesh = None
    for ax, (side, run) in zip(axes[:, 0], shown):
        g = df[df.run_id == run].pivot_table(index="order", columns="t_s", values="pages", aggfunc="sum")
        t = g.columns.to_numpy(dtype=float)
        edges = np.concatenate([[t[0] - (t[1] - t[0]) / 2 if len(t) > 1 else t[0] - 0.5],
                                (t[1:] + t[:-1]) / 2,
                                [t[-1] + (t[-1] - t[-2]) / 2 if len(t) > 1 else t[0] + 0.5]])
        orders = g.index.to_numpy()
        values = np.ma.masked_less_equal(g.to_numpy(dtype=float), 0)
        mesh = ax.pcolormesh(edges, np.append(orders - 0.5, orders[-1] + 0.5), values,
                             norm=LogNorm(vmin=1, vmax=vmax), cmap="viridis", shading="flat")
        ax.set_yticks(orders)
        ax.tick_params(labelsize=7)
        ax.set_ylabel("order", fontsize=8)
        title = fig_text(side) if side == names.get(run) else f"{fig_text(side)}: {fig_text(names.get(run, run))}"
        ax.set_title(title, fontsize=9, loc="left",
                     color=pal.color(side) if side in pal.groups else "black")
    axes[-1, 0].set_xlabel("s since the run's first event", fontsize=8)
    if mesh is not None:
        fig.colorbar(mesh, ax=list(axes[:, 0]), label="free pages (log; blank: none)", shrink=0.9)
    fig._kmemscope_alt = ("Heatmaps of free pages per order over time from buddyinfo, one per run, "
                          "titled and coloured by side")
    note = (f"{plural(left, 'more run')} not drawn (up to {MAX_HEATMAPS_PER_SIDE} per side); "
            "pick runs with run=[...]." if left else None)
    return finish(fig, notes=[note])


def largest_groups(df):
    """The (kind, order) groups of stalls with their count `n`, most stalls first (then kind and
    order, so that ties fall the same way on every run)."""
    return (df.groupby(["kind", "order"]).size().reset_index(name="n")
            .sort_values(["n", "kind", "order"], ascending=[False, True, True])
            .reset_index(drop=True))


def _order_text(order):
    return "no order" if order == -1 else f"order {order}"


def stall_cdfs(scope):
    """Cumulative distribution of stall latencies, a panel per kind and order, a line per side (all
    its runs' stalls), log time axis. Counts per side in the legend of each panel. The panels are
    the MAX_CDF_PANELS groups with the most stalls, largest first; a note counts the rest."""
    groups, pal = scope.groups(), scope.palette()
    df = scope.analysis("stalls.each", "stall latencies")
    side_of = {r: s for s, rs in groups.items() for r in rs}
    df = df[df.run_id.isin(side_of)].assign(side=lambda d: d.run_id.map(side_of))
    df = df[df.duration_ms > 0]
    if df.empty:
        raise Missing("No stalls in these runs (or their begin and end events were not recorded): "
                      "no latency distributions.")
    df["order"] = df["order"].fillna(-1).astype(int)
    every = largest_groups(df)
    keys, left = every.head(MAX_CDF_PANELS), every.iloc[MAX_CDF_PANELS:]
    cols = 3
    fig, axes = new_figure("stall_cdfs", (len(keys) + cols - 1) // cols, cols, height=2.6)
    panels = {}
    for ax, k in zip(axes.flat, keys.itertuples()):
        sub = df[(df.kind == k.kind) & (df.order == k.order)]
        table = {}
        for side in groups:
            x = np.sort(sub[sub.side == side].duration_ms.to_numpy())
            if not len(x):
                continue
            y = 100.0 * np.arange(1, len(x) + 1) / len(x)
            st = pal.side(side) if side in pal.groups else {"color": "black"}
            # from 0% at the shortest stall, so that one stall is a visible step too
            ax.step(np.r_[x[0], x], np.r_[0.0, y], where="post", lw=1.6, label=fig_text(side), **st)
            table[side] = {"stalls": len(x), "p50_ms": float(np.percentile(x, 50)),
                           "p90_ms": float(np.percentile(x, 90)), "max_ms": float(x[-1])}
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 100)
        order = _order_text(k.order)
        counts = ", ".join(f"{fig_text(s)} {v['stalls']}" for s, v in table.items())
        ax.set_title(f"{STALL_KINDS.get(k.kind, k.kind)}, {order}\nstalls: {counts}", fontsize=9)
        ax.set_xlabel("stall latency, ms (log)", fontsize=8)
        ax.set_ylabel("% of stalls ≤ latency", fontsize=8)
        panels[f"{k.kind} {order}"] = pd.DataFrame(table).T
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    legend_outside(fig, title="side")
    fig._kmemscope_alt = "Cumulative distributions of stall latency per kind and order, a line per side"
    note = None
    if len(left):
        what = ", ".join(f"{STALL_KINDS.get(k.kind, k.kind)} {_order_text(k.order)}: {k.n:,}"
                         for k in left.head(MAX_LEFT_NAMED).itertuples())
        rest = len(left) - MAX_LEFT_NAMED
        what += f" and {plural(rest, 'more group')}" if rest > 0 else ""
        note = (f"{plural(len(left), 'more group')} of kind and order not drawn: "
                f"{plural(int(left.n.sum()), 'stall')} ({what}); the panels are the "
                f"{MAX_CDF_PANELS} with the most stalls, largest first.")
    return finish(fig, Drawn("stall_cdfs", panels, "Numbers drawn (stalls and percentiles per side)"),
                  [note])
