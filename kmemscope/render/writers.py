"""Each output format's writer: a Document (a kind, rows, an envelope and notes) to a stream.

(The formats themselves, their names, extensions and which writer each has, are
kmemscope.render.formats'; where the bytes go, stdout or an -o file, is kmemscope.render.output's.)

The aligned table is for people; the rest are for programs and say which schema they follow:
  json      one document: an object, the envelope
            {schema_version, kmemscope_version, kind, ..., rows: [...], notes: [...]}
            (the kinds of DOCUMENT_KINDS; the queries catalogue's stays an array of rows)
  jsonl     one object per line, every line a row (for streams: jq, pandas, DuckDB)
  csv       RFC 4180: a header line, then one line per row; no comment lines
  parquet   the Arrow types, the envelope in the file's key-value metadata
csv and jsonl hold rows only, so that every reader of those formats reads them whole: their
envelope and notes go to stderr and to the --notes file (write_notes). Every format writes one
valid document.
"""
import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kmemscope.common.version import __version__
from kmemscope.render.tables import MAX_CELL, format_table, jsonable, printable

# The version of every machine-readable output's layout (docs/output-schema.md): a field
# renamed or removed, or a change of a field's meaning or unit, makes it "2"; a field added
# at the end keeps it. The JSON Schema of each kind ships in kmemscope/render/schemas/.
SCHEMA_VERSION = "1"
# The kinds whose json is an object with the envelope: every kind with a schema in
# render/schemas/. The queries catalogue (analyses, analysis_columns: documentation, not data)
# stays an array of rows.
DOCUMENT_KINDS = ("comparison", "trend", "info", "query", "sql")


class OutputError(ValueError):
    """An output format that cannot be written (the CLI prints it as one line)."""


@dataclass
class Document:
    """What an output holds, whatever its format: the kind of output (comparison, trend,
    query, sql, info), its rows (an Arrow table, a RecordBatchReader, or a list of dicts),
    the envelope's other fields (label, baseline, ...: `meta`) and the notes."""
    kind: str
    rows: Any
    meta: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    text: str | None = None           # the text formats of a comparison: the text itself
    parts: dict | None = None         # json: named tables in place of `rows` (info)


def envelope(doc):
    """The fields every machine-readable output of `doc` starts with, then its meta."""
    return {"schema_version": SCHEMA_VERSION, "kmemscope_version": __version__,
            "kind": doc.kind, **doc.meta}


# Rows the sql verb prints as a text table at most: a table is for reading, and it is
# aligned over all its rows at once, so its memory grows with them (10 million rows of
# `SELECT * FROM range(1e7)` took 2.96 GB). csv, json, jsonl and parquet stream every row.
TABLE_MAX_ROWS = 10_000


def _batches(data, rows=8192):
    """Record batches of an Arrow table, or of a RecordBatchReader as it reads them."""
    return data.to_batches(max_chunksize=rows) if hasattr(data, "to_batches") else data


def arrow_rows(rows):
    """A Document's rows as Arrow (a list of dicts becomes a table)."""
    if isinstance(rows, list):
        import pyarrow as pa

        return pa.Table.from_pylist(rows)
    return rows


# ---------------------------------------------------------------- JSON

def _json_rows(data):
    """Rows one record batch at a time: a large result is never one Python list."""
    import pyarrow as pa

    for batch in _batches(data):
        # an empty MAP comes back from Arrow as [], a full one as pairs: both are objects
        maps = {f.name for f in batch.schema if pa.types.is_map(f.type)}
        for row in batch.to_pylist():
            yield json.dumps({k: {} if k in maps and v == [] else jsonable(v)
                              for k, v in row.items()}, default=str, ensure_ascii=False)


def _json_texts(batch):
    """The batch's rows as JSON objects, a StringArray (None when a column needs the row-wise
    path: a name twice). Each column becomes JSON text in Arrow's kernels, not row by row in
    Python: integers and booleans as Arrow writes them, floats as their shortest round-trip
    text (NaN and infinities null, as json.dumps(jsonable) gives), text escaped for JSON;
    other types (lists, maps, times, bytes) through jsonable() a column at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    if len(set(names)) != len(names):
        return None
    parts = []
    for i, (name, col) in enumerate(zip(names, batch.columns)):
        text = _json_column(col, pa, pc)
        parts += ["," if i else "", json.dumps(name, ensure_ascii=False) + ":",
                  pc.fill_null(text, "null")]
    if not parts:
        return pa.array(["{}"] * batch.num_rows, pa.string())
    return pc.binary_join_element_wise("{", *parts, "}", "")


_JSON_ESCAPES = [("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")]


def _json_column(col, pa, pc):
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return pc.cast(col, pa.string())
    if pa.types.is_floating(t):
        if not pa.types.is_float64(t):
            col = pc.cast(col, pa.float64())
        text = pc.cast(col, pa.string())
        # 1.0 is "1" to Arrow: keep it a float as json.dumps writes it
        text = pc.if_else(pc.match_substring_regex(text, r"^-?[0-9]+$"),
                          pc.binary_join_element_wise(text, ".0", ""), text)
        return pc.if_else(pc.is_finite(col), text, pa.scalar(None, pa.string()))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        text = col
        for find, repl in _JSON_ESCAPES:
            text = pc.replace_substring(text, find, repl)
        if pc.any(pc.match_substring_regex(text, r"[\x00-\x1f\x7f]")).as_py():
            # rare: the other control characters one by one, as json.dumps escapes them
            for code in [*range(0x20), 0x7F]:
                ch = chr(code)
                if ch not in "\n\r\t":
                    text = pc.replace_substring(text, ch, json.dumps(ch)[1:-1])
        return pc.binary_join_element_wise('"', pc.cast(text, pa.string()), '"', "")
    if pa.types.is_decimal(t):
        # as text, as json.dumps(default=str) writes a Decimal (Arrow's text is str()'s)
        return pc.binary_join_element_wise('"', pc.cast(col, pa.string()), '"', "")
    is_map = pa.types.is_map(t)
    return pa.array([None if v is None else json.dumps({} if is_map and v == [] else jsonable(v),
                                                       default=str, ensure_ascii=False)
                     for v in col.to_pylist()], pa.string())


def _write_json_rows(data, out, lines, indent="\n  "):
    """JSON (one array) or JSON lines to the binary stream `out`, a batch of rows at a time."""
    import pyarrow.compute as pc

    first = True
    if not lines:
        out.write(b"[")
    for batch in _batches(data, rows=65536):
        if batch.num_rows == 0:
            continue
        rows = _json_texts(batch)
        if rows is None:                  # the row-wise path
            texts = list(_json_rows(batch))
        else:
            texts = None
        if lines:
            if texts is not None:
                out.write("".join(t + "\n" for t in texts).encode())
            else:
                _write_strings(out, pc.binary_join_element_wise(rows, "\n", ""))
            continue
        if texts is not None:
            out.write("".join((indent if first and i == 0 else "," + indent) + t
                              for i, t in enumerate(texts)).encode())
        else:
            _write_strings(out, pc.binary_join_element_wise(indent if first else "," + indent,
                                                            rows.slice(0, 1), ""))
            _write_strings(out, pc.binary_join_element_wise("," + indent, rows.slice(1), ""))
        first = False
    if not lines:
        out.write((indent[:-2] + "]" if not first else "]").encode())


def _write_strings(out, arr):
    """The UTF-8 bytes of every string of `arr` one after another (its data buffer's span)."""
    import pyarrow as pa

    if len(arr) == 0:
        return
    if isinstance(arr, pa.ChunkedArray):
        for chunk in arr.chunks:
            _write_strings(out, chunk)
        return
    import numpy as np

    kind = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=kind)
    start, end = int(offsets[arr.offset]), int(offsets[arr.offset + len(arr)])
    out.write(memoryview(arr.buffers()[2])[start:end])


# ---------------------------------------------------------------- CSV

# A cell that starts with one of these is a formula to a spreadsheet (`=cmd|' /c calc'!A1`
# runs a program in some): OWASP's advice on CSV injection is to prefix it with a quote,
# which makes it text. Tab and CR, the rest of OWASP's list, are escaped with the other
# control characters (\t, \r), so no cell starts with them.
FORMULA_STARTS = ("=", "+", "-", "@")
# RE2 (pyarrow.compute): a cell that csv_cell() changes; the others are left as they are.
_CSV_UNSAFE = r"^[=+\-@]|[\x{00}-\x{1f}\x{7f}-\x{9f}]"


def csv_cell(text):
    """Text as a CSV cell that neither a terminal nor a spreadsheet acts on: control
    characters escaped as in tables (ESC as \\x1b, a newline as \\n), and a leading
    = + - @ behind a quote."""
    text = printable(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _csv_text(col):
    """A string column with every unsafe cell made safe (csv_cell); safe columns as they are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pc.any(pc.match_substring_regex(col, _CSV_UNSAFE)).as_py():
        return col
    return pa.array([None if v is None else csv_cell(v) for v in col.to_pylist()], pa.string())


def _csv_batch(batch):
    """CSV holds text and numbers: lists, maps and structs as JSON, bytes as base64, and
    every text cell made safe (csv_cell), its column name too."""
    import pyarrow as pa

    cols = []
    for col in batch.columns:
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        if pa.types.is_nested(col.type):
            col = pa.array([json.dumps(jsonable(v), default=str) if v is not None else None
                            for v in col.to_pylist()], pa.string())
        elif pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            col = pa.array([jsonable(v) for v in col.to_pylist()], pa.string())
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = _csv_text(col)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, names=[csv_cell(n) for n in batch.schema.names])


def _write_csv(data, out):
    """CSV to the binary stream `out`, a record batch at a time (the header even with no rows)."""
    import pyarrow.csv as pacsv

    schema = data.schema
    writer = None
    for batch in _batches(data):
        batch = _csv_batch(batch)
        if writer is None:
            writer = pacsv.CSVWriter(out, batch.schema)
        writer.write_batch(batch)
    if writer is None:          # no rows: the header alone
        import pyarrow as pa

        writer = pacsv.CSVWriter(out, _csv_batch(pa.RecordBatch.from_pylist([], schema)).schema)
    writer.close()


# ---------------------------------------------------------------- each format's writer
# Each takes (doc, out) with out a binary stream, and the table's max_cell and width; the
# registry (formats.py) names the writer of every format.

def write_table(doc, out, max_cell=MAX_CELL, width=None):
    """An aligned text table of the rows, for people."""
    out.write(format_table(doc.rows, max_cell, width=width).encode())


def write_csv(doc, out, **_):
    """RFC 4180 CSV: a header line, then a line per row. Nothing else: no notes, no envelope
    (a comment line is a row to pandas, DuckDB and Python's csv module)."""
    _write_csv(arrow_rows(doc.rows), out)


def write_jsonl(doc, out, **_):
    """One JSON object per line, every line a row (the envelope and notes: --notes FILE)."""
    _write_json_rows(arrow_rows(doc.rows), out, lines=True)


def write_json(doc, out, **_):
    """One JSON document: for DOCUMENT_KINDS the envelope object, its rows (or, for info, its
    named tables) and its notes, the rows streamed a batch at a time; for the other kinds
    (the queries catalogue) one array of objects."""
    if doc.kind not in DOCUMENT_KINDS:
        _write_json_rows(arrow_rows(doc.rows), out, lines=False)
        out.write(b"\n")
        return
    out.write(b"{")
    for i, (key, value) in enumerate(envelope(doc).items()):
        out.write(f"{',' if i else ''}\n {json.dumps(key)}: "
                  f"{json.dumps(jsonable(value), ensure_ascii=False, default=str)}".encode())
    parts = doc.parts if doc.parts is not None else {"rows": doc.rows}
    for key, rows in parts.items():
        out.write(f",\n {json.dumps(key)}: ".encode())
        _write_json_rows(arrow_rows(rows), out, lines=False, indent="\n  ")
    notes = json.dumps([str(n) for n in doc.notes], ensure_ascii=False)
    out.write(f',\n "notes": {notes}\n}}\n'.encode())


def parquet_metadata(doc):
    """The envelope as Parquet key-value metadata: schema_version, kmemscope_version and kind
    as plain text, the notes (kmemscope.notes) and every other field as JSON."""
    head = envelope(doc)
    meta = {key: str(head.pop(key)) for key in ("schema_version", "kmemscope_version", "kind")}
    meta["kmemscope.notes"] = json.dumps([str(n) for n in doc.notes])
    meta.update({key: json.dumps(jsonable(value), default=str) for key, value in head.items()})
    return {k.encode(): v.encode() for k, v in meta.items()}


def write_parquet(doc, out, **_):
    """Parquet to `out` (a path or a binary stream), a record batch at a time, the envelope in
    the file's key-value metadata."""
    import pyarrow.parquet as pq

    data = arrow_rows(doc.rows)
    schema = data.schema.with_metadata({**(data.schema.metadata or {}), **parquet_metadata(doc)})
    with pq.ParquetWriter(out, schema) as writer:
        for batch in _batches(data, rows=1 << 20):
            writer.write_batch(batch)


def write_folded(doc, out, **_):
    """`stack samples` per row (flamegraph.pl, inferno, speedscope read it)."""
    table = doc.rows
    if "stack" not in table.column_names or "samples" not in table.column_names:
        raise OutputError("--format folded needs a result with columns stack and samples, "
                          "such as alloc_origins.folded")
    for stack, samples in zip(table.column("stack").to_pylist(),
                              table.column("samples").to_pylist()):
        if stack is None or samples is None:
            continue
        # A space inside a frame would move the count; a newline would forge a line.
        stack = printable(str(stack)).replace(" ", "_")
        out.write(f"{stack} {samples}\n".encode())


def write_text(doc, out, **_):
    """A comparison's text for people (text, mmtests, markdown), as its Document holds it."""
    out.write(doc.text.encode())


def notes_document(doc, fmt):
    """What --notes FILE holds: the output's envelope and notes, without its rows: the one
    place a csv's or jsonl's schema version and caveats go (docs/output-schema.md)."""
    return {**envelope(doc), "format": fmt, "notes": [str(n) for n in doc.notes]}


# ---------------------------------------------------------------- where the bytes go

def terminal_width():
    """stdout's columns when it is a terminal (tables fit it), else None (pipes get whole lines)."""
    import shutil

    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((100, 24)).columns


def _stdout_binary(binary=None):
    """stdout as a binary stream, after what was written to it as text (`binary`: the name of
    a format no terminal shows, refused there)."""
    if binary and sys.stdout.isatty():
        raise OutputError(f"{binary} output is binary: give -o FILE")
    sys.stdout.flush()
    return sys.stdout.buffer


def write_to(writer, doc, output=None, binary=None, max_cell=MAX_CELL):
    """`doc` through `writer` to `output` (a path: common/outfile.py, renamed into place when
    written, removed on an error) or to stdout (binary: the format's name, refused on a
    terminal)."""
    if output:
        from kmemscope.common.outfile import NewFile

        with NewFile(output) as out:
            writer(doc, out, max_cell=max_cell)
        return
    out = _stdout_binary(binary)
    writer(doc, out, max_cell=max_cell, width=terminal_width())
    out.flush()


class ResultWriter:
    """The `sql` verb's results, each written as it arrives, one after another, to stdout or
    to the -o file (opened with the first result).

    stream(batches) writes a result as DuckDB hands it over, a batch at a time, so that a
    result of any size takes a batch's memory (csv, json, jsonl, parquet). table(rows)
    prints a text table of at most TABLE_MAX_ROWS rows, and says so under it when it cut the
    result. csv and table results are separated by an empty line; a format that is one
    document (json, parquet: `Format.one_result`) holds one result.

    fmt: the registry's Format (kmemscope.render.formats), whose writer writes each result.
    """

    def __init__(self, fmt, output=None, kind="sql", several="table, csv or jsonl", notes=None):
        self.fmt, self.output, self.kind = fmt, output, kind
        # the command's notes, a list it keeps adding to: json writes those there are when a
        # result's rows are written (after them), parquet those there are when it starts
        self.notes = notes if notes is not None else []
        self.several = several          # the formats that hold several results, for a message
        self.results = 0
        self._out = None
        self._file = None       # the -o file being written (common/outfile.py)
        if not output and fmt.binary and sys.stdout.isatty():
            raise OutputError(f"{fmt.name} output is binary: give -o FILE")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._file is not None:
            self._file.__exit__(*exc)      # renamed into place, or removed on an error
        elif self._out is not None:
            self._out.flush()
        return False

    def _next(self):
        """The stream for the next result (an empty line after a previous csv or table)."""
        if self.results and self.fmt.one_result:
            from kmemscope.common.errors import KmemscopeError

            raise KmemscopeError(f"--format {self.fmt.name} holds one result and the SQL has more "
                                 "than one statement that returns rows",
                                 f"run them one at a time, or use --format {self.several}")
        if self._out is None:
            if self.output:
                from kmemscope.common.outfile import NewFile

                self._file = NewFile(self.output)
                self._out = self._file.__enter__()
            else:
                self._out = _stdout_binary(self.fmt.binary and self.fmt.name)
        else:
            self._out.write(self.fmt.between_results)
        self.results += 1
        return self._out

    def stream(self, batches):
        """Write one statement's result (a RecordBatchReader; None: the statement had none)."""
        if batches is not None:
            out = self._next()
            self.fmt.writer(Document(self.kind, batches, notes=self.notes), out)
            out.flush()

    def table(self, rows):
        """Print one statement's result as a text table: its first TABLE_MAX_ROWS rows, and a
        last line saying so when there are more (as a table says which columns it hid)."""
        if rows is None:
            return
        out = self._next()
        text = format_table(rows.slice(0, TABLE_MAX_ROWS), MAX_CELL,
                            width=None if self.output else terminal_width())
        if rows.num_rows > TABLE_MAX_ROWS:
            text += (f"(the first {TABLE_MAX_ROWS:,} rows of a longer result; "
                     "--format csv, jsonl or parquet writes every row)\n")
        out.write(text.encode())
        out.flush()


@contextmanager
def _text_output(output, newline=None):
    """A text stream to the -o file (common/outfile.py: renamed into place when the block
    ends, removed on an error) or to stdout."""
    if not output:
        yield sys.stdout
        return
    import io

    from kmemscope.common.outfile import NewFile

    with NewFile(output) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline=newline)
        yield text
        text.flush()
        text.detach()


def write_document(parts, output=None):
    """Several named tables as one text document, each under its name and row count."""
    text = "\n".join(f"{printable(name)} ({table.num_rows})\n{format_table(table)}"
                     for name, table in parts.items())
    with _text_output(output) as out:
        out.write(text)
