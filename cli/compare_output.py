"""Write a comparison (queries/sides.py) as mmtests-style text, markdown, or rows for csv/json.

The text layout follows mmtests compare-kernels: one block of rows per metric
(Min, Amean/Hmean, Stddev, CoeffVar, Max, BAmean-95/BHmean-95), one column per
side, each cell `%12.2f (%7.2f%%)` with the percent difference against the
baseline (positive = better), significant ones `*x%*`. Below it, the p-values.
"""
import math

STAT_ROWS = ("min", "mean", "stddev", "coeffvar", "max", "best_mean")
CELL_WIDTH = 23
TEST_TEXT = {
    "band": "mmtests band test (mean +/- 1.96*s bands do not overlap)",
    "welch": "Welch's t-test, p < {alpha}",
    "mannwhitney": "Mann-Whitney U test, p < {alpha}",
}


def _stat_name(metric, key):
    kind = metric.mean_kind
    return {"min": "Min", "mean": kind, "stddev": "Stddev", "coeffvar": "CoeffVar",
            "max": "Max", "best_mean": f"B{kind}-95"}[key]


def pct_text(pct):
    if pct is None:
        return "n/a"
    if math.isinf(pct):
        return "+inf" if pct > 0 else "-inf"
    return f"{pct:.2f}"


def _cell(value, pct, significant):
    v = f"{value:12.2f}" if value is not None else f"{'n/a':>12}"
    if value is None:
        return v.ljust(CELL_WIDTH)
    p = f"{pct_text(pct):>7}"
    return f"{v} *{p}%*" if significant else f"{v} ({p}%)"


def _row_pct(metric, key, base, new):
    from kmemscope.queries.compare import pct_diff

    # Spread is better when smaller, whatever the metric's direction (mmtests does the same).
    better = "lower" if key in ("stddev", "coeffvar") else metric.better
    return pct_diff(getattr(base, key), getattr(new, key), better)


def format_text(sides, rows, test="band", alpha=0.05):
    """The mmtests-style table, as one string."""
    width = max([len(r.metric.name) for r in rows] + [10])
    lead = 10 + width + 1
    out = [f"{sides.label}: baseline {sides.baseline}; percent difference: positive = better; "
           f"*x%*: significant by the {TEST_TEXT[test].format(alpha=alpha)}", ""]
    out.append(" " * lead + "".join(f"{s:>{CELL_WIDTH}}" for s in sides.sides))
    counts = [f"({len(sides.runs[s])} run{'' if len(sides.runs[s]) == 1 else 's'})" for s in sides.sides]
    out.append(" " * lead + "".join(f"{c:>{CELL_WIDTH}}" for c in counts))
    for r in rows:
        base = r.stats[sides.baseline]
        for key in STAT_ROWS:
            cells = []
            for s in sides.sides:
                x = r.stats[s]
                value = getattr(x, key)
                if s == sides.baseline:
                    pct = 0.0 if value is not None else None
                    sig = False
                else:
                    pct = _row_pct(r.metric, key, base, x)
                    sig = key == "mean" and bool(r.versus[s].significant)
                cells.append(_cell(value, pct, sig))
            out.append(f"{_stat_name(r.metric, key):<9} {r.metric.name:<{width}} " + "".join(cells).rstrip())
        out.append(f"{'Range':<9} {r.metric.name:<{width}} "
                   + "".join(f"{r.stats[s].range:>12}" + " " * 11 for s in sides.sides).rstrip())
        out.append(f"{'N':<9} {r.metric.name:<{width}} "
                   + "".join(f"{r.stats[s].n:>12}" + " " * 11 for s in sides.sides).rstrip())
        out.append("")
    for s in sides.sides[1:]:
        out.append(f"Significance of {s} vs {sides.baseline} (better: the direction each metric prefers)")
        out.append(f"{'metric':<{width}}  better  {'Welch p':>9}  {'Mann-Whitney p':>14}  {'band test':>9}")
        for r in rows:
            c = r.versus[s]
            band = "n/a" if c.band_significant is None else ("apart" if c.band_significant else "overlap")
            out.append(f"{r.metric.name:<{width}}  {r.metric.better:<6}  {_p(c.welch_p):>9}  "
                       f"{_p(c.mannwhitney_p):>14}  {band:>9}")
        out.append("")
    if any(len(v) < 2 for v in sides.runs.values()):
        out.append("n/a: a side with one run has no stddev, and no test can be run against it.")
    return "\n".join(out).rstrip() + "\n"


def _p(p):
    if p is None:
        return "n/a"
    return f"{p:.4f}" if p >= 0.0001 else f"{p:.1e}"


def records(sides, rows):
    """One dict per metric and side: the rows of --format csv/json."""
    out = []
    for r in rows:
        for s in sides.sides:
            x = r.stats[s]
            c = r.versus.get(s)
            pct = 0.0 if c is None and x.mean is not None else (c.pct_diff if c else None)
            out.append({
                "label": sides.label, "side": s, "baseline": s == sides.baseline,
                "metric": r.metric.name, "better": r.metric.better, "mean_kind": r.metric.mean_kind,
                "runs": len(sides.runs[s]), "n": x.n, "runs_without_value": x.runs_without_value,
                "min": x.min, "mean": x.mean, "max": x.max, "stddev": x.stddev,
                "coeffvar": x.coeffvar, "best_mean_95": x.best_mean, "range": x.range,
                # JSON has no infinity: the number is null and the text says +inf/-inf.
                "pct_diff": None if pct is None or math.isinf(pct) else pct,
                "pct_diff_text": pct_text(pct),
                "band_significant": c.band_significant if c else None,
                "welch_p": c.welch_p if c else None,
                "mannwhitney_p": c.mannwhitney_p if c else None,
                "significant": c.significant if c else None,
            })
    return out


def markdown_text(text):
    """A label value as literal Markdown table text: no markup, no cell breaks, no HTML."""
    text = " ".join(str(text).split())
    for ch in "\\`*_{}[]()#+-.!|<>~":
        text = text.replace(ch, "\\" + ch)
    return text


def format_markdown(sides, rows):
    """A compact markdown table: one line per metric, "mean [range]" per side, p-values."""
    head = ["metric", "better", "mean"]
    base = markdown_text(sides.baseline)
    for s in sides.sides:
        head.append(f"{markdown_text(s)} (n={len(sides.runs[s])})")
        if s != sides.baseline:
            head += [f"{markdown_text(s)} vs {base}", "Welch p", "Mann-Whitney p", "bands"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"`{r.metric.name}`", r.metric.better, r.metric.mean_kind]
        for s in sides.sides:
            x = r.stats[s]
            if x.n == 0:
                cells.append("n/a")
            else:
                cells.append(f"{x.mean:.2f} [{x.range}]"
                             + (f" n={x.n}" if x.n != len(sides.runs[s]) else ""))
            if s != sides.baseline:
                c = r.versus[s]
                pct = pct_text(c.pct_diff)
                pct = "n/a" if pct == "n/a" else pct + "%"
                cells.append(f"\\*{pct}\\*" if c.significant else pct)
                band = "n/a" if c.band_significant is None else ("apart" if c.band_significant else "overlap")
                cells += [_p(c.welch_p), _p(c.mannwhitney_p), band]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
