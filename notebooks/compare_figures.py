"""Figures and tables for the compare notebook: sides of a label, per-host points, study tables.

The statistics come from kmemscope.queries.compare; this module only lays
them out. The study tables reproduce the shape of the evidence that
page-allocator patches publish: the high-atomic reservation study (HighAtomic,
THP, compaction, pgscan, atomic order 4+ per side, about 60 hosts a side), the
per-CPU list study (top-5 pfns per kernel) and the defrag_mode study (vmstat
counters with % change).
"""
import html

import numpy as np
import pandas as pd
from IPython.display import HTML

from kmemscope import compare_output as co
from kmemscope.queries import compare as st
from kmemscope.queries.sides import compare_sides, condense_notes, load_sides, missing_notes

from .figures import Missing, _figure

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
                                run_ids=scope.runs or None, labels=scope.labels or None)
        if len(self.sides.sides) < 2:
            raise Missing(f"Every selected run has the same {label}={self.sides.baseline}: "
                          "nothing to compare.")
        self.rows = compare_sides(self.sides, test=test)

    def table(self):
        """The comparison as markdown, the mmtests-style text, and notes on missing values."""
        notes = condense_notes(self.sides.notes) + missing_notes(self.sides, self.rows)
        text = co.format_text(self.sides, self.rows, self.test)
        note_md = "\n".join(f"- {n}" for n in notes)
        return (co.format_markdown(self.sides, self.rows),
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
        for ax, r in zip(axes.flat, rows):
            for i, side in enumerate(self.sides.sides):
                x = r.stats[side]
                ax.scatter(i + rng.uniform(-0.12, 0.12, len(x.values)), x.values, s=14, alpha=0.7,
                           zorder=3)
                if x.mean is not None:
                    ax.hlines(x.mean, i - 0.3, i + 0.3, color="black", lw=1.5)
            ax.set_xticks(range(len(self.sides.sides)), self.sides.sides, fontsize=8)
            ax.set_xlim(-0.6, len(self.sides.sides) - 0.4)
            ax.set_title(f"{r.metric.name} ({r.metric.better} is better)", fontsize=8)
        for ax in list(axes.flat)[len(rows):]:
            ax.set_visible(False)
        sentence = (f"*No run could give {', '.join(empty)}: left out.*" if empty else None)
        return fig, sentence

    def highatomic_study(self):
        """the high-atomic reservation study's table: per side, ranges per host and the pgscan total across hosts."""
        out = []
        for side in self.sides.sides:
            v = self.sides.values
            stat = {m: st.clean(v(m)[side]) for m in st.METRICS}
            pgscan = stat["pgscan_kswapd_per_min"]
            out.append({
                self.sides.label: side,
                "hosts": len(self.sides.runs[side]),
                "HighAtomic pageblocks per host": st.value_range(stat["highatomic_pageblocks_max"]),
                "THP success rate": st.value_range(stat["thp_fault_success_pct"], "%"),
                "Compaction success rate": st.value_range(stat["compaction_success_pct"], "%"),
                "pgscan_kswapd per minute (total across hosts)":
                    _si(sum(pgscan)) if pgscan else "n/a",
                "Atomic order-4+ allocations": _total(stat["eligible_allocs_order_4_plus"]),
                "Atomic order 1-3 allocations": _total(stat["eligible_allocs_order_1_3"]),
            })
        return pd.DataFrame(out).set_index(self.sides.label).T

    def pcp_study(self, runs_per_side=3):
        """The per-CPU list study: the 5 most-allocated page frames of each run (up to a few runs per side)."""
        lines = []
        for side in self.sides.sides:
            for run in self.sides.runs[side][:runs_per_side]:
                hot = self.scope.__class__(self.scope.dataset, [run]).query("hot_pfns", top_n=5)
                lines.append(f"{side} ({run[:8]})")
                lines += [f"{int(r.allocs):>8} pfn=0x{int(r.pfn):x}" for r in hot.itertuples()]
            if len(self.sides.runs[side]) > runs_per_side:
                lines.append(f"  ... and {len(self.sides.runs[side]) - runs_per_side} more runs")
        return "```\n" + "\n".join(lines) + "\n```"

    def defrag_study(self):
        """The defrag_mode study: vmstat counters per side (mean of per-run deltas), % change, Welch p."""
        try:
            vm = self.scope.query("vmstat_rates")
        except Exception as exc:
            raise Missing(f"No vmstat samples in these runs: no vmstat table ({exc}).") from None
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
        return pd.DataFrame(rows).set_index("counter")


def _si(x):
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"~{x / div:.1f}{suffix}"
    return f"{x:.0f}"


def _total(values):
    return f"{int(sum(values)):,}" if values else "n/a"
