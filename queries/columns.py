"""Documented columns: the `-- @columns` blocks of analyses (catalog.py) and of the views of
queries/lib/ modules (sql_lib.py), and the units their columns may have.

    -- @columns
    --   NAME  UNIT  description
    --         more indented: the description goes on

A block ends at the first line that is not a comment, is blank, or is indented
less than its first column line.
"""
import re
from dataclasses import dataclass

from kmemscope.common.errors import QueryError

UNITS = {
    "text": "a name or label",
    "map": "key -> value pairs",
    "bool": "true or false",
    "count": "a number of events or things",
    "rank": "position, 1 = first",
    "pages": "base pages",
    "kB": "kibibytes (a folio size)",
    "order": "allocation order: 2^order base pages",
    "pfn": "page frame number",
    "flags": "a bit mask",
    "code": "a number that names something: enum value, node, bucket",
    "ns": "nanoseconds (a time stamp: CLOCK_MONOTONIC, the trace's clock)",
    "s": "seconds",
    "ms": "milliseconds (a duration)",
    "%": "percent",
    "/s": "per second",
    "/min": "per minute",
    "/1000": "per 1,000 of what the description names",
    "ratio": "a quotient without unit",
    "list": "a list: its elements in the description",
}

_COLUMN = re.compile(r"([a-z_][a-z0-9_]*)\s+(\S+)\s+(\S.*)")


@dataclass
class Column:
    name: str
    unit: str
    doc: str


class ColumnBlock:
    """Reads the lines after a `-- @columns` line into `columns`, one line at a time."""

    def __init__(self, where):
        self.where = where         # for errors: the file
        self.columns = []
        self.indent = None         # of the first column line

    def feed(self, line):
        """True when `line` belongs to the block (and was read), False when it ends it."""
        rest = line[2:] if line.startswith("--") else None
        if rest is None or not rest.strip():
            return False
        indent = len(rest) - len(rest.lstrip())
        if indent < 2 or (self.indent is not None and indent < self.indent):
            return False
        if self.indent is not None and indent > self.indent:
            self.columns[-1].doc += " " + rest.strip()
            return True
        m = _COLUMN.fullmatch(rest.strip())
        if not m:
            raise QueryError(f"{self.where}: bad @columns line (NAME UNIT description): {line}")
        if m.group(2) not in UNITS:
            raise QueryError(f"{self.where}: unknown unit {m.group(2)!r} of column "
                             f"{m.group(1)}; units: {' '.join(UNITS)}")
        self.indent = indent
        self.columns.append(Column(m.group(1), m.group(2), m.group(3).strip()))
        return True
