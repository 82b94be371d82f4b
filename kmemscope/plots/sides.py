"""Figures and tables of a Comparison: sides of a label, per-run points, study tables.

The statistics come from the API's Comparison; this module only lays them
out. A metric's value on a side is the comparison row's `.mean` everywhere
(table, vmstat table, figure, verdict), always named by its statistic
(`stat_name`): nothing here computes another mean. Every figure keeps the sides apart: a panel, a bar or a point per
side (or per run), never a sum over both: each side is summarised per run
(mean, spread, range), and a total across hosts appears only where a row says
so. The tables have the shape of the evidence page-allocator patches publish:
the high-atomic reserve (HighAtomic pageblocks, THP and compaction success,
pgscan_kswapd, atomic allocations per side), the per-CPU lists (the five
hottest pfns per run) and compaction and THP (the vmstat rows of a kernel A/B
table, with percent difference and significance). The comparison's own HTML table and the
value and verdict spans these tables share are kmemscope/render/comparison_html.py's.
"""
import html
import math

import pandas as pd

from kmemscope.queries.statistics import value_range
from kmemscope.render.comparison import source_mark
from kmemscope.render.comparison_html import comparison_html, number_text, value_html, verdict_html

from .figure import (MAX_LINES, Drawn, Html, Missing, fig_text, finish, hex_pfn, new_figure,
                     plural)
from .scope import Scope
from .style import Palette

HTML = Html    # the tables below are HTML a notebook displays

def stat_name(row, side=None):
    """The name of the statistic in a row's `.mean` ('Hmean' or 'Amean'), as the comparison says."""
    stats = row.stats.get(side) if side is not None else next(iter(row.stats.values()), None)
    return getattr(stats, "stat", None) or row.metric.mean_kind


def side_interval(row, side):
    """(low, high) of the side's statistic: the comparison model's 95% interval (Student's t;
    order statistics for a median), never below 0 for a count nor past 100 for a percentage;
    None where the model prints none (fewer than 3 values, no spread: its value_note)."""
    rec = row.records[side]
    if rec.value_low is None or rec.value_high is None:
        return None
    return rec.value_low, rec.value_high


COPY_SCRIPT = ("var t=document.getElementById('{id}').innerText;"
               "function ok(){{this.textContent='copied';}}"
               "if(navigator.clipboard&&window.isSecureContext){{navigator.clipboard.writeText(t)"
               ".then(ok.bind(this));}}else{{var r=document.createRange();"
               "r.selectNodeContents(document.getElementById('{id}'));var s=getSelection();"
               "s.removeAllRanges();s.addRange(r);document.execCommand('copy');s.removeAllRanges();"
               "ok.call(this);}}")


class ComparisonFigures:
    """The figures and tables of one Comparison, coloured by its sides in its order."""

    def __init__(self, comparison):
        self.comparison, self.test = comparison, comparison.test
        self.sides, self.rows = comparison.sides, comparison.rows
        self.palette = Palette(self.groups)
        ds = comparison.open()
        runs = [r for side in self.sides.sides for r in self.sides.runs[side]]
        self.scope = Scope(ds, runs, [], self.sides.label, self.sides.baseline, list(self.sides.sides))
        self.scope.use_palette(self.palette)       # the scope's figures colour by side too

    @property
    def groups(self):
        """side -> its run ids, baseline first."""
        return {side: list(self.sides.runs[side]) for side in self.sides.sides}

    def row(self, name):
        return next((r for r in self.rows if r.metric.name == name), None)

    def side_counts(self):
        """'a: 1 run on 1 host; b: 2 runs on 1 host' from the runs table (a bare trace.dat may lack its host)."""
        return "; ".join(f"{side}: {_runs_on_hosts(ids, self._hosts())}"
                         for side, ids in self.groups.items())

    def _hosts(self):
        runs = self.scope.query_runs()
        return {r: (None if pd.isna(h) or h == "" else h) for r, h in zip(runs.run_id, runs.host)}

    def intro(self):
        esc = html.escape
        return (f"<p>Sides of <code>{esc(self.sides.label)}</code> (baseline {esc(self.sides.baseline)}): "
                f"{esc(self.side_counts())}.</p>")

    def summary(self):
        """The headline verdicts: each summary metric that both sides measured, its statistic per
        side and the difference, as the comparison table gives them."""
        esc = html.escape
        base = self.sides.baseline
        items = []
        for r in self.rows:
            if r.metric.kind != "summary":
                continue
            for side in self.sides.sides[1:]:
                rec = r.records[side]
                if rec.change is None:
                    continue
                items.append(
                    f"<li><b>{esc(r.metric.title)}</b>: {value_html(r.records[base])} on {esc(base)}, "
                    f"{value_html(r.records[side])} on {esc(side)}: {verdict_html(rec)} "
                    f"({esc(rec.statistic)}, {esc(_direction_text(rec))})</li>")
        swatches = " ".join(f"<span style='display:inline-block;width:0.9em;height:0.9em;"
                            f"background:{self.palette.color(s)}'></span> {esc(s)}"
                            for s in self.sides.sides)
        lead = (f"<p>Colours in every figure: {swatches}. A change is called better or worse "
                f"only where significant (<code>*</code>): {esc(_test_text(self.comparison))}."
                "</p>")
        if not items:
            return HTML(lead + "<p><i>No headline metric was measured on both sides.</i></p>")
        return HTML(lead + "<ul class='kmemscope-summary'>" + "".join(items) + "</ul>")

    def table(self):
        """The comparison: a table that marks better and worse, the mmtests layout, the notes."""
        notes = self.comparison.notes
        text = self.comparison.mmtests(test="band")     # as `compare --format mmtests` prints it
        note_html = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
        shown = [r for r in self.rows if r.metric.kind != "vmstat"]
        block = ("<div class='kmemscope-mmtests'><p><b>mmtests compare-kernels layout</b> (every metric, "
                 "ready to paste into a posting) <button type='button' onclick=\""
                 + html.escape(COPY_SCRIPT.format(id="kmemscope-mmtests"), quote=True)
                 + "\">copy</button></p><pre id='kmemscope-mmtests'>" + html.escape(text)
                 + "</pre></div>")
        return HTML(self.intro() + comparison_html(self.sides, shown) + block
                    + (f"<p><b>Notes</b></p><ul>{note_html}</ul>" if notes else ""), self.comparison.text())

    def distributions(self, metrics=None):
        """One panel per metric: every run a point (a marker per run, the side's colour), the side's
        statistic (the comparison's Hmean or Amean) a bar with its 95% confidence interval, cut to
        what the quantity can take. metrics: names of the comparison's rows (None: every row but
        the vmstat ones, which have their own table)."""
        if metrics is None:
            mine = [r for r in self.rows if r.metric.kind != "vmstat"]
        else:
            known = {r.metric.name: r for r in self.rows}
            unknown = [m for m in metrics if m not in known]
            if unknown:
                from kmemscope.common.errors import QueryError

                raise QueryError(f"the comparison has no metric {', '.join(unknown)}",
                                 f"its metrics: {', '.join(known)}")
            mine = [known[m] for m in metrics]
        measured = [r for r in mine if any(x.n for x in r.stats.values())]
        rows = [r for r in measured if any(v for x in r.stats.values() for v in x.values)]
        empty = [r.metric.name for r in mine if r not in measured]
        zero = [r.metric.name for r in measured if r not in rows]
        if not rows:
            raise Missing(f"{'No metric has' if len(mine) > 1 else ', '.join(zero + empty) + ' has'} "
                          "a non-zero value on no side: nothing to draw.")
        cols = min(3, len(rows))
        fig, axes = new_figure("distributions", (len(rows) + cols - 1) // cols, cols, height=2.9,
                               width=11 if cols > 1 else 6)
        sides = self.sides.sides
        panels = {}
        for ax, r in zip(axes.flat, rows):
            stat = stat_name(r)
            drawn = {}
            scale = _scale(r, sides)
            for i, side in enumerate(sides):
                x = r.stats[side]
                runs = [run for run, v in zip(self.sides.runs[side], self.sides.values(r.metric.name)[side])
                        if v is not None and v == v]
                for j, (run, v) in enumerate(zip(runs, x.values)):
                    st = self.palette.run_marker(run)
                    ax.scatter([i + (j - (len(runs) - 1) / 2) * 0.08], [v / scale], s=22, zorder=3, alpha=0.85,
                               edgecolor="black", linewidth=0.4, **st)
                if x.mean is None:
                    ax.text(i, 0.5, "no value", ha="center", va="center", fontsize=8, color="0.4",
                            transform=ax.get_xaxis_transform())
                    continue
                ax.hlines(x.mean / scale, i - 0.3, i + 0.3, color=self.palette.color(side), lw=2.2,
                          gid=f"side={side}")
                ci = side_interval(r, side)
                if ci is None:
                    ax.text(i + 0.32, x.mean / scale, f"{x.n} run:\nno spread", fontsize=7, color="0.3",
                            va="center")
                else:
                    lo, hi = ci
                    ax.vlines(i, lo / scale, hi / scale, color=self.palette.color(side), lw=1.2,
                              gid=f"ci={side}")
                    ax.hlines([lo / scale, hi / scale], i - 0.08, i + 0.08, color=self.palette.color(side), lw=1.2)
                drawn[side] = {stat: x.mean, "ci_low": ci[0] if ci else float("nan"),
                               "ci_high": ci[1] if ci else float("nan"), "runs": x.n}
            ax.set_xticks(range(len(sides)), [fig_text(s) for s in sides], fontsize=8)
            ax.set_xlim(-0.6, len(sides) - 0.4)
            ax.set_title(f"{fig_text(r.metric.title)}\n{stat} per side; "
                         f"{_direction_text(r.records[self.sides.baseline])}",
                         fontsize=9)
            ax.set_ylabel(_unit_label(r.metric.unit) + (f" (x {scale:.0e})" if scale != 1 else ""),
                          fontsize=8)
            ax.tick_params(labelsize=8)
            values = [v / scale for x in r.stats.values() for v in x.values]
            if min(values) >= 0:      # counts, shares, times: from zero
                top = max(values + [(x.mean or 0) / scale for x in r.stats.values()])
                ax.set_ylim(0, 100 if r.metric.unit == "%" else (top * 1.12 or 1))
            panels[f"{r.metric.name} ({stat})"] = pd.DataFrame(drawn).T if drawn else None
        for ax in list(axes.flat)[len(rows):]:
            ax.set_visible(False)
        # the legend: what a marker means (a run) and what a bar means, outside the panels
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], linestyle="none", markeredgecolor="black", markeredgewidth=0.4,
                          markersize=6, **{k: v for k, v in self.palette.run_marker(run).items() if k != "gid"},
                          label=f"{fig_text(side)}: {run[:8]}")
                   for side in sides for run in self.sides.runs[side]][:MAX_LINES]
        handles.append(Line2D([], [], color="0.3", lw=2.2, label="the side's statistic (Hmean/Amean)"))
        handles.append(Line2D([], [], color="0.3", lw=1.2, marker="_", markersize=8,
                              label="95% interval of\nthe side's statistic"))
        fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
        fig._kmemscope_alt = ("Per-metric panels: one point per run, the side's statistic as a bar "
                              "with its 95% confidence interval")
        notes = []
        if empty:
            notes.append(f"No run could give {', '.join(empty)}: left out.")
        if zero:
            notes.append(f"Zero on every run of every side, so no panel: {', '.join(zero)}.")
        return finish(fig, Drawn("distributions", panels, "Numbers drawn (statistic and 95% CI per side)"),
                      [" ".join(notes)])

    def highatomic_study(self):
        """The high-atomic reserve per side: per-run ranges and the comparison's statistic; a total
        only where a row says so."""
        host = self._hosts()
        names = ("highatomic_pageblocks_max", "thp_fault_success_pct", "compaction_success_pct",
                 "pgscan_kswapd_per_min", "eligible_allocs_order_4_plus", "eligible_allocs_order_1_3")
        values = {m: {s: [v for v in vs if v is not None and v == v]
                      for s, vs in self.sides.values(m).items()} for m in names}
        hosts = {s: len({host.get(r) for r in self.sides.runs[s]} - {None}) or len(self.sides.runs[s])
                 for s in self.sides.sides}
        rows = [("runs", {s: f"{len(self.sides.runs[s])}" for s in self.sides.sides}),
                ("hosts", {s: _hosts_cell(self.sides.runs[s], host) for s in self.sides.sides})]

        def stat(m, unit=""):
            r = self.row(m)
            if r is None:
                return lambda s: value_range(values[m][s], unit)
            return lambda s: _stat_cell(r, s, unit)

        spec = [
            ("HighAtomic pageblocks per run (statistic; range)", stat("highatomic_pageblocks_max")),
            ("THP success rate per run (statistic; range)", stat("thp_fault_success_pct", "%")),
            ("Compaction success rate per run (statistic; range)", stat("compaction_success_pct", "%")),
            ("pgscan_kswapd per minute, per run (statistic; range)", stat("pgscan_kswapd_per_min")),
            ("pgscan_kswapd per minute, total across the side's hosts (each host the mean of its runs)",
             lambda s: _host_total(*self.sides.host_total("pgscan_kswapd_per_min", s))),
            ("Atomic order-4+ allocations per run (statistic; range)", stat("eligible_allocs_order_4_plus")),
            ("Atomic order 1-3 allocations per run (statistic; range)", stat("eligible_allocs_order_1_3")),
        ]
        rows += [(title, {s: fn(s) for s in self.sides.sides}) for title, fn in spec]
        table = pd.DataFrame([{"measure": title, **vals} for title, vals in rows])
        sentence = (f"Per run over each side ({self.side_counts()}); the statistic is the comparison's "
                    "(Hmean where higher is better, else Amean) and says its name.")
        if len(set(hosts.values())) > 1:
            sentence += (" The sides have different numbers of hosts: compare the per-run rows, "
                         "not the totals.")
        return sentence, table

    def pcp_study(self, runs_per_side=3):
        """The per-CPU list study: the 5 most-allocated page frames of each run (up to a few runs per side)."""
        lines = []
        for side in self.sides.sides:
            for run in self.sides.runs[side][:runs_per_side]:
                if not self.scope.narrowed([run]).runs_with("mm_page_alloc"):
                    lines.append(f"{side} ({run[:8]}): no mm_page_alloc events")
                    continue
                hot = self.scope.narrowed([run]).query("hot_pfns", top_n=5)
                lines.append(f"{side} ({run[:8]})")
                lines += [f"{int(r.allocs):>8} pfn={hex_pfn(r.pfn)}" for r in hot.itertuples()]
            more = len(self.sides.runs[side]) - runs_per_side
            if more > 0:
                lines.append(f"  ... and {plural(more, 'more run')}")
        return HTML("<pre class='kmemscope-mono'>" + html.escape("\n".join(lines)) + "</pre>")

    def vmstat_table(self):
        """Compaction and THP: the vmstat rows of a kernel A/B table: per side the comparison's
        statistic ± stddev (named), the raw relative change (new/baseline - 1, as the vmstat block),
        marked better or worse where the row has a direction (its reason on hover), and the p of the
        permutation test of the means (--test welch)."""
        rows = [r for r in self.rows if r.metric.kind == "vmstat"]
        if not rows:
            raise Missing("No vmstat samples in these runs (bare trace.dat): no vmstat table.")
        esc = html.escape
        base = self.sides.baseline
        head = ["counter", "better"] + [esc(s) for s in self.sides.sides]
        for side in self.sides.sides[1:]:
            head += [f"{esc(side)} vs {esc(base)}", f"{esc(side)} Welch p"]
        out = ["<table class='dataframe kmemscope-vmstat'><thead><tr>"
               + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
        for r in rows:
            cells = [esc(r.metric.title + _source_mark(r)),
                     f"<span title=\"{esc(r.metric.reason, quote=True)}\">{esc(r.metric.better)}</span>"]
            for side in self.sides.sides:
                x = r.stats[side]
                sd = "" if x.stddev is None else f" ± {x.stddev:.2f}"
                cells.append("n/a" if x.mean is None else f"{value_html(r.records[side])}{sd}")
            for side in self.sides.sides[1:]:
                rec = r.records[side]
                cells.append(verdict_html(rec))
                cells.append("n/a" if rec.welch_p is None else f"{rec.welch_p:.3g}")
            out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        out.append("</tbody></table>")
        return HTML("".join(out))


def _scale(row, sides):
    """1, or the power of ten a panel's numbers are drawn divided by when they come near the
    largest double (1.7e308: matplotlib's axis range and margins would overflow)."""
    import math

    big = [abs(v) for side in sides for v in [*row.stats[side].values, row.stats[side].mean,
                                               *(side_interval(row, side) or ())]
           if isinstance(v, (int, float)) and math.isfinite(v)]
    top = max(big, default=0)
    return 10.0 ** math.floor(math.log10(top)) if top > 1e300 else 1.0


def _unit_label(unit):
    return {"%": "percent (%)", "count": "count per run", "/min": "per minute", "ms": "milliseconds",
            "/1000": "per 1,000 allocations"}.get(unit, unit or "value")


def _direction_text(rec):
    return "no stated direction" if rec.direction == "none" else f"{rec.direction} is better"


def _source_mark(row):
    """' [trace]', ' [trace, lower bound]', ' [trace, model]': where a row's values came from, if
    not its block's usual."""
    marks = {source_mark(rec) for rec in row.records.values() if rec.n}
    return max(marks, key=len) if marks else ""


def _test_text(comparison):
    table = comparison.table
    if table.test == "band":
        return "the mmtests band test (no correction)"
    name = {"welch": "the permutation test of the means",
            "mannwhitney": "the permutation test of the ranks"}[table.test]
    return f"{name}, adjusted p < {table.alpha}; correction: {table.correction_text()}"


def _stat_cell(row, side, unit=""):
    x = row.stats[side]
    if x.mean is None:
        return "n/a"
    return f"{stat_name(row, side)} {number_text(x.mean)}{unit}; range {value_range(x.values, unit)}"


def _runs_on_hosts(ids, host):
    named = {host.get(r) for r in ids} - {None}
    unnamed = sum(1 for r in ids if host.get(r) is None)
    if not unnamed:
        return f"{plural(len(ids), 'run')} on {plural(len(named), 'host')}"
    if not named:
        return f"{plural(len(ids), 'run')} (host not recorded)"
    return (f"{plural(len(ids), 'run')} on {plural(len(named), 'host')} "
            f"({plural(unnamed, 'run')} without a host name)")


def _hosts_cell(ids, host):
    named = {host.get(r) for r in ids} - {None}
    unnamed = sum(1 for r in ids if host.get(r) is None)
    return f"{len(named)}" + (f" (+{unnamed} unnamed)" if unnamed else "")


def _host_total(total, hosts):
    return "n/a" if total is None else f"{_si(total)} over {plural(hosts, 'host')}"


def _si(x):
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"~{x / div:.1f}{suffix}"
    return f"{x:.0f}"


def _total(values):
    return f"{int(sum(values)):,}" if values else "n/a"
