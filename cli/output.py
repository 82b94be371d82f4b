"""Write query results the same way on every verb: table, csv, json, jsonl or parquet.

The aligned table is for people; csv, json (one array of objects, in the style
of sqlite-utils) and jsonl (one object per line, for streams) are for programs;
parquet keeps the Arrow types. Every format writes one valid document. `-o FILE`
takes its format from the file's extension when --format is not given, and a
mismatch between the two is an error rather than a mislabelled file.
"""
import json
import sys

from kmemscope.tables import MAX_CELL, format_table, jsonable, printable

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
# folded: `stack samples` lines for flame-graph tools, from a result with the
# columns stack and samples (alloc_origins.folded); offered by `query` only.
FOLDED = "folded"
EXTENSIONS = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl",
              ".parquet": "parquet", ".txt": "table", ".folded": FOLDED}


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


# ---------------------------------------------------------------- JSON

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
    text = "\n".join(f"{printable(name)} ({table.num_rows})\n{format_table(table)}"
                     for name, table in parts.items())
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


# ---------------------------------------------------------------- comparisons

def write_records(table_rows, notes, fmt, output, meta=None):
    """csv/json/jsonl/parquet of `table_rows` (dicts) with the notes inside the file."""
    import pyarrow as pa

    table = pa.Table.from_pylist(table_rows)
    if fmt == "parquet":
        metadata = {b"kmemscope.notes": json.dumps(list(notes)).encode()}
        metadata.update({k.encode(): json.dumps(v).encode() for k, v in (meta or {}).items()})
        write_result(table.replace_schema_metadata(metadata), fmt, output)
        return
    out = open(output, "w", encoding="utf-8", newline="") if output else sys.stdout
    try:
        if fmt == "json":
            doc = dict(meta or {})
            doc["rows"] = [{k: jsonable(v) for k, v in row.items()} for row in table_rows]
            doc["notes"] = list(notes)
            out.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        elif fmt == "jsonl":
            for note in notes:
                out.write(json.dumps({"note": note}, ensure_ascii=False) + "\n")
            for row in table_rows:
                out.write(json.dumps({k: jsonable(v) for k, v in row.items()},
                                     ensure_ascii=False) + "\n")
        elif fmt == "csv":
            import io

            import pyarrow.csv as pacsv

            for note in notes:
                out.write("# note: " + printable(" ".join(str(note).split())) + "\n")
            buf = io.BytesIO()
            pacsv.write_csv(table, buf)
            out.write(buf.getvalue().decode("utf-8"))
        else:
            raise ValueError(f"unknown format {fmt}")
    finally:
        if output:
            out.close()
