"""A/B statistics over per-run values: the mmtests compare-kernels table, plus two-sample tests.

Pure functions over lists of numbers (one value per run, None for a run that
cannot give the metric, e.g. no procfs samples). No dataset access here: see
queries/sides.py for turning a dataset into per-side values.

Two conventions, one per kind of metric (Metric.convention), each used
everywhere the metric appears (table cell, figure, verdict):
- "mmtests" (headline and benchmark metrics, as mmtests' compare-kernels):
  Hmean = n / sum(1/x) where higher is better, Amean otherwise; the percent
  difference is signed so that positive always means better: higher-better
  `new*100/base - 100`, lower-better `100 - new*100/base`. An Hmean cannot be
  taken over a value <= 0: such a metric's row uses the Amean on every side,
  and a note says so.
- "counter" (vmstat and stall rows, as kernel postings print them): the
  arithmetic mean of the per-run values (a success rate is the mean of the
  runs' rates) and the raw relative change `new/base - 1`, whatever the
  direction.
mmtests' band test: significant when the bands mean +/- 1.96*s of the two
sides do not overlap (s is not divided by sqrt(n), as mmtests does).
Beside it: Welch's t-test and the Mann-Whitney U test, two-sided, computed as
scipy.stats computes them (its Student t from scipy.special; the tests hold both
equal to scipy.stats) without importing scipy.stats, which costs half a second.
"""
import math
from dataclasses import dataclass, field

# The metric catalogue lives in metrics.py; METRICS are the summary analysis's metrics.
from .metrics import SUMMARY as METRICS  # noqa: F401
from .metrics import Metric  # noqa: F401

BAND_Z = 1.96
BEST_PCT = 95   # BAmean-95 / BHmean-95: the mean of the best 95% of the runs


def clean(values):
    """The usable values: None and NaN dropped (a run that lacks the metric)."""
    return [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def amean(xs):
    return sum(xs) / len(xs) if xs else None


def hmean(xs):
    """n / sum(1/x); None when there are no values or any is <= 0 (no harmonic mean exists)."""
    if not xs or any(x <= 0 for x in xs):
        return None
    return len(xs) / sum(1.0 / x for x in xs)


def stddev(xs):
    """Sample standard deviation (n-1); None below two values."""
    if len(xs) < 2:
        return None
    m = amean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def mean_of(stat, xs):
    """The statistic named `stat` ("Hmean" or "Amean") of xs."""
    return hmean(xs) if stat == "Hmean" else amean(xs)


def row_statistic(metric, sides_values):
    """(statistic, note or None) of one metric's row over every side's per-run values.

    The metric's own (Metric.mean_kind), unless it is an Hmean and some run's value
    is <= 0, where no harmonic mean exists: then the Amean on every side, so that the
    sides stay comparable, and a note that says why.
    """
    stat = metric.mean_kind
    if stat != "Hmean":
        return stat, None
    bad = [x for xs in sides_values for x in clean(xs) if x <= 0]
    if not bad:
        return stat, None
    return "Amean", (f"{metric.name}: Amean instead of Hmean on every side: "
                     f"{len(bad)} run{'s have' if len(bad) > 1 else ' has'} a value <= 0 "
                     f"(min {min(bad):g}), where no harmonic mean exists")


def best_mean(metric, xs, pct=BEST_PCT, stat=None):
    """Mean of the best pct% of the values (at least one), best by the metric's direction."""
    if not xs:
        return None
    keep = max(1, math.ceil(len(xs) * pct / 100.0))
    ordered = sorted(xs, reverse=(metric.better == "higher"))
    return mean_of(stat or metric.mean_kind, ordered[:keep])


def change(metric, base, new, better=None):
    """The percent difference of a row by the metric's convention (see the module doc)."""
    if metric.convention == "counter":
        return percent_change(base, new)
    return pct_diff(base, new, better or metric.better)


def pct_diff(base, new, better):
    """mmtests' percent difference, positive = better.

    0 when both are 0; None when either is missing or only the baseline is 0
    (no finite percentage: the outputs print n/a and a note says why).
    """
    if base is None or new is None:
        return None
    if base == 0:
        return 0.0 if new == 0 else None
    if better == "higher":
        return new * 100.0 / base - 100.0
    return 100.0 - new * 100.0 / base


def format_number(x, decimals):
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def value_range(xs, unit=""):
    """min-max written like the high-atomic reservation study: "1-6%", "309-312", "1%" when all equal."""
    if not xs:
        return "n/a"
    lo, hi = min(xs), max(xs)
    # Fewest decimals that still tell min from max apart (0 for whole numbers).
    decimals = 0
    while decimals < 3 and lo != hi and format_number(lo, decimals) == format_number(hi, decimals):
        decimals += 1
    if decimals == 0 and max(abs(lo), abs(hi)) < 1 and (lo, hi) != (0, 0):
        decimals = 2
    if lo == hi:
        return f"{format_number(lo, decimals)}{unit}"
    # Both ends with the same decimals ("2.0-2.1"), unless they are whole ("309-312").
    return f"{lo:.{decimals}f}-{hi:.{decimals}f}{unit}"


@dataclass
class SideStats:
    side: str
    n: int
    runs_without_value: int
    min: float | None = None
    mean: float | None = None
    max: float | None = None
    stddev: float | None = None
    coeffvar: float | None = None      # 100 * s / Amean
    best_mean: float | None = None     # BAmean-95 / BHmean-95
    range: str = "n/a"
    values: list = field(default_factory=list)
    stat: str | None = None            # the statistic in `mean` and `best_mean`: "Hmean" or "Amean"


def describe(metric, values, side="", stat=None):
    """Summary statistics of one side's per-run values for one metric.

    stat: the row's statistic (row_statistic); by default the metric's own.
    """
    raw = list(values)
    xs = clean(raw)
    stat = stat or metric.mean_kind
    st = SideStats(side=side, n=len(xs), runs_without_value=len(raw) - len(xs), values=xs,
                   stat=stat)
    if not xs:
        return st
    st.min, st.max = min(xs), max(xs)
    st.mean = mean_of(stat, xs)
    st.stddev = stddev(xs)
    am = amean(xs)
    if st.stddev is not None and am:
        st.coeffvar = 100.0 * st.stddev / abs(am)
    st.best_mean = best_mean(metric, xs, stat=stat)
    st.range = value_range(xs, metric.range_unit)
    return st


def band_test(base, new):
    """mmtests: significant when mean +/- 1.96*s bands do not overlap; None below 2 runs a side."""
    if base.n < 2 or new.n < 2:
        return None
    b_lo, b_hi = base.mean - BAND_Z * base.stddev, base.mean + BAND_Z * base.stddev
    n_lo, n_hi = new.mean - BAND_Z * new.stddev, new.mean + BAND_Z * new.stddev
    return n_lo > b_hi or n_hi < b_lo


def welch_p(a, b):
    """Two-sided Welch t-test p-value; None below 2 values a side.

    Both sides constant: 1.0 when equal, 0.0 when not (scipy returns NaN there).
    """
    if len(a) < 2 or len(b) < 2:
        return None
    if len(set(a)) == 1 and len(set(b)) == 1:
        return 1.0 if a[0] == b[0] else 0.0
    # scipy.stats.ttest_ind(equal_var=False) computed from its parts: scipy.special's Student
    # t distribution imports in a third of the time scipy.stats takes (half a second that
    # every `compare` paid); tests/test_compare_stats.py holds the two equal.
    from scipy.special import stdtr

    va, vb = _sample_variance(a) / len(a), _sample_variance(b) / len(b)
    t = (math.fsum(a) / len(a) - math.fsum(b) / len(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    p = float(2.0 * stdtr(df, -abs(t)))
    return None if math.isnan(p) else min(p, 1.0)


def _sample_variance(xs):
    mean = math.fsum(xs) / len(xs)
    return math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1)


def mannwhitney_p(a, b):
    """Two-sided Mann-Whitney U p-value, as scipy.stats.mannwhitneyu gives it by default:
    exact when a side has at most 8 values and none are tied, else the normal approximation
    with tie and continuity corrections. None below 2 values a side.

    Written out rather than imported: scipy.stats takes half a second or more to import,
    which every `compare` paid; tests/test_compare_stats.py holds it equal to scipy's."""
    if len(a) < 2 or len(b) < 2 or any(math.isnan(x) for x in (*a, *b)):
        return None
    if len(set(a) | set(b)) == 1:
        return 1.0
    n1, n2 = len(a), len(b)
    ranks, tie_sizes = _average_ranks([*a, *b])
    u1 = math.fsum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    if (n1 > 8 and n2 > 8) or tie_sizes:
        n = n1 + n2
        tie_term = sum(t ** 3 - t for t in tie_sizes)
        sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
        z = (u - n1 * n2 / 2 - 0.5) / sd
        p = math.erfc(z / math.sqrt(2.0))          # 2 * P(Z > z)
    else:
        p = 2.0 * _exact_u_sf(round(u), n1, n2)
    return min(max(p, 0.0), 1.0)


def _average_ranks(values):
    """(1-based ranks, ties sharing their average rank; the sizes of the tied groups)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks, tie_sizes = [0.0] * len(values), []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        if j > i:
            tie_sizes.append(j - i + 1)
        i = j + 1
    return ranks, tie_sizes


def _exact_u_sf(u, n1, n2):
    """P(U >= u) when every split of n1 + n2 distinct ranks is equally likely. The counts of
    each U are the coefficients of the Gaussian binomial [n1+n2 choose m]_q, m = min(n1, n2),
    built as the product over i of (1 - q^(n+i)) / (1 - q^i), in exact integers."""
    m, n = min(n1, n2), max(n1, n2)
    counts = [1]
    for i in range(1, m + 1):
        grown = counts + [0] * (n + i)
        for k in range(len(grown) - 1, n + i - 1, -1):      # times (1 - q^(n+i))
            grown[k] -= grown[k - (n + i)]
        for k in range(i, len(grown)):                       # over (1 - q^i), exactly
            grown[k] += grown[k - i]
        counts = grown[:m * n + 1] if i == m else grown[:i * n + 1]
    return sum(counts[u:]) / math.comb(n1 + n2, m)


TESTS = ("band", "welch", "mannwhitney")


@dataclass
class MetricDiff:
    """One metric, one side against the baseline."""
    metric: Metric
    base: SideStats
    new: SideStats
    pct_diff: float | None = None
    band_significant: bool | None = None
    welch_p: float | None = None
    mannwhitney_p: float | None = None
    significant: bool | None = None    # by the chosen test; None when it cannot be run


def compare(metric, base, new, test="band", alpha=0.05):
    """Compare two SideStats of `metric`; `test` decides `significant` (the *x%* marks)."""
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r} (one of {', '.join(TESTS)})")
    c = MetricDiff(metric, base, new)
    c.pct_diff = change(metric, base.mean, new.mean)
    c.band_significant = band_test(base, new)
    c.welch_p = welch_p(base.values, new.values)
    c.mannwhitney_p = mannwhitney_p(base.values, new.values)
    if test == "band":
        c.significant = c.band_significant
    else:
        p = c.welch_p if test == "welch" else c.mannwhitney_p
        c.significant = None if p is None else p < alpha
    return c


def percent_change(base, new):
    """Plain change new/base - 1 in %, without direction; None from a zero baseline."""
    if base is None or new is None:
        return None
    if base == 0:
        return 0.0 if new == 0 else None
    return (new / base - 1.0) * 100.0
