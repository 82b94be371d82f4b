"""Write query results the same way on every verb: table, csv, json, jsonl or parquet.

The aligned table is for people; csv, json (one array of objects, in the style
of sqlite-utils) and jsonl (one object per line, for streams) are for programs;
parquet keeps the Arrow types. Every format writes one valid document. `-o FILE`
takes its format from the file's extension when --format is not given, and a
mismatch between the two is an error rather than a mislabelled file.
"""
import base64
import json
import math
import sys

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
# folded: `stack samples` lines for flame-graph tools, from a result with the
# columns stack and samples (alloc_origins.folded); offered by `query` only.
FOLDED = "folded"
EXTENSIONS = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl",
              ".parquet": "parquet", ".txt": "table", ".folded": FOLDED}
MAX_CELL = 60
NULL = "NULL"      # what a missing value shows as in table output


class OutputError(ValueError):
    """An output format that cannot be written (the CLI prints it as one line)."""


def resolve_format(fmt, output, allowed=FORMATS, default="table"):
    """The format to write: --format if given, else from -o's extension, else `default`."""
    inferred = None
    if output:
        lower = str(output).lower()
        inferred = next((f for ext, f in EXTENSIONS.items() if lower.endswith(ext)), None)
        if inferred is not None and inferred not in allowed:
            inferred = None
    if fmt is None:
        return inferred or default
    if inferred is not None and inferred != fmt:
        raise OutputError(f"-o {output} looks like {inferred} but --format is {fmt}: "
                          "give a matching extension or drop one of them")
    return fmt


# ---------------------------------------------------------------- cells

# Control characters in data (a label with a newline, an escape sequence in a
# comm) would forge rows or colour the terminal: shown escaped in tables.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)]}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def printable(text):
    """`text` with control characters escaped, for aligned text output."""
    return text.translate(_CONTROL)


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
        text = f"{value:.{decimals if decimals is not None else 6}f}"
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

    return pa.types.is_integer(arrow_type) and (name == "pfn" or name.endswith("_pfn"))


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


def format_table(table, max_cell=MAX_CELL, width=None):
    """An aligned text table; numbers right-aligned, text left-aligned, long cells cut.

    pfn columns print in hex. width: the terminal's columns; wider tables cut
    their widest columns (with …) until each line fits.
    """
    import pyarrow as pa

    names = [printable(n) for n in table.column_names]
    columns = [col.to_pylist() for col in table.columns]
    for j, (name, t) in enumerate(zip(table.column_names, table.schema.types)):
        if is_pfn_column(name, t):
            columns[j] = [hex(v) if isinstance(v, int) else v for v in columns[j]]
    decimals = [_float_decimals(col) if pa.types.is_floating(t) else None
                for col, t in zip(columns, table.schema.types)]
    cells = [[_cell(col[i], max_cell, decimals[j]) for j, col in enumerate(columns)]
             for i in range(table.num_rows)]
    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
               for t in table.schema.types]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    hidden = []
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


# ---------------------------------------------------------------- JSON

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


def _json_rows(table):
    """Rows one record batch at a time: a large result is never one Python list."""
    import pyarrow as pa

    for batch in table.to_batches(max_chunksize=8192):
        # an empty MAP comes back from Arrow as [], a full one as pairs: both are objects
        maps = {f.name for f in batch.schema if pa.types.is_map(f.type)}
        for row in batch.to_pylist():
            yield json.dumps({k: {} if k in maps and v == [] else jsonable(v)
                              for k, v in row.items()}, default=str, ensure_ascii=False)


def _write_json(table, out, lines):
    if lines:
        for row in _json_rows(table):
            out.write(row + "\n")
        return
    first = True
    out.write("[")
    for row in _json_rows(table):
        out.write(("\n  " if first else ",\n  ") + row)
        first = False
    out.write("\n]\n" if not first else "]\n")


# ---------------------------------------------------------------- writers

def _csv_ready(table):
    """CSV cannot hold lists, maps or bytes: write them as JSON or base64 text."""
    import pyarrow as pa

    cols = []
    for col in table.columns:
        if pa.types.is_nested(col.type):
            col = pa.array([json.dumps(jsonable(v), default=str) if v is not None else None
                            for v in col.to_pylist()], pa.string())
        elif pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            col = pa.array([jsonable(v) for v in col.to_pylist()], pa.string())
        elif pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols.append(col)
    return pa.table(cols, names=table.column_names)


def _write_folded(table, out):
    """`stack samples` per row (flamegraph.pl, inferno, speedscope read it)."""
    if "stack" not in table.column_names or "samples" not in table.column_names:
        raise OutputError("--format folded needs a result with columns stack and samples, "
                          "such as alloc_origins.folded")
    for stack, samples in zip(table.column("stack").to_pylist(),
                              table.column("samples").to_pylist()):
        if stack is None or samples is None:
            continue
        # A space inside a frame would move the count; a newline would forge a line.
        stack = printable(str(stack)).replace(" ", "_")
        out.write(f"{stack} {samples}\n")


def terminal_width():
    """stdout's columns when it is a terminal (tables fit it), else None (pipes get whole lines)."""
    import shutil

    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((100, 24)).columns


def write_result(table, fmt="table", output=None, max_cell=MAX_CELL):
    """Write an Arrow table to `output` (a path) or stdout in `fmt`."""
    if fmt == FOLDED:
        out = open(output, "w", encoding="utf-8") if output else sys.stdout
        try:
            _write_folded(table, out)
        finally:
            if output:
                out.close()
        return
    if fmt not in FORMATS:
        raise OutputError(f"unknown output format {fmt!r}; one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        if not output:
            if sys.stdout.isatty():
                raise OutputError("parquet output is binary: give -o FILE")
            pq.write_table(table, sys.stdout.buffer)
        else:
            pq.write_table(table, output)
        return
    if fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(_csv_ready(table), output or sys.stdout.buffer)
        return
    out = open(output, "w", encoding="utf-8") if output else sys.stdout
    try:
        if fmt in ("json", "jsonl"):
            _write_json(table, out, lines=fmt == "jsonl")
        else:
            out.write(format_table(table, max_cell, width=None if output else terminal_width()))
    finally:
        if output:
            out.close()


def write_document(parts, fmt, output=None):
    """Several named tables as ONE document: a JSON object of arrays, or tables one after another."""
    if fmt == "json":
        out = open(output, "w", encoding="utf-8") if output else sys.stdout
        try:
            out.write("{")
            for i, (name, table) in enumerate(parts.items()):
                out.write(("" if i == 0 else ",") + f"\n{json.dumps(name)}: ")
                rows = [json.loads(r) for r in _json_rows(table)]
                out.write(json.dumps(rows, indent=2, ensure_ascii=False, default=str)
                          .replace("\n", "\n  "))
            out.write("\n}\n")
        finally:
            if output:
                out.close()
        return
    if fmt != "table":
        raise OutputError(f"write_document writes json or table, not {fmt}")
    text = "\n".join(f"{name} ({table.num_rows})\n{format_table(table)}" for name, table in parts.items())
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
