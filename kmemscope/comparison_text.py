"""A comparison (queries/sides.py) as mmtests text, markdown, or rows for csv/json/parquet.

Layouts:
- text: one block of rows per metric (Min, Amean/Hmean, Stddev, CoeffVar, Max,
  BAmean-95/BHmean-95, Range, N), one column per side, then the p-values.
- mmtests: mmtests compare-kernels' layout, ready to paste into a patch: a
  block of headline metrics and one of imported benchmark results, each
  grouped by statistic; a block of the vmstat rows a kernel A/B table shows,
  under their mmtests names, one row per counter; a block of stall latencies.
- markdown: one line per metric, "mean [range]" per side, the p-values.
Every cell is `%12.2f (%7.2f%%)` (wider when a value needs it): the value and
its percent difference against the baseline; significant ones `*x%*`; n/a where
there is no number (a side without values, a zero baseline). The percent
difference follows the metric's convention (queries/compare.py): positive =
better for headline and benchmark metrics (mmtests), the raw relative change
new/baseline - 1 for the kernel's counters (vmstat, stalls); each block's
header line says which, and which mean. Notes are part of every output: a block
of lines at the end, a comment block at the top of CSV, a `notes` field of JSON,
the `kmemscope.notes` metadata of Parquet.
"""
import math

from kmemscope.common.text import printable

STAT_ROWS = ("min", "mean", "stddev", "coeffvar", "max", "best_mean")
VALUE_WIDTH, PCT_WIDTH = 12, 7
CELL_WIDTH = VALUE_WIDTH + PCT_WIDTH + 4          # "%12.2f (%7.2f%)"
TEST_TEXT = {
    "band": "the mmtests band test (mean +/- 1.96*s bands do not overlap)",
    "welch": "Welch's t-test, p < {alpha}",
    "mannwhitney": "the Mann-Whitney U test, p < {alpha}",
}
# mmtests blocks: which metric kinds go in which, and how each is laid out.
BLOCKS = (("headline", ("summary",), "stats"),
          ("vmstat", ("vmstat",), "means"),
          ("stalls", ("stalls",), "means"),
          ("benchmark", ("imported",), "stats"),
          ("fragmentation", ("frag",), "stats"))
# What each convention's block header says of its numbers (queries/compare.py).
CONVENTION_TEXT = {
    "mmtests": "Hmean where higher is better, else Amean; percent difference: positive = better",
    "counter": "Amean: the arithmetic mean of the runs' values; percent difference: the raw "
               "relative change, new/baseline - 1",
}


def _stat_name(row, key):
    kind = row.stat or row.metric.mean_kind
    return {"min": "Min", "mean": kind, "stddev": "Stddev", "coeffvar": "CoeffVar",
            "max": "Max", "best_mean": f"B{kind}-95"}[key]


def _block_header(title, rows):
    conventions = sorted({r.metric.convention for r in rows})
    return f"{title} ({'; '.join(CONVENTION_TEXT[c] for c in conventions)})"


def pct_text(pct):
    if pct is None or (isinstance(pct, float) and not math.isfinite(pct)):
        return "n/a"
    return f"{pct:.2f}"


def _cell(value, pct, significant):
    """`value (pct%)`; columns widen (never wrap or overflow) for values that need it."""
    if value is None:
        return f"{'n/a':>{VALUE_WIDTH}}" + " " * (CELL_WIDTH - VALUE_WIDTH)
    v = f"{value:{VALUE_WIDTH}.2f}"
    if pct is None:
        return f"{v} ({'n/a':>{PCT_WIDTH}} )"
    return f"{v} *{pct:{PCT_WIDTH}.2f}%*" if significant else f"{v} ({pct:{PCT_WIDTH}.2f}%)"


def _row_pct(metric, key, base, new):
    from kmemscope.queries.compare import change

    # Spread is better when smaller, whatever the metric's direction (mmtests does the same).
    better = "lower" if key in ("stddev", "coeffvar") else metric.better
    return change(metric, getattr(base, key), getattr(new, key), better)


def _cells(sides, r, key):
    base = r.stats[sides.baseline]
    cells = []
    for s in sides.sides:
        x = r.stats[s]
        value = getattr(x, key)
        if s == sides.baseline:
            cells.append(_cell(value, 0.0 if value is not None else None, False))
        else:
            sig = key == "mean" and bool(r.versus[s].significant)
            cells.append(_cell(value, _row_pct(r.metric, key, base, x), sig))
    return cells


def _width(sides, rows=()):
    """A side's column: the widest of a cell, its name and every cell of `rows` (plus a gap)."""
    cells = [len(c) + 1 for r in rows for key in STAT_ROWS for c in _cells(sides, r, key)]
    return max([CELL_WIDTH] + [len(printable(s)) + 2 for s in sides.sides] + cells)


def _header(sides, lead, w=None):
    w = w or _width(sides)
    counts = [f"({len(sides.runs[s])} run{'' if len(sides.runs[s]) == 1 else 's'})" for s in sides.sides]
    return [" " * lead + "".join(f"{printable(s):>{w}}" for s in sides.sides),
            " " * lead + "".join(f"{c:>{w}}" for c in counts)]


def _join(cells, sides, w=None):
    w = w or _width(sides)
    return "".join(c.rjust(w) if len(c) < w else c for c in cells).rstrip()


def _intro(sides, test, alpha):
    return (f"{printable(sides.label)}: baseline {printable(sides.baseline)}; "
            f"*x%*: significant by {TEST_TEXT[test].format(alpha=alpha)}")


def _one_run_line(sides):
    """The stated line when a side has a single run: nothing was tested there."""
    single = [s for s in sides.sides if len(sides.runs[s]) < 2]
    if not single:
        return []
    return [f"n/a: {', '.join(printable(s) for s in single)} "
            f"{'has' if len(single) == 1 else 'have'} one run: no stddev, and no test of "
            "significance was run against a side of one run (no *x%* marks there)."]


def _finish(out, notes):
    """The text of `out` lines, then the notes after one blank line."""
    text = "\n".join(out).rstrip()
    if notes:
        text += "\n\n" + "\n".join(f"note: {printable(n)}" for n in notes)
    return text + "\n"


def format_text(sides, rows, test="band", alpha=0.05, notes=()):
    """The per-metric table with p-values, as one string."""
    width = max([len(r.metric.name) for r in rows] + [10])
    lead = 10 + width + 1
    w = _width(sides, rows)
    out = [_intro(sides, test, alpha)]
    out += [f"{c} metrics: {CONVENTION_TEXT[c]}"
            for c in sorted({r.metric.convention for r in rows})]
    out += [""] + _header(sides, lead, w)
    for r in rows:
        for key in STAT_ROWS:
            out.append(f"{_stat_name(r, key):<9} {r.metric.name:<{width}} "
                       + _join(_cells(sides, r, key), sides, w))
        out.append(f"{'Range':<9} {r.metric.name:<{width}} "
                   + "".join(f"{r.stats[s].range:>12}" + " " * (w - 12) for s in sides.sides).rstrip())
        out.append(f"{'N':<9} {r.metric.name:<{width}} "
                   + "".join(f"{r.stats[s].n:>12}" + " " * (w - 12) for s in sides.sides).rstrip())
        out.append("")
    for s in sides.sides[1:]:
        out.append(f"Significance of {printable(s)} vs {printable(sides.baseline)} "
                   "(better: the direction each metric prefers)")
        out.append(f"{'metric':<{width}}  better  {'Welch p':>9}  {'Mann-Whitney p':>14}  {'band test':>9}")
        for r in rows:
            c = r.versus[s]
            band = "n/a" if c.band_significant is None else ("apart" if c.band_significant else "overlap")
            out.append(f"{r.metric.name:<{width}}  {r.metric.better:<6}  {_p(c.welch_p):>9}  "
                       f"{_p(c.mannwhitney_p):>14}  {band:>9}")
        out.append("")
    out += _one_run_line(sides)
    return _finish(out, notes)


def format_mmtests(sides, rows, test="band", alpha=0.05, notes=()):
    """mmtests compare-kernels' layout: a block per kind of metric, ready to paste into a patch."""
    out = [_intro(sides, test, alpha)]
    for title, kinds, layout in BLOCKS:
        block = [r for r in rows if r.metric.kind in kinds]
        if not block:
            continue
        out.append("")
        w = _width(sides, block)
        if layout == "stats":
            width = max(len(r.metric.name) for r in block)
            lead = 10 + width + 1
            out += [_block_header(title, block)] + _header(sides, lead, w)
            for key in STAT_ROWS:
                for r in block:
                    out.append(f"{_stat_name(r, key):<9} {r.metric.name:<{width}} "
                               + _join(_cells(sides, r, key), sides, w))
        else:
            width = max(len(_title(r)) for r in block)
            lead = width + 1
            out += [_block_header(title, block)] + _header(sides, lead, w)
            for r in block:
                out.append(f"{_title(r):<{width}} " + _join(_cells(sides, r, "mean"), sides, w))
    out += [""] + _one_run_line(sides) if _one_run_line(sides) else []
    return _finish(out, notes)


def _title(row):
    """A means-block row's name: the metric's title, marked where the trace answered it."""
    return row.metric.title + (TRACE_MARK if getattr(row, "from_trace", False) else "")


# Marks a vmstat row that some run took from the trace (no procfs samples); a note says which.
TRACE_MARK = " [trace]"


def _p(p):
    if p is None:
        return "n/a"
    return f"{p:.4f}" if p >= 0.0001 else f"{p:.1e}"


def records(sides, rows):
    """One dict per metric and side: the rows of --format csv/json/jsonl/parquet."""
    out = []
    for r in rows:
        for s in sides.sides:
            x = r.stats[s]
            c = r.versus.get(s)
            pct = 0.0 if c is None and x.mean is not None else (c.pct_diff if c else None)
            out.append({
                "label": sides.label, "side": s, "baseline": s == sides.baseline,
                "metric": r.metric.name, "title": r.metric.title, "kind": r.metric.kind,
                "unit": r.metric.unit, "better": r.metric.better,
                "mean_kind": r.stat or r.metric.mean_kind, "convention": r.metric.convention,
                "runs": len(sides.runs[s]), "n": x.n, "runs_without_value": x.runs_without_value,
                "min": x.min, "mean": x.mean, "max": x.max, "stddev": x.stddev,
                "coeffvar": x.coeffvar, "best_mean_95": x.best_mean, "range": x.range,
                "pct_diff": pct,
                "pct_diff_text": pct_text(pct),
                "band_significant": c.band_significant if c else None,
                "welch_p": c.welch_p if c else None,
                "mannwhitney_p": c.mannwhitney_p if c else None,
                "significant": c.significant if c else None,
            })
    return out


def markdown_text(text):
    """A label value as literal Markdown table text: no markup, no cell breaks, no HTML."""
    text = printable(" ".join(str(text).split()))
    for ch in "\\`*_{}[]()#+-.!|<>~":
        text = text.replace(ch, "\\" + ch)
    return text


def format_markdown(sides, rows, notes=()):
    """A compact markdown table: one line per metric, "mean [range]" per side, p-values."""
    head = ["metric", "better", "mean"]
    base = markdown_text(sides.baseline)
    for s in sides.sides:
        head.append(f"{markdown_text(s)} (n={len(sides.runs[s])})")
        if s != sides.baseline:
            head += [f"{markdown_text(s)} vs {base}", "Welch p", "Mann-Whitney p", "bands"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"`{r.metric.name}`", r.metric.better, r.stat or r.metric.mean_kind]
        for s in sides.sides:
            x = r.stats[s]
            if x.n == 0:
                cells.append("n/a")
            else:
                cells.append(f"{x.mean:.2f} [{markdown_text(x.range)}]"
                             + (f" n={x.n}" if x.n != len(sides.runs[s]) else ""))
            if s != sides.baseline:
                c = r.versus[s]
                pct = pct_text(c.pct_diff)
                pct = "n/a" if pct == "n/a" else pct + "%"
                cells.append(f"\\*{pct}\\*" if c.significant else pct)
                band = "n/a" if c.band_significant is None else ("apart" if c.band_significant else "overlap")
                cells += [_p(c.welch_p), _p(c.mannwhitney_p), band]
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "Notes:", ""] + [f"- {markdown_text(n)}" for n in notes]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- trends

def over_rows(sides, names, over, series):
    """Rows (metric, side, index, value) of each metric over runs or minutes.

    over="run": the side's runs in recording order, index 1..n, the run's value.
    over="minute": `series[(run_id, metric)] = {minute: value}`, averaged over
    the side's runs that have that minute.
    """
    out = []
    for name in names:
        for s in sides.sides:
            if over == "run":
                for i, row in enumerate(sides.ordered_runs(s), 1):
                    out.append({"metric": name, "side": s, "index": i, "run_id": row["run_id"],
                                "value": row.get(name), "runs": 1 if row.get(name) is not None else 0})
            else:
                minutes: dict = {}
                for run_id in sides.runs[s]:
                    for minute, value in (series.get((run_id, name)) or {}).items():
                        minutes.setdefault(minute, []).append(value)
                for minute in sorted(minutes):
                    vals = [v for v in minutes[minute] if v is not None]
                    out.append({"metric": name, "side": s, "index": minute, "run_id": None,
                                "value": sum(vals) / len(vals) if vals else None,
                                "runs": len(vals)})
    return out


def format_over(sides, names, over, rows, titles, notes=()):
    """Each metric as a column per side, a line per run (or minute): the patch's trend table."""
    w = _width(sides)
    label = "run" if over == "run" else "minute"
    out = []
    for name in names:
        mine = [r for r in rows if r["metric"] == name]
        what = ("per run, in recording order" if over == "run"
                else "per minute of the capture, mean over the side's runs")
        out += [f"{titles.get(name, name)} ({what})",
                f"{label:>6}" + "".join(f"{printable(s):>{w}}" for s in sides.sides)]
        indexes = sorted({r["index"] for r in mine})
        for i in indexes:
            cells = []
            for s in sides.sides:
                v = next((r["value"] for r in mine if r["side"] == s and r["index"] == i), None)
                cells.append(f"{v:{w}.2f}" if v is not None else f"{'':>{w}}")
            out.append(f"{i:>6}" + "".join(cells).rstrip())
        out.append("")
    return _finish(out, notes)
