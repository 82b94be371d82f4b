#!/usr/bin/env python3
"""How often `kmemscope compare` calls a change where there is none, finds one that is there,
and how often its 95% interval of a change holds the true change.

Every figure goes through compare's own path: queries.comparison_model.compare_table() over a
SideSet of per-run values (what `kmemscope compare` calls after reading the dataset), with
its default test (Welch, exact permutation at small n), its Benjamini-Hochberg correction
across each table of 20 rows, its minimum of runs a side and its interval. A row the table
calls significant is a flag; a row compare did not test is not one.

- null tables: 20 rows, each side drawn from one distribution: normal, log-normal, and
  counts (Poisson means 0.5, 1, 2 and 5, what a small kernel A/B counts), at 2 v 2, 3 v 3,
  4 v 4, 10 v 10 and 60 v 60; per size, the share of tables with any row called changed
  (the family-wise error; the correction keeps it near 5% or under) and the share of rows
  compare tested at all;
- shifted tables: 19 null normal rows and one moved by 0.8 standard deviations: the share
  of tables where the moved row is called (power);
- intervals: per distribution and size, the share of null rows whose 95% interval of the
  change excludes the true change of 0 (95% coverage: 5%), and the share of rows that got
  no interval (compare says why on the row).

The load average is printed beside the figures; they are rates, not timings.

usage: benchmarks/stats_calibration.py [--trials 200] [--seed 1]
"""
import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kmemscope.queries.comparison_model import compare_table  # noqa: E402
from kmemscope.queries.metrics import Metric  # noqa: E402
from kmemscope.queries.sides import SideSet  # noqa: E402

ROWS = 20
SIZES = (2, 3, 4, 10, 60)
KINDS = ("normal", "lognormal", "poisson 0.5", "poisson 1", "poisson 2", "poisson 5")
SHIFT = 0.8


def load1():
    return os.getloadavg()[0]


def draw(rng, kind, shape):
    if kind == "normal":
        return 100 + 10 * rng.standard_normal(shape)
    if kind == "lognormal":
        return np.exp(rng.standard_normal(shape))
    return rng.poisson(float(kind.split()[1]), shape).astype(float)


def table(a, b):
    """compare_table over one table: a, b of shape (ROWS, n), per row and run."""
    metrics = {f"m{i:02}": Metric(f"m{i:02}", "lower", "count", f"m{i:02}", "imported")
               for i in range(len(a))}
    rows, runs = [], {"a": [], "b": []}
    for side, values in (("a", a), ("b", b)):
        for j in range(values.shape[1]):
            run = f"{side}{j}"
            runs[side].append(run)
            rows.append({"run_id": run, "side": side,
                         **{name: float(values[i, j]) for i, name in enumerate(metrics)}})
    sides = SideSet("kernel", ["a", "b"], runs, rows, metrics=metrics)
    return [r.records["b"] for r in compare_table(sides).rows]


def null_tables(rng, kind, n, trials):
    """(share of tables with a row called, share of rows tested, share of rows whose interval
    excludes 0, share of rows without an interval)."""
    flagged = tested = excluded = missing = 0
    for _ in range(trials):
        recs = table(draw(rng, kind, (ROWS, n)), draw(rng, kind, (ROWS, n)))
        flagged += any(r.significant for r in recs)
        tested += sum(r.p_adjusted is not None for r in recs)
        for r in recs:
            if r.change_low is None:
                missing += r.change is not None
            else:
                excluded += not (r.change_low <= 0 <= r.change_high)
    rows = trials * ROWS
    return flagged / trials, tested / rows, excluded / rows, missing / rows


def power(rng, n, trials):
    found = 0
    for _ in range(trials):
        a, b = draw(rng, "normal", (ROWS, n)), draw(rng, "normal", (ROWS, n))
        b[-1] += SHIFT * 10
        found += bool(table(a, b)[-1].significant)
    return found / trials


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200, help="tables per size and kind")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    warnings.filterwarnings("error", category=RuntimeWarning)    # an overflow is a defect
    rng = np.random.default_rng(args.seed)
    print(f"stats_calibration: {args.trials} tables of {ROWS} rows per size and kind, through "
          f"compare_table (Welch / exact permutation, Benjamini-Hochberg, alpha 0.05); "
          f"load {load1():.2f}")
    print()
    print("null tables: tables with any row called / rows tested / rows whose 95% interval "
          "excludes 0 / rows without an interval")
    print(f"{'data':<12} " + "  ".join(f"{f'{n} v {n}':>27}" for n in SIZES))
    for kind in KINDS:
        cells = []
        for n in SIZES:
            called, tested, excl, none = null_tables(rng, kind, n, args.trials)
            cells.append(f"{called:5.3f} /{tested:5.2f} /{excl:6.3f} /{none:5.2f}")
        print(f"{kind:<12} " + "  ".join(f"{c:>27}" for c in cells))
    print("(load %.2f)" % load1())  # sql-safe: a line printed for people, not SQL
    print()
    print(f"one normal row of {ROWS} moved by {SHIFT} sd: share of tables where it is called")
    print("  " + "  ".join(f"{n} v {n}: {power(rng, n, args.trials):.3f}" for n in SIZES))
    print("(load %.2f)" % load1())  # sql-safe: a line printed for people, not SQL


if __name__ == "__main__":
    main()
