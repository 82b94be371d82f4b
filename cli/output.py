"""Print query results the same way on every verb: table, csv, json or parquet.

The aligned table is for people; csv and json (one object per row, in the
style of sqlite-utils) are for programs; parquet keeps the Arrow types.
"""
import json
import sys

FORMATS = ("table", "csv", "json", "parquet")
MAX_CELL = 60


# Control characters in data (a label with a newline, an escape sequence in a
# comm) would forge rows or colour the terminal: shown escaped in tables.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)]}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def printable(text):
    """`text` with control characters escaped, for aligned text output."""
    return text.translate(_CONTROL)


def _cell(value, max_cell=MAX_CELL):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        text = ",".join(f"{k}={v}" for k, v in value)   # an Arrow MAP such as labels
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_cell(v, None) for v in value) + "]"
    elif isinstance(value, dict):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    text = printable(text)
    if max_cell is None or len(text) <= max_cell:
        return text
    return text[:max_cell - 1] + "…"


def format_table(table, max_cell=MAX_CELL):
    """An aligned text table; numbers right-aligned, text left-aligned, long cells cut."""
    import pyarrow as pa

    names = table.column_names
    rows = table.to_pylist()
    cells = [[_cell(r[n], max_cell) for n in names] for r in rows]
    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
               for t in table.schema.types]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    names = [printable(n) for n in names]
    widths = [max(w, len(n)) for w, n in zip(widths, names)]
    out = [line(names), "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells]
    return "\n".join(out) + "\n"


def _jsonable(value):
    if isinstance(value, list) and value and isinstance(value[0], tuple) and len(value[0]) == 2:
        return {k: v for k, v in value}   # Arrow MAP comes back as key/value pairs
    return value


def write_result(table, fmt="table", output=None, max_cell=MAX_CELL):
    """Write an Arrow table to `output` (a path) or stdout in `fmt`."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        if not output:
            if sys.stdout.isatty():
                raise ValueError("parquet output is binary: give -o FILE")
            pq.write_table(table, sys.stdout.buffer)
        else:
            pq.write_table(table, output)
        return
    if fmt == "csv":
        import pyarrow as pa
        import pyarrow.csv as pacsv

        # CSV cannot hold lists or maps: write them as JSON text.
        cols = []
        for name, col in zip(table.column_names, table.columns):
            if pa.types.is_nested(col.type):
                col = pa.array([json.dumps(_jsonable(v), default=str) if v is not None else None
                                for v in col.to_pylist()], pa.string())
            elif pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            cols.append(col)
        table = pa.table(cols, names=table.column_names)
        sink = output or sys.stdout.buffer
        pacsv.write_csv(table, sink)
        return
    if fmt == "json":
        text = json.dumps([{k: _jsonable(v) for k, v in row.items()} for row in table.to_pylist()],
                          default=str, indent=2) + "\n"
    else:
        text = format_table(table, max_cell)
    if output:
        with open(output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
