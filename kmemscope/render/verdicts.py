"""The words, numbers and colours every human output of a comparison prints beside a record.

A record of the comparison model (queries/comparison_model.py) holds the verdict as a word;
this module says it: the colour every HTML output gives it, the text beside a change
('+688.80% worse *'), a model row's bounds ('+1/-0'), what a value is when it is not exact,
and a p-value. Text, mmtests, markdown and HTML print these and nothing of their own.
(The range of a side's values, "309-312", is the record's own `range` field: the model's
queries/statistics.py value_range writes it, the one range text of every output.)
"""
from kmemscope.queries.comparison_model import NOT_SIGNIFICANT, SIGNIFICANT_VERDICTS

# The colour of each significant verdict in HTML: green better, red worse, blue a significant
# change of a metric without a direction.
VERDICT_COLORS = {"better": "#1a7f37", "worse": "#cf222e", "higher": "#0550ae",
                  "lower": "#0550ae"}


def verdict_color(record):
    """The colour of a record's verdict in HTML: green better, red worse, blue a significant
    change of a metric without a direction; none otherwise (not significant, not tested)."""
    return VERDICT_COLORS.get(record.verdict, "inherit")


def verdict_text(record):
    """'+688.80% worse *', '-4.09% (leans worse, not significant)', 'n/a': the words every
    human output prints beside a change."""
    if record.is_baseline:
        return "baseline"
    if record.change is None:       # no percent change (a baseline of 0): the words stay
        if record.leaning is None or record.leaning == "same":
            return "n/a"
        if record.verdict in SIGNIFICANT_VERDICTS:
            return f"n/a {record.verdict} *"
        return f"n/a (leans {record.leaning}, {record.verdict})"
    pct = f"{record.change:+.2f}%"
    if record.verdict in SIGNIFICANT_VERDICTS:
        return f"{pct} {record.verdict} *"
    if record.verdict == NOT_SIGNIFICANT and record.leaning not in (None, "same"):
        return f"{pct} (leans {record.leaning}, not significant)"
    if record.verdict == "not tested" and record.untested:
        return f"{pct} (not tested: {record.untested})"
    return f"{pct} ({record.verdict})"


def _amount(x):
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def bounds_text(record):
    """'+1/-0' on a model row whose side has bounds: how much higher and lower the kernel's
    value can be than the statistic shown; '' on every other row."""
    if record.exactness != "model" or record.value is None or record.bound_low is None:
        return ""
    up = max(record.bound_high - record.value, 0.0)
    down = max(record.value - record.bound_low, 0.0)
    return f"+{_amount(up)}/-{_amount(down)}"


def exactness_text(record):
    """'' (exact), 'model +1/-0' or 'lower bound': what every human output says of a row's
    value beside its source."""
    if record.exactness == "model":
        return f"model {bounds_text(record)}".rstrip()
    if record.exactness == "lower bound" or record.exact is False:
        return "lower bound"
    return ""


def p_text(p):
    """A p-value as every output prints it: 4 decimals, or 1 significant digit below 0.0001."""
    if p is None:
        return "n/a"
    return f"{p:.4f}" if p >= 0.0001 else f"{p:.1e}"
