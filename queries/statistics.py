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
Beside it, what decides a verdict: the permutation test of the means (--test welch) or of
the average ranks (--test mannwhitney), two-sided, exact up to EXACT_MAX_SPLITS splits and
over PERMUTATION_DRAWS random splits above (two_sample()). Welch's t-test and the
Mann-Whitney U test stay here as scipy.stats computes them (its Student t from
scipy.special; the tests hold both equal to scipy.stats), without importing scipy.stats,
which costs half a second; no verdict uses them.
"""
import functools
import itertools
import math
from dataclasses import dataclass, field

from kmemscope.common.text import number_text

# The metric catalogue lives in metrics.py; METRICS are the summary analysis's metrics.
from .metrics import SUMMARY as METRICS  # noqa: F401
from .metrics import Metric  # noqa: F401

BAND_Z = 1.96
BEST_PCT = 95   # BAmean-95 / BHmean-95: the mean of the best 95% of the runs


def clean(values):
    """The usable values: None and NaN dropped (a run that lacks the metric)."""
    return [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def _scale(xs):
    """The largest magnitude of xs (1 when all are 0): values divided by it lie in [-1, 1], so
    that sums and squares of any finite input stay finite (1.7e308 + 1.7e308 overflows)."""
    top = max((abs(x) for x in xs), default=0.0)
    return top if top > 0 else 1.0


def amean(xs):
    """The arithmetic mean, taken over xs / max|x| so that any finite values give a finite mean."""
    if not xs:
        return None
    s = _scale(xs)
    return s * (math.fsum(x / s for x in xs) / len(xs))


def hmean(xs):
    """n / sum(1/x); None when there are no values or any is <= 0 (no harmonic mean exists).

    Taken as m * n / sum(m/x), m the smallest value: each m/x is in (0, 1], so a subnormal
    value (1/5e-324 overflows) or a huge one gives the harmonic mean and no error."""
    if not xs or any(x <= 0 for x in xs):
        return None
    m = min(xs)
    return m * (len(xs) / math.fsum(m / x for x in xs))


def stddev(xs):
    """Sample standard deviation (n-1); None below two values. Scaled as amean()."""
    if len(xs) < 2:
        return None
    s = _scale(xs)
    scaled = [x / s for x in xs]
    m = math.fsum(scaled) / len(scaled)
    return s * math.sqrt(math.fsum((x - m) ** 2 for x in scaled) / (len(xs) - 1))


def mean_of(stat, xs):
    """The statistic named `stat` ("Hmean", "Amean" or "Median") of xs."""
    return STATISTICS[stat](xs)


def median(xs):
    """The middle value (the mean of the two middle ones for an even count); None when empty."""
    if not xs:
        return None
    ordered = sorted(xs)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else ordered[mid - 1] / 2.0 + ordered[mid] / 2.0


STATISTICS = {"Hmean": hmean, "Amean": amean, "Median": median}
# --stat's names for the centre of higher-is-better rows.
STAT_CHOICES = {"hmean": "Hmean", "amean": "Amean", "median": "Median"}


def row_statistic(metric, sides_values, stat=None):
    """(statistic, note or None) of one metric's row over every side's per-run values.

    The metric's own (Metric.mean_kind), or `stat` ("Hmean", "Amean" or "Median", from
    --stat) on a higher-is-better row of the mmtests convention. An Hmean where some
    run's value is <= 0, where no harmonic mean exists, is the Amean on every side, so
    that the sides stay comparable, and a note says why.
    """
    chosen = metric.mean_kind
    if stat and metric.convention == "mmtests" and metric.better == "higher":
        chosen = stat
    if chosen != "Hmean":
        return chosen, None
    bad = [x for xs in sides_values for x in clean(xs) if x <= 0]
    if not bad:
        return chosen, None
    return "Amean", (f"{metric.name}: Amean instead of Hmean on every side: "
                     f"{len(bad)} run{'s have' if len(bad) > 1 else ' has'} a value <= 0 "
                     f"(min {min(bad):g}), where no harmonic mean exists")


def best_count(n, pct=BEST_PCT):
    """How many of n runs mmtests' BHmean-pct / BAmean-pct keep: int(n * pct / 100), at least 1
    (so 3 of 4 runs for -95, and 19 of 20)."""
    return max(1, int(n * pct / 100))


def best_mean(metric, xs, pct=BEST_PCT, stat=None):
    """mmtests' BHmean-pct / BAmean-pct: the Hmean (on an Hmean row) or else the Amean over the
    best_count(n) best values, best by the metric's direction (the highest first where higher
    is better). mmtests has no best-runs median: a --stat median row's is the BAmean, as its
    name (best_name) says."""
    if not xs:
        return None
    ordered = sorted(xs, reverse=(metric.better == "higher"))
    stat = stat or metric.mean_kind
    return mean_of("Hmean" if stat == "Hmean" else "Amean", ordered[:best_count(len(xs), pct)])


def spread(stat, xs):
    """(stddev, coefficient of variation %) about the row's statistic, as mmtests computes them.

    About an Hmean H (mmtests' HStddev and HCoeffVar): sqrt(H^4 * sum((1/x - 1/H)^2) / n),
    the delta-method spread of a harmonic mean; otherwise the sample standard deviation.
    The coefficient of variation divides by the row's own statistic, except about a median,
    where it divides by the Amean, as mmtests' Stat.pm computes CoeffVar whatever the centre
    (a median of 0 would give none). None below two values.
    HStddev is computed as H * sqrt(sum((H/x - 1)^2) / n), the same number, whose every term
    stays finite for any finite input (H^4 overflows from H = 1.2e77 up).
    """
    if len(xs) < 2:
        return None, None
    centre = mean_of(stat, xs)
    if stat == "Hmean":
        sd = centre * math.sqrt(math.fsum((centre / x - 1) ** 2 for x in xs) / len(xs))
    else:
        sd = stddev(xs)
    if stat == "Median":
        centre = amean(xs)
    return sd, (100.0 * (sd / abs(centre)) if centre else None)


def spread_names(stat):
    """What mmtests calls the spread rows about `stat`: (Stddev, CoeffVar) or (HStddev, HCoeffVar)."""
    return ("HStddev", "HCoeffVar") if stat == "Hmean" else ("Stddev", "CoeffVar")


def best_name(stat, pct=BEST_PCT):
    """'BHmean-95', 'BAmean-95': mmtests' names, each for what best_mean() computes (a median
    row's best runs are averaged: BAmean)."""
    return f"B{'H' if stat == 'Hmean' else 'A'}mean-{pct}"


def change(metric, base, new, better=None):
    """The percent difference of a row by the metric's convention (see the module doc); the raw
    change for a metric with no stated direction (better "none")."""
    better = better or metric.better
    if metric.convention == "counter" or better == "none":
        return percent_change(base, new)
    return pct_diff(base, new, better)


def pct_diff(base, new, better):
    """mmtests' percent difference, positive = better: (new - base) / |base| in %, negated
    where lower is better (mmtests' `new*100/base - 100` and `100 - new*100/base` for a
    positive baseline; over a negative one the sign still follows the direction, where
    mmtests' formula would call a rise from -0.9 to -0.35 a fall).

    0 when both are 0; None when either is missing or only the baseline is 0
    (no finite percentage: the outputs print n/a and a note says why).
    """
    up = percent_change(base, new)
    if up is None:
        return None
    return up if better == "higher" else -up


def _ratio(new, base):
    """new / base, or None where the quotient of two finite values is not finite (5e-324 as a
    baseline): no percentage there, n/a as for a baseline of 0."""
    try:
        ratio = new / base
    except (OverflowError, ZeroDivisionError):
        return None
    return ratio if math.isfinite(ratio) and math.isfinite(ratio * 100.0) else None


def format_number(x, decimals):
    text = number_text(x, decimals)
    if "e" in text or "n" in text:          # 1.7e+308, inf, nan: no zeros to trim
        return text
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
    return f"{number_text(lo, decimals)}-{number_text(hi, decimals)}{unit}"


@dataclass
class SideStats:
    side: str
    n: int
    runs_without_value: int
    min: float | None = None
    mean: float | None = None
    max: float | None = None
    stddev: float | None = None     # about `mean`: mmtests' HStddev on an Hmean row (spread())
    coeffvar: float | None = None   # 100 * stddev / mean
    best_mean: float | None = None  # BAmean-95 / BHmean-95
    range: str = "n/a"
    values: list = field(default_factory=list)
    stat: str | None = None     # the statistic in `mean` and `best_mean`: "Hmean", "Amean", "Median"


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
    st.stddev, st.coeffvar = spread(stat, xs)
    st.best_mean = best_mean(metric, xs, stat=stat)
    st.range = value_range(xs, metric.range_unit)
    return st


def band_test(base, new):
    """mmtests: significant when the bands mean +/- 1.96*s do not overlap, s the row's own spread
    (HStddev about an Hmean, as mmtests' meanci over stddev-hmean); None below 2 runs a side."""
    if base.n < 2 or new.n < 2:
        return None
    b_lo, b_hi = base.mean - BAND_Z * base.stddev, base.mean + BAND_Z * base.stddev
    n_lo, n_hi = new.mean - BAND_Z * new.stddev, new.mean + BAND_Z * new.stddev
    return n_lo > b_hi or n_hi < b_lo


def welch_p(a, b):
    """Two-sided Welch t-test p-value; None below 2 values a side, and None where both sides are
    constant (no spread: Welch's t is undefined, as scipy's NaN says; two_sample() decides
    such a row by the exact permutation test instead, never by a p of 0).

    Computed over the values divided by their largest magnitude (t and its degrees of
    freedom do not change), so that any finite input gives finite sums.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    if len(set(a)) == 1 and len(set(b)) == 1:
        return None
    # scipy.stats.ttest_ind(equal_var=False) computed from its parts: scipy.special's Student
    # t distribution imports in a third of the time scipy.stats takes (half a second that
    # every `compare` paid); tests/test_compare_stats.py holds the two equal.
    from scipy.special import stdtr

    scale = _scale([*a, *b])
    a, b = [x / scale for x in a], [x / scale for x in b]
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


TESTS = ("welch", "mannwhitney", "band")

# ---------------------------------------------------------------- small samples: exact tests

# Below this many values a side no test runs (the row says "not tested" and why): two runs
# give one difference to judge the spread by, and Welch's t on them called 45-71% of null
# tables of 20 Poisson rows changed.
MIN_TEST_N = 3
# Up to this many ways of splitting the pooled values into the two sides (C(n_a + n_b, n_a):
# 12,870 at 8 v 8, 48,620 at 9 v 9) the p-value is exact: every split is enumerated.
EXACT_MAX_SPLITS = 20_000


def splits(na, nb):
    """How many ways the pooled na + nb values split into sides of na and nb: C(na + nb, na)."""
    return math.comb(na + nb, na)


def smallest_p(na, nb):
    """The smallest two-sided p-value a permutation test of na v nb values can give: the
    observed split the most extreme of all, one split of C(na + nb, na) each way."""
    return min(1.0, 2.0 / splits(na, nb))


_SPLIT_CACHE: dict = {}


def _split_indexes(n, k):
    """Every k-subset of range(n) as rows of an array (cached: a table asks for few sizes)."""
    import numpy as np

    key = (n, k)
    if key not in _SPLIT_CACHE:
        _SPLIT_CACHE[key] = np.array(list(itertools.combinations(range(n), k)), dtype=np.int16)
    return _SPLIT_CACHE[key]


def permutation_p(a, b, ranks=False, draws=None):
    """Two-sided permutation p-value of the difference in means of a and b (of their average
    ranks with ranks=True: the Mann-Whitney U test, exact with ties): twice the smaller share
    of splits of the pooled values into sides of len(a) and len(b) whose difference is at
    least as low, or as high, as the observed one. None below 2 values a side.

    Up to EXACT_MAX_SPLITS splits every split is enumerated: the exact p, as
    scipy.stats.permutation_test(permutation_type="independent", n_resamples=inf) computes it
    (differences within a relative 1e-12 count as equal), never below smallest_p(). Above,
    `draws` (PERMUTATION_DRAWS) random splits (_random_subsets(), seeded from the sizes),
    counted as Phipson & Smyth do, the observed split among them: each tail is
    (1 + splits as extreme) / (draws + 1), so p is never 0 nor below 2 / (draws + 1), and it
    lies within a standard error of sqrt(p (2 - p) / draws) of the exact p (mc_error()).

    The difference in means is a monotone function of side a's sum (the pooled sum is
    fixed), so each split is judged by its sum, over values shifted and scaled into [-1, 1].
    """
    import numpy as np

    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    pooled = _average_ranks([*a, *b])[0] if ranks else [*a, *b]
    scale = _scale(pooled)
    z = np.array([x / scale for x in pooled])
    z -= np.median(z)
    tol = 1e-12 * max(1.0, float(np.abs(z).sum()))
    observed = z[:na].sum()
    if splits(na, nb) <= EXACT_MAX_SPLITS:
        sums = z[_split_indexes(na + nb, na)].sum(axis=1)
        low = int(np.count_nonzero(sums <= observed + tol))
        high = int(np.count_nonzero(sums >= observed - tol))
        return min(1.0, 2.0 * min(low, high) / len(sums))
    draws = draws or PERMUTATION_DRAWS
    # side a's sum over random splits: the smaller side drawn (the fewest indexes), and
    # side a's sum the pooled sum less it where that side is b
    k = min(na, nb)
    subsets = _random_subsets(na + nb, k, draws)
    step = max(1, 1_000_000 // k)           # gathered a million values at a time
    drawn = np.concatenate([z[subsets[i:i + step]].sum(axis=1)
                            for i in range(0, draws, step)])
    sums = drawn if k == na else z.sum() - drawn
    low = 1 + int(np.count_nonzero(sums <= observed + tol))
    high = 1 + int(np.count_nonzero(sums >= observed - tol))
    return min(1.0, 2.0 * min(low, high) / (draws + 1))


# Above EXACT_MAX_SPLITS splits, this many random ones: the p's standard error
# sqrt(p (2 - p) / draws) is at most 0.0032 (p = 1), 0.0019 at p = 0.2, 0.0007 at p = 0.05,
# so a p is within 0.01 of the exact one by over 3 standard errors at any p.
PERMUTATION_DRAWS = 100_000


PERMUTATION_SEED = 20_251_207


def mc_error(p, draws=PERMUTATION_DRAWS):
    """The standard error of a Monte-Carlo permutation p: twice a tail share q = p / 2 of
    `draws` splits, 2 sqrt(q (1 - q) / draws) = sqrt(p (2 - p) / draws)."""
    return math.sqrt(max(p * (2.0 - p), 0.0) / draws)


@functools.lru_cache(maxsize=4)
def _random_subsets(n, k, draws):
    """`draws` random k-subsets of range(n), uniform, as rows of an array: the same for every
    row of a table with these sizes (drawn once, cached), and seeded from the sizes, so that
    one comparison prints the same p every time. Few indexes out of many (a canary of 3 hosts
    against 60): k indexes drawn with replacement, the rows that repeat one drawn again;
    otherwise the k smallest of n random keys, in chunks that keep the keys to a few
    megabytes."""
    import numpy as np

    rng = np.random.default_rng([PERMUTATION_SEED, n, k, draws])
    dtype = np.int16 if n < 2 ** 15 else np.int32
    if k * (k - 1) <= n:                  # at most about half the rows repeat an index
        out = rng.integers(0, n, size=(draws, k), dtype=dtype)
        again = np.arange(draws)
        while len(again):
            rows = out[again]
            repeats = np.zeros(len(again), dtype=bool)
            for i, j in itertools.combinations(range(k), 2):
                repeats |= rows[:, i] == rows[:, j]
            again = again[repeats]
            out[again] = rng.integers(0, n, size=(len(again), k), dtype=dtype)
        return out
    out = np.empty((draws, k), dtype=dtype)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, draws, chunk):
        keys = rng.random((min(chunk, draws - start), n))
        out[start:start + len(keys)] = np.argpartition(keys, k - 1, axis=1)[:, :k]
    return out


@dataclass
class PValue:
    p: float | None           # two-sided p; None: not tested
    method: str | None        # what computed p: permutation, permutation-ranks (exact), or
                              # permutation-mc, permutation-ranks-mc (random splits)
    reason: str | None = None  # why there is no p (None when there is one)
    error: float | None = None  # the standard error of a Monte-Carlo p (None: exact)


def two_sample(test, a, b, what="runs"):
    """The p-value of `test` ("welch" or "mannwhitney") for samples a, b: the permutation test
    of the difference in means (welch) or in average ranks (mannwhitney), at every size:

    - fewer than MIN_TEST_N values a side: not tested, and the reason says so;
    - every value on both sides equal: not tested ("all values are equal"), as a test of
      nothing;
    - up to EXACT_MAX_SPLITS splits of the pooled values: exact, every split enumerated (no
      normal approximation, no t distribution fitted to two or three values, no p below
      2 / C(n_a + n_b, n_a));
    - two constant sides that differ, at any size: the exact p 2 / C(n_a + n_b, n_a) (only
      the observed split, and for equal sides its mirror, is as extreme);
    - above: PERMUTATION_DRAWS random splits (permutation_p()), with the p's standard error.
      Welch's t and the normal approximation of the U test are not used: with sides as
      unequal as a canary of 3 hosts against 60, Welch's t on the canary's three values
      called a null row changed in most tables of 20 count rows.
    """
    if len(a) < MIN_TEST_N or len(b) < MIN_TEST_N:
        few = min(len(a), len(b))
        return PValue(None, None, f"{few} {what[:-1] if few == 1 else what} on a side; "
                                      f"a test needs {MIN_TEST_N} a side")
    if len(set(a) | set(b)) == 1:
        return PValue(None, None, f"all values are equal ({a[0]:g})")
    ranks = test == "mannwhitney"
    method = "permutation-ranks" if ranks else "permutation"
    exact = splits(len(a), len(b)) <= EXACT_MAX_SPLITS
    if not exact and len(set(a)) == 1 and len(set(b)) == 1:
        return PValue(smallest_p(len(a), len(b)), method)
    p = permutation_p(a, b, ranks=ranks)
    if exact:
        return PValue(p, method)
    return PValue(p, method + "-mc", error=mc_error(p))


def reachable_p(na, nb):
    """The smallest p a test of na v nb values can give: 2 / C(na + nb, na) where every split
    is enumerated, 2 / (PERMUTATION_DRAWS + 1) where they are drawn."""
    if splits(na, nb) <= EXACT_MAX_SPLITS:
        return smallest_p(na, nb)
    return 2.0 / (PERMUTATION_DRAWS + 1)


def out_of_reach(na, nb, alpha):
    """Why a test of na v nb values can say nothing at `alpha` (its smallest p is not below
    alpha), or None when it can."""
    if na < MIN_TEST_N or nb < MIN_TEST_N:
        return None
    low = reachable_p(na, nb)
    if low < alpha:
        return None
    if splits(na, nb) > EXACT_MAX_SPLITS:
        return (f"{na} v {nb}: {PERMUTATION_DRAWS:,} random splits give no p below {low:.2g}, "
                f"so p < {alpha:g} cannot be reached")
    return (f"{na} v {nb}: no split of {na + nb} values gives p below {low:.2g} "
            f"(2 of {splits(na, nb)} splits), so p < {alpha:g} cannot be reached")


def calls_need(floors, alpha, method="bh"):
    """How many rows must sit at their smallest reachable p (`floors`, one per test of the
    table) before the correction can call any: 1 where one row can be called alone, None
    where none can at all. Benjamini-Hochberg calls the k smallest where the k-th is at most
    k * alpha / m, so with every p at least its floor it needs the least k whose k-th
    smallest floor is at most that; Holm needs the smallest floor below alpha / m."""
    m = len(floors)
    if not m:
        return None
    ordered = sorted(floors)
    if method == "none":
        return 1 if ordered[0] < alpha else None
    if method == "holm":
        return 1 if ordered[0] < alpha / m else None
    for k, floor in enumerate(ordered, 1):
        if floor <= k * alpha / m:
            return k
    return None


def percent_change(base, new):
    """Plain change (new - base) / |base| in %, without direction (new/base - 1 for a positive
    baseline; positive always means higher, over a negative baseline too); None from a zero
    baseline."""
    if base is None or new is None:
        return None
    if base == 0:
        return 0.0 if new == 0 else None
    ratio = _ratio(new, base)
    if ratio is None:
        return None
    return (ratio - 1.0) * 100.0 if base > 0 else (1.0 - ratio) * 100.0


# ---------------------------------------------------------------- across the rows of a table

CORRECTIONS = {"bh": "Benjamini-Hochberg (false discovery rate)",
               "holm": "Holm (family-wise error rate)",
               "none": "none"}


def adjust(pvalues, method="bh"):
    """The p-values adjusted across one table's tests (None stays None and is not counted).

    bh: Benjamini-Hochberg, p_(i) * m / i made monotone from the largest down, which keeps
    the expected share of false discoveries at most alpha; holm: (m - i + 1) * p_(i) made
    monotone from the smallest up, which keeps the chance of any false one at most alpha.
    Both as scipy.stats.false_discovery_control and statsmodels' multipletests give them
    (tests/test_compare_stats.py holds them equal).
    """
    import numpy as np

    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r} (one of {', '.join(CORRECTIONS)})")
    tested = [i for i, p in enumerate(pvalues) if p is not None]
    out = list(pvalues)
    if not tested or method == "none":
        return out
    p = np.array([pvalues[i] for i in tested], dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "bh":
        scaled = ranked * m / np.arange(1, m + 1)
        adjusted = np.minimum.accumulate(scaled[::-1])[::-1]
    else:
        scaled = ranked * (m - np.arange(m))
        adjusted = np.maximum.accumulate(scaled)
    back = np.empty(m)
    back[order] = np.minimum(adjusted, 1.0)
    for i, value in zip(tested, back):
        out[i] = float(value)
    return out


# ---------------------------------------------------------------- intervals: the bootstrap (a side's)

BOOTSTRAP_RESAMPLES = 2000
CI_LEVEL = 0.95


def _stat_rows(stat, samples):
    """The statistic of each row of a 2-D array of resampled values."""
    import numpy as np

    if stat == "Hmean":
        return samples.shape[1] / np.sum(1.0 / samples, axis=1)
    if stat == "Median":
        return np.median(samples, axis=1)
    return samples.mean(axis=1)


def _resample(rng, xs, resamples):
    import numpy as np

    data = np.asarray(xs, dtype=float)
    return data[rng.integers(0, len(data), size=(resamples, len(data)))]


# ---------------------------------------------------------------- the interval of a change

# Below this many values a side the interval of a change is printed with a note that its 95%
# is not held (benchmarks/stats_calibration.py measures the coverage per n; docs/compare.md).
INTERVAL_HOLDS_FROM = 4


def fieller(base, new, level=CI_LEVEL):
    """(low, high, why) of the ratio mean(new) / mean(base) by Fieller's theorem: every ratio r
    for which mean(new) - r * mean(base) is within the t quantile of its standard error, the
    t with Welch-Satterthwaite's degrees of freedom at the estimate. (None, None, why) where
    the set is not one bounded interval: the baseline's mean is within its own error of 0,
    a side has fewer than two values, or neither side has any spread.

    On values divided by their largest magnitude (the ratio does not change), so that any
    finite input gives finite squares.
    """
    from scipy.special import stdtrit

    if len(base) < 2 or len(new) < 2:
        return None, None, "a side has fewer than two values"
    scale = _scale([*base, *new])
    a, b = [x / scale for x in base], [x / scale for x in new]
    ma, mb = math.fsum(a) / len(a), math.fsum(b) / len(b)
    va, vb = _sample_variance(a) / len(a), _sample_variance(b) / len(b)
    if va == 0 and vb == 0:
        return None, None, "neither side has any spread"
    if ma == 0:
        return None, None, "the baseline's mean is 0"
    r = mb / ma
    var = vb + r * r * va
    if var == 0:
        return None, None, "the new side has no spread and a mean of 0"
    df = var ** 2 / ((vb ** 2 / (len(b) - 1) if vb else 0.0)
                     + ((r * r * va) ** 2 / (len(a) - 1) if va else 0.0))
    t = float(stdtrit(df, (1 + level) / 2))
    lead = ma * ma - t * t * va
    if lead <= 0:
        return None, None, "the baseline's mean is within its error of 0: no bounded interval"
    half = math.sqrt(t * t * (vb * lead + va * mb * mb))
    return (ma * mb - half) / lead, (ma * mb + half) / lead, None


def change_interval(stat, base, new, convention, better, level=CI_LEVEL, seed=0):
    """((low, high) or None, note or None): the interval of a row's change, in its convention.

    Amean rows: Fieller's interval of the ratio of the means (fieller()). Hmean rows: the same
    over the reciprocals (an Hmean is 1 / the mean of 1/x), inverted. Median rows: the
    percentile bootstrap of the ratio of the medians (no closed form). Where every value is
    >= 0 the ratio cannot fall below 0, and the interval is cut there (so a count's change
    stays at or above -100%). The note says why there is no interval, or that the 95% is not
    held at this many values a side (below INTERVAL_HOLDS_FROM, measured).
    """
    if len(base) < 2 or len(new) < 2:
        return None, "a side has fewer than two values"
    if stat == "Median":
        ratio = _bootstrap_ratio("Median", base, new, seed, level)
        why = None if ratio else "the baseline's resampled medians reach 0"
        lo, hi = ratio if ratio else (None, None)
    elif stat == "Hmean":
        base_r, new_r = reciprocals(base, new)
        lo_r, hi_r, why = fieller(base_r, new_r, level)
        if why is None and lo_r is not None and lo_r <= 0:
            why = "the reciprocals' ratio reaches 0: no bounded interval"
        lo, hi = (None, None) if why or lo_r is None or hi_r is None else (1 / hi_r, 1 / lo_r)
    else:
        lo, hi, why = fieller(base, new, level)
    if why or lo is None or hi is None:
        return None, why or "no interval"
    if min(base) >= 0 and min(new) >= 0:
        lo, hi = max(lo, 0.0), max(hi, 0.0)
    # in % up from the baseline, (new - base) / |base|, as percent_change() and pct_diff()
    if (mean_of(stat, base) or 0) >= 0:
        interval = (float(lo) * 100.0 - 100.0, float(hi) * 100.0 - 100.0)
    else:
        interval = (100.0 - float(hi) * 100.0, 100.0 - float(lo) * 100.0)
    if convention == "mmtests" and better == "lower":
        interval = (-interval[1], -interval[0])
    if not all(math.isfinite(x) for x in interval):
        return None, "the interval is beyond what a float holds"
    note = None
    if min(len(base), len(new)) < INTERVAL_HOLDS_FROM:
        note = (f"{min(len(base), len(new))} values on a side: this interval's 95% is not held "
                f"below {INTERVAL_HOLDS_FROM} a side")
    return interval, note


def reciprocals(a, b):
    """m/x for every value of a and of b, m the smallest of them all: the reciprocals up to one
    factor (which no test or ratio of means sees), each in (0, 1], where 1/x would overflow
    for a subnormal x. For positive values only (an Hmean row's)."""
    m = min(*a, *b)
    return [m / x for x in a], [m / x for x in b]


def _bootstrap_ratio(stat, base, new, seed, level, resamples=BOOTSTRAP_RESAMPLES):
    import numpy as np

    scale = _scale([*base, *new])
    base, new = [x / scale for x in base], [x / scale for x in new]
    sb = _stat_rows(stat, _resample(np.random.default_rng(seed + 1), base, resamples))
    sn = _stat_rows(stat, _resample(np.random.default_rng(seed), new, resamples))
    if np.any(sb == 0):
        return None
    return _quantiles(sn / sb, level)


# A side's interval is printed from this many values; below, the record says why not.
SIDE_INTERVAL_FROM = 3
# A median's distribution-free interval holds 95% from 6 values (2 / 2^6 = 0.031).
MEDIAN_INTERVAL_FROM = 6


def side_interval(stat, xs, level=CI_LEVEL, most=None):
    """((low, high) or None, why none or None): a 95% interval of one side's statistic.

    Amean: Student's t interval, mean +/- t(n-1) s / sqrt(n), whose 95% is exact for normal
    values at any n (a percentile bootstrap is [min, max] at two values and held 51% there,
    80% at four). Hmean: the same interval of the mean of 1/x, inverted (none where it
    reaches 0). Median: the distribution-free interval between two order statistics, the
    widest pair whose binomial coverage is at least 95% (from MEDIAN_INTERVAL_FROM values).
    None below SIDE_INTERVAL_FROM values or where every value is equal (no spread to go
    by: five hosts at 0 say little of a mean that is rarely 0). Where every value is >= 0 the
    interval stops at 0, and at `most` (100 for a share in %) where none is above it. Over values divided by their largest magnitude, so that any finite
    input gives a finite interval."""
    interval, why = _side_interval(stat, xs, level)
    if interval and most is not None and max(xs) <= most:
        interval = (min(interval[0], most), min(interval[1], most))
    return interval, why


def _side_interval(stat, xs, level):
    n = len(xs)
    if n < SIDE_INTERVAL_FROM:
        return None, f"{n} value{'' if n == 1 else 's'}: an interval needs {SIDE_INTERVAL_FROM}"
    if len(set(xs)) == 1:
        return None, "every value is equal: no spread to go by"
    if stat == "Median":
        return _median_interval(xs, level)
    scale = _scale(xs)
    if stat == "Hmean":
        m = min(xs)
        lo, hi = _t_interval([m / x for x in xs], level)
        if lo <= 0:
            return None, "the interval of the mean of 1/x reaches 0: no bounded interval"
        return (m / hi, m / lo), None
    lo, hi = _t_interval([x / scale for x in xs], level)
    if min(xs) >= 0:
        lo = max(lo, 0.0)
    return (lo * scale, hi * scale), None


def _t_interval(xs, level):
    from scipy.special import stdtrit

    n = len(xs)
    mean = math.fsum(xs) / n
    half = float(stdtrit(n - 1, (1 + level) / 2)) * math.sqrt(_sample_variance(xs) / n)
    return mean - half, mean + half


def _median_interval(xs, level):
    """The order statistics x_(j) .. x_(n+1-j) with the largest j whose coverage,
    1 - 2 P(Binomial(n, 1/2) < j), is at least `level`."""
    n = len(xs)
    if n < MEDIAN_INTERVAL_FROM:
        return None, (f"{n} values: a median's 95% interval needs {MEDIAN_INTERVAL_FROM}")
    ordered = sorted(xs)
    below, j = 0.0, 0
    while True:
        below_next = below + math.comb(n, j) / 2.0 ** n      # P(B <= j)
        if 1 - 2 * below_next < level:
            break
        below, j = below_next, j + 1
    return (ordered[j - 1], ordered[n - j]), None


def _quantiles(values, level):
    import numpy as np

    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


# ---------------------------------------------------------------- how many runs would tell

POWER = 0.8
# Above this many a side the t distribution is the normal one to four digits: the normal
# approximation's n is the answer.
EXACT_UP_TO = 20_000


def runs_needed(base, new, detect_pct, alpha, power=POWER, explain=False):
    """Runs (or hosts) per side for a two-sided t-test at level `alpha` to detect, with
    probability `power`, a change of detect_pct % of the baseline's mean, given the spread
    the two sides show (the root mean of their variances). None when there is no spread
    to go by (fewer than MIN_TEST_N values a side, or none differ) or no baseline mean to
    take a percentage of; explain=True returns (n, why it is None).

    Power from the noncentral t distribution with 2n - 2 degrees of freedom (scipy.stats),
    the n of equal sides, as statistical power tables compute it; never fewer than a test
    runs on (MIN_TEST_N), nor fewer than the exact permutation test, which compare uses at
    that size, needs for its smallest p to fall below `alpha`.
    """
    n, why = _runs_needed(base, new, detect_pct, alpha, power)
    return (n, why) if explain else n


def _runs_needed(base, new, detect_pct, alpha, power):
    import numpy as np
    from scipy import stats as sps

    if len(base) < MIN_TEST_N or len(new) < MIN_TEST_N:
        return None, f"a spread needs {MIN_TEST_N} values a side to go by"
    scale = _scale([*base, *new])
    base, new = [x / scale for x in base], [x / scale for x in new]
    sd = math.sqrt((_sample_variance(base) + _sample_variance(new)) / 2)
    delta = abs(amean(base)) * detect_pct / 100.0
    if not delta:
        return None, "the baseline's mean is 0"
    if sd == 0:
        return None, "no spread to go by (every value equal on each side)"
    floor = MIN_TEST_N
    while splits(floor, floor) <= EXACT_MAX_SPLITS and smallest_p(floor, floor) >= alpha:
        floor += 1
    # the normal approximation: n = 2 ((z_(1-alpha/2) + z_power) sd / delta)^2
    z = (sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power)) * sd / delta
    guess = max(2, math.ceil(2 * z * z))
    if guess > EXACT_UP_TO:
        return max(guess, floor), None
    n = np.arange(2, 2 * guess + 20)
    df = 2 * n - 2
    ncp = delta / (sd * np.sqrt(2.0 / n))
    crit = sps.t.ppf(1 - alpha / 2, df)
    got = sps.nct.sf(crit, df, ncp) + sps.nct.cdf(-crit, df, ncp)
    found = int(n[np.argmax(got >= power)]) if np.any(got >= power) else guess
    return max(found, floor), None
