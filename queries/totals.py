"""Fleet totals: `compare --stat sum`, each side's value the total across its units.

A fleet posting reports "pgscan_kswapd per minute, total across ~60 hosts": not a
per-host mean but the sum of every host's value. With `--unit host` a side's units
are its hosts, each host's value the arithmetic mean of its runs (sides.unit_values),
and the Sum is the total of those; without --unit, the total of the side's runs.

The Sum row is the comparison of the per-unit values (queries/comparison_model.py,
with the arithmetic mean as each row's centre) made into totals: the value and its
95% interval are n times the mean's (the t interval of a total of n units is n times
that of their mean), the change is the change of the totals in the row's
convention, and its interval follows from the means' by the ratio of the unit counts.
The test still compares the per-unit values (a total is not a sample statistic that
a two-sample test speaks to): a change is called only where the per-unit test calls
it and the totals move the same way as the per-unit means, so a total that grew only
because a side has more hosts is never called a change.
"""
import dataclasses
import math

STAT = "Sum"
# Units of a share or a rate of something else: a total of them means nothing; such a row
# keeps the arithmetic mean of its units.
NOT_SUMMED = ("%", "/1000")
CENTRE = "amean"       # the per-unit statistic the totals are made from


def as_totals(sides, table, leaning_of, not_significant):
    """The ComparisonTable `table` (computed with CENTRE as every row's statistic) as totals.

    leaning_of(direction, base, new) and not_significant are the comparison model's own
    (queries/comparison_model.py), which calls this: one rule for which way a value leans."""
    from . import statistics as st

    _leaning, NOT_SIGNIFICANT = leaning_of, not_significant

    base_side = sides.baseline
    shares, beyond = [], []
    for row in table.rows:
        if row.metric.unit in NOT_SUMMED:
            shares.append(row.metric.name)
            continue
        n = {s: row.stats[s].n for s in sides.sides}
        mean = {s: row.stats[s].mean for s in sides.sides}
        total = {s: None if mean[s] is None else mean[s] * n[s] for s in sides.sides}
        if any(t is not None and not math.isfinite(t) for t in total.values()):
            beyond.append(row.metric.name)       # two values near 1.7e308 add up to inf
            total = {s: t if t is None or math.isfinite(t) else None for s, t in total.items()}
        for s in sides.sides:
            rec = row.records[s]
            is_base = s == base_side
            change = (0.0 if total[s] is not None else None) if is_base else st.change(
                row.metric, total[base_side], total[s])
            low, high = _change_interval(row.metric, rec, n[base_side], n[s])
            leaning = None if is_base else _leaning(row.metric.better, total[base_side], total[s])
            verdict, significant = rec.verdict, rec.significant
            if not is_base and significant is not None and total[s] is not None:
                agree = leaning == _leaning(row.metric.better, mean[base_side], mean[s])
                significant = bool(significant and agree and leaning != "same")
                verdict = leaning if significant else NOT_SIGNIFICANT
            row.records[s] = dataclasses.replace(
                rec, statistic=STAT, value=total[s],
                value_low=None if rec.value_low is None else rec.value_low * n[s],
                value_high=None if rec.value_high is None else rec.value_high * n[s],
                change=change, change_low=None if is_base else low,
                change_high=None if is_base else high, leaning=leaning, verdict=verdict,
                significant=significant)
        row.stat = STAT
    table.options["stat"] = "sum"
    note = (f"--stat sum: each side's value is the total across its "
            f"{sides.unit + 's' if sides.unit else 'runs'} of each one's value"
            + (" (a host's value: the mean of its runs)" if sides.unit else "")
            + "; Min, Max and the spread are of those values; the test compares the values, "
            "and a change is called only where the totals move the way the values do")
    if shares:
        more = (f"--stat sum: {', '.join(shares[:6])}{' ...' if len(shares) > 6 else ''}: a share "
                "is not summed: Amean of the values")
        notes = [note, more]
    else:
        notes = [note]
    if beyond:
        notes.append(f"--stat sum: {', '.join(beyond[:6])}{' ...' if len(beyond) > 6 else ''}: "
                     "a side's total is beyond the largest double (1.8e308): n/a")
    sides.notes += [n for n in notes if n not in sides.notes]
    return table


def _change_interval(metric, rec, n_base, n_new):
    """The change interval of the totals from that of the means: ratio times n_new/n_base."""
    if rec.change_low is None or rec.change_high is None or not n_base:
        return None, None
    k = n_new / n_base
    lower_better = metric.convention == "mmtests" and metric.better == "lower"

    def ratio(c):                       # change in the row's convention -> new/base
        return (100.0 - c) / 100.0 if lower_better else (c + 100.0) / 100.0

    def back(r):
        return 100.0 - r * 100.0 if lower_better else r * 100.0 - 100.0

    ends = sorted((back(ratio(rec.change_low) * k), back(ratio(rec.change_high) * k)))
    return ends[0], ends[1]
