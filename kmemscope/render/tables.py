"""Arrow tables as aligned text, and Arrow values as JSON: the same on every surface.

The command line prints these tables, Result's text view in a notebook is one,
and the comparison's outputs use the same cells. Numbers are right-aligned with
about six significant digits, pfn columns in hex, missing values as NULL, and
control characters escaped (a label with a newline or an escape sequence
cannot forge rows or colour a terminal). Given a width, a table fits it: wide
cells are clipped and columns in the middle are hidden, with a line saying so.
"""
import base64
import json
import math

from kmemscope.dataset.rows import Rows
from kmemscope.common.text import printable  # noqa: F401  (control characters escaped, cells and all)

MAX_CELL = 60
NULL = "NULL"      # what a missing value shows as in table output


def _is_pairs(value):
    return isinstance(value, list) and bool(value) and all(
        isinstance(v, tuple) and len(v) == 2 for v in value)


def _float_decimals(values):
    """Decimals that show about six significant digits of a column, in fixed notation."""
    finite = [abs(v) for v in values if isinstance(v, float) and math.isfinite(v)]
    if not finite:
        return 0
    biggest = max(finite)
    digits = len(str(int(biggest))) if biggest >= 1 else 0
    if all(v == int(v) for v in finite):
        return 0
    return max(0, min(6, 6 - digits))


def _cell(value, max_cell=MAX_CELL, decimals=None):
    if value is None:
        return NULL
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        places = decimals if decimals is not None else 6
        if value and (abs(value) >= 1e21 or abs(value) < 1e-6):
            text = f"{value:.6g}"      # 1.7e+308, 5e-324: neither 309 digits nor a false 0
            # (fixed point below 1e21, where a double still reads as a number of digits)
        else:
            text = f"{value:.{places}f}"
    elif _is_pairs(value):
        text = ",".join(f"{k}={v}" for k, v in value)   # an Arrow MAP such as labels
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_cell(v, None) for v in value) + "]"
    elif isinstance(value, dict):
        text = json.dumps(value, default=str)
    elif isinstance(value, (bytes, bytearray)):
        text = base64.b64encode(value).decode()
    else:
        text = str(value)
    text = printable(text)
    if max_cell is None or len(text) <= max_cell:
        return text
    return text[:max_cell - 1] + "…"


def is_pfn_column(name, arrow_type):
    """Page frame numbers: shown in hex in tables, as trace-cmd and perf print them."""
    import pyarrow as pa

    return pa.types.is_integer(arrow_type) and _is_pfn_name(name)


def _is_pfn_name(name):
    return name == "pfn" or name.endswith("_pfn")


def _fit(widths, width, floor=8):
    """Column widths shrunk, widest first, until the line fits `width` (None: as they are)."""
    widths = list(widths)
    if not width:
        return widths
    while sum(widths) + 2 * (len(widths) - 1) > width:
        widest = max(range(len(widths)), key=lambda i: widths[i])
        if widths[widest] <= floor:
            break
        widths[widest] -= 1
    return widths


def _clip(text, width):
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def _kind_of_arrow(t):
    import pyarrow as pa

    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    return "decimal" if pa.types.is_decimal(t) else "other"


def _cells(table, max_cell=MAX_CELL):
    """(column names, rows of cell texts, which columns are numeric) of an Arrow table or Rows:
    the one rendering of values that text and HTML tables share (pfns in hex, labels as k=v,
    NULL, about six significant digits, control characters escaped)."""
    if isinstance(table, Rows):
        kinds, columns = table.kinds, table.columns_as_lists()
    else:
        kinds = [_kind_of_arrow(t) for t in table.schema.types]
        columns = [col.to_pylist() for col in table.columns]
    names = [printable(n) for n in table.column_names]
    for j, (name, kind) in enumerate(zip(table.column_names, kinds)):
        if kind == "int" and _is_pfn_name(name):
            columns[j] = [hex(v) if isinstance(v, int) else v for v in columns[j]]
    decimals = [_float_decimals(col) if kind == "float" else None
                for col, kind in zip(columns, kinds)]
    cells = [[_cell(col[i], max_cell, decimals[j]) for j, col in enumerate(columns)]
             for i in range(table.num_rows)]
    numeric = [kind in ("int", "float", "decimal") for kind in kinds]
    return names, cells, numeric


def format_html(table, max_cell=MAX_CELL):
    """The table as an HTML <table> with the cells of format_table (every cell escaped; numbers
    right-aligned)."""
    import html

    names, cells, numeric = _cells(table, max_cell)
    align = ['' if not num else ' style="text-align: right"' for num in numeric]
    head = "".join(f"<th{a}>{html.escape(n)}</th>" for n, a in zip(names, align))
    body = "".join("<tr>" + "".join(f"<td{a}>{html.escape(c)}</td>" for c, a in zip(row, align))
                   + "</tr>" for row in cells)
    return (f'<table class="dataframe kmemscope-result"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def format_table(table, max_cell=MAX_CELL, width=None):
    """An aligned text table; numbers right-aligned, text left-aligned, long cells cut.

    `table`: an Arrow table, or Rows. pfn columns print in hex. width: the terminal's
    columns; wider tables cut their widest columns (with …) until each line fits.
    """
    names, cells, numeric = _cells(table, max_cell)
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    hidden: list[str] = []
    if width:
        # Too many columns even when cut: leave out middle ones, like duckdb's shell, for "…"
        while len(widths) > 2 and sum(min(w, 8) for w in widths) + 2 * len(widths) > width:
            mid = len(widths) // 2 if "…" not in names else names.index("…")
            # then neighbours of "…", right and left in turn, so both ends stay in view
            drop = mid + 1 if len(hidden) % 2 and mid + 1 < len(names) - 1 else mid - 1
            if drop <= 0:
                drop = mid + 1
            if "…" not in names:
                hidden.append(names[mid])
                names[mid], widths[mid], numeric[mid] = "…", 1, False
                for row in cells:
                    row[mid] = "…"
                continue
            if drop <= 0 or drop >= len(names) - 1:
                break
            hidden.append(names[drop])
            for lst in (names, widths, numeric):
                del lst[drop]
            for row in cells:
                del row[drop]
    fitted = _fit(widths, width)
    if fitted != widths:
        names = [_clip(n, w) for n, w in zip(names, fitted)]
        cells = [[_clip(v, w) for v, w in zip(row, fitted)] for row in cells]
        widths = fitted

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(names), "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells]
    if hidden:
        out.append(_clip(f"({len(hidden)} columns not shown at this width: "
                         f"{', '.join(sorted(hidden, key=table.column_names.index))}; "
                         "--format csv or json shows all)", width))
    return "\n".join(out) + "\n"



def jsonable(value):
    """A Python value from Arrow as JSON: MAPs as objects, bytes as base64, NaN as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if _is_pairs(value):
        return {str(k): jsonable(v) for k, v in value}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    return value
