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


def test_constant_sides():
    assert st.welch_p([0.0, 0.0, 0.0], [0.0, 0.0]) == 1.0
    assert st.welch_p([1.0, 1.0], [2.0, 2.0]) == 0.0
    assert st.mannwhitney_p([0.0, 0.0], [0.0, 0.0]) == 1.0


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
    assert rec["welch_p"] == pytest.approx(_welch_by_hand([0.0, 0.0, 0.0], [2.0, 3.0, 1.0]))
    assert rec["leaning"] == "worse"          # from 0 to 2: a rise, where lower is better
    notes = missing_notes(sides, rows)
    assert any("baseline's mean is 0" in n and LOWER.name in n for n in notes)
    for text in (co.format_text(sides, table, notes=notes), co.format_markdown(sides, table, notes),
                 co.format_mmtests(sides, table, notes=notes)):
        assert "inf" not in text
        assert "n/a" in text and "baseline's mean is 0" in text


