"""Every output format kmemscope writes, in one registry that the command line reads.

A format has a name (`--format NAME`), the file extensions that imply it (`-o FILE`
without --format), and the kinds of output that offer it:

  rows        a query's result (sql, query, metrics list): table, csv, json, jsonl, parquet
  query       what `query` writes: the rows formats and `folded` (flame-graph lines,
              from a result with the columns stack and samples, as alloc_origins.folded)
  comparison  what `compare` writes: text, mmtests and markdown for people, and the
              rows formats but `table` for programs

A name the registry does not hold, and an extension that names a format the output does
not offer, are refused in one line (OutputError), never written as something else.
"""
from dataclasses import dataclass


class OutputError(ValueError):
    """An output format that cannot be written (the CLI prints it as one line)."""


@dataclass(frozen=True)
class Format:
    name: str
    extensions: tuple
    kinds: frozenset
    help: str
    text: bool = False      # written as text lines a person reads: any of them may go to a .txt


# A .txt or .text file is text of any kind: it suggests the default format, contradicts none
# that is text (`compare --format mmtests -o table.txt`).
PLAIN_TEXT = (".txt", ".text")


_ROWS, _QUERY, _COMPARISON = "rows", "query", "comparison"
REGISTRY = (
    Format("table", (".txt",), frozenset({_ROWS, _QUERY}),
           "an aligned text table, for people (at most 10,000 rows)", text=True),
    Format("text", (".txt", ".text"), frozenset({_COMPARISON}),
           "the comparison's full text: statistics, changes, tests and verdicts", text=True),
    Format("mmtests", (".mmtests",), frozenset({_COMPARISON}),
           "mmtests compare-kernels' layout, to paste into a patch", text=True),
    Format("markdown", (".md",), frozenset({_COMPARISON}),
           "one markdown line per metric and side", text=True),
    Format("csv", (".csv",), frozenset({_ROWS, _QUERY, _COMPARISON}),
           "comma-separated values, cells made inert for spreadsheets"),
    Format("json", (".json",), frozenset({_ROWS, _QUERY, _COMPARISON}),
           "one JSON document (an array of objects)"),
    Format("jsonl", (".jsonl", ".ndjson"), frozenset({_ROWS, _QUERY, _COMPARISON}),
           "one JSON object per line, for streams"),
    Format("parquet", (".parquet",), frozenset({_ROWS, _QUERY, _COMPARISON}),
           "Parquet, with the Arrow types"),
    Format("folded", (".folded",), frozenset({_QUERY}),
           "`stack samples` lines for flame-graph tools (alloc_origins.folded)", text=True),
)
BY_NAME = {f.name: f for f in REGISTRY}
FOLDED = "folded"
# The formats of a query's rows, in the order --help lists them (registry order: for
# people first, then for programs).
ROWS = tuple(f.name for f in REGISTRY if _ROWS in f.kinds)


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
