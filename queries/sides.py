"""Group a dataset's runs into sides by a label and compare their metrics.

A side is the set of runs sharing one value of a label (kernel=vanilla); the
first side is the baseline the others are compared against. The per-run
values come from queries/metrics.py, the statistics from statistics.py.
"""
import math
import re
from dataclasses import dataclass, field

from kmemscope.common.errors import QueryError

from . import statistics as st


@dataclass
class SideSet:
    label: str
    sides: list                      # label values, baseline first
    runs: dict                       # side -> [run_id]
    summary: list                    # one dict per run on a side: run_id, side, metric values
    notes: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)   # name -> Metric, in the order to show
    unit: str | None = None                 # --unit: the label whose values are a side's units (hosts)

    @property
    def baseline(self):
        return self.sides[0]

    def values(self, metric, bound=None):
        """side -> per-run values of `metric` (None where a run lacks it). bound: a model
        bound's key (metrics.BOUND_LOW, BOUND_HIGH): each run's bound, its value where it has
        none."""
        out: dict = {s: [] for s in self.sides}
        for row in self.summary:
            out[row["side"]].append(_value(row, metric, bound))
        return out

    def unit_values(self, metric, bound=None):
        """side -> one value per unit (host) of `metric`: the arithmetic mean of the unit's runs
        that have it (None for a unit with none), so that n counts units, not runs. Without
        --unit, the per-run values. bound: as in values()."""
        if self.unit is None:
            return self.values(metric, bound)
        out: dict = {s: {} for s in self.sides}
        for row in self.summary:
            out[row["side"]].setdefault(row["unit"], []).append(_value(row, metric, bound))
        return {s: [st.amean(st.clean(vs)) for vs in units.values()] for s, units in out.items()}

    def unit_count(self, side):
        """How many runs, or units when --unit is given, the side has."""
        if self.unit is None:
            return len(self.runs[side])
        return len({r["unit"] for r in self.summary if r["side"] == side})

    def host_total(self, metric, side):
        """(total, hosts) of `metric` across the side's hosts: each host's value is the mean of its
        runs' (a host recorded four times counts once), summed over the hosts; a run without a
        recorded host counts as a host of its own. (None, 0) when no run has a value."""
        per_host: dict = {}
        for row in self.runs_of(metric, side):
            per_host.setdefault(row.get("host") or ("run", row["run_id"]), []).append(row[metric])
        if not per_host:
            return None, 0
        return math.fsum(math.fsum(vs) / len(vs) for vs in per_host.values()), len(per_host)

    def runs_of(self, metric, side):
        """The side's run rows that have a value of `metric`."""
        return [r for r in self.summary if r["side"] == side and r.get(metric) is not None]

    def ordered_runs(self, side):
        """The side's runs in the order they were recorded (wall-clock start, else run id)."""
        rows = [r for r in self.summary if r["side"] == side]
        return sorted(rows, key=lambda r: (r.get("started_ns") is None, r.get("started_ns") or 0,
                                           r["run_id"]))


def _value(row, metric, bound):
    value = row.get(metric)
    if bound is None or value is None:
        return value
    found = row.get(metric + bound)
    return value if found is None else found


def load_sides(dataset, by, baseline=None, run_ids=None, labels=None, params=None, engine=None,
               metrics=None, order=None, unit=None):
    """Per-run metric values of the selected runs, split by the value of label `by`.

    metrics: names (queries/metrics.py); None for the default set. engine: as
    for runner.run_query ("duckdb", "spark" or a spark_engine()). order: the sides
    to compare, in this order, baseline first (--sides); others are left out with a
    note. unit: a label (or "host", the run's recorded host) whose values are the
    units a side's runs are summarised per (--unit). Fewer than two sides is an
    error: there is nothing to compare.
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
    if order:
        rows, values, more = _ordered_sides(rows, values, by, order, baseline)
        notes += more
    if unit is not None:
        rows, more = _with_units(rows, unit)
        notes += more
    if baseline is not None and not order:
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
    return SideSet(by, values, runs, rows, notes, found.metrics, unit)


def _ordered_sides(rows, present, by, order, baseline):
    """(rows, sides, notes) of --sides: the sides named, in that order, the first the baseline."""
    order = list(order)
    unknown = [s for s in order if s not in present]
    if unknown:
        raise QueryError(f"no run has {by}={unknown[0]}", f"values of {by}: {', '.join(present)}")
    if len(set(order)) != len(order):
        raise QueryError("--sides names a side twice", "name each side once, baseline first")
    if baseline is not None and baseline != order[0]:
        raise QueryError(f"--baseline {baseline} is not the first of --sides ({order[0]})",
                         "the first side of --sides is the baseline")
    left = [s for s in present if s not in order]
    notes = [f"sides left out (not in --sides): {', '.join(left)}"] if left else []
    return [r for r in rows if r["side"] in order], order, notes


def _with_units(rows, unit):
    """(rows with their "unit" key, notes): a run's unit is its label `unit`, or for "host"
    without such a label the host it was recorded on; runs without one are left out."""
    kept, missing = [], []
    for row in rows:
        key = row["labels"].get(unit)
        if key is None and unit == "host":
            key = row.get("host")
        if key is None:
            missing.append(row["run_id"])
            continue
        row["unit"] = key
        kept.append(row)
    notes = []
    if missing:
        notes.append(f"{len(missing)} run{'s have' if len(missing) > 1 else ' has'} no {unit} and "
                     f"{'are' if len(missing) > 1 else 'is'} left out of the per-{unit} comparison: "
                     + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    if not kept:
        raise QueryError(f"no run has a {unit!r} to summarise by",
                         f"label runs --label {unit}=VALUE, or leave --unit out")
    repeated = len(kept) - len({(r["side"], r["unit"]) for r in kept})
    if repeated:
        notes.append(f"--unit {unit}: {len(kept)} runs summarised as "
                     f"{len({(r['side'], r['unit']) for r in kept})} {unit}s (each {unit}'s value is "
                     "the arithmetic mean of its runs); n counts " + unit + "s")
    return kept, notes


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
    # Several analyses of one command say the same thing about a run: each run once per note
    for note in dict.fromkeys(notes):
        m = re.match(r"run (\S+?):? (.*)$", note)
        if m:
            if m.group(2) not in groups:
                groups[m.group(2)] = []
                out.append(m.group(2))
            if m.group(1) not in groups[m.group(2)]:
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
