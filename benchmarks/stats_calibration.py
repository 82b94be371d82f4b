#!/usr/bin/env python3
"""How often `kmemscope compare` calls a change where there is none, finds one that is there,
and how often its 95% intervals hold the true value.

Every figure goes through compare's own path: queries.comparison_model.compare_table() over a
SideSet of per-run values (what `kmemscope compare` calls after reading the dataset), with
its default test (the permutation test of the means: exact up to 20,000 splits, else
100,000 random ones), its Benjamini-Hochberg correction across each table of 20 rows, its
minimum of values a side and its intervals. A row the table calls significant is a flag; a row
compare did not test is not one.

- null tables: 20 rows, each side drawn from one distribution: normal, log-normal, and
  counts (Poisson means 0.5, 1, 2 and 5, what a small kernel A/B counts), at 2 v 2 to
  60 v 60 and with a few canary hosts against a fleet (3, 4 and 5 v 60, 10 v 300); per
  size: the share of tables with any row called changed (the family-wise error; the
  correction keeps it near 5% or under), the share of rows compare tested at all, the share
  of printed intervals of the change that exclude the true change of 0 (95%: 5%) and the
  share of rows printed with one, then the share of printed per-side intervals that miss
  the distribution's mean and the share of sides printed with one;
- the mmtests band test (--format mmtests' default) on the same null tables: the share of
  tables with a row marked;
- shifted tables: 19 null normal rows and one moved by 0.8 standard deviations: the share
  of tables where the moved row is called (power).

The load average is printed beside the figures; they are rates, not timings.

usage: benchmarks/stats_calibration.py [--trials 200] [--seed 1] [--sizes 3v3,3v60]
"""
import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kmemscope.queries.comparison_model import compare_table  # noqa: E402
from kmemscope.queries.metrics import Metric  # noqa: E402
from kmemscope.queries.sides import SideSet  # noqa: E402

ROWS = 20
SIZES = ((2, 2), (3, 3), (4, 4), (10, 10), (60, 60), (60, 3), (60, 4), (60, 5), (300, 10))
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


def true_mean(kind):
    if kind == "normal":
        return 100.0
    if kind == "lognormal":
        return float(np.exp(0.5))
    return float(kind.split()[1])


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
    return compare_table(sides).rows


def null_tables(rng, kind, sizes, trials):
    """The shares of one cell (see the module doc)."""
    flagged = tested = excluded = printed = side_missed = side_printed = band = 0
    truth = true_mean(kind)
    for _ in range(trials):
        a, b = draw(rng, kind, (ROWS, sizes[0])), draw(rng, kind, (ROWS, sizes[1]))
        rows = table(a, b)
        recs = [r.records["b"] for r in rows]
        flagged += any(r.significant for r in recs)
        tested += sum(r.p_adjusted is not None for r in recs)
        for r in recs:
            if r.change_low is not None:
                printed += 1
                excluded += not (r.change_low <= 0 <= r.change_high)
        for row in rows:
            for rec in row.records.values():
                if rec.value_low is not None:
                    side_printed += 1
                    side_missed += not (rec.value_low <= truth <= rec.value_high)
        band += any(r.band_apart for r in recs)    # the band test's mark, as --test band
    rows = trials * ROWS
    return {"called": flagged / trials, "tested": tested / rows,
            "change_miss": excluded / max(printed, 1), "change_shown": printed / rows,
            "side_miss": side_missed / max(side_printed, 1),
            "side_shown": side_printed / (2 * rows), "band": band / trials}


def power(rng, sizes, trials):
    found = 0
    for _ in range(trials):
        a, b = draw(rng, "normal", (ROWS, sizes[0])), draw(rng, "normal", (ROWS, sizes[1]))
        b[-1] += SHIFT * 10
        found += bool(table(a, b)[-1].records["b"].significant)
    return found / trials


def parse_sizes(text):
    out = []
    for part in text.split(","):
        base, new = part.split("v")
        out.append((int(base), int(new)))
    return tuple(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200, help="tables per size and kind")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sizes", type=parse_sizes, default=SIZES,
                    help="BASEvNEW,... (default: %s)" % ",".join(f"{a}v{b}" for a, b in SIZES))
    args = ap.parse_args(argv)
    warnings.filterwarnings("error", category=RuntimeWarning)    # an overflow is a defect
    rng = np.random.default_rng(args.seed)
    start = time.monotonic()
    print(f"stats_calibration: {args.trials} tables of {ROWS} rows per size and kind, through "
          f"compare_table (permutation test, exact or 100,000 random splits; "
          f"Benjamini-Hochberg; alpha 0.05); load {load1():.2f}")
    print()
    print("null tables, per size (baseline v new): tables with any row called / rows tested /")
    print("  printed change intervals that exclude 0 / rows with one /")
    print("  printed side intervals that miss the mean / sides with one / tables the band test marks")
    for sizes in args.sizes:
        print(f"{sizes[0]} v {sizes[1]}")
        for kind in KINDS:
            c = null_tables(rng, kind, sizes, args.trials)
            print(f"  {kind:<12} {c['called']:5.3f} / {c['tested']:4.2f} / "
                  f"{c['change_miss']:5.3f} / {c['change_shown']:4.2f} / "
                  f"{c['side_miss']:5.3f} / {c['side_shown']:4.2f} / {c['band']:5.3f}")
        print(f"  (load {load1():.2f})")  # sql-safe: a printed line, not SQL
    print()
    print(f"one normal row of {ROWS} moved by {SHIFT} sd: share of tables where it is called")
    print("  " + "  ".join(f"{a} v {b}: {power(rng, (a, b), args.trials):.3f}"
                           for a, b in args.sizes))
    print(f"(load {load1():.2f}; {time.monotonic() - start:.0f} s)")  # sql-safe: a printed line


if __name__ == "__main__":
    main()
