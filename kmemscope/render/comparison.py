"""A comparison (queries/comparison_model.py) as mmtests text, markdown, or rows for csv/json/parquet.

Every number and word here is a field of the comparison model's records: the
layouts below choose which fields to print and how wide, and compute nothing
(no mean, no change, no verdict, no colour from a sign).

Layouts:
- text: one block of rows per metric (Min, Hmean/Amean/Median, Stddev or
  HStddev, CoeffVar or HCoeffVar, Max, BHmean-95/BAmean-95, Range, N), one
  column per side; then per side against the baseline the change with its 95%
  interval (and, grouped, why a row has none or why its 95% is not held), the test's p-value and the adjusted one, the verdict and the source.
- mmtests: mmtests compare-kernels' layout, ready to paste into a patch: a
  block of headline metrics and one of imported benchmark results, each
  grouped by statistic; a block of the vmstat rows a kernel A/B table shows,
  under their mmtests names, one row per counter; a block of stall counts and
  latencies.
- markdown: one line per metric and side, the value with its interval, the
  change with its interval, p, adjusted p, the verdict.
Every cell of the two mmtests-like layouts is `%12.2f (%7.2f%%)` (wider when a
value needs it): the value and its change against the baseline in the block's
convention; `*x%*` where the verdict is significant; n/a where there is no number.
A row whose values did not come from the block's usual source is marked
(`[trace]`, `[vmstat]`; `[trace, lower bound]` where the trace counts only part;
`[trace, model +1/-0]` where a trace model met events it could not classify, and the
value cell then carries the bounds: `85.00 +1/-0`: the kernel's count is up to 1 higher
and 0 lower).
Notes are part of every output for people: a block of lines at the end (markdown: a
Notes list); the machine formats' are kmemscope/render/writers.py's (a `notes` field of
JSON, the `kmemscope.notes` metadata of Parquet, stderr and --notes FILE for csv and jsonl).
"""
import dataclasses
import math

from kmemscope.common.text import number_text, printable
from kmemscope.queries.comparison_model import BLOCKS
from kmemscope.render.verdicts import (bounds_text, exactness_text, p_text,  # noqa: F401
                                       verdict_color, verdict_text)  # (the report colours by it)

# (the statistic row's key: the record's field with its value, its change, its name's field)
STAT_ROWS = (("min", "min_change", None), ("value", "change", "statistic"),
             ("stddev", "stddev_change", "stddev_name"),
             ("coeffvar", "coeffvar_change", "coeffvar_name"), ("max", "max_change", None),
             ("best_mean", "best_change", "best_name"))
STAT_TITLES = {"min": "Min", "max": "Max"}
# mmtests' names (Stat.pm) where the model's differ: a median is its 2nd quartile
MMTESTS_STAT_NAMES = {"Median": "2nd-qrtle"}
VALUE_WIDTH, PCT_WIDTH = 12, 7
CELL_WIDTH = VALUE_WIDTH + PCT_WIDTH + 4          # "%12.2f (%7.2f%)"
TEST_TEXT = {
    "band": "the mmtests band test (mean +/- 1.96*s bands do not overlap)",
    "welch": "the permutation test of the means (--test welch)",
    "mannwhitney": "the permutation test of the ranks (--test mannwhitney: Mann-Whitney's U)",
}
# How each block's rows are laid out in --format mmtests, and the source its rows usually have.
LAYOUT = {"headline": "stats", "vmstat": "means", "stalls": "means", "cost": "means",
          "shifted": "means", "workload": "means",
          "mthp": "means", "benchmark": "stats", "fragmentation": "stats"}
USUAL_SOURCE = {"headline": "trace", "vmstat": "vmstat", "stalls": "trace",
                "cost": "procfs sample", "shifted": "vmstat", "workload": "rusage",
                "mthp": "sysfs sample",
                "benchmark": "imported",
                "fragmentation": "procfs sample"}
# What a block's header calls it, where that is more than its name.
BLOCK_TITLES = {"shifted": "direct compaction shifted"}
# What each convention's block header says of its numbers.
CONVENTION_TEXT = {
    "mmtests": "Hmean where higher is better, else Amean; percent difference: positive = better "
               "(Stddev, CoeffVar: positive = less spread; a row without a direction: "
               "positive = higher)",
    "counter": "Amean: the arithmetic mean of the runs' values; percent difference: the raw "
               "relative change, new/baseline - 1",
}


def source_mark(record):
    """' [trace]', ' [trace, lower bound]', ' [trace, model]', '' for a row from its block's
    usual source."""
    usual = record.source == USUAL_SOURCE.get(record.block)
    if usual and record.exact:
        return ""
    what = "model" if record.exactness == "model" else exactness_text(record)
    return f" [{record.source}{', ' + what if what else ''}]"


def source_text(record):
    """'trace', 'trace (lower bound)', 'trace (model +1/-0)': a record's source, with what
    its value is when not exact."""
    what = exactness_text(record)
    return record.source + (f" ({what})" if what else "")


# What a block of --stat sum rows says of its numbers, per convention.
SUM_TEXT = {
    "mmtests": "Sum: the total across the side's {units} of each one's value; percent "
               "difference of the totals: positive = better (a row without a direction: "
               "positive = higher)",
    "counter": "Sum: the total across the side's {units} of each one's value; percent "
               "difference: the raw relative change of the totals, new/baseline - 1",
}


def _block_header(title, rows, sides=None):
    """The block's title and its one sign convention (naming the rows without a direction,
    whose change in the mmtests convention is the raw one: positive = higher)."""
    conventions = sorted({r.metric.convention for r in rows})
    source = USUAL_SOURCE.get(title)
    title = BLOCK_TITLES.get(title, title)
    undirected = [r.metric.name for r in rows
                  if r.metric.convention == "mmtests" and r.metric.better == "none"]
    none = f"; no direction: {', '.join(undirected)}" if undirected else ""
    if rows and all(r.stat == "Sum" for r in rows):
        units = (sides.unit + "s") if sides is not None and sides.unit else "runs"
        what = "; ".join(SUM_TEXT[c].format(units=units) for c in conventions)
        return f"{title} ({what}{none}; source: {source} unless marked)"
    stats = sorted({r.stat for r in rows if r.stat not in ("Hmean", "Amean")})
    extra = f"; {', '.join(stats)} where --stat asks for it" if stats else ""
    return (f"{title} ({'; '.join(CONVENTION_TEXT[c] for c in conventions)}{none}{extra}; "
            f"source: {source} unless marked)")


def same_quantity_lines(sides, rows, side, titles=False):
    """Rows of one quantity in more than one block, each with its change in its own block's
    convention, so that a rise in one and a fall in another read as what they are. titles:
    name a row of a means block (vmstat, stalls, cost, mthp) by its title, as mmtests does."""
    by_name = {r.metric.name: r for r in rows}
    seen: set[str] = set()
    out: list[str] = []
    for r in rows:
        rec = r.records[side]
        if not rec.same_as or r.metric.name in seen:
            continue
        group = [r] + [by_name[n] for n in rec.same_as.split(", ") if n in by_name]
        seen.update(g.metric.name for g in group)
        if all(g.records[side].change is None for g in group):
            continue            # nothing to reconcile: no change on any of them
        parts = []
        for g in group:
            grec = g.records[side]
            sign = ("raw change" if g.metric.convention == "counter" or g.metric.better == "none"
                    else "positive = better")
            name = (g.metric.title if titles and LAYOUT.get(grec.block) == "means"
                    else g.metric.name)
            change = "n/a" if pct_text(grec.change) == "n/a" else f"{grec.change:+.2f}%"
            parts.append(f"{name} ({grec.block}) {change} "
                         f"({sign}, {grec.statistic})")
        out.append(f"  {' and '.join(parts)}: one quantity, {rec.same_quantity}")
    if not out:
        return []
    return [f"one quantity in several rows ({printable(side)} vs "
            f"{printable(sides.baseline)}):"] + out + [""]


def pct_text(pct):
    if pct is None or (isinstance(pct, float) and not math.isfinite(pct)):
        return "n/a"
    return number_text(pct)


def _cell(value, pct, significant, bounds=""):
    """`value (pct%)`, `value +k/-j (pct%)` for a model's bounds; columns widen (never wrap or
    overflow) for values that need it."""
    if value is None:
        return f"{'n/a':>{VALUE_WIDTH}}" + " " * (CELL_WIDTH - VALUE_WIDTH)
    v = f"{number_text(value):>{VALUE_WIDTH}}" + (f" {bounds}" if bounds else "")
    if pct is None:
        return f"{v} ({'n/a':>{PCT_WIDTH}} )"
    shown = f"{number_text(pct):>{PCT_WIDTH}}"
    return f"{v} *{shown}%*" if significant else f"{v} ({shown}%)"


def _stat_name(row, key):
    rec = next(iter(row.records.values()))
    value_key, _change, name_field = next(k for k in STAT_ROWS if k[0] == key)
    name = getattr(rec, name_field) if name_field else STAT_TITLES[value_key]
    return MMTESTS_STAT_NAMES.get(name, name)


def _cells(sides, r, key):
    _v, change_key, _n = next(k for k in STAT_ROWS if k[0] == key)
    cells = []
    for s in sides.sides:
        rec = r.records[s]
        sig = key == "value" and bool(rec.significant)
        cells.append(_cell(getattr(rec, key), getattr(rec, change_key), sig,
                           bounds_text(rec) if key == "value" else ""))
    return cells


def _width(sides, rows=()):
    """A side's column: the widest of a cell, its name and every cell of `rows` (plus a gap)."""
    cells = [len(c) + 1 for r in rows for key, _c, _n in STAT_ROWS for c in _cells(sides, r, key)]
    return max([CELL_WIDTH] + [len(printable(s)) + 2 for s in sides.sides] + cells)


def _count_text(sides, s):
    n = sides.unit_count(s)
    what = sides.unit if sides.unit else "run"
    return f"({n} {what}{'' if n == 1 else 's'})"


def _header(sides, lead, w=None):
    w = w or _width(sides)
    counts = [_count_text(sides, s) for s in sides.sides]
    return [" " * lead + "".join(f"{printable(s):>{w}}" for s in sides.sides),
            " " * lead + "".join(f"{c:>{w}}" for c in counts)]


def _join(cells, sides, w=None):
    w = w or _width(sides)
    return "".join(c.rjust(w) if len(c) < w else c for c in cells).rstrip()


def _intro(sides, table):
    """Who is the baseline, what marks a change and what the correction covered."""
    if table.test == "band":
        how = (f"*x%*: significant by {TEST_TEXT['band']}, only where both sides have spread "
               f"and a test of the row's size can reach p < {table.alpha}")
    else:
        how = (f"*x%*: significant by {TEST_TEXT[table.test]}, adjusted p < {table.alpha}; "
               f"correction: {table.correction_text()}")
    per = f"; n counts {sides.unit}s (each the mean of its runs)" if sides.unit else ""
    return f"{printable(sides.label)}: baseline {printable(sides.baseline)}{per}; {how}"


def _one_run_line(sides):
    """The stated line when a side has a single run: nothing was tested there."""
    single = [s for s in sides.sides if sides.unit_count(s) < 2]
    if not single:
        return []
    what = sides.unit or "run"
    return [f"n/a: {', '.join(printable(s) for s in single)} "
            f"{'has' if len(single) == 1 else 'have'} one {what}: no stddev, and no test of "
            f"significance was run against a side of one {what} (no *x%* marks there)."]


def _finish(out, notes):
    """The text of `out` lines, then the notes after one blank line."""
    text = "\n".join(out).rstrip()
    if notes:
        text += "\n\n" + "\n".join(f"note: {printable(n)}" for n in notes)
    return text + "\n"


def _interval(low, high, unit=""):
    if low is None or high is None:
        return "n/a"
    return f"[{number_text(low)}, {number_text(high)}]{unit}"


def format_text(sides, table, notes=()):
    """The per-metric table, then each side's verdicts against the baseline, as one string."""
    rows = table.rows
    width = max([len(r.metric.name) for r in rows] + [10])
    lead = 10 + width + 1
    w = _width(sides, rows)
    out = [_intro(sides, table)]
    summed = bool(rows) and all(r.stat == "Sum" for r in rows)
    units = (sides.unit + "s") if sides.unit else "runs"
    out += [f"{c} metrics: {(SUM_TEXT if summed else CONVENTION_TEXT)[c].format(units=units)}"
            for c in sorted({r.metric.convention for r in rows})]
    out += [""] + _header(sides, lead, w)
    for r in rows:
        for key, _c, _n in STAT_ROWS:
            out.append(f"{_stat_name(r, key):<9} {r.metric.name:<{width}} "
                       + _join(_cells(sides, r, key), sides, w))
        out.append(f"{'Range':<9} {r.metric.name:<{width}} "
                   + "".join(f"{r.records[s].range:>12}" + " " * (w - 12) for s in sides.sides).rstrip())
        out.append(f"{'N':<9} {r.metric.name:<{width}} "
                   + "".join(f"{r.records[s].n:>12}" + " " * (w - 12) for s in sides.sides).rstrip())
        out.append("")
    p_head = "band test" if table.test == "band" else "p       adj. p"
    vw = max([len(verdict_text(r.records[s])) for r in rows for s in sides.sides[1:]] + [7])
    for s in sides.sides[1:]:
        out.append(f"{printable(s)} vs {printable(sides.baseline)}: change with its 95% "
                   "interval (Fieller's, of the ratio of the statistics), in each row's convention")
        out.append(f"{'metric':<{width}}  {'better':<6}  {'change [95% interval]':<32}  "
                   f"{p_head:<16}  {'verdict':<{vw}}  source")
        for r in rows:
            rec = r.records[s]
            if table.test == "band":
                ps = "n/a" if rec.band_apart is None else ("apart" if rec.band_apart else "overlap")
            else:
                ps = f"{p_text(rec.p):<7} {p_text(rec.p_adjusted)}"
            change = f"{pct_text(rec.change)}% {_interval(rec.change_low, rec.change_high, '%')}"
            out.append(f"{r.metric.name:<{width}}  {rec.direction:<6}  {change:<32}  {ps:<16}  "
                       f"{verdict_text(rec):<{vw}}  {source_text(rec)}")
        out.append("")
        out += _interval_lines(rows, s)
        out += _sampled_p_lines(rows, s)
        out += same_quantity_lines(sides, rows, s)
    out += _detect_lines(sides, table)
    out += _one_run_line(sides)
    return _finish(out, notes)


def _interval_lines(rows, side):
    """The rows whose change has no interval, or one whose 95% is not held, grouped by why."""
    why: dict = {}
    for r in rows:
        rec = r.records[side]
        if rec.interval_note and rec.change is not None:
            none = "no interval: " if rec.change_low is None else ""
            why.setdefault(none + rec.interval_note, []).append(r.metric.name)
    if not why:
        return []
    out = ["intervals:"]
    for note, names in why.items():
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        out.append(f"  {note}: {shown}")
    return out + [""]


def _sampled_p_lines(rows, side):
    """The rows whose p was counted over random splits, with the largest standard error."""
    sampled = [r for r in rows if r.records[side].p_error is not None]
    if not sampled:
        return []
    names = [r.metric.name for r in sampled]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    worst = max(r.records[side].p_error for r in sampled)
    return [f"p over random splits (too many to enumerate; standard error at most {worst:.4f}): "
            f"{shown}", ""]


def _detect_lines(sides, table):
    """--detect: per side, the rows without a significant change and the runs each would need."""
    if not table.detect_pct:
        return []
    what = f"{sides.unit}s" if sides.unit else "runs"
    out = [f"--detect {table.detect_pct:g}%: {what} per side for 80% power to detect a "
           f"{table.detect_pct:g}% change of the baseline's mean, by a t-test at "
           f"{table.alpha}/{max(table.tested, 1)} (what the correction asks of one change)"]
    for r in table.rows:
        for s in sides.sides[1:]:
            rec = r.records[s]
            if rec.significant or rec.verdict in ("n/a", "baseline"):
                continue
            need = f"n/a ({rec.detect_note})" if rec.detect_n is None else f"{rec.detect_n:,}"
            out.append(f"  {r.metric.name} ({printable(s)}): {need}")
    return out + [""]


def format_mmtests(sides, table, notes=()):
    """mmtests compare-kernels' layout: a block per kind of metric, ready to paste into a patch."""
    out = [_intro(sides, table)]
    for title, _kinds in BLOCKS:
        block = [r for r in table.rows if r.block == title]
        if not block:
            continue
        out.append("")
        w = _width(sides, block)
        if LAYOUT[title] == "stats":
            names = {id(r): r.metric.name + source_mark(r.records[sides.baseline]) for r in block}
            width = max(len(n) for n in names.values())
            lead = 10 + width + 1
            out += [_block_header(title, block, sides)] + _header(sides, lead, w)
            for key, _c, _n in STAT_ROWS:
                for r in block:
                    out.append(f"{_stat_name(r, key):<9} {names[id(r)]:<{width}} "
                               + _join(_cells(sides, r, key), sides, w))
        else:
            width = max(len(_title(r, sides)) for r in block)
            lead = width + 1
            out += [_block_header(title, block, sides)] + _header(sides, lead, w)
            for r in block:
                out.append(f"{_title(r, sides):<{width}} " + _join(_cells(sides, r, "value"), sides, w))
    for s in sides.sides[1:]:
        same = same_quantity_lines(sides, table.rows, s, titles=True)
        out += [""] + same[:-1] if same else []
    out += _disagreement_lines(sides, table)
    out += [""] + _one_run_line(sides) if _one_run_line(sides) else []
    return _finish(out, notes)


def _disagreement_lines(sides, table):
    """Under a band-test table: the rows where the band test and the default test, after the
    correction, do not agree (one marks what the other does not), so that a pasted table
    never hides what `compare` itself calls."""
    if table.test != "band":
        return []
    other = table.retested(sides, "welch")
    # sql-safe: a sentence for people (the test's and the correction's names), not SQL
    default = f"{TEST_TEXT['welch']} with {other.correction_text()}"
    out = []
    for s in sides.sides[1:]:
        lines = []
        for band_row, row in zip(table.rows, other.rows):
            b, w = band_row.records[s], row.records[s]
            if bool(b.significant) == bool(w.significant):
                continue
            band = ("apart" if b.band_apart else "overlap" if b.band_apart is not None
                    else f"no band test ({b.untested})")
            called = (f"adjusted p {p_text(w.p_adjusted)}" if w.p_adjusted is not None
                      else f"not tested ({w.untested})")
            lines.append(f"  {row.metric.name}: bands {band}; {called}"
                         if b.band_apart is not None else f"  {row.metric.name}: {band}; {called}")
        if lines:
            out += ["", f"the band test and {default} disagree ({printable(s)} vs "
                        f"{printable(sides.baseline)}; at adjusted p < {table.alpha}):"] + lines
    return out


def _title(row, sides):
    """A means-block row's name: the metric's title, with its source's mark (from any side)."""
    marks = {source_mark(row.records[s]) for s in sides.sides if row.records[s].n}
    mark = max(marks, key=len) if marks else ""
    return row.metric.title + mark


def records(sides, table):
    """One dict per metric and side, every field of the model's record: the rows of
    --format csv/json/jsonl/parquet."""
    return [{"label": sides.label, **dataclasses.asdict(rec)} for rec in table.records]


def format_markdown(sides, table, notes=()):
    """A markdown table: one line per metric and side, each cell a field of its record."""
    head = ["metric", "source", "better", "side", "n", "statistic", "value [95% interval]",
            "change [95% interval]", "p", "adj. p", "verdict"]
    if table.detect_pct:
        head.append(f"{sides.unit or 'run'}s for {table.detect_pct:g}%")
    lines = [f"{markdown_text(_intro(sides, table))}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.rows:
        for s in sides.sides:
            rec = r.records[s]
            value = "n/a" if rec.value is None else (
                f"{number_text(rec.value)} " + (markdown_text(bounds_text(rec)) + " " if bounds_text(rec) else "")
                + markdown_text(_interval(rec.value_low, rec.value_high))
                + (f" ({markdown_text(rec.value_note)})" if rec.value_note else ""))
            change = "" if rec.is_baseline else (
                f"{pct_text(rec.change)}% {markdown_text(_interval(rec.change_low, rec.change_high))}"
                + (f" ({markdown_text(rec.interval_note)})" if rec.interval_note else ""))
            cells = [f"`{r.metric.name}`", markdown_text(source_text(rec)),
                     rec.direction, markdown_text(s), f"{rec.n}", rec.statistic, value, change,
                     "" if rec.is_baseline else p_text(rec.p),
                     "" if rec.is_baseline else p_text(rec.p_adjusted),
                     markdown_text(verdict_text(rec))]
            if table.detect_pct:
                cells.append("" if rec.detect_n is None else f"{rec.detect_n:,}")
                if rec.detect_note and not rec.is_baseline:
                    cells[-1] = f"n/a ({markdown_text(rec.detect_note)})"
            lines.append("| " + " | ".join(cells) + " |")
    for s in sides.sides[1:]:
        same = same_quantity_lines(sides, table.rows, s)
        if same:
            lines += ["", markdown_text(same[0]), ""] + [f"- {markdown_text(x.strip())}"
                                                        for x in same[1:-1]]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {markdown_text(n)}" for n in notes]
    return "\n".join(lines) + "\n"


def markdown_text(text):
    """A label value as literal Markdown table text: no markup, no cell breaks, no HTML."""
    text = printable(" ".join(str(text).split()))
    for ch in "\\`*_{}[]()#+-.!|<>~":
        text = text.replace(ch, "\\" + ch)
    return text


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
