"""Every output format kmemscope writes, in one registry that the command line reads.

A format has a name (`--format NAME`), the file extensions that imply it (`-o FILE`
without --format), and the kinds of output that offer it:

  rows        a query's result (sql, query, metrics list): table, csv, json, jsonl, parquet
  query       what `query` writes: the rows formats and `folded` (flame-graph lines,
              from a result with the columns stack and samples, as alloc_origins.folded)
  comparison  what `compare` writes: text, mmtests and markdown for people, and the
              rows formats but `table` for programs

Each format names its writer (kmemscope/render/writers.py), so the command line asks the
registry rather than listing formats: `write(fmt, doc, output)` writes any of them, and
`machine` marks those for programs (csv, json, jsonl, parquet), which carry the schema
version of docs/output-schema.md.

A name the registry does not hold, and an extension that names a format the output does
not offer, are refused in one line (OutputError), never written as something else.
"""
from dataclasses import dataclass
from typing import Callable

from kmemscope.render import writers
from kmemscope.render.writers import OutputError  # noqa: F401  (the CLI catches it from here)


@dataclass(frozen=True)
class Format:
    name: str
    extensions: tuple
    kinds: frozenset
    help: str
    writer: Callable                # writers.write_X(doc, out, max_cell=, width=)
    text: bool = False      # written as text lines a person reads: any of them may go to a .txt
    machine: bool = False   # for programs: carries the schema version (docs/output-schema.md)
    binary: bool = False    # bytes no terminal shows: stdout only when it is not a terminal
    one_result: bool = False        # one document: holds one result of `sql`, not several
    between_results: bytes = b""    # what `sql` writes between two statements' results
    method: str | None = None       # a comparison's text formats: the Comparison method giving it
    notes_inside: bool = True       # the output holds its notes (csv and jsonl hold rows only)


# A .txt or .text file is text of any kind: it suggests the default format, contradicts none
# that is text (`compare --format mmtests -o table.txt`).
PLAIN_TEXT = (".txt", ".text")


_ROWS, _QUERY, _COMPARISON = "rows", "query", "comparison"
_TABULAR = frozenset({_ROWS, _QUERY, _COMPARISON})
REGISTRY = (
    Format("table", (".txt",), frozenset({_ROWS, _QUERY}),
           "an aligned text table, for people (at most 10,000 rows)", writers.write_table,
           text=True, between_results=b"\n"),
    Format("text", (".txt", ".text"), frozenset({_COMPARISON}),
           "the comparison's full text: statistics, changes, tests and verdicts",
           writers.write_text, text=True, method="text"),
    Format("mmtests", (".mmtests",), frozenset({_COMPARISON}),
           "mmtests compare-kernels' layout, to paste into a patch", writers.write_text,
           text=True, method="mmtests"),
    Format("markdown", (".md",), frozenset({_COMPARISON}),
           "one markdown line per metric and side", writers.write_text, text=True,
           method="markdown"),
    Format("csv", (".csv",), _TABULAR,
           "RFC 4180 comma-separated values, cells made inert for spreadsheets (no comment "
           "lines: notes on stderr and in --notes FILE)", writers.write_csv, machine=True,
           between_results=b"\n", notes_inside=False),
    Format("json", (".json",), _TABULAR,
           "one JSON object: schema_version and the envelope, its rows, its notes",
           writers.write_json, machine=True,
           one_result=True),
    Format("jsonl", (".jsonl", ".ndjson"), _TABULAR,
           "one JSON object per line, a row each, for streams", writers.write_jsonl,
           machine=True, notes_inside=False),
    Format("parquet", (".parquet",), _TABULAR,
           "Parquet, with the Arrow types and schema_version in its metadata",
           writers.write_parquet, machine=True, binary=True, one_result=True),
    Format("folded", (".folded",), frozenset({_QUERY}),
           "`stack samples` lines for flame-graph tools (alloc_origins.folded)",
           writers.write_folded, text=True),
)
BY_NAME = {f.name: f for f in REGISTRY}
# The formats of a query's rows, in the order --help lists them (registry order: for
# people first, then for programs).
ROWS = tuple(f.name for f in REGISTRY if _ROWS in f.kinds)
# The formats for programs, each with its schema version (docs/output-schema.md).
MACHINE = tuple(f.name for f in REGISTRY if f.machine)


def is_machine(name):
    """True for a format written for programs (csv, json, jsonl, parquet)."""
    return BY_NAME[name].machine


def listed(names_):
    """'csv, json, jsonl or parquet': names for a message."""
    names_ = list(names_)
    return ", ".join(names_[:-1]) + " or " + names_[-1] if len(names_) > 1 else "".join(names_)


def write(fmt, doc, output=None, max_cell=writers.MAX_CELL):
    """Write `doc` (a writers.Document) in format `fmt` to `output` (a path) or stdout, with
    the registry's writer of that format."""
    f = BY_NAME.get(fmt)
    if f is None:
        raise OutputError(f"unknown output format {fmt!r}; one of {', '.join(BY_NAME)}")
    writers.write_to(f.writer, doc, output, binary=f.binary and f.name, max_cell=max_cell)


def write_notes(path, doc, fmt):
    """--notes FILE: the output's envelope and notes as one JSON document (the `notes_file`
    of the kind's schema in render/schemas/)."""
    import json

    from kmemscope.common.outfile import write_file

    write_file(path, json.dumps(writers.notes_document(doc, fmt), indent=1,
                                ensure_ascii=False) + "\n")


def result_writer(fmt, output=None, kind="sql", notes=None):
    """The sql verb's writer of one result after another in format `fmt` (notes: the list of
    the command's notes, which json and parquet hold)."""
    several = listed(f.name for f in REGISTRY if _ROWS in f.kinds and not f.one_result)
    return writers.ResultWriter(BY_NAME[fmt], output, kind, several, notes=notes)


def names(kind):
    """The formats `kind` (rows, query, comparison) offers, in registry order."""
    return tuple(f.name for f in REGISTRY if kind in f.kinds)


def extensions(kind):
    """{extension: format} of the formats `kind` offers (the first format holding an extension)."""
    out: dict[str, str] = {}
    for f in REGISTRY:
        if kind in f.kinds:
            for ext in f.extensions:
                out.setdefault(ext, f.name)
    return out


def _suffix(output):
    name = str(output).lower()
    dot = name.rfind(".")
    return name[dot:] if dot > max(name.rfind("/"), 0) else ""


def resolve(fmt, output, kind="rows", default="table"):
    """The format to write: --format if given, else from -o's extension, else `default`.

    A --format that the extension contradicts is an error rather than a mislabelled file;
    so is, for a comparison, an extension that names no format it writes."""
    offered = names(kind)
    if fmt is not None and fmt not in offered:
        raise OutputError(f"unknown output format {fmt!r}; one of {', '.join(offered)}")
    suffix = _suffix(output) if output else ""
    by_suffix = extensions(kind)
    if kind == _COMPARISON and suffix and fmt is None and suffix not in by_suffix:
        raise OutputError(f"{output}: compare writes {', '.join(by_suffix)} files (or a name "
                          f"without an extension, as text), not {suffix}")
    inferred = by_suffix.get(suffix)
    if fmt is None:
        return inferred or default
    plain_text = suffix in PLAIN_TEXT and BY_NAME[fmt].text
    if inferred is not None and inferred != fmt and not plain_text:
        raise OutputError(f"-o {output} looks like {inferred} but --format is {fmt}: "
                          "give a matching extension or drop one of them")
    return fmt
