"""Figures and tables for the compare notebook: sides of a label, per-run points, study tables.

The statistics come from kmemscope.queries.compare; this module only lays
them out. Every figure keeps the sides apart: a panel, a bar or a point per
side (or per run), never a sum over both. The study tables reproduce the shape
of the evidence that page-allocator patches publish: the high-atomic
reservation study (HighAtomic, THP, compaction, pgscan, atomic order 4+ per
side), the per-CPU list study (top-5 pfns per kernel) and the defrag_mode study
(vmstat counters with % change).
"""
import dataclasses
import html

import numpy as np
import pandas as pd
from IPython.display import HTML

from kmemscope.cli import compare_output as co
from kmemscope.errors import KmemscopeError
from kmemscope.queries import compare as st
from kmemscope.queries.sides import (MetricRow, compare_sides, condense_notes, load_sides,
                                     missing_notes)

from . import figures as F
from .figures import Missing, _figure, fig_text, hex_pfn, md_text, plural

# the defrag_mode study's rows: (title, vmstat counters summed). Counters absent on a kernel count as absent.
DEFRAG_STUDY_ROWS = [
    ("THP fault alloc", ["thp_fault_alloc"]),
    ("THP fault fallback", ["thp_fault_fallback"]),
    ("Direct compact fail", ["compact_fail"]),
    ("Direct compact success", ["compact_success"]),
    ("Compact daemon scanned migrate", ["compact_daemon_migrate_scanned"]),
    ("Compact daemon scanned free", ["compact_daemon_free_scanned"]),
    ("Compact total migrate scanned", ["compact_migrate_scanned"]),
    ("Compact total free scanned", ["compact_free_scanned"]),
    ("Alloc stall", ["allocstall_dma", "allocstall_dma32", "allocstall_normal", "allocstall_movable",
                     "allocstall_device"]),
    ("Pages kswapd scanned", ["pgscan_kswapd"]),
    ("Pages kswapd reclaimed", ["pgsteal_kswapd"]),
    ("Pages direct scanned", ["pgscan_direct"]),
    ("Pages direct reclaimed", ["pgsteal_direct"]),
    ("Swap out", ["pswpout"]),
    ("Swap in", ["pswpin"]),
    ("File refaults", ["workingset_refault_file"]),
]


class Comparison:
    """The sides of `label` in a dataset and every metric compared; built once per notebook."""

    def __init__(self, scope, label, baseline=None, test="band"):
        self.scope, self.test = scope, test
        self.sides = load_sides(scope.dataset, label, baseline or None,
                                run_ids=scope.runs or None, labels=scope.labels or None,
                                engine=scope.open()._engine)
        if len(self.sides.sides) < 2:
            raise Missing(f"Every selected run has the same {md_text(label)}={md_text(self.sides.baseline)}: "
                          "nothing to compare.")
        self.rows = compare_sides(self.sides, test=test)
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
        """The comparison as markdown, the mmtests-style text, and notes on missing values."""
        notes = condense_notes(self.sides.notes) + missing_notes(self.sides, self.rows)
        text = co.format_text(self.sides, self.rows, self.test)
        note_md = "\n".join(f"- {md_text(n)}" for n in notes)
        shown_sides, shown_rows = _escaped(self.sides, self.rows)
        return (self.intro(),
                co.format_markdown(shown_sides, shown_rows),
                # The long mmtests layout folds away under the compact table.
                HTML("<details><summary>mmtests compare-kernels layout</summary><pre>"
                     + html.escape(text) + "</pre></details>"),
                ("**Notes**\n\n" + note_md) if notes else None)

    def distributions(self):
        """One panel per metric: every run a point (jittered), the side's mean a bar."""
        rows = [r for r in self.rows if any(x.n for x in r.stats.values())]
        empty = [r.metric.name for r in self.rows if r not in rows]
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
        """the high-atomic reservation study's table: per side, ranges per run and the pgscan total across runs."""
        host = self._hosts()
        v = self.sides.values
        stats = {side: {m: st.clean(v(m)[side]) for m in st.METRICS} for side in self.sides.sides}
        rows = [("runs", {s: f"{len(self.sides.runs[s])}" for s in self.sides.sides}),
                ("hosts", {s: _hosts_cell(self.sides.runs[s], host) for s in self.sides.sides})]
        spec = [
            ("HighAtomic pageblocks per run", lambda x: st.value_range(x["highatomic_pageblocks_max"])),
            ("THP success rate", lambda x: st.value_range(x["thp_fault_success_pct"], "%")),
            ("Compaction success rate", lambda x: st.value_range(x["compaction_success_pct"], "%")),
            ("pgscan_kswapd per minute (total across runs)",
             lambda x: _si(sum(x["pgscan_kswapd_per_min"])) if x["pgscan_kswapd_per_min"] else "n/a"),
            ("Atomic order-4+ allocations", lambda x: _total(x["eligible_allocs_order_4_plus"])),
            ("Atomic order 1-3 allocations", lambda x: _total(x["eligible_allocs_order_1_3"])),
        ]
        rows += [(title, {s: fn(stats[s]) for s in self.sides.sides}) for title, fn in spec]
        table = pd.DataFrame([{"measure": title, **vals} for title, vals in rows])
        sentence = f"Over the runs of each side ({self.side_counts()})."
        return sentence, table

    def pcp_study(self, runs_per_side=3):
        """The per-CPU list study: the 5 most-allocated page frames of each run (up to a few runs per side)."""
        lines = []
        for side in self.sides.sides:
            for run in self.sides.runs[side][:runs_per_side]:
                try:
                    hot = self.scope.__class__(self.scope.dataset, [run]).query("hot_pfns", top_n=5)
                except KmemscopeError:
                    lines.append(f"{side} ({run[:8]}): no mm_page_alloc events")
                    continue
                lines.append(f"{side} ({run[:8]})")
                lines += [f"{int(r.allocs):>8} pfn={hex_pfn(r.pfn)}" for r in hot.itertuples()]
            more = len(self.sides.runs[side]) - runs_per_side
            if more > 0:
                lines.append(f"  ... and {plural(more, 'more run')}")
        return HTML("<pre>" + html.escape("\n".join(lines)) + "</pre>")

    def defrag_study(self):
        """The defrag_mode study: vmstat counters per side (mean of per-run deltas), % change, Welch p."""
        try:
            vm = self.scope.query("vmstat_rates")
        except Exception as exc:
            raise Missing(f"No vmstat samples in these runs: no vmstat table ({md_text(exc)}).") from None
        if vm.empty:
            raise Missing("No vmstat samples in these runs (bare trace.dat): no vmstat table.")
        side_of = {run: side for side, runs in self.sides.runs.items() for run in runs}
        vm = vm[vm.run_id.isin(side_of)]
        base = self.sides.baseline
        rows = []
        for title, names in DEFRAG_STUDY_ROWS:
            sub = vm[vm.name.isin(names)]
            if sub.empty:
                continue
            per_run = sub.groupby("run_id")["delta"].sum()
            row = {"counter": title}
            means = {}
            for side in self.sides.sides:
                vals = [float(per_run[r]) for r in self.sides.runs[side] if r in per_run.index]
                means[side] = st.amean(vals)
                row[side] = "n/a" if means[side] is None else f"{means[side]:.2f}"
                if side != base:
                    pct = st.percent_change(means[base], means[side])
                    row[f"{side} %"] = "n/a" if pct is None else (
                        co.pct_text(pct) if np.isinf(pct) else f"{pct:+.2f}%")
                    base_vals = [float(per_run[r]) for r in self.sides.runs[base] if r in per_run.index]
                    p = st.welch_p(base_vals, vals)
                    row[f"{side} Welch p"] = "n/a" if p is None else f"{p:.3g}"
            rows.append(row)
        if not rows:
            raise Missing("None of the defrag_mode study's vmstat counters is in these runs.")
        return pd.DataFrame(rows)


def _escaped(sides, rows):
    """The side set and rows with label values made safe for Markdown (they come from the runs)."""
    esc = md_text
    shown = dataclasses.replace(sides, label=esc(sides.label), sides=[esc(x) for x in sides.sides],
                                runs={esc(k): v for k, v in sides.runs.items()})
    out = [MetricRow(r.metric, {esc(k): v for k, v in r.stats.items()},
                     {esc(k): v for k, v in r.versus.items()}) for r in rows]
    return shown, out


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
