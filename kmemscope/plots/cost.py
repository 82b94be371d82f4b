"""What the allocator's work cost: where the time went per side, and free pages in whole blocks.

  time_spent         a comparison's cost rows per side: direct compaction, direct reclaim
                     (time allocating tasks waited, from the trace), kcompactd, kswapd and
                     khugepaged CPU time stacked, system CPU beside them (a panel each, each on
                     its own scale, each bar's total written on it); each segment the
                     side's statistic of its row (the comparison's, per run)
  free_pages_blocks  vmstat nr_free_pages and nr_free_pages_blocks (6.15+: free pages in
                     free pageblocks) over time, a pair of lines per run
"""
import numpy as np
import pandas as pd

from .figure import Drawn, Missing, fig_text, finish, new_figure, no_negative_axes
from .style import Palette, legend_outside

# (the comparison's row, the segment's name, seconds per unit of the row)
STACK = (("cost.direct_compaction_ms", "direct compaction (tasks waiting)", 1e-3),
         ("cost.direct_reclaim_ms", "direct reclaim (tasks waiting)", 1e-3),
         ("cost.kcompactd_cpu_s", "kcompactd CPU", 1.0),
         ("cost.kswapd_cpu_s", "kswapd CPU", 1.0),
         ("cost.khugepaged_cpu_s", "khugepaged CPU", 1.0))
SYSTEM = ("cost.system_cpu_s", "system CPU (every CPU)", 1.0)
SEGMENT_COLORS = ("#cf222e", "#fb8f44", "#0969da", "#54aeff", "#8250df")


def time_spent(cmp):
    """cmp: a kmemscope Comparison that has the cost rows."""
    cmp_sides = cmp.sides
    rows = {r.metric.name: r for r in cmp.rows}
    if not any(name in rows for name, _t, _k in STACK + (SYSTEM,)):
        raise Missing("The comparison has no cost rows: compare with metrics=['cost'] "
                      "(kmemscope compare --metrics cost).")
    sides = cmp_sides.sides
    table = {}
    stats = set()
    for side in sides:
        out = {}
        for name, title, scale in STACK + (SYSTEM,):
            rec = rows[name].records[side] if name in rows else None
            out[f"{title}, s"] = (rec.value * scale if rec is not None and rec.value is not None
                                  else float("nan"))
            if rec is not None and rec.statistic:
                stats.add(rec.statistic)
        table[side] = out
    frame = pd.DataFrame.from_dict(table, orient="index")
    if not np.nansum(frame.to_numpy()) > 0:
        raise Missing("Every cost row is n/a or 0 on every side: nothing to draw.")
    # two panels, each on its own scale: the waits and threads' CPU are often a tenth of
    # system CPU or less, and drawn on its scale their stack would be a sliver
    fig, axes = new_figure("time_spent", 1, 2, height=3.6, width=9)
    fig.get_layout_engine().set(wspace=0.08)
    stack_ax, system_ax = axes[0, 0], axes[0, 1]
    x = np.arange(len(sides))
    bottom = np.zeros(len(sides))
    for (name, title, _scale), color in zip(STACK, SEGMENT_COLORS):
        h = np.nan_to_num(frame[f"{title}, s"].to_numpy(dtype=float))
        stack_ax.bar(x, h, 0.6, bottom=bottom, color=color, label=title, gid=f"stack={name}")
        bottom += h
    system = np.nan_to_num(frame[f"{SYSTEM[1]}, s"].to_numpy(dtype=float))
    system_ax.bar(x, system, 0.6, color="0.65", hatch="//", edgecolor="0.35",
                  label=SYSTEM[1], gid="system")
    palette = Palette({s: list(cmp_sides.runs[s]) for s in sides})
    stat = "/".join(sorted(stats)) or "Amean"
    for ax, tops in ((stack_ax, bottom), (system_ax, system)):
        ax.set_xticks(x, [fig_text(s) for s in sides], fontsize=8)
        for tick, side in zip(ax.get_xticklabels(), sides):     # each side named in its colour
            tick.set_color(palette.color(side))
        for xi, top in zip(x, tops):                             # each bar's total, written on it
            ax.annotate(f"{top:.3g} s", (xi, top), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7)
    stack_ax.set_ylabel(f"seconds per run ({stat} of the side's runs)"
                        if stat != "Sum" else "seconds, total across the side", fontsize=8)
    stack_ax.set_title("Waits in the allocation path and\nbackground threads' CPU (stacked)",
                       fontsize=9)
    system_ax.set_title("System CPU\n(its own scale)", fontsize=9)
    no_negative_axes(fig)
    for ax, tops in ((stack_ax, bottom), (system_ax, system)):
        if tops.max() > 0:                                       # room for the totals
            ax.set_ylim(0, tops.max() * 1.15)
    legend_outside(fig)
    missing = [c for c in frame.columns if frame[c].isna().any()]
    notes = [f"Each segment is the side's {stat} of its cost row (the comparison's statistic)."]
    if missing:
        gaps = "; ".join(f"{c[:-3]} on {', '.join(str(s) for s in frame.index[frame[c].isna()])}"
                         for c in missing)
        notes.append(f"n/a, drawn as 0: {gaps} (no samples or events answer it: the "
                     "comparison's notes say why).")
    notes.append("Direct compaction and reclaim are wall-clock time tasks waited (the trace); "
                 "the threads' and system time is CPU time (samples): a task waiting in direct "
                 "compaction is also on a CPU, so the stack is not a partition of system CPU.")
    fig._kmemscope_alt = "Stacked bars per side: " + ", ".join(t for _n, t, _s in STACK)
    return finish(fig, Drawn("time_spent", {"time per run, s": frame.copy()}), notes)


def free_pages_blocks(scope):
    """nr_free_pages and nr_free_pages_blocks over time, a solid and a dashed line per run."""
    names = ("nr_free_pages", "nr_free_pages_blocks")
    if not scope.runs_with("vmstat"):
        raise Missing("No vmstat samples in these runs (a bare trace.dat has none: capture with "
                      "kmemscope record): no free pages over time.")
    df = scope.sql("SELECT v.run_id, (v.ts - f.first_ts) / 1e9 AS t_s, v.name, v.value "
                   "FROM vmstat AS v JOIN run_facts AS f ON f.run_id = v.run_id "
                   "WHERE list_contains(?, v.name) ORDER BY v.run_id, v.name, v.ts",
                   params=[list(names)])
    with_blocks = sorted(set(df.run_id[df.name == "nr_free_pages_blocks"]))
    if not with_blocks:
        raise Missing("No run's vmstat has nr_free_pages_blocks (kernels 6.15+): no free pages "
                      "in free pageblocks over time.")
    groups, pal = scope.groups(), scope.palette()
    runs = [r for rs in groups.values() for r in rs if r in with_blocks]
    run_names = scope.run_names()
    fig, axes = new_figure("free_pages_blocks", 1, 1, height=3.2)
    ax = axes[0, 0]
    panels: dict = {}
    for run in runs:
        style = pal.run(run)
        for name, line in (("nr_free_pages", "-"), ("nr_free_pages_blocks", "--")):
            g = df[(df.run_id == run) & (df.name == name)]
            if g.empty:
                continue
            ax.plot(g.t_s.to_numpy(), g.value.to_numpy(), linestyle=line, markersize=0,
                    color=style.get("color"), gid=style.get("gid"), label=fig_text(f"{run_names.get(run, run)} {name}"))
            panels.setdefault(name, {})[run[:8]] = pd.Series(g.value.to_numpy(),
                                                             index=np.round(g.t_s.to_numpy(), 2))
    ax.set_xlabel("s since the run's first event", fontsize=8)
    ax.set_ylabel("pages", fontsize=8)
    ax.set_title("Free pages (solid) and free pages in free pageblocks (dashed, 6.15+)", fontsize=9)
    no_negative_axes(fig)
    if len(runs) <= 6:
        legend_outside(fig)
    drawn = Drawn("free_pages_blocks", {
        name: pd.DataFrame(series).sort_index() for name, series in panels.items()})
    left = sorted(set(df.run_id) - set(with_blocks))
    notes = [f"{len(left)} run{'s' if len(left) != 1 else ''} without nr_free_pages_blocks "
             "(kernels before 6.15) not drawn." if left else None]
    fig._kmemscope_alt = "Line chart over time per run: nr_free_pages and nr_free_pages_blocks"
    return finish(fig, drawn, notes)

