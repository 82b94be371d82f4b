"""The comparison statistics (queries/statistics.py) on fixed per-run values.

Oracles: the standard library's statistics module, hand computation of the
mmtests formulas (mmtests' compare-kernels), Welch's t from its textbook formula,
and an exact Mann-Whitney p-value by enumerating every split of the ranks.
"""
import itertools
import math
import re
import statistics

import pytest
from scipy import stats as sps

from kmemscope.render import comparison as co
from kmemscope.queries import statistics as st
from kmemscope.queries.comparison_model import compare_table
from kmemscope.queries.sides import SideSet, missing_notes

HIGHER_RATE = st.METRICS["thp_fault_success_pct"]     # Hmean, higher is better
LOWER = st.METRICS["highatomic_pageblocks_max"]       # Amean, lower is better


def test_hmean_amean_stddev_match_the_statistics_module():
    xs = [44.0, 51.5, 78.0, 60.25]
    assert st.hmean(xs) == pytest.approx(statistics.harmonic_mean(xs))
    assert st.amean(xs) == pytest.approx(statistics.fmean(xs))
    assert st.stddev(xs) == pytest.approx(statistics.stdev(xs))
    d = st.describe(HIGHER_RATE, xs)
    assert d.mean == pytest.approx(4 / sum(1 / x for x in xs))       # n / sum(1/x)
    assert (d.min, d.max, d.n) == (44.0, 78.0, 4)
    a = st.describe(LOWER, xs)           # an Amean row: the sample stddev, CoeffVar over the Amean
    assert a.stddev == pytest.approx(statistics.stdev(xs))
    assert a.coeffvar == pytest.approx(100 * statistics.stdev(xs) / statistics.fmean(xs))


def test_hmean_is_never_taken_over_a_value_at_or_below_zero():
    # scipy's limit (0 for a zero) would make one idle run's 0 the whole side's mean
    assert sps.hmean([0.0, 2.0, 4.0]) == 0.0
    assert st.hmean([0.0, 2.0, 4.0]) is None
    assert st.hmean([-1.0, 2.0]) is None


def test_percent_difference_positive_means_better():
    # higher-better: new*100/base - 100; lower-better: 100 - new*100/base
    assert st.pct_diff(50.0, 60.0, "higher") == pytest.approx(20.0)
    assert st.pct_diff(50.0, 40.0, "higher") == pytest.approx(-20.0)
    assert st.pct_diff(310.0, 1.0, "lower") == pytest.approx(100 - 100 / 310)
    assert st.pct_diff(50.0, 60.0, "lower") == pytest.approx(-20.0)


def test_percent_difference_against_a_zero_baseline_is_not_a_number():
    assert st.pct_diff(0.0, 0.0, "lower") == 0.0
    assert st.pct_diff(0.0, 3.0, "lower") is None           # no finite percentage: n/a
    assert st.pct_diff(0.0, 3.0, "higher") is None
    assert st.pct_diff(None, 3.0, "higher") is None
    assert st.percent_change(0.0, 5.0) is None
    assert st.percent_change(46727.07, 57054.53) == pytest.approx(22.10, abs=0.01)   # the defrag_mode study


def test_band_test_by_hand():
    base = st.describe(LOWER, [1.0, 2.0, 3.0])       # mean 2, s 1: band 0.04 .. 3.96
    apart = st.describe(LOWER, [10.0, 11.0, 12.0])   # band 9.04 .. 12.96
    close = st.describe(LOWER, [3.0, 4.0, 5.0])      # band 2.04 .. 5.96: overlaps
    assert st.band_test(base, apart) is True
    assert st.band_test(base, close) is False


def _welch_by_hand(a, b):
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return 2 * sps.t.sf(abs(t), df)


def _mannwhitney_exact(a, b):
    """P(|U - mean| >= observed) over every equally likely split of the pooled ranks (no ties)."""
    pooled = sorted(a + b)
    rank = {v: i + 1 for i, v in enumerate(pooled)}
    n1, n2 = len(a), len(b)
    u = sum(rank[x] for x in a) - n1 * (n1 + 1) / 2
    centre = n1 * n2 / 2
    us = [sum(c) - n1 * (n1 + 1) / 2 for c in itertools.combinations(range(1, n1 + n2 + 1), n1)]
    return sum(1 for v in us if abs(v - centre) >= abs(u - centre)) / len(us)


def test_welch_and_mannwhitney_against_independent_computation():
    a = [1.2, 3.4, 6.0, 2.2, 5.1]
    b = [44.0, 78.0, 51.5, 60.25]
    assert st.welch_p(a, b) == pytest.approx(_welch_by_hand(a, b), rel=1e-9)
    assert st.mannwhitney_p(a, b) == pytest.approx(_mannwhitney_exact(a, b), rel=1e-9)
    c = [2.0, 5.5, 1.0, 3.9]
    assert st.mannwhitney_p(a, c) == pytest.approx(_mannwhitney_exact(a, c), rel=1e-9)


def test_welch_equals_scipys_ttest_ind():
    """welch_p computes Welch's test from scipy.special (a lighter import than scipy.stats):
    it gives what scipy.stats.ttest_ind(equal_var=False) gives, over samples of every shape."""
    import random

    rng = random.Random(7)
    for _ in range(300):
        na, nb = rng.randint(2, 40), rng.randint(2, 40)
        scale = 10 ** rng.uniform(-3, 6)
        a = [rng.gauss(0, 1) * scale for _ in range(na)]
        b = [rng.gauss(rng.uniform(-2, 2), rng.uniform(0.1, 5)) * scale for _ in range(nb)]
        if rng.random() < 0.1:
            b = [b[0]] * nb                      # one side constant, the other not
        want = float(sps.ttest_ind(a, b, equal_var=False).pvalue)
        assert st.welch_p(a, b) == pytest.approx(want, rel=1e-7, abs=1e-300), (a, b)


def test_mannwhitney_equals_scipys_mannwhitneyu():
    """mannwhitney_p is written out (scipy.stats is slow to import): it gives what
    scipy.stats.mannwhitneyu(alternative="two-sided") gives, exact and asymptotic, with and
    without ties, small sides and a small side against a large one."""
    import random

    rng = random.Random(11)
    for _ in range(600):
        na = rng.choice([2, 3, 5, 8, 9, 20])
        nb = rng.choice([2, 4, 8, 9, 30, 200])
        tied = rng.random() < 0.3
        a = [rng.randint(0, 5) if tied else rng.gauss(0, 1) for _ in range(na)]
        b = [rng.randint(0, 6) if tied else rng.gauss(rng.uniform(-1, 1), 1) for _ in range(nb)]
        if len(set(a) | set(b)) == 1:
            continue
        want = float(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)
        assert st.mannwhitney_p(a, b) == pytest.approx(want, rel=1e-9, abs=1e-300), (a, b)
    assert st.mannwhitney_p([1.0, float("nan")], [2.0, 3.0]) is None


def test_compare_imports_no_scipy_stats():
    """Comparing runs needs scipy.special only (scipy.stats costs half a second to import)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from kmemscope.queries import statistics as st\n"
            "st.welch_p([1.0, 2.0, 4.0], [3.0, 5.0, 9.0]); st.mannwhitney_p([1.0, 2.0], [3.0, 4.5])\n"
            "print('scipy.stats' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "False"


def test_constant_sides_never_give_a_p_of_zero():
    # Welch's t has no spread to divide by there (scipy's t is -inf, its p 0): welch_p gives
    # none, and the row is decided by the exact test
    assert sps.ttest_ind([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], equal_var=False).pvalue == 0.0
    assert st.welch_p([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]) is None
    assert st.welch_p([1.0, 1.0], [2.0, 2.0]) is None
    assert st.mannwhitney_p([0.0, 0.0], [0.0, 0.0]) == 1.0
    # two runs a side: below the stated minimum, not tested, and the reason says so
    few = st.two_sample("welch", [5.0, 5.0], [6.0, 6.0])
    assert few.p is None and f"needs {st.MIN_TEST_N}" in few.reason
    same = st.two_sample("welch", [0.0] * 4, [0.0] * 4)
    assert same.p is None and "all values are equal" in same.reason
    # constant and different at 4 v 4: the exact p, 2 of the 70 splits as extreme
    exact = st.two_sample("welch", [5.0] * 4, [6.0] * 4)
    assert exact.method == "permutation" and exact.p == pytest.approx(2 / math.comb(8, 4))
    # at 30 v 30 (beyond enumeration) the same exact p, from its count
    big = st.two_sample("welch", [5.0] * 30, [6.0] * 30)
    assert big.p == pytest.approx(2 / math.comb(60, 30)) and big.p > 0
    # a size whose smallest p cannot reach alpha says so
    assert "cannot be reached" in st.out_of_reach(3, 3, 0.05)
    assert st.out_of_reach(4, 4, 0.05) is None
    assert st.smallest_p(3, 3) == pytest.approx(0.1)


def _scipy_exact(a, b, ranks=False):
    """scipy's exact permutation test of the difference in means (of average ranks)."""
    import numpy as np

    if ranks:
        r = sps.rankdata(a + b)
        a, b = list(r[:len(a)]), list(r[len(a):])
    return float(sps.permutation_test((np.array(a), np.array(b)),
                                      lambda x, y, axis: x.mean(axis=axis) - y.mean(axis=axis),
                                      permutation_type="independent", vectorized=True,
                                      n_resamples=np.inf, alternative="two-sided").pvalue)


def test_exact_permutation_test_equals_scipys_permutation_test():
    import random

    rng = random.Random(5)
    for _ in range(200):
        na, nb = rng.randint(2, 6), rng.randint(2, 6)
        if rng.random() < 0.5:          # counts, with ties: what small kernel A/Bs give
            mean = rng.choice([0.5, 1, 2, 5])
            a = [float(sum(rng.random() < mean / 10 for _ in range(10))) for _ in range(na)]
            b = [float(sum(rng.random() < mean / 10 for _ in range(10))) for _ in range(nb)]
        else:
            a = [rng.gauss(0, 1) for _ in range(na)]
            b = [rng.gauss(rng.uniform(-2, 2), 1) for _ in range(nb)]
        if len(set(a) | set(b)) == 1:
            continue
        for ranks in (False, True):
            got = st.permutation_p(a, b, ranks=ranks)
            assert got == pytest.approx(_scipy_exact(a, b, ranks), rel=1e-12), (a, b, ranks)
            assert got >= st.smallest_p(na, nb) - 1e-15
    # without ties the rank version is the exact Mann-Whitney U test
    a, b = [1.2, 3.4, 6.0, 2.2, 5.1], [44.0, 78.0, 51.5, 60.25]
    assert st.permutation_p(a, b, ranks=True) == pytest.approx(_mannwhitney_exact(a, b))


def test_two_constant_count_sides_at_two_runs_are_not_significant():
    """The issue's imported 5,5 v 6,6: before, Welch's 0 made it `-20.00% worse *`."""
    sides = _sides({"a": [5.0, 5.0], "b": [6.0, 6.0]}, LOWER.name)
    for test in ("welch", "mannwhitney", "band"):
        rec = compare_table(sides, [LOWER.name], test=test).rows[0].records["b"]
        assert rec.significant is None and rec.verdict == "not tested", test
        assert "a test needs 3" in rec.untested and "not tested: " in co.verdict_text(rec)


def _fieller_by_hand(a, b, level=0.95):
    """Fieller's set {r : (mb - r ma)^2 <= t^2 (vb + r^2 va)} found by bisection on a grid,
    t from scipy.stats with Welch-Satterthwaite's df at the estimate."""
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    r = mb / ma
    df = (vb + r * r * va) ** 2 / (vb ** 2 / (len(b) - 1) + (r * r * va) ** 2 / (len(a) - 1))
    t = sps.t.ppf((1 + level) / 2, df)

    def inside(x):
        return (mb - x * ma) ** 2 <= t * t * (vb + x * x * va)

    def edge(lo, hi):          # lo inside, hi outside
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if inside(mid) else (lo, mid)
        return lo
    return edge(r, r - 1e6), edge(r, r + 1e6)


def test_change_interval_is_fiellers_and_says_when_there_is_none():
    a, b = [100.0, 104.0, 97.0, 101.0], [110.0, 115.0, 108.0, 111.0]
    lo, hi = _fieller_by_hand(a, b)
    (got_lo, got_hi), note = st.change_interval("Amean", a, b, "counter", "lower")
    assert (got_lo, got_hi) == pytest.approx((lo * 100 - 100, hi * 100 - 100), rel=1e-6)
    assert note is None
    # mmtests lower-is-better: 100 - 100 r, the ends swapped
    (m_lo, m_hi), _ = st.change_interval("Amean", a, b, "mmtests", "lower")
    assert (m_lo, m_hi) == pytest.approx((100 - hi * 100, 100 - lo * 100), rel=1e-6)
    # an Hmean row: the reciprocals' ratio, inverted
    r_lo, r_hi = _fieller_by_hand([1 / x for x in a], [1 / x for x in b])
    (h_lo, h_hi), _ = st.change_interval("Hmean", a, b, "mmtests", "higher")
    assert (h_lo, h_hi) == pytest.approx((100 / r_hi - 100, 100 / r_lo - 100), rel=1e-6)
    # no spread at all, or a baseline within its error of 0: no interval, and why
    assert st.change_interval("Amean", [5.0] * 4, [6.0] * 4, "counter", "lower") == (
        None, "neither side has any spread")
    none, why = st.change_interval("Amean", [0.0, 0.0, 5.0, 0.0], [1.0, 2.0, 1.0, 3.0],
                                   "counter", "lower")
    assert none is None and "no bounded interval" in why
    # counts: the ratio cannot fall below 0, so a change stays at or above -100%
    (c_lo, _), _ = st.change_interval("Amean", [40.0, 50.0, 45.0, 55.0], [0.0, 1.0, 0.0, 30.0],
                                      "counter", "lower")
    assert c_lo == -100.0


@pytest.mark.parametrize("value", [1.7e308, 5e-324, -1.7e308])
def test_any_finite_value_gives_finite_statistics(value):
    """The issue's imported values: OverflowError (HStddev's H^4), ZeroDivisionError, +nan%."""
    import warnings

    metric = st.Metric(name="x", better="higher", unit="u", title="x", kind="imported")
    values = {"a": [value, value / 2, value, value / 4], "b": [value / 2, value, value / 3, value]}
    sides = _sides(values, "x")
    sides.metrics = {"x": metric}
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # numpy's overflow warnings fail the test
        table = compare_table(sides, ["x"], detect=5)
        rec = table.rows[0].records["b"]
    for field in ("value", "stddev", "coeffvar", "best_mean", "change", "change_low",
                  "change_high", "p"):
        got = getattr(rec, field)
        assert got is None or math.isfinite(got), (field, got)
    assert rec.p is not None and rec.change is not None
    # the statistics equal scipy's / the statistics module's on the same values scaled to 1
    scale = abs(value)
    b = [x / scale for x in values["b"]]
    want = statistics.harmonic_mean(b) if value > 0 else statistics.fmean(b)
    assert rec.value / scale == pytest.approx(want, rel=1e-12)


def test_one_run_side_has_no_stddev_and_no_tests():
    one = st.describe(HIGHER_RATE, [40.0])
    many = st.describe(HIGHER_RATE, [1.0, 6.0, 3.0])
    assert one.n == 1 and one.stddev is None and one.coeffvar is None
    assert st.welch_p(many.values, one.values) is None and st.mannwhitney_p(many.values, one.values) is None
    assert st.band_test(many, one) is None
    sides = _sides({"many": [1.0, 6.0, 3.0], "one": [40.0]}, HIGHER_RATE.name)
    rec = compare_table(sides, [HIGHER_RATE.name]).rows[0].records["one"]
    assert rec.significant is None and rec.verdict == "not tested" and rec.p is None
    assert rec.change == pytest.approx(40.0 * 100 / statistics.harmonic_mean([1.0, 6.0, 3.0]) - 100)


def test_null_values_are_left_out_and_counted():
    d = st.describe(LOWER, [None, 309.0, float("nan"), 312.0])
    assert (d.n, d.runs_without_value, d.range) == (2, 2, "309-312")
    empty = st.describe(LOWER, [None, None])
    assert empty.n == 0 and empty.mean is None and empty.range == "n/a"


@pytest.mark.parametrize("values, unit, text", [
    ([1.2, 6.4, 3.3], "%", "1-6%"),          # the high-atomic reservation study's way
    ([44.1, 78.0], "%", "44-78%"),
    ([309.0, 312.0], "", "309-312"),
    ([1.0], "", "1"),
    ([0.0, 0.0], "", "0"),
    ([0.31, 0.35], "%", "0.31-0.35%"),
    ([2.04, 2.06], "", "2.0-2.1"),
    ([0.3, 0.3], "%", "0.3%"),
])
def test_value_range(values, unit, text):
    assert st.value_range(values, unit) == text


def _sides(values_by_side, metric):
    rows, runs = [], {}
    for side, values in values_by_side.items():
        runs[side] = []
        for i, v in enumerate(values):
            run = f"{side}-{i}"
            runs[side].append(run)
            rows.append({"run_id": run, "side": side, metric: v})
    return SideSet("kernel", list(values_by_side), runs, rows)


def test_text_table_marks_significant_cells_and_one_run_sides():
    sides = _sides({"vanilla": [310.0, 311.0, 309.0, 312.0], "patched": [1.0, 1.0, 2.0, 1.0],
                    "single": [5.0]}, LOWER.name)
    rows = compare_table(sides, [LOWER.name], test="band")
    text = co.format_text(sides, rows)
    amean = next(line for line in text.splitlines() if line.startswith("Amean"))
    pct = 100 - statistics.fmean([1.0, 1.0, 2.0, 1.0]) * 100 / 310.5
    assert f"*{pct:7.2f}%*" in amean                   # bands far apart: marked the mmtests way
    assert f"({100 - 5.0 * 100 / 310.5:7.2f}%)" in amean  # one run: no test, no mark
    assert re.search(r"^Range\s+highatomic_pageblocks_max\s+309-312\s+1-2\s+5$", text, re.M)
    assert "n/a: single has one run: no stddev, and no test of significance" in text
    recs = {r["side"]: r for r in co.records(sides, rows)}
    assert recs["patched"]["band_apart"] is True and recs["patched"]["verdict"] == "better"
    assert recs["single"]["welch_p"] is None and recs["single"]["stddev"] is None


def test_zero_baseline_is_n_a_with_a_note_never_inf():
    sides = _sides({"vanilla": [0.0, 0.0, 0.0], "patched": [2.0, 3.0, 1.0]}, LOWER.name)
    table = compare_table(sides, [LOWER.name])
    rows = table.rows
    rec = [r for r in co.records(sides, table) if r["side"] == "patched"][0]
    assert rec["change"] is None and rec["change_low"] is None
    # 3 v 3: the exact permutation test (Welch's t fitted to three values would say 0.074)
    assert rec["welch_p"] == pytest.approx(_scipy_exact([0.0, 0.0, 0.0], [2.0, 3.0, 1.0]))
    assert rec["method"] == "permutation" and "cannot be reached" in rec["untested"]
    assert rec["leaning"] == "worse"          # from 0 to 2: a rise, where lower is better
    notes = missing_notes(sides, rows)
    assert any("baseline's mean is 0" in n and LOWER.name in n for n in notes)
    for text in (co.format_text(sides, table, notes=notes), co.format_markdown(sides, table, notes),
                 co.format_mmtests(sides, table, notes=notes)):
        assert "inf" not in text
        assert "n/a" in text and "baseline's mean is 0" in text




def test_best_runs_row_is_named_for_what_it_computes_under_every_stat():
    """--stat median labelled the median of the best runs `BAmean-95`; the row is the Amean of
    the best 3 of 4 (mmtests' BAmean-95) under --stat median and amean, the Hmean under hmean."""
    xs = [1210.91, 719.55, 412.19, 1052.93]
    best3 = sorted(xs, reverse=True)[:3]
    for stat, name, want in (("Median", "BAmean-95", statistics.fmean(best3)),
                             ("Amean", "BAmean-95", statistics.fmean(best3)),
                             ("Hmean", "BHmean-95", statistics.harmonic_mean(best3))):
        d = st.describe(HIGHER_RATE, xs, stat=stat)
        assert st.best_name(stat) == name and d.best_mean == pytest.approx(want), stat
