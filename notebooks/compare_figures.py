"""Figures and tables for the compare notebook: sides of a label, per-run points, study tables.

The statistics come from kmemscope.queries.compare; this module only lays
them out. Every figure keeps the sides apart: a panel, a bar or a point per
side (or per run), never a sum over both: each side is summarised per run
(mean, spread, range), and a total across hosts appears only where a row says
so. The tables have the shape of the evidence page-allocator patches publish:
the high-atomic reserve (HighAtomic pageblocks, THP and compaction success,
pgscan_kswapd, atomic allocations per side), the per-CPU lists (the five
hottest pfns per run) and compaction and THP (the vmstat rows of a kernel A/B
table, with percent difference and significance).
"""
import html

import numpy as np
import pandas as pd
from IPython.display import HTML

from kmemscope import comparison_text as co
from kmemscope.errors import KmemscopeError
from kmemscope.api import stats as st

from . import figures as F
from .figures import Missing, _figure, fig_text, hex_pfn, md_text, plural

class ComparisonFigures:
    """The sides of `label` in a dataset and every metric compared; built once per notebook."""

    def __init__(self, scope, label, baseline=None, test="band"):
        self.scope, self.test = scope, test
        self.comparison = scope.open().compare(label, baseline or None, test=test,
                                               run=scope.runs or None, label=scope.labels or None)
        self.sides, self.rows = self.comparison.sides, self.comparison.rows
        self.colors = {side: f"C{i}" for i, side in enumerate(self.sides.sides)}

    @property
    def groups(self):
        """side -> its run ids, baseline first."""
        return {side: list(self.sides.runs[side]) for side in self.sides.sides}

    def side_counts(self):
        """'a: 1 run on 1 host; b: 2 runs on 1 host' from the runs table (a bare trace.dat may lack its host)."""
        return "; ".join(f"{md_text(side)}: {_runs_on_hosts(ids, self._hosts())}"
                         for side, ids in self.groups.items())

    def _hosts(self):
        runs = self.scope.query_runs()
        return {r: (None if pd.isna(h) or h == "" else h) for r, h in zip(runs.run_id, runs.host)}

    def intro(self):
        return (f"Sides of `{md_text(self.sides.label)}` (baseline {md_text(self.sides.baseline)}): "
                f"{self.side_counts()}.")

    def table(self):
        """The comparison: a table that marks better and worse, the mmtests layout, the notes."""
        notes = self.comparison.notes
        text = co.format_mmtests(self.sides, self.rows, self.test)
        note_md = "\n".join(f"- {md_text(n)}" for n in notes)
        shown = [r for r in self.rows if r.metric.kind != "vmstat"]
        return (self.intro(),
                HTML(comparison_html(self.sides, shown)),
                # The long mmtests layout folds away under the compact table.
                HTML("<details><summary>mmtests compare-kernels layout (every metric)</summary><pre>"
                     + html.escape(text) + "</pre></details>"),
                ("**Notes**\n\n" + note_md) if notes else None)

    def distributions(self):
        """One panel per metric: every run a point (jittered), the side's mean a bar."""
        # vmstat rows have a table of their own (vmstat_table); the rest get a panel each
        mine = [r for r in self.rows if r.metric.kind != "vmstat"]
        rows = [r for r in mine if any(x.n for x in r.stats.values())]
        empty = [r.metric.name for r in mine if r not in rows]
        cols = 3
        fig, axes = _figure((len(rows) + cols - 1) // cols, cols, height=2.6)
        rng = np.random.default_rng(0)      # fixed jitter: the same report every time
        ticks = [fig_text(s) for s in self.sides.sides]
        for ax, r in zip(axes.flat, rows):
            for i, side in enumerate(self.sides.sides):
                x = r.stats[side]
                ax.scatter(i + rng.uniform(-0.12, 0.12, len(x.values)), x.values, s=14, alpha=0.7,
                           zorder=3, color=self.colors[side])
                if x.mean is not None:
                    ax.hlines(x.mean, i - 0.3, i + 0.3, color="black", lw=1.5)
                else:
                    ax.text(i, 0.5, "no value", ha="center", va="center", fontsize=8, color="0.5",
                            transform=ax.get_xaxis_transform())
            ax.set_xticks(range(len(self.sides.sides)), ticks, fontsize=8)
            ax.set_xlim(-0.6, len(self.sides.sides) - 0.4)
            ax.set_title(f"{r.metric.name} ({r.metric.better} is better)", fontsize=8)
        for ax in list(axes.flat)[len(rows):]:
            ax.set_visible(False)
        F.no_negative_axes(fig)
        sentence = (f"*No run could give {', '.join(empty)}: left out.*" if empty else None)
        return fig, sentence

    def pollution(self):
        """The fallback pollution matrix of each side, side by side on one colour scale."""
        fig, drawn, frag = F.pollution_by(self.scope, self.groups, what="side")
        frag = frag.rename(columns={"side": self.sides.label})
        return fig, drawn, frag

    def atomic_orders(self):
        """Non-blocking allocations per order, a bar per side, a panel per reserve class."""
        fig, drawn, note = F.atomic_orders_by(self.scope, self.groups, group_title="side")
        return fig, drawn, note

    def orders(self):
        """Every allocation per order, a bar per side (log scale)."""
        return F.order_histogram(self.scope, self.groups,
                                 title="allocations per order, summed over each side's runs")

    def highatomic_study(self):
        """The high-atomic reserve per side: per-run ranges and means; totals only where labelled."""
        host = self._hosts()
        v = self.sides.values
        names = ("highatomic_pageblocks_max", "thp_fault_success_pct", "compaction_success_pct",
                 "pgscan_kswapd_per_min", "eligible_allocs_order_4_plus", "eligible_allocs_order_1_3")
        stats = {side: {m: st.clean(v(m)[side]) for m in names} for side in self.sides.sides}
        hosts = {s: len({host.get(r) for r in self.sides.runs[s]} - {None}) or len(self.sides.runs[s])
                 for s in self.sides.sides}
        rows = [("runs", {s: f"{len(self.sides.runs[s])}" for s in self.sides.sides}),
                ("hosts", {s: _hosts_cell(self.sides.runs[s], host) for s in self.sides.sides})]
        spec = [
            ("HighAtomic pageblocks per run (range)",
             lambda s, x: st.value_range(x["highatomic_pageblocks_max"])),
            ("THP success rate per run (range)",
             lambda s, x: st.value_range(x["thp_fault_success_pct"], "%")),
            ("Compaction success rate per run (range)",
             lambda s, x: st.value_range(x["compaction_success_pct"], "%")),
            ("pgscan_kswapd per minute, per run (mean ± stddev)",
             lambda s, x: _mean_sd(x["pgscan_kswapd_per_min"])),
            ("pgscan_kswapd per minute, total across the side's hosts",
             lambda s, x: (f"{_si(sum(x['pgscan_kswapd_per_min']))} over {plural(hosts[s], 'host')}"
                           if x["pgscan_kswapd_per_min"] else "n/a")),
            ("Atomic order-4+ allocations per run (mean, range)",
             lambda s, x: _mean_range(x["eligible_allocs_order_4_plus"])),
            ("Atomic order 1-3 allocations per run (mean, range)",
             lambda s, x: _mean_range(x["eligible_allocs_order_1_3"])),
        ]
        rows += [(title, {s: fn(s, stats[s]) for s in self.sides.sides}) for title, fn in spec]
        table = pd.DataFrame([{"measure": title, **vals} for title, vals in rows])
        sentence = f"Per run over each side ({self.side_counts()})."
        if len(set(hosts.values())) > 1:
            sentence += (" The sides have different numbers of hosts: compare the per-run rows, "
                         "not the totals.")
        return sentence, table

    def pcp_study(self, runs_per_side=3):
        """The per-CPU list study: the 5 most-allocated page frames of each run (up to a few runs per side)."""
        lines = []
        for side in self.sides.sides:
            for run in self.sides.runs[side][:runs_per_side]:
                try:
                    hot = self.scope.narrowed([run]).query("hot_pfns", top_n=5)
                except KmemscopeError:
                    lines.append(f"{side} ({run[:8]}): no mm_page_alloc events")
                    continue
                lines.append(f"{side} ({run[:8]})")
                lines += [f"{int(r.allocs):>8} pfn={hex_pfn(r.pfn)}" for r in hot.itertuples()]
            more = len(self.sides.runs[side]) - runs_per_side
            if more > 0:
                lines.append(f"  ... and {plural(more, 'more run')}")
        return HTML("<pre>" + html.escape("\n".join(lines)) + "</pre>")

    def vmstat_table(self):
        """Compaction and THP: the vmstat rows of a kernel A/B table, per-run mean ± stddev per side,
        the percent difference (positive = better), marked better or worse, and Welch's p."""
        rows = [r for r in self.rows if r.metric.kind == "vmstat"]
        if not rows:
            raise Missing("No vmstat samples in these runs (bare trace.dat): no vmstat table.")
        base = self.sides.baseline
        out = []
        for r in rows:
            row = {"counter": r.metric.title, "better": r.metric.better}
            for side in self.sides.sides:
                x = r.stats[side]
                row[side] = "n/a" if x.mean is None else _mean_sd(x.values)
                if side != base:
                    c = r.versus[side]
                    row[f"{side} vs {base}"] = _verdict(c.pct_diff, c.significant)
                    row[f"{side} Welch p"] = "n/a" if c.welch_p is None else f"{c.welch_p:.3g}"
            out.append(row)
        return pd.DataFrame(out)


def _verdict(pct, significant):
    """'+22.10% better', '-5.00% worse *' (significant), 'n/a'."""
    if pct is None:
        return "n/a"
    word = "better" if pct > 0 else ("worse" if pct < 0 else "same")
    return f"{pct:+.2f}% {word}" + (" *" if significant else "")


def comparison_html(sides, rows):
    """The comparison as an HTML table: per side "mean [range]", and against the baseline the
    percent difference coloured by direction (green better, red worse; bold when significant)."""
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
            cells.append("n/a" if x.n == 0 else f"{x.mean:.2f} [{esc(x.range)}]"
                         + (f" n={x.n}" if x.n != len(sides.runs[s]) else ""))
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


def _mean_sd(values):
    if not values:
        return "n/a"
    m = st.amean(values)
    sd = st.stddev(values)
    return f"{m:.2f}" if sd is None else f"{m:.2f} ± {sd:.2f}"


def _mean_range(values):
    if not values:
        return "n/a"
    return f"{st.amean(values):,.1f} ({st.value_range(values)})"


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
