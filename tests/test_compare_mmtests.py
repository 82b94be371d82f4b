"""mmtests' statistics where a row carries mmtests' name, pinned to values derived by hand.

The definitions are mmtests' own (bin/lib/MMTests/Stat.pm and Summarise.pm, read, not
copied): a side's values sorted best first (descending where higher is better);
BHmean-N / BAmean-N the harmonic / arithmetic mean of the first int(n*N/100) of them
(at least one); about an Hmean H the spread is HStddev = sqrt(H^4 * sum((1/x - 1/H)^2) / n)
and HCoeffVar = 100 * HStddev / H; about an Amean the sample stddev and 100 * s / Amean.
The band test marks a change where H +/- 1.96 * HStddev of the two sides do not overlap.

The expected numbers below are worked out in the comments, not produced by the code.
"""
import math

import pytest

from kmemscope.queries import statistics as st
from kmemscope.queries.metrics import SUMMARY
from kmemscope.queries.sides import SideSet

SUCCESS = SUMMARY["compaction_success_pct"]           # higher is better: Hmean rows
LOWER = SUMMARY["highatomic_pageblocks_max"]          # lower is better: Amean rows

# compaction_success_pct of examples/ab-defrag-mode's four defrag0 runs (vmstat's
# 100 * compact_success / compact_stall per run), where mmtests prints BHmean-95 60.93.
DEFRAG0 = [60.33519553072626, 45.96774193548387, 91.66666666666667, 35.67251461988304]


def test_bhmean_95_keeps_three_of_four_runs_as_mmtests_prints_60_93():
    # int(4 * 95 / 100) = int(3.8) = 3 runs: the best three, 91.67, 60.34, 45.97;
    # their Hmean = 3 / (1/91.6667 + 1/60.3352 + 1/45.9677)
    #             = 3 / (0.010909 + 0.016574 + 0.021754) = 3 / 0.049238 = 60.93
    d = st.describe(SUCCESS, DEFRAG0)
    assert round(d.best_mean, 2) == 60.93
    assert st.best_count(4) == 3 and st.best_count(20) == 19 and st.best_count(1) == 1
    assert st.best_count(10, 90) == 9 and st.best_count(3) == 2


def test_bamean_95_of_a_lower_is_better_row_keeps_the_lowest():
    # lower is better: ascending; int(5*95/100) = 4: (1 + 2 + 3 + 4) / 4 = 2.5
    d = st.describe(LOWER, [5.0, 3.0, 1.0, 4.0, 2.0])
    assert d.best_mean == 2.5


def test_hstddev_and_hcoeffvar_on_an_hmean_row():
    # x = 2, 4, 4: H = 3 / (1/2 + 1/4 + 1/4) = 3; 1/H = 1/3
    # sum((1/x - 1/H)^2) = (1/2-1/3)^2 + 2 (1/4-1/3)^2 = 1/36 + 2/144 = 1/24
    # HStddev = sqrt(3^4 * (1/24) / 3) = sqrt(81/72) = sqrt(1.125); HCoeffVar = 100 * that / 3
    d = st.describe(SUCCESS, [2.0, 4.0, 4.0])
    assert d.mean == pytest.approx(3.0)
    assert d.stddev == pytest.approx(math.sqrt(1.125))
    assert d.coeffvar == pytest.approx(100 * math.sqrt(1.125) / 3)
    assert st.spread_names("Hmean") == ("HStddev", "HCoeffVar")
    assert st.spread_names("Amean") == ("Stddev", "CoeffVar")


def test_band_test_uses_the_rows_own_spread():
    # base 2, 4, 4: H = 3, HStddev = 1.0607: band 0.921 .. 5.079
    # new 6, 6, 6.5: H = 3 / (2/6 + 1/6.5) = 6.1579; 1/H = 0.162393;
    #   sum = 2 (1/6 - 0.162393)^2 + (1/6.5 - 0.162393)^2 = 2 * 1.826e-05 + 7.304e-05 = 1.0955e-04
    #   HStddev = sqrt(6.1579^4 * 1.0955e-04 / 3) = 37.920 * 0.0060429 = 0.22915: band 5.709 .. 6.607
    # 5.079 < 5.709: apart. With the sample stddev about the Amean (0.2887 for new) it would
    # be apart too; about base's Amean (s = 1.1547, band 1.07 .. 5.60) too: so also check a
    # pair where the two rules disagree:
    base, new = st.describe(SUCCESS, [2.0, 4.0, 4.0]), st.describe(SUCCESS, [6.0, 6.0, 6.5])
    assert new.stddev == pytest.approx(0.22915, rel=1e-3)
    assert st.band_test(base, new) is True
    # base 1, 4, 4: H = 2, 1/H = 0.5; sum = 0.25 + 2 * 0.0625 = 0.375; HStddev = sqrt(16 * 0.375 / 3)
    #   = sqrt(2) = 1.4142: band -0.772 .. 4.772
    # new 5, 5, 5.2: H = 3 / (0.4 + 0.192308) = 5.0649, HStddev ~ 0.094: band ~4.88 .. 5.25
    # 4.772 < 4.88: apart by mmtests' rule; the sample stddev of base (1.732, Amean 3:
    # band -0.39 .. 6.39) would overlap.
    base, new = st.describe(SUCCESS, [1.0, 4.0, 4.0]), st.describe(SUCCESS, [5.0, 5.0, 5.2])
    assert base.stddev == pytest.approx(math.sqrt(2))
    assert st.band_test(base, new) is True


def test_the_table_names_the_statistics_mmtests_names():
    from kmemscope.queries.comparison_model import compare_table

    rows = [{"run_id": f"{s}{i}", "side": s, SUCCESS.name: v}
            for s, vs in (("a", DEFRAG0), ("b", [20.86, 3.10, 4.58, 8.77])) for i, v in enumerate(vs)]
    sides = SideSet("kernel", ["a", "b"], {"a": ["a0", "a1", "a2", "a3"],
                                          "b": ["b0", "b1", "b2", "b3"]}, rows)
    rec = compare_table(sides, [SUCCESS.name], test="band").rows[0].records["a"]
    assert (rec.statistic, rec.stddev_name, rec.coeffvar_name, rec.best_name) == (
        "Hmean", "HStddev", "HCoeffVar", "BHmean-95")
    assert round(rec.best_mean, 2) == 60.93
