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
table, with percent difference and significance).
"""
import html

import pandas as pd

from .figure import (MAX_LINES, Drawn, Html, Missing, fig_text, finish, hex_pfn, new_figure,
                     plural)
from .scope import Scope
from .style import Palette

HTML = Html    # the tables below are HTML a notebook displays

def stat_name(row, side=None):
    """The name of the statistic in a row's `.mean` ('Hmean' or 'Amean'), as the comparison says."""
    stats = row.stats.get(side) if side is not None else next(iter(row.stats.values()), None)
    return getattr(stats, "stat", None) or row.metric.mean_kind


# What a metric can take, by unit: the interval drawn is cut to it (a count is never negative).
BOUNDS = {"%": (0.0, 100.0), "count": (0.0, None), "/min": (0.0, None), "ms": (0.0, None),
          "s": (0.0, None), "/s": (0.0, None), "pages": (0.0, None)}


def bounds(metric):
    """(low, high) that a metric's values can take (None: unbounded on that side). Per mille:
    a rate per 1,000 allocations is >= 0, the kernel's indices lie in -1000..1000."""
    if metric.unit == "/1000":
        return (0.0, None) if metric.name.startswith("pollution") else (-1000.0, 1000.0)
    return BOUNDS.get(metric.unit, (None, None))


def clipped(interval, limits):
    """An interval cut to (low, high) limits; None stays None."""
    if interval is None:
        return None
    lo, hi = interval
    if limits[0] is not None:
        lo, hi = max(lo, limits[0]), max(hi, limits[0])
    if limits[1] is not None:
        lo, hi = min(lo, limits[1]), min(hi, limits[1])
    return lo, hi


def mean_ci(stats, level=0.95):
    """(low, high) of a 95% confidence interval of the side's mean: `.mean` +/- t * s / sqrt(n),
    Student's t with n - 1 degrees of freedom; None below two runs."""
    if stats.n < 2 or stats.stddev is None or stats.mean is None:
        return None
    from scipy.stats import t

    half = t.ppf(0.5 + level / 2, stats.n - 1) * stats.stddev / stats.n ** 0.5
    return stats.mean - half, stats.mean + half


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
                c = r.versus[side]
                if c.pct_diff is None:
                    continue
                stat = stat_name(r, side)
                color = _color(c.pct_diff)
                items.append(
                    f"<li><b>{esc(r.metric.title)}</b>: {_value_html(r, base)} on {esc(base)}, "
                    f"{_value_html(r, side)} on {esc(side)}: <span style='color:{color}'>"
                    f"{esc(_verdict(c.pct_diff, c.significant))}</span> ({stat}, "
                    f"{'higher' if r.metric.better == 'higher' else 'lower'} is better)</li>")
        swatches = " ".join(f"<span style='display:inline-block;width:0.9em;height:0.9em;"
                            f"background:{self.palette.color(s)}'></span> {esc(s)}"
                            for s in self.sides.sides)
        lead = (f"<p>Colours in every figure: {swatches}. Significance marked <code>*</code> by the "
                f"{esc(self.test)} test.</p>")
        if not items:
            return HTML(lead + "<p><i>No headline metric was measured on both sides.</i></p>")
        return HTML(lead + "<ul class='kmemscope-summary'>" + "".join(items) + "</ul>")

    def table(self):
        """The comparison: a table that marks better and worse, the mmtests layout, the notes."""
        notes = self.comparison.notes
        text = self.comparison.mmtests()
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
            for i, side in enumerate(sides):
                x = r.stats[side]
                runs = [run for run, v in zip(self.sides.runs[side], self.sides.values(r.metric.name)[side])
                        if v is not None and v == v]
                for j, (run, v) in enumerate(zip(runs, x.values)):
                    st = self.palette.run_marker(run)
                    ax.scatter([i + (j - (len(runs) - 1) / 2) * 0.08], [v], s=22, zorder=3, alpha=0.85,
                               edgecolor="black", linewidth=0.4, **st)
                if x.mean is None:
                    ax.text(i, 0.5, "no value", ha="center", va="center", fontsize=8, color="0.4",
                            transform=ax.get_xaxis_transform())
                    continue
                ax.hlines(x.mean, i - 0.3, i + 0.3, color=self.palette.color(side), lw=2.2,
                          gid=f"side={side}")
                ci = clipped(mean_ci(x), bounds(r.metric))
                if ci is None:
                    ax.text(i + 0.32, x.mean, f"{x.n} run:\nno spread", fontsize=7, color="0.3",
                            va="center")
                else:
                    lo, hi = ci
                    ax.vlines(i, lo, hi, color=self.palette.color(side), lw=1.2, gid=f"ci={side}")
                    ax.hlines([lo, hi], i - 0.08, i + 0.08, color=self.palette.color(side), lw=1.2)
                drawn[side] = {stat: x.mean, "ci_low": ci[0] if ci else float("nan"),
                               "ci_high": ci[1] if ci else float("nan"), "runs": x.n}
            ax.set_xticks(range(len(sides)), [fig_text(s) for s in sides], fontsize=8)
            ax.set_xlim(-0.6, len(sides) - 0.4)
            ax.set_title(f"{fig_text(r.metric.title)}\n{stat} per side; {r.metric.better} is better",
                         fontsize=9)
            ax.set_ylabel(_unit_label(r.metric.unit), fontsize=8)
            ax.tick_params(labelsize=8)
            values = [v for x in r.stats.values() for v in x.values]
            if min(values) >= 0:      # counts, shares, times: from zero
                top = max(values + [x.mean or 0 for x in r.stats.values()])
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
                              label="95% CI of the side's statistic\n(cut to the values it can take)"))
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
                return lambda s: _range(values[m][s], unit)
            return lambda s: _stat_cell(r, s, unit)

        spec = [
            ("HighAtomic pageblocks per run (statistic; range)", stat("highatomic_pageblocks_max")),
            ("THP success rate per run (statistic; range)", stat("thp_fault_success_pct", "%")),
            ("Compaction success rate per run (statistic; range)", stat("compaction_success_pct", "%")),
            ("pgscan_kswapd per minute, per run (statistic; range)", stat("pgscan_kswapd_per_min")),
            ("pgscan_kswapd per minute, total across the side's hosts (each host's mean over its runs)",
             lambda s: self._host_total("pgscan_kswapd_per_min", s, host)),
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

    def _host_total(self, metric, side, host):
        """A fleet's total of a per-run rate: each host's mean over its runs, summed over the hosts
        (four runs on one host are one host's rate, not four hosts'); a run without a host name
        counts as a host of its own."""
        per_host = {}
        for row in self.sides.summary:
            v = row.get(metric)
            if row["side"] == side and v is not None and v == v:
                per_host.setdefault(host.get(row["run_id"]) or row["run_id"], []).append(v)
        if not per_host:
            return "n/a"
        total = sum(sum(vs) / len(vs) for vs in per_host.values())
        return f"{_si(total)} over {plural(len(per_host), 'host')}"

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
        statistic ± stddev (named), the percent difference (positive = better), marked better or
        worse, and Welch's p."""
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
            cells = [esc(r.metric.title), esc(r.metric.better)]
            for side in self.sides.sides:
                x = r.stats[side]
                sd = "" if x.stddev is None else f" ± {x.stddev:.2f}"
                cells.append("n/a" if x.mean is None else f"{_value_html(r, side)}{sd}")
            for side in self.sides.sides[1:]:
                c = r.versus[side]
                cells.append(f"<span style='color:{_color(c.pct_diff)}'>"
                             f"{esc(_verdict(c.pct_diff, c.significant))}</span>")
                cells.append("n/a" if c.welch_p is None else f"{c.welch_p:.3g}")
            out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        out.append("</tbody></table>")
        return HTML("".join(out))


def _unit_label(unit):
    return {"%": "percent (%)", "count": "count per run", "/min": "per minute", "ms": "milliseconds",
            "/1000": "per 1,000 allocations"}.get(unit, unit or "value")


def _color(pct):
    if pct is None or pct == 0:
        return "inherit"
    return "#1a7f37" if pct > 0 else "#cf222e"


def _value_html(row, side):
    """'<span data-...>Hmean 31.67</span>': the side's statistic, named, with its value in data attributes."""
    x = row.stats[side]
    if x.mean is None:
        return "n/a"
    stat = stat_name(row, side)
    return (f"<span class='kmemscope-value' data-metric=\"{html.escape(row.metric.name, quote=True)}\" "
            f"data-side=\"{html.escape(side, quote=True)}\" data-stat='{stat}' "
            f"data-value='{x.mean!r}'>{stat} {x.mean:,.2f}</span>")


def _stat_cell(row, side, unit=""):
    x = row.stats[side]
    if x.mean is None:
        return "n/a"
    return f"{stat_name(row, side)} {x.mean:,.2f}{unit}; range {_range(x.values, unit)}"


def _range(values, unit=""):
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    fmt = (lambda v: f"{v:,.0f}") if all(float(v).is_integer() for v in values) else (lambda v: f"{v:,.2f}")
    return f"{fmt(lo)}{unit}" if lo == hi else f"{fmt(lo)}{unit} to {fmt(hi)}{unit}"


def _verdict(pct, significant):
    """'+22.10% better', '-5.00% worse *' (significant), 'n/a'."""
    if pct is None:
        return "n/a"
    word = "better" if pct > 0 else ("worse" if pct < 0 else "same")
    return f"{pct:+.2f}% {word}" + (" *" if significant else "")


def comparison_html(sides, rows):
    """The comparison as an HTML table: per side its statistic, named (Hmean or Amean, the one
    `compare` uses), and the range of the per-run values; against the baseline the percent
    difference coloured by direction (green better, red worse; bold when significant)."""
    esc = html.escape
    head = ["metric", "unit", "better"] + [f"{esc(s)} (n={len(sides.runs[s])})" for s in sides.sides]
    for s in sides.sides[1:]:
        head += [f"{esc(s)} vs {esc(sides.baseline)}", "Welch p", "Mann-Whitney p", "bands"]
    out = ["<table class='kmemscope-compare'><thead><tr>"
           + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows:
        cells = [f"<code>{esc(r.metric.name)}</code>", esc(r.metric.unit), esc(r.metric.better)]
        for s in sides.sides:
            x = r.stats[s]
            cells.append("n/a" if x.n == 0 else _value_html(r, s)
                         + f"<br><small>range {esc(_range(x.values, r.metric.range_unit))}"
                         + (f", {x.n} of {len(sides.runs[s])} runs" if x.n != len(sides.runs[s]) else "")
                         + "</small>")
        for s in sides.sides[1:]:
            c = r.versus[s]
            pct = c.pct_diff
            if pct is None:
                cell = "<td>n/a</td>"
            else:
                color = "#1a7f37" if pct > 0 else ("#cf222e" if pct < 0 else "inherit")
                text = _verdict(pct, False)
                text = f"<b>*{text}*</b>" if c.significant else text
                cell = f"<td style='color:{color}'>{text}</td>"
            band = "n/a" if c.band_significant is None else ("apart" if c.band_significant else "overlap")
            cells_s = [cell, f"<td>{_p(c.welch_p)}</td>", f"<td>{_p(c.mannwhitney_p)}</td>",
                       f"<td>{band}</td>"]
            cells += [None] + cells_s
        row = "".join(c if c and c.startswith("<td") else ("" if c is None else f"<td>{c}</td>")
                      for c in cells)
        out.append(f"<tr>{row}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _p(p):
    if p is None:
        return "n/a"
    return f"{p:.4f}" if p >= 0.0001 else f"{p:.1e}"


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


def _si(x):
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"~{x / div:.1f}{suffix}"
    return f"{x:.0f}"


def _total(values):
    return f"{int(sum(values)):,}" if values else "n/a"
