#!/usr/bin/env python3
"""How often `kmemscope compare` calls a change where there is none, and finds one that is there.

Tables of 20 rows are compared side against side, many times over, at 4, 10, 60 and 300
runs (or hosts) a side:

- null tables, synthetic: every row normal (and, to see skew, log-normal) on both sides;
- null tables, real: the eight captures of examples/ab-defrag-mode/ parsed, the per-run
  values of one side (defrag0's four runs, every metric of the default table with a
  spread), whole runs resampled with replacement and dealt into two sides of n;
- shifted tables: 19 null rows and one moved by 0.5 or 0.8 standard deviations.

For each test (Welch, Mann-Whitney, the mmtests band test) and correction (none,
Benjamini-Hochberg, Holm) it prints the false-positive rate per table (the share of null
tables with any row flagged: the family-wise error rate), the false discovery rate on the
shifted tables, the false-positive rate per row, and the power per shift (the share of
tables where the moved row is flagged). The tests are scipy.stats' vectorised over the
trials (queries/statistics.py's welch_p and mannwhitney_p are held equal to them by
tests/test_compare_stats.py); the band test and the corrections are kmemscope's own
(queries/statistics.py). Last, the 95% bootstrap interval of a 0.5 sd change at 60 v 60, as
compare prints it, and how often it holds the true change.

The load average is printed beside the figures; they are rates, not timings.

usage: benchmarks/stats_calibration.py [--trials 1000] [--seed 1]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from scipy import stats as sps

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kmemscope.queries import statistics as st  # noqa: E402

SIZES = (4, 10, 60, 300)
ROWS = 20
ALPHA = 0.05
SHIFTS = (0.5, 0.8)
TESTS = ("welch", "mannwhitney", "band")
CORRECTIONS = ("none", "bh", "holm")


def print_load():
    """The 1-minute load average beside the figures (a loaded machine's are noise)."""
    print("(1-minute load average", round(load1(), 2), ")")


def load1():
    return os.getloadavg()[0]


def pvalues(test, a, b):
    """(trials, rows) p-values of `test` for sides a, b of shape (trials, rows, n)."""
    if test == "welch":
        p = sps.ttest_ind(a, b, axis=2, equal_var=False).pvalue
    else:
        p = sps.mannwhitneyu(a, b, axis=2, alternative="two-sided").pvalue
    return np.nan_to_num(p, nan=1.0)


def band_flags(a, b):
    """(trials, rows) of the mmtests band test on Amean rows: mean +/- 1.96 s do not overlap."""
    ma, mb = a.mean(axis=2), b.mean(axis=2)
    sa, sb = a.std(axis=2, ddof=1), b.std(axis=2, ddof=1)
    return (ma - st.BAND_Z * sa > mb + st.BAND_Z * sb) | (mb - st.BAND_Z * sb > ma + st.BAND_Z * sa)


def flags(test, correction, a, b):
    """(trials, rows) booleans: the rows `compare` would mark, per table."""
    if test == "band":
        return band_flags(a, b)
    p = pvalues(test, a, b)
    if correction != "none":
        p = np.array([st.adjust(list(row), correction) for row in p])
    return p < ALPHA


def synthetic(rng, trials, n, shift=0.0, skew=False):
    """Two sides (trials, ROWS, n); the last row of the second side moved by `shift` sd."""
    def draw():
        x = rng.standard_normal((trials, ROWS, n))
        return np.exp(0.5 * x) if skew else x
    a, b = draw(), draw()
    if shift:
        sd = np.exp(0.5) * np.sqrt(np.exp(0.25) - 1) if skew else 1.0
        b[:, -1, :] += shift * sd
    return a, b


def real_runs():
    """(runs, metrics) of defrag0's per-run values of every default metric with a spread."""
    import kmemscope

    with tempfile.TemporaryDirectory() as tmp:
        ds = Path(tmp) / "ds"
        subprocess.run([sys.executable, "-m", "kmemscope", "parse", "-q",
                        *sorted((ROOT / "examples" / "ab-defrag-mode").glob("run*")), "-o", ds],
                       check=True)
        c = kmemscope.open(ds).compare("kernel")
        cols = []
        for row in c.rows:
            values = row.stats["defrag0"].values
            if len(values) == 4 and np.std(values) > 0:
                cols.append(values)
    return np.array(cols).T, len(cols)


def resampled(rng, runs, trials, n):
    """Null tables from real runs: whole runs drawn with replacement, dealt into two sides."""
    pick = rng.integers(0, len(runs), size=(trials, 2 * n))
    drawn = runs[pick]                               # (trials, 2n, metrics)
    drawn = np.transpose(drawn, (0, 2, 1))           # (trials, metrics, 2n)
    return drawn[:, :, :n], drawn[:, :, n:]


def null_rates(marked):
    """(per table: any row flagged; per row: share of rows flagged)."""
    return marked.any(axis=1).mean(), marked.mean()


def fdr(marked, true_row=-1):
    """Mean over tables of false flags / flags (0 where nothing is flagged)."""
    false = marked.sum(axis=1) - marked[:, true_row]
    total = marked.sum(axis=1)
    return np.where(total > 0, false / np.maximum(total, 1), 0.0).mean()


def interval_coverage(rng, trials, n=60, shift=0.5):
    """Share of 0.5 sd shifts at n v n whose 95% bootstrap interval of the change holds it."""
    hits, widths = 0, []
    for i in range(trials):
        base = 100 + 10 * rng.standard_normal(n)
        new = 100 + 10 * (rng.standard_normal(n) + shift)
        _, change = st.bootstrap_intervals("Amean", list(base), list(new), "counter", "lower",
                                           seed=i, resamples=1000)
        hits += change[0] <= shift * 10 <= change[1]       # true change: +5% of 100
        widths.append(change[1] - change[0])
    return hits / trials, float(np.median(widths))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000, help="tables per size and kind")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    # resampled real runs repeat values: scipy warns of a lost digit, not of a wrong p-value
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    rng = np.random.default_rng(args.seed)
    runs, metrics = real_runs()
    print(f"stats_calibration: {args.trials} tables of {ROWS} rows per size and kind, "
          f"alpha {ALPHA}; real null rows: {metrics} metrics of defrag0's 4 runs "
          f"(examples/ab-defrag-mode), the first {ROWS} of them; load {load1():.2f}")
    runs = runs[:, :ROWS]
    print()
    print("false positives on null tables: per table (any row flagged) / per row")
    head = f"{'data':<10} {'n':>4}  " + "  ".join(f"{t + ' ' + c:>22}" for t in TESTS
                                                    for c in (CORRECTIONS if t != "band" else ("none",)))
    print(head)
    for kind in ("normal", "lognormal", "real"):
        for n in SIZES:
            if kind == "real":
                a, b = resampled(rng, runs, args.trials, n)
            else:
                a, b = synthetic(rng, args.trials, n, skew=kind == "lognormal")
            cells = []
            for test in TESTS:
                for corr in (CORRECTIONS if test != "band" else ("none",)):
                    table, row = null_rates(flags(test, corr, a, b))
                    cells.append(f"{table:>10.3f} / {row:<9.4f}")
            print(f"{kind:<10} {n:>4}  " + "  ".join(f"{c:>22}" for c in cells))
    print_load()
    print()
    print("shifted tables (19 null rows, one moved): power of the moved row / false discovery rate")
    print(head.replace("data      ", "shift (sd)"))
    for shift in SHIFTS:
        for n in SIZES:
            a, b = synthetic(rng, args.trials, n, shift=shift)
            cells = []
            for test in TESTS:
                for corr in (CORRECTIONS if test != "band" else ("none",)):
                    marked = flags(test, corr, a, b)
                    cells.append(f"{marked[:, -1].mean():>10.3f} / {fdr(marked):<9.4f}")
            print(f"{shift:<10} {n:>4}  " + "  ".join(f"{c:>22}" for c in cells))
    print_load()
    print()
    coverage, width = interval_coverage(rng, max(50, args.trials // 5))
    print(f"95% bootstrap interval of a 0.5 sd change (+5%) at 60 v 60: holds the true change in "
          f"{coverage:.1%} of {max(50, args.trials // 5)} trials, median width {width:.2f} "
          f"percentage points (load {load1():.2f})")


if __name__ == "__main__":
    main()
