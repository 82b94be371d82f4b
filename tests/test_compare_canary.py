"""Verdicts for a few canary hosts against a fleet, and what each output can stand behind.

Every figure goes through compare's own path, compare_table() over a SideSet of per-unit
values (what `kmemscope compare` calls after reading a dataset). Oracles: the exact
permutation p by full enumeration of the C(63, 3) = 39,711 splits (itertools, here);
the true mean of the distribution the values are drawn from (coverage); mmtests' Stat.pm
formulas written out here (CoeffVar over the Amean); the verdict's direction read from the
two sides' values.
"""
import itertools
import math
import re
import statistics

import numpy as np
import pytest

from kmemscope.queries import statistics as st
from kmemscope.queries.comparison_model import compare_table
from kmemscope.queries.metrics import MTHP_BETTER, VMSTAT_DIRECTIONS, Metric
from kmemscope.queries.sides import SideSet
from kmemscope.render import comparison as co
from kmemscope.render.verdicts import verdict_text


def sides_of(base, new, better="lower", unit="count", names=None):
    """A SideSet of two sides ("base", "new"), one metric per row of `base`/`new` (rows of
    per-unit values), each an imported metric with the direction given."""
    base, new = np.atleast_2d(base), np.atleast_2d(new)
    names = names or [f"m{i:02}" for i in range(len(base))]
    metrics = {n: Metric(n, better, unit, n, "imported") for n in names}
    rows, runs = [], {"base": [], "new": []}
    for side, values in (("base", base), ("new", new)):
        for j in range(values.shape[1]):
            run = f"{side}{j}"
            runs[side].append(run)
            rows.append({"run_id": run, "side": side,
                         **{n: float(values[i, j]) for i, n in enumerate(names)}})
    return SideSet("kernel", ["base", "new"], runs, rows, metrics=metrics)


def new_records(table):
    return [r.records["new"] for r in table.rows]


def exact_permutation_p(a, b):
    """Two-sided exact permutation p of the difference in means, every split enumerated."""
    pooled = np.array(a + b, dtype=float)
    total, na = pooled.sum(), len(a)
    observed = pooled[:na].mean() - pooled[na:].mean()
    nb = len(pooled) - na
    low = high = count = 0
    for idx in itertools.combinations(range(len(pooled)), na):
        s = pooled[list(idx)].sum()
        diff = s / na - (total - s) / nb
        low += diff <= observed + 1e-9
        high += diff >= observed - 1e-9
        count += 1
    return min(1.0, 2 * min(low, high) / count)


def test_a_zero_canary_against_sixty_hosts_gets_the_permutation_p():
    rng = np.random.default_rng(11)
    fleet = rng.poisson(1.0, 60).astype(float)
    canary = [0.0, 0.0, 0.0]
    want = exact_permutation_p(canary, list(fleet))
    # the canary is the "new" side: compare's p must be the same permutation p either way round
    table = compare_table(sides_of(fleet, canary))
    rec = new_records(table)[0]
    assert rec.method == "permutation-mc" and rec.p_error is not None
    assert abs(rec.p - want) < 0.01, (rec.p, want)
    assert rec.p_error == pytest.approx(math.sqrt(rec.p * (2 - rec.p) / st.PERMUTATION_DRAWS))
    # Welch's t on three equal values: what compare used to print (p ~ 1e-11, "worse *")
    assert st.welch_p(canary, list(fleet)) < 1e-6 and want > 0.01
    # the text output says which p were counted over random splits, and their error
    text = co.format_text(sides_of(fleet, canary), table)
    assert re.search(r"p over random splits .*standard error at most 0\.00\d\d\): m00", text)
    # seeded: the same p on every call
    assert new_records(compare_table(sides_of(fleet, canary)))[0].p == rec.p


def test_monte_carlo_p_is_never_zero_and_counts_the_observed_split():
    # the most extreme split of 39,711: the observed one counts, so p >= 2 / (draws + 1) > 0,
    # and a draw or two of that same split adds as much again
    far = st.permutation_p([100.0, 101.0, 102.0], list(np.arange(60.0)))
    assert 2 / (st.PERMUTATION_DRAWS + 1) <= far <= 12 / (st.PERMUTATION_DRAWS + 1)
    # the constant sides' p is exact at any size (only the observed split is as extreme)
    p = st.two_sample("welch", [5.0] * 3, [6.0] * 60)
    assert p.p == pytest.approx(2 / math.comb(63, 3)) and p.error is None


@pytest.mark.slow   # 120 tables of 20 rows, 4,800 Monte-Carlo tests: about ten seconds
@pytest.mark.parametrize("canary", [3, 4])
@pytest.mark.parametrize("kind", ["poisson 0.5", "poisson 1", "normal"])
def test_null_canary_tables_call_almost_nothing(canary, kind):
    rng = np.random.default_rng(canary * 100 + len(kind))

    def draw(shape):
        if kind == "normal":
            return 100 + 10 * rng.standard_normal(shape)
        return rng.poisson(float(kind.split()[1]), shape).astype(float)

    called = 0
    for _ in range(20):
        recs = new_records(compare_table(sides_of(draw((20, 60)), draw((20, canary)))))
        called += any(r.significant for r in recs)
        assert all(r.method in (None, "permutation-mc", "permutation") for r in recs)
    assert called <= 2, f"{called} of 20 null tables at {canary} v 60 ({kind}) called a row"


def test_side_intervals_cover_at_four_runs_or_are_not_printed():
    """1,600 rows of normal values at 4 v 4: each side's 95% interval holds the true mean at
    least 92% of the times it is printed."""
    rng = np.random.default_rng(4)
    held = printed = 0
    for _ in range(80):
        table = compare_table(sides_of(100 + 10 * rng.standard_normal((20, 4)),
                                       100 + 10 * rng.standard_normal((20, 4))))
        for row in table.rows:
            for rec in row.records.values():
                if rec.value_low is None:
                    assert rec.value_note, rec.metric
                    continue
                printed += 1
                held += rec.value_low <= 100 <= rec.value_high
    assert printed >= 3000
    assert held / printed >= 0.92, held / printed


def test_side_intervals_say_why_they_are_absent():
    recs = compare_table(sides_of([[1.0, 2.0]], [[3.0, 3.0, 3.0]])).rows[0].records
    assert recs["base"].value_low is None and "needs 3" in recs["base"].value_note
    assert recs["new"].value_low is None and "no spread" in recs["new"].value_note
    # a median's interval is two order statistics, from 6 values: here x(1) .. x(6) of 6
    lo_hi, why = st.side_interval("Median", [5.0, 1.0, 4.0, 2.0, 6.0, 3.0])
    assert lo_hi == (1.0, 6.0) and why is None
    assert st.side_interval("Median", [1.0, 2.0, 3.0, 4.0, 5.0])[0] is None


def test_band_test_marks_no_row_without_spread():
    sides = sides_of([[5.0, 5.0, 5.0, 5.0]], [[6.0, 6.0, 6.0, 6.0]])
    text = co.format_mmtests(sides, compare_table(sides, test="band"))
    assert "*" not in "".join(line for line in text.splitlines() if line.startswith("Amean"))
    rec = new_records(compare_table(sides, test="band"))[0]
    assert rec.significant is None and "no spread" in rec.untested


def test_band_test_at_three_runs_marks_nothing_the_text_calls_untestable():
    sides = sides_of([[5.0, 5.0, 5.0]], [[6.0, 6.0, 6.0]])
    assert "cannot be reached" in new_records(compare_table(sides))[0].untested
    text = co.format_mmtests(sides, compare_table(sides, test="band"))
    assert "-20.00%*" not in text and "*" not in text.split("\n\n", 1)[1].split("the band")[0]
    rng = np.random.default_rng(33)
    marked = 0
    for _ in range(40):
        sides = sides_of(rng.poisson(1.0, (20, 3)), rng.poisson(1.0, (20, 3)))
        text = co.format_mmtests(sides, compare_table(sides, test="band"))
        marked += any(re.search(r"\*\s*-?\d+\.\d\d%\*", line) for line in text.splitlines())
    assert marked <= 3


def test_band_and_default_test_disagreeing_is_said_under_the_table():
    # bands apart (s small against the gap), yet at 4 v 4 with 20 rows BH calls nothing
    rng = np.random.default_rng(5)
    base = 100 + rng.standard_normal((20, 4))
    new = base + 0.0
    new[0] = [110.0, 110.5, 111.0, 110.2]
    sides = sides_of(base, new)
    band = compare_table(sides, test="band")
    assert new_records(band)[0].significant is True
    assert not new_records(compare_table(sides))[0].significant
    text = co.format_mmtests(sides, band)
    assert "disagree" in text and re.search(r"m00: bands apart; adjusted p \d", text)


def test_a_note_says_when_the_correction_needs_many_rows_at_the_floor():
    rng = np.random.default_rng(6)
    table = compare_table(sides_of(rng.normal(size=(44, 4)), rng.normal(size=(44, 4))))
    want = math.ceil(44 * (2 / math.comb(8, 4)) / 0.05)          # 26
    assert any(f"at least {want} rows" in n and "0.029" in n for n in table.notes), table.notes
    # at 10 v 10 one row can be called alone: no note
    assert not compare_table(sides_of(rng.normal(size=(44, 10)),
                                      rng.normal(size=(44, 10)))).notes


@pytest.mark.parametrize("better", ["higher", "lower"])
def test_a_negative_baseline_is_signed_by_the_direction(better):
    sides = sides_of([[-0.9, -0.91, -0.89, -0.9, -0.92]], [[-0.35, -0.36, -0.34, -0.35, -0.33]],
                     better=better, unit="score")
    rec = new_records(compare_table(sides))[0]
    # the value rose (less negative): better where higher is better, worse where lower is
    assert rec.leaning == ("better" if better == "higher" else "worse")
    assert (rec.change > 0) == (rec.leaning == "better")
    assert rec.change_low <= rec.change <= rec.change_high
    base, new = statistics.fmean([-0.9, -0.91, -0.89, -0.9, -0.92]), -0.346
    up = (new - base) / abs(base) * 100
    assert rec.change == pytest.approx(up if better == "higher" else -up, rel=1e-6)
    assert verdict_text(rec).startswith("+" if rec.leaning == "better" else "-")


def test_demand_rows_have_no_direction():
    assert VMSTAT_DIRECTIONS["thp_fault_alloc"][0] == "none"
    assert MTHP_BETTER["anon_fault_alloc"][0] == "none"
    assert VMSTAT_DIRECTIONS["thp_fault_fallback"][0] == "lower"


def test_stat_median_is_mmtests_2nd_quartile_with_coeffvar_over_the_amean():
    base, new = [10.0, 11.0, 30.0, 12.0], [20.0, 21.0, 22.0, 60.0]
    sides = sides_of([base], [new], better="higher", unit="ops")
    table = compare_table(sides, stat="Median")
    rec = table.rows[0].records["base"]
    assert rec.statistic == "Median" and rec.value == statistics.median(base)
    assert rec.coeffvar == pytest.approx(100 * statistics.stdev(base) / statistics.fmean(base))
    text = co.format_mmtests(sides, table)
    assert re.search(r"^2nd-qrtle\s+m00\s", text, re.M) and not re.search(r"^Median", text, re.M)



