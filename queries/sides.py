"""Group a dataset's runs into sides by a label and compare their metrics.

A side is the set of runs sharing one value of a label (kernel=vanilla); the
first side is the baseline the others are compared against. The per-run
values come from queries/metrics.py, the statistics from compare.py.
"""
import re
from dataclasses import dataclass, field

from kmemscope.common.errors import QueryError

from . import compare as st


@dataclass
class SideSet:
    label: str
    sides: list                      # label values, baseline first
    runs: dict                       # side -> [run_id]
    summary: list                    # one dict per run on a side: run_id, side, metric values
    notes: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)   # name -> Metric, in the order to show

    @property
    def baseline(self):
        return self.sides[0]

    def values(self, metric):
        """side -> per-run values of `metric` (None where a run lacks it)."""
        out: dict = {s: [] for s in self.sides}
        for row in self.summary:
            out[row["side"]].append(row.get(metric))
        return out

    def ordered_runs(self, side):
        """The side's runs in the order they were recorded (wall-clock start, else run id)."""
        rows = [r for r in self.summary if r["side"] == side]
        return sorted(rows, key=lambda r: (r.get("started_ns") is None, r.get("started_ns") or 0,
                                           r["run_id"]))


def load_sides(dataset, by, baseline=None, run_ids=None, labels=None, params=None, engine=None,
               metrics=None):
    """Per-run metric values of the selected runs, split by the value of label `by`.

    metrics: names (queries/metrics.py); None for the default set. engine: as
    for runner.run_query ("duckdb", "spark" or a spark_engine()). Fewer than
    two sides is an error: there is nothing to compare.
    """
    from .metrics import gather

    if params:
        raise QueryError("compare takes no analysis parameters")
    found = gather(dataset, metrics, run_ids=run_ids, labels=labels, engine=engine)
    notes = list(found.notes)
    rows, missing = [], []
    for row in found.runs:
        value = row["labels"].get(by)
        if value is None:
            missing.append(row["run_id"])
            continue
        row["side"] = value
        rows.append(row)
    if missing:
        verb = "run has" if len(missing) == 1 else "runs have"
        notes.append(f"{len(missing)} {verb} no label {by!r} and {'is' if len(missing) == 1 else 'are'} left out: "
                     + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    values = sorted({r["side"] for r in rows})
    if not values:
        raise QueryError(f"no run has a label {by!r}",
                         "label runs at parse time: kmemscope parse ... --label KEY=VALUE")
    if baseline is not None:
        if baseline not in values:
            raise QueryError(f"no run has {by}={baseline}",
                             f"values of {by}: {', '.join(values)}")
        values.remove(baseline)
        values.insert(0, baseline)
    if len(values) < 2:
        n = len(rows)
        raise QueryError(f"nothing to compare: every selected run ({n}) has {by}={values[0]}",
                         f"compare needs runs with two or more values of {by}; "
                         "label the other side's runs at parse time (--label)")
    runs = {v: [r["run_id"] for r in rows if r["side"] == v] for v in values}
    notes += source_notes(rows, values)
    return SideSet(by, values, runs, rows, notes, found.metrics)


def source_notes(rows, sides):
    """Notes for metrics that some runs took from the trace instead of vmstat.

    A summary metric M (or M_pct) with a column M_source says per run where its
    value came from ('vmstat' or 'trace'); sides computed from different sources
    are not measured alike, and the note says so.
    """
    from .metrics import SUMMARY

    notes = []
    for metric in SUMMARY:
        col = (metric[:-4] if metric.endswith("_pct") else metric) + "_source"
        counts: dict = {}
        for row in rows:
            src = row.get(col)
            if src:
                side = counts.setdefault(row["side"], {})
                side[src] = side.get(src, 0) + 1
        used = {src for side in counts.values() for src in side}
        if not used or used == {"vmstat"}:
            continue
        parts = "; ".join(f"{s}: " + ", ".join(f"{n} from {src}" for src, n in sorted(counts[s].items()))
                          for s in sides if s in counts)
        if len(used) > 1:
            notes.append(f"{metric}: sides computed from different sources ({parts}); "
                         "the trace model and its agreement with vmstat: kmemscope queries thp")
        else:
            notes.append(f"{metric}: from the trace, no vmstat samples ({parts}); "
                         "the trace model and its agreement with vmstat: kmemscope queries thp")
    return notes


@dataclass
class MetricRow:
    metric: object       # queries.metrics.Metric
    stats: dict          # side -> SideStats
    versus: dict         # side (not the baseline) -> compare.MetricDiff against the baseline
    stat: str | None = None     # the row's statistic on every side ("Hmean" or "Amean")
    note: str | None = None     # why the row's statistic is not the metric's own, if it is not
    from_trace: bool = False   # a vmstat row that some run's trace answered (no samples)


def compare_sides(sides, metrics=None, test="band", alpha=0.05):
    """[MetricRow] for every metric: each side described, each non-baseline side compared.

    metrics: names among sides.metrics (default: all of them, in order).
    """
    from .metrics import GROUPS, SUMMARY

    names = []
    for name in metrics or list(sides.metrics):
        if name in GROUPS:          # a group: its metrics that the sides have
            names += [n for n, m in sides.metrics.items() if m.kind == GROUPS[name]]
        else:
            names.append(name)
    out = []
    for name in names:
        metric = sides.metrics.get(name) or SUMMARY.get(name)
        if metric is None:
            raise QueryError(f"unknown metric {name!r}", "metrics: " + ", ".join(sides.metrics))
        values = sides.values(metric.name)
        stat, note = st.row_statistic(metric, values.values())
        stats = {s: st.describe(metric, values[s], s, stat) for s in sides.sides}
        base = stats[sides.baseline]
        versus = {s: st.compare(metric, base, stats[s], test, alpha) for s in sides.sides[1:]}
        out.append(MetricRow(metric, stats, versus, stat, note, _from_trace(sides, metric)))
    return out


def _from_trace(sides, metric):
    """Whether some run's value of a vmstat metric was counted from its trace."""
    from .metrics import TRACE_SOURCE, VMSTAT_DERIVED, parse_name

    if metric.kind != "vmstat":
        return False
    counter = parse_name(metric.name)[1]
    for row in sides.summary:
        traced = row.get(TRACE_SOURCE)
        if traced and row.get(metric.name) is not None and (
                counter in traced or counter in VMSTAT_DERIVED):
            return True
    return False


def missing_notes(sides, rows):
    """One note per metric that some runs could not give (no procfs, no events)."""
    notes, zero_base = [r.note for r in rows if r.note], []
    for row in rows:
        lacking = {s: x.runs_without_value for s, x in row.stats.items() if x.runs_without_value}
        if lacking:
            parts = ", ".join(f"{n} of {len(sides.runs[s])} on {s}" for s, n in lacking.items())
            notes.append(f"{row.metric.name}: no value for {parts} (left out of its statistics)")
        base = row.stats[sides.baseline].mean
        if base == 0 and any(row.stats[s].mean not in (None, 0) for s in sides.sides[1:]):
            zero_base.append(row.metric.name)
    if zero_base:
        notes.append(f"the baseline's mean is 0, so there is no percent difference (n/a), for "
                     f"{', '.join(zero_base[:6])}" + (f" and {len(zero_base) - 6} more"
                                                       if len(zero_base) > 6 else ""))
    return notes


def condense_notes(notes):
    """Fold per-run notes that say the same thing ("run X has no ... events") into one line each:
    "run X has no ...", or "2 runs (X, Y) have no ..." (60 hosts, one note)."""
    groups: dict = {}
    out: list = []
    for note in notes:
        m = re.match(r"run (\S+?):? (.*)$", note)
        if m:
            if m.group(2) not in groups:
                groups[m.group(2)] = []
                out.append(m.group(2))
            groups[m.group(2)].append(m.group(1))
        else:
            out.append(note)
    lines = []
    for n in out:
        if n not in groups:
            lines.append(n)
            continue
        ids = groups[n]
        if len(ids) == 1:
            lines.append(f"run {ids[0]} {n}")
        else:
            shown = ", ".join(ids[:3]) + (" ..." if len(ids) > 3 else "")
            plural = re.sub(r"^has ", "have ", n).replace(": its rows", ": their rows")
            lines.append(f"{len(ids)} runs ({shown}) {plural}")
    return lines
