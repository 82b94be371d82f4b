"""A comparison (queries/comparison_model.py) as HTML: its table, and the value and verdict
spans the report's other tables share (kmemscope/plots/sides.py).

Every number and word is a field of a record, printed by kmemscope/render/verdicts.py:
the verdict's colour and text, a model row's bounds, the p-values; the range of a side's
values is the record's `range` ("309-312"). Every text from a dataset is escaped.
"""
import html
import math

from kmemscope.render.comparison import source_text
from kmemscope.render.verdicts import bounds_text, p_text, verdict_color, verdict_text


def number_text(v):
    """Two decimals, or two significant digits below 0.1: a kcompactd CPU time of 0.075 s is
    not 0.08, and 0.01 against 0.005 is not 0.01 against 0.01."""
    if v and abs(v) < 0.1:
        return f"{v:,.{1 - math.floor(math.log10(abs(v)))}f}"
    return f"{v:,.2f}"


def verdict_html(rec):
    """The record's change and verdict, coloured by its verdict (never by a sign)."""
    text = html.escape(verdict_text(rec))
    if rec.significant:
        text = f"<b>{text}</b>"
    return (f"<span class='kmemscope-verdict' data-metric=\"{html.escape(rec.metric, quote=True)}\" "
            f"data-side=\"{html.escape(rec.side, quote=True)}\" data-verdict='{html.escape(rec.verdict)}' "
            f"style='color:{verdict_color(rec)}'>{text}</span>")


def value_html(rec):
    """'<span data-...>Hmean 31.67</span>': the side's statistic, named, with its value in data
    attributes (and a model row's bounds after it)."""
    if rec.value is None:
        return "n/a"
    bounds = bounds_text(rec)
    return (f"<span class='kmemscope-value' data-metric=\"{html.escape(rec.metric, quote=True)}\" "
            f"data-side=\"{html.escape(rec.side, quote=True)}\" data-stat='{rec.statistic}' "
            f"data-value='{rec.value!r}'>{rec.statistic} {number_text(rec.value)}</span>"
            + (f" {html.escape(bounds)}" if bounds else ""))


def comparison_html(sides, rows):
    """The comparison as an HTML table: per side its statistic, named, with its 95% interval and the
    range of the per-run values; against the baseline the change with its interval, the verdict
    (green better, red worse, only where significant), the p-value and the adjusted one, the source."""
    esc = html.escape
    head = ["metric", "unit", "better", "source"] + [f"{esc(s)} (n={sides.unit_count(s)})"
                                                      for s in sides.sides]
    for s in sides.sides[1:]:
        head += [f"{esc(s)} vs {esc(sides.baseline)} [95% interval]", "p", "adjusted p"]
    out = ["<table class='kmemscope-compare'><thead><tr>"
           + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows:
        base_rec = r.records[sides.baseline]
        cells = [f"<code>{esc(r.metric.name)}</code>", esc(r.metric.unit), esc(base_rec.direction),
                 esc(_sources(r))]
        for s in sides.sides:
            rec = r.records[s]
            cells.append("n/a" if rec.n == 0 else value_html(rec)
                         + (f" [{number_text(rec.value_low)}, {number_text(rec.value_high)}]"
                            if rec.value_low is not None else "")
                         + f"<br><small>range {esc(rec.range)}"
                         + (f", {rec.n} of {rec.runs} runs" if rec.n != rec.runs and not sides.unit else "")
                         + "</small>")
        for s in sides.sides[1:]:
            rec = r.records[s]
            interval = ("" if rec.change_low is None
                        else f"<br><small>[{rec.change_low:+.2f}%, {rec.change_high:+.2f}%]</small>")
            cells += [verdict_html(rec) + interval, p_text(rec.p), p_text(rec.p_adjusted)]
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _sources(row):
    """The sources of a row's values over its sides, lower bounds named."""
    found = {source_text(rec) if rec.exactness != "model" else f"{rec.source} (model)"
             for rec in row.records.values() if rec.n}
    return "; ".join(sorted(found)) or "n/a"
