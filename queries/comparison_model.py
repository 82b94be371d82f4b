"""The comparison model: per metric and side, the one record every output renders.

`compare_table()` is the only place that decides, for one row of a comparison and
one side, how many runs (or hosts) it has, which statistic summarises them, where
the values came from and whether they are exact, which way is better, the change
against the baseline and its interval, the test, its p-value before and after the
correction across the table, and the verdict word. Text, mmtests, markdown,
csv/json/parquet, the HTML report and the notebook display print these records
(kmemscope/render/: comparison.py, comparison_html.py, verdicts.py) and compute nothing
of their own: no renderer reads a sign to choose a colour or a word.

Record fields are public (`Comparison.records`, `Comparison.df()`): FIELDS lists
them in a stable order; add new ones at the end.
"""
import dataclasses
from typing import Any
import zlib
from dataclasses import dataclass, field

from kmemscope.common.errors import QueryError

from . import statistics as st

DEFAULT_TEST = "welch"
DEFAULT_CORRECTION = "bh"

# The verdicts of a significant change (the words people read, their colours and texts, are
# kmemscope/render/verdicts.py's).
SIGNIFICANT_VERDICTS = ("better", "worse", "higher", "lower")
# What a verdict that is not significant says, whichever way it leans.
NOT_SIGNIFICANT = "no significant change"

# Blocks of a table: which metric kinds go in which (--format mmtests prints them in order).
BLOCKS = (("headline", ("summary",)), ("vmstat", ("vmstat",)), ("stalls", ("stalls",)),
          ("cost", ("cost",)), ("shifted", ("shifted",)), ("workload", ("workload",)),
          ("mthp", ("mthp",)),
          ("benchmark", ("imported",)), ("fragmentation", ("frag",)))
BLOCK_OF = {kind: block for block, kinds in BLOCKS for kind in kinds}


@dataclass(frozen=True)
class ComparisonRecord:
    """One metric on one side, as every output shows it. A field is None where it has no value
    (a side without values, a side of one run, the baseline's own change)."""
    metric: str | None             # the metric's name (vmstat.compact_stall, tps, ...)
    title: str | None              # what a table calls the row
    block: str | None              # headline, vmstat, stalls, benchmark, fragmentation
    kind: str | None               # summary, vmstat, stalls, imported, frag
    unit: str | None               # %, count, /min, ms, ...
    side: str | None
    baseline: str | None
    is_baseline: bool | None
    n: int | None                  # values summarised: runs, or units (hosts) with --unit
    n_of: str | None               # "runs", or the unit label's plural ("hosts")
    runs: int | None               # the side's runs, with or without a value
    missing: int | None            # runs (units) without a value, left out of n
    statistic: str | None          # Hmean, Amean or Median: the centre in `value`
    value: float | None            # the side's statistic
    value_low: float | None        # 95% interval of `value` (t, or order statistics for a median)
    value_high: float | None
    min: float | None
    max: float | None
    stddev_name: str | None        # Stddev, or HStddev about an Hmean (mmtests)
    stddev: float | None
    coeffvar_name: str | None      # CoeffVar or HCoeffVar
    coeffvar: float | None
    best_name: str | None          # BHmean-95 or BAmean-95
    best_mean: float | None
    range: str | None              # min-max as text ("36-92%")
    source: str | None             # vmstat, procfs sample, trace, imported; "trace+vmstat" when mixed
    exact: bool | None             # False: a model with bounds, or a lower bound (exactness)
    direction: str | None          # higher, lower (is better) or none
    convention: str | None         # mmtests: change positive = better (positive = higher where the
                            # direction is none); counter: the raw change new/base - 1
    change: float | None           # percent, in the convention; 0 on the baseline
    change_low: float | None       # 95% bootstrap interval of the change
    change_high: float | None
    test: str | None               # welch, mannwhitney or band
    p: float | None                # the test's two-sided p-value (None for the band test)
    p_adjusted: float | None       # after the correction across the table's tests
    correction: str | None         # bh, holm or none
    tested: int | None             # how many tests the correction covered
    significant: bool | None       # the verdict's test after the correction; None: not tested
    leaning: str | None            # which way the value moved: better/worse, higher/lower (direction
                            # none), same; None without two values to compare
    verdict: str | None            # better, worse, higher, lower (significant), "no significant
                            # change", "not tested", "n/a", "baseline"
    detect_pct: float | None       # --detect: the change asked about, in %
    detect_n: int | None           # runs (units) per side for 80% power to detect it; None: n/a
    # per statistic row of the mmtests layout: its change against the baseline's, in the
    # convention (spread rows: smaller is better, as mmtests compares them)
    min_change: float | None = None
    max_change: float | None = None
    stddev_change: float | None = None
    coeffvar_change: float | None = None
    best_change: float | None = None
    welch_p: float | None = None   # both tests' raw p-values, whichever decides
    mannwhitney_p: float | None = None
    band_apart: bool | None = None  # the mmtests band test: the bands do not overlap; None where
                            # it is not applied (a side without spread, a size no test can call)
    direction_reason: str | None = None  # why `direction` is the better way, or why a row has
                            # none (every row has one: queries/metrics.py, the metric's definition)
    method: str | None = None      # what computed `p`: welch, permutation (exact, at small n),
                            # mannwhitney, permutation-ranks; None: not tested
    untested: str | None = None    # why the verdict is "not tested" (too few values a side, all
                            # values equal, a size whose smallest p cannot reach alpha)
    interval_note: str | None = None  # why there is no change interval, or that its 95% is not
                            # held at this size
    detect_note: str | None = None  # --detect: why detect_n is None
    exactness: str | None = None   # exact; model (a trace model that met events it could not
                            # classify: the kernel's value lies in bound_low .. bound_high);
                            # lower bound (the trace counts only part of it)
    bound_low: float | None = None  # model rows: the side's statistic over each run's least value
    bound_high: float | None = None  # ... and over each run's most; None on other rows
    same_as: str | None = None     # the other rows of this table that measure the same quantity
                            # (metric names, ", "-joined), perhaps in another block's convention
    same_quantity: str | None = None  # what those rows and this one all measure
    value_note: str | None = None  # why `value` has no interval (too few values, no spread)
    p_error: float | None = None   # the standard error of a Monte-Carlo permutation p (method
                            # permutation-mc: random splits); None where p is exact

    @property
    def lower_bound(self):
        return self.exactness == "lower bound"

    @property
    def model(self):
        return self.exactness == "model"


FIELDS = tuple(f.name for f in dataclasses.fields(ComparisonRecord))


@dataclass
class MetricRow:
    """One metric of a comparison: the per-side values and the record of each side."""
    metric: Any              # queries.metrics.Metric
    stats: dict              # side -> compare.SideStats (the values, per run or per unit)
    records: dict            # side -> ComparisonRecord
    stat: str | None = None         # the row's statistic on every side
    note: str | None = None         # why the row's statistic is not the metric's own, if it is not

    @property
    def block(self):
        return BLOCK_OF.get(self.metric.kind, "headline")

    def record(self, side):
        return self.records[side]


@dataclass
class ComparisonTable:
    """A whole comparison: its rows and what was tested how."""
    rows: list                    # [MetricRow]
    test: str
    alpha: float
    correction: str
    tested: int                   # tests the correction covered (rows x non-baseline sides)
    unit: str | None = None
    detect_pct: float | None = None
    notes: list = field(default_factory=list)
    options: dict = field(default_factory=dict)   # compare_table's other arguments, to test again

    def retested(self, sides, test):
        """The same comparison decided by another test (the mmtests layout's band test)."""
        if test == self.test:
            return self
        return compare_table(sides, test=test, alpha=self.alpha, correction=self.correction,
                             detect=self.detect_pct, **self.options)

    @property
    def records(self):
        return [r.records[s] for r in self.rows for s in r.records]

    def correction_text(self):
        """'Benjamini-Hochberg (false discovery rate) over 42 tests', or why there is none."""
        if self.test == "band":
            return "none: the band test gives no p-value to correct"
        if not self.tested:
            return "none: no row could be tested (each verdict says why)"
        if self.correction == "none":
            return f"none over {self.tested} tests (each at p < {self.alpha})"
        return f"{st.CORRECTIONS[self.correction]} over {self.tested} tests"


def resolve_metrics(sides, metrics, directions=None):
    """The Metric of each name asked for (groups expanded), with --direction applied."""
    from .metrics import GROUPS, SUMMARY

    names = []
    for name in metrics or list(sides.metrics):
        if name in GROUPS:          # a group: its metrics that the sides have
            names += [n for n, m in sides.metrics.items() if m.kind == GROUPS[name]]
        else:
            names.append(name)
    # a metric named both by its group and by itself (cost, cost.system_cpu_s/min) is one row
    names = list(dict.fromkeys(names))
    out = []
    for name in names:
        metric = sides.metrics.get(name) or SUMMARY.get(name)
        if metric is None:
            raise QueryError(f"unknown metric {name!r}", "metrics: " + ", ".join(sides.metrics))
        if directions and name in directions:
            metric = dataclasses.replace(
                metric, better=directions[name],
                reason=f"stated with --direction {name}={directions[name]}"
                       + (f" (kmemscope's own: {metric.better}: {metric.reason})" if metric.reason
                          else ""))
        out.append(metric)
    for name in directions or {}:
        if name not in names:
            raise QueryError(f"--direction names {name!r}, which is not compared",
                             "metrics compared: " + ", ".join(names))
    return out


def compare_table(sides, metrics=None, test=DEFAULT_TEST, alpha=0.05, correction=DEFAULT_CORRECTION,
                  stat=None, detect=None, directions=None):
    """The comparison of every metric's sides: a ComparisonTable of MetricRows and their records.

    test: the test whose verdict marks a change (welch, mannwhitney or band);
    correction: bh, holm or none, across every test of the table; stat: "Hmean",
    "Amean" or "Median" for higher-is-better rows of the mmtests convention; detect:
    a change in % for which non-significant rows get the runs per side that would
    detect it; directions: {metric: "higher"|"lower"} for metrics without one.
    """
    if test not in st.TESTS:
        raise ValueError(f"unknown test {test!r} (one of {', '.join(st.TESTS)})")
    if correction not in st.CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r} (one of {', '.join(st.CORRECTIONS)})")
    if stat == "sum":           # fleet totals: the per-unit comparison, made into totals
        from .totals import CENTRE, as_totals

        return as_totals(sides, compare_table(sides, metrics, test, alpha, correction, CENTRE,
                                              detect, directions), _leaning, NOT_SIGNIFICANT)
    partial = [_row_parts(sides, metric, stat, test) for metric in resolve_metrics(sides, metrics, directions)]
    # the correction runs across every (row, side) the test could run on
    keys = [(i, s) for i, part in enumerate(partial) for s in part["tests"]]
    raw = [partial[i]["tests"][s].get(test) for i, s in keys]
    # a row whose size cannot reach alpha (an exact test's smallest p is above it) says so and
    # is left out of the correction (Tarone): it could never be called, and counting it would
    # only raise every other row's threshold
    for k, (i, s) in enumerate(keys):
        tests = partial[i]["tests"][s]
        na, nb = tests["sizes"]
        why = st.out_of_reach(na, nb, alpha)
        if why:                     # no band mark where no test of this size could call one
            tests["band"] = None
        if why and tests["untested"] is None:
            tests["untested"], raw[k] = why, None
    if test == "band":
        adjusted, tested = [None] * len(raw), sum(1 for i, s in keys
                                                  if partial[i]["tests"][s]["band"] is not None)
    else:
        adjusted, tested = st.adjust(raw, correction), sum(p is not None for p in raw)
    for (i, s), p_adj in zip(keys, adjusted):
        partial[i]["tests"][s]["p_adjusted"] = p_adj
    table = ComparisonTable([], test, alpha, correction, tested, sides.unit, detect,
                            options={"metrics": metrics, "stat": stat, "directions": directions})
    table.notes += _reach_notes(partial, keys, raw, test, alpha, correction)
    detect_alpha = alpha / max(tested, 1) if correction != "none" else alpha
    for part in partial:
        table.rows.append(_finish_row(sides, part, table, detect_alpha))
    _cross_reference(table.rows)
    return table


def _reach_notes(partial, keys, raw, test, alpha, correction):
    """A note where the correction can call nothing unless many rows sit at the smallest p
    their size can give (4 v 4: 0.029; with 44 tests Benjamini-Hochberg needs 26 there)."""
    if test == "band":
        return []
    floors = [st.reachable_p(*partial[i]["tests"][s]["sizes"])
              for (i, s), p in zip(keys, raw) if p is not None]
    need = st.calls_need(floors, alpha, correction)
    if need == 1 or not floors:
        return []
    low = min(floors)
    sizes = sorted({"{} v {}".format(*partial[i]["tests"][s]["sizes"])
                    for (i, s), p in zip(keys, raw) if p is not None})
    what = st.CORRECTIONS[correction]
    if need is None:
        return [f"no row can be called: at {', '.join(sizes)} no p can fall below {low:.2g}, "
                f"and {what} over {len(floors)} tests asks less of the first call"]
    return [f"{what} over {len(floors)} tests can call a row only where at least {need} rows "
            f"reach the smallest p their size gives ({low:.2g} at {', '.join(sizes)}): more "
            f"runs a side, or fewer rows (--metrics), let one change be called alone"]


def _cross_reference(rows):
    """Each record of a row that measures the same quantity as other rows of the table names
    them (same_as) and what they measure (same_quantity)."""
    shown = {r.metric.name for r in rows}
    for r in rows:
        others, what = r.metric.same_quantity
        others = [n for n in others if n in shown]
        if not others:
            continue
        for s, rec in r.records.items():
            r.records[s] = dataclasses.replace(rec, same_as=", ".join(others), same_quantity=what)


def _row_parts(sides, metric, stat, test=DEFAULT_TEST):
    """A row's per-side statistics and raw test results, before the table's correction."""
    values = sides.unit_values(metric.name)
    row_stat, note = st.row_statistic(metric, values.values(), st.STAT_CHOICES.get(stat, stat))
    stats = {s: st.describe(metric, values[s], s, row_stat) for s in sides.sides}
    base = stats[sides.baseline]
    tests = {}
    what = (sides.unit + "s") if sides.unit else "runs"
    for s in sides.sides[1:]:
        new = stats[s]
        # An Hmean is the reciprocal of the mean of 1/x: Welch's test of the Hmeans compares
        # the means of 1/x (the rank test is the same either way round).
        a, b = (st.reciprocals(base.values, new.values)
                if row_stat == "Hmean" and base.values and new.values else (base.values, new.values))
        welch, mw = st.two_sample("welch", a, b, what), st.two_sample("mannwhitney", a, b, what)
        # mmtests' band test as mmtests defines it, but not below the size any test needs nor
        # on a side without spread (its band is a point: 5,5,5 v 6,6,6 would be "apart")
        band, band_why = None, welch.reason
        if band_why is None and (base.stddev == 0 or new.stddev == 0):
            band_why = "a side has no spread: the band test's band is a point"
        elif band_why is None:
            band = st.band_test(base, new)
        chosen = {"welch": welch, "mannwhitney": mw}.get(test)
        tests[s] = {"welch": welch.p, "mannwhitney": mw.p, "band": band,
                    "method": chosen.method if chosen else ("band" if band is not None else None),
                    "untested": chosen.reason if chosen else band_why,
                    "p_error": chosen.error if chosen else None,
                    "sizes": (len(a), len(b))}
    return {"metric": metric, "stat": row_stat, "note": note, "stats": stats, "tests": tests}


def _seed(name, side):
    """A bootstrap seed of its own per row and side, the same on every call: every output of
    one comparison prints the same interval."""
    return zlib.crc32(f"{name}\0{side}".encode())


def _finish_row(sides, part, table, detect_alpha):
    metric, stats, row_stat = part["metric"], part["stats"], part["stat"]
    base = stats[sides.baseline]
    records = {}
    for s in sides.sides:
        x = stats[s]
        seed = _seed(metric.name, s)
        side_ci, value_note = st.side_interval(row_stat, x.values,
                                               most=100.0 if metric.unit == "%" else None)
        if s == sides.baseline:
            change_ci, interval_note, test_result = None, None, {}
        else:
            change_ci, interval_note = st.change_interval(row_stat, base.values, x.values,
                                                          metric.convention, metric.better,
                                                          seed=seed)
            test_result = part["tests"][s]
        records[s] = dataclasses.replace(
            _record(sides, metric, row_stat, base, x, s, side_ci, change_ci, test_result,
                    table, detect_alpha, interval_note),
            value_note=value_note if x.n else None, p_error=test_result.get("p_error"))
    return MetricRow(metric, stats, records, row_stat, part["note"])


def _record(sides, metric, row_stat, base, x, side, side_ci, change_ci, tests, table, detect_alpha,
            interval_note=None):
    is_base = side == sides.baseline
    source, exactness = _side_source(sides, metric, side)
    bound_low, bound_high = (_side_bounds(sides, metric, side, row_stat) if exactness == "model"
                             else (None, None))
    stddev_name, coeffvar_name = st.spread_names(row_stat)
    p = tests.get(table.test) if table.test != "band" else None
    p_adj = tests.get("p_adjusted")
    if is_base:
        significant = None
    elif table.test == "band":
        significant = tests.get("band")
    else:
        significant = None if p_adj is None else bool(p_adj < table.alpha)
    leaning = None if is_base else _leaning(metric.better, base.mean, x.mean)
    verdict = _verdict(is_base, base, x, significant, leaning)
    detect_n = detect_note = None
    if table.detect_pct and not is_base and not significant and base.n and x.n:
        detect_n, detect_note = st.runs_needed(base.values, x.values, table.detect_pct,
                                               detect_alpha, explain=True)

    def diff(key, better=None):
        if is_base:
            return 0.0 if getattr(x, key) is not None else None
        return st.change(metric, getattr(base, key), getattr(x, key), better)

    change = diff("mean")
    return ComparisonRecord(
        metric=metric.name, title=metric.title, block=BLOCK_OF.get(metric.kind, "headline"),
        kind=metric.kind, unit=metric.unit, side=side, baseline=sides.baseline,
        is_baseline=is_base, n=x.n, n_of=(sides.unit + "s") if sides.unit else "runs",
        runs=len(sides.runs[side]), missing=x.runs_without_value, statistic=row_stat,
        value=x.mean, value_low=side_ci[0] if side_ci else None,
        value_high=side_ci[1] if side_ci else None, min=x.min, max=x.max,
        stddev_name=stddev_name, stddev=x.stddev, coeffvar_name=coeffvar_name, coeffvar=x.coeffvar,
        best_name=st.best_name(row_stat), best_mean=x.best_mean, range=x.range,
        source=source, exact=exactness == "exact", direction=metric.better, convention=metric.convention,
        change=change, change_low=change_ci[0] if change_ci else None,
        change_high=change_ci[1] if change_ci else None,
        test=table.test, p=p, p_adjusted=p_adj if table.test != "band" else None,
        correction=table.correction if table.test != "band" else "none", tested=table.tested,
        significant=significant, leaning=leaning, verdict=verdict,
        detect_pct=table.detect_pct, detect_n=detect_n,
        min_change=diff("min"), max_change=diff("max"),
        # Spread is better when smaller, whatever the metric's direction (as mmtests compares it).
        stddev_change=diff("stddev", "lower"), coeffvar_change=diff("coeffvar", "lower"),
        best_change=diff("best_mean"),
        welch_p=tests.get("welch"), mannwhitney_p=tests.get("mannwhitney"),
        band_apart=tests.get("band"), direction_reason=metric.reason or None,
        method=None if is_base else tests.get("method"),
        untested=None if is_base or significant is not None else (
            tests.get("untested") or ("no values" if verdict == "n/a" else None)),
        interval_note=interval_note if x.n and base.n else None, detect_note=detect_note,
        exactness=exactness, bound_low=bound_low, bound_high=bound_high)


def _leaning(direction, base, new):
    """Which way the side's statistic moved from the baseline's, read against the direction."""
    if base is None or new is None:
        return None
    if new == base:
        return "same"
    up = new > base
    if direction == "higher":
        return "better" if up else "worse"
    if direction == "lower":
        return "worse" if up else "better"
    return "higher" if up else "lower"


def _verdict(is_base, base, new, significant, leaning):
    if is_base:
        return "baseline"
    if base.mean is None or new.mean is None:
        return "n/a"
    if significant is None:
        return "not tested"
    if significant and leaning not in (None, "same"):
        return leaning
    return NOT_SIGNIFICANT


def _side_source(sides, metric, side):
    """(source, exactness) of a side: its runs' sources joined ("trace+vmstat" when they
    differ); exact only when every run's value is, else a lower bound when any run's is one,
    else a model."""
    from .metrics import value_exactness

    found = [value_exactness(metric, run) for run in sides.runs_of(metric.name, side)]
    if not found:
        return value_exactness(metric, {})[0], "exact"
    kinds = {e for _, e in found}
    exactness = next(e for e in ("lower bound", "model", "exact") if e in kinds)
    return "+".join(sorted({s for s, _ in found})), exactness


def _side_bounds(sides, metric, side, row_stat):
    """(low, high): the side's statistic over each run's (unit's) least and most value by the
    model, a run without bounds counting its value at both ends."""
    from .metrics import BOUND_HIGH, BOUND_LOW

    out = []
    for key in (BOUND_LOW, BOUND_HIGH):
        values = sides.unit_values(metric.name, bound=key)[side]
        xs = st.clean(values)
        out.append(st.mean_of(row_stat, xs) if xs else None)
    return tuple(out)
