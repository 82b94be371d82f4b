"""The catalog of named analyses: one .sql file each in queries/, documented by its header.

The header is a comment. Its first line names the analysis; prose paragraphs
say what it answers; a paragraph that starts with `Caveats` says what to
mind. A few lines are read by kmemscope:

    -- NAME: one-line description                    (the first line)
    -- @param NAME TYPE DEFAULT [CHOICE|CHOICE] description
    -- @param NAME TYPE DEFAULT [MIN..MAX] description   (a number in that range)
    -- @param NAME FILE DEFAULT description   a regular file of at most 1 MiB, bound
                                 as its absolute path; DEFAULT is relative to queries/
    -- @requires TABLE ...       tables the answer needs: an error when no selected run has
                                 one, a note for each run without it
    -- @optional TABLE ...       tables used when present: a note for each run without one
    -- @any_of TABLE ...         at least one must be present; each is otherwise optional
    -- @derived NAME ...         per-run derived tables (queries/derived_tables.py), made on first use
    -- @include MODULE, ...      queries/lib/ modules whose views it reads (sql_lib.py): they,
                                 and the modules they include, run before it; no other does
                                 (a module's header says `-- include:` alike; `requires`
                                 always names tables)
    -- @section NAME: description
    -- @columns                  the section's result columns, one a line, after run_id
    --   NAME  UNIT  description     and labels (which every result starts with); a line
    --         more indented continues the description. UNIT is one of UNITS.
    -- @timed_by KIND EVENT ...   the events a kind of row is timed by (stalls.sql: a run that
                                 recorded them all and has no row of KIND had none)
    -- @prelude                  statements run before the chosen section (temp views)

Directives after an `@section` line belong to that section, the others to
every section. A file with one SELECT and no `@section` keeps its `@columns`
in the header. TYPE is INTEGER, BIGINT, DOUBLE, VARCHAR, BOOLEAN or FILE;
DEFAULT NULL means none. `NAME.SECTION` picks a section, `NAME` the first.
`kmemscope queries NAME` prints all of it (`describe`).
"""
import difflib
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kmemscope.common.errors import QueryError

from . import sql_lib
from .columns import UNITS, Column, ColumnBlock  # noqa: F401  (UNITS: part of the catalog's API)

QUERY_DIR = Path(__file__).resolve().parent

TYPES: dict = {"INTEGER": int, "BIGINT": int, "DOUBLE": float, "VARCHAR": str, "BOOLEAN": None,
         "FILE": str}
MAX_PARAM_FILE = 1 << 20       # a FILE parameter is a small table (a mapping), not data

# Every result starts with these two, so no @columns repeats them.
RUN_COLUMNS = (("run_id", "text", "the run (kmemscope info lists them)"),
               ("labels", "map", "the run's labels"))
REQ_KEYS = ("requires", "optional", "any_of", "derived", "include")


@dataclass
class Param:
    name: str
    type: str
    default: object
    choices: tuple
    doc: str
    bounds: tuple | None = None        # (min, max) of a number, inclusive
    default_text: str = "NULL"  # as written in the header

    def describe_range(self):
        lo, hi = self.bounds or (None, None)
        return f"from {lo:g} to {hi:g}" if self.type == "DOUBLE" else f"from {lo} to {hi}"


@dataclass
class Section:
    name: str
    description: str
    sql: str = ""
    requires: list = field(default_factory=list)
    optional: list = field(default_factory=list)
    any_of: list = field(default_factory=list)
    derived: list = field(default_factory=list)
    include: list = field(default_factory=list)    # queries/lib/ modules, as the header names them
    columns: list | None = None             # [Column] from @columns, run_id and labels first; None: none
    notes: list = field(default_factory=list)   # prose lines in the section's comment


@dataclass
class Analysis:
    name: str
    description: str
    path: Path
    params: dict = field(default_factory=dict)
    common: Section = field(init=False)     # directives that apply to every section
    prelude: str = ""
    sections: list = field(default_factory=list)
    text: list = field(default_factory=list)      # header prose lines, caveats apart
    caveats: list = field(default_factory=list)
    timed_by: dict = field(default_factory=dict)  # {kind: (event, ...)} from @timed_by

    def __post_init__(self):
        self.common = Section("", self.description)

    def needs(self, section):
        """The table requirements of `section`: the file's plus its own."""
        out = Section(section.name, section.description, section.sql, columns=section.columns)
        for key in REQ_KEYS:
            setattr(out, key, list(dict.fromkeys(getattr(self.common, key) + getattr(section, key))))
        # A section's @any_of replaces the file's: it names what that section needs.
        out.any_of = list(section.any_of or self.common.any_of)
        # The derived tables the included modules build on are made before they run.
        out.derived = list(dict.fromkeys(out.derived + sql_lib.derived_of(out.include)))
        return out

    def modules(self, section):
        """The names of the queries/lib/ modules that run before `section`, in their order."""
        return [m.name for m in sql_lib.closure(self.needs(section).include, f"analysis {self.name}")]

    def query_name(self, section):
        return self.name if section is self.sections[0] else f"{self.name}.{section.name}"


# ---------------------------------------------------------------- parameters

def _check_file(param, text, qname):
    """A FILE parameter: an existing regular file, small, named without glob characters."""
    where = f"parameter {param.name} of {qname}"
    text = str(text)
    # DuckDB's readers expand * ? [ in a path: such a name could read other files.
    if not text or any(c in text for c in "*?[]{}"):
        raise QueryError(f"{where} must name one file (no * ? [ ] {{ }}), not {text!r}")
    try:
        st = os.stat(text)
    except OSError as exc:
        raise QueryError(f"{where}: cannot read {text}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise QueryError(f"{where}: {text} is not a regular file")
    if st.st_size > MAX_PARAM_FILE:
        raise QueryError(f"{where}: {text} is {st.st_size} bytes, more than {MAX_PARAM_FILE}")
    if not os.access(text, os.R_OK):
        raise QueryError(f"{where}: cannot read {text}: permission denied")
    return os.path.abspath(text)


def convert_param(param, text, qname):
    """`text` (a command-line string or a typed value) as `param`'s type, checked."""
    if text is None:
        return None
    if param.type == "FILE":
        return _check_file(param, text, qname)
    if param.type == "BOOLEAN":
        if isinstance(text, bool):
            return text
        low = str(text).strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise QueryError(f"parameter {param.name} of {qname} must be true or false, not {text!r}")
    conv = TYPES[param.type]
    try:
        value = conv(text.strip() if isinstance(text, str) and conv is not str else text)
    except (TypeError, ValueError, OverflowError):
        raise QueryError(f"parameter {param.name} of {qname} must be {param.type.lower()}, "
                         f"not {text!r}") from None
    if conv is float and not math.isfinite(value):
        raise QueryError(f"parameter {param.name} of {qname} must be a finite number, not {text!r}")
    if param.bounds and not param.bounds[0] <= value <= param.bounds[1]:
        raise QueryError(f"parameter {param.name} of {qname} must be {param.describe_range()}, "
                         f"not {text!r}")
    if param.choices and str(value) not in param.choices:
        raise QueryError(f"parameter {param.name} of {qname} must be one of "
                         f"{', '.join(param.choices)}, not {text!r}")
    return value


def _parse_param(path, name, line, rest):
    pm = re.match(r"(\w+)\s+(\w+)\s+(\S+)(?:\s+\[([^\]]*)\])?\s*(.*)", rest)
    if not pm or pm.group(2).upper() not in TYPES:
        raise QueryError(f"{path}: bad @param line: {line}")
    bracket = pm.group(4)
    choices: tuple = ()
    bounds: tuple | None = None
    if bracket and ".." in bracket:
        conv = TYPES[pm.group(2).upper()]
        lo, _, hi = bracket.partition("..")
        try:
            bounds = (conv(lo), conv(hi))
        except (TypeError, ValueError):
            raise QueryError(f"{path}: bad range in @param line: {line}") from None
    elif bracket:
        choices = tuple(c.strip() for c in bracket.split("|"))
    p = Param(pm.group(1), pm.group(2).upper(), None, choices, pm.group(5), bounds, pm.group(3))
    default = pm.group(3)
    if p.type == "FILE" and default != "NULL":
        default = str(QUERY_DIR / default)
    p.default = None if default == "NULL" else convert_param(p, default, name)
    return p


# ---------------------------------------------------------------- headers

_DIRECTIVE = re.compile(r"--\s*@(\w+)\s*(.*)")


def parse_analysis(path):
    """Read one .sql file into an Analysis (header documentation, directives, sections)."""
    text = Path(path).read_text()
    name = Path(path).stem
    lines = text.splitlines()
    m = re.match(r"--\s*([\w.]+)\s*:\s*(.*)", lines[0] if lines else "")
    if not m or m.group(1) != name:
        raise QueryError(f"{path}: the first line must be `-- {name}: <description>`")
    a = Analysis(name=name, description=m.group(2).strip(), path=Path(path))
    reader = _AnalysisReader(a, path)
    for line in lines[1:]:
        reader.line(line)
    reader.flush()
    if not a.sections or not all(sec.sql for sec in a.sections):
        raise QueryError(f"{path}: every section needs a SELECT")
    _place_columns(a, path)
    a.text, a.caveats = _split_caveats(a.text)
    for sec in a.sections:
        sec.notes = _trim(sec.notes)
        _check_includes(a, sec, path)
    return a


def _check_includes(a, sec, path):
    """An unknown module, or a view of queries/lib/ read without including its module, is an
    error when the file is read, not a missing table when it runs."""
    included = set(a.modules(sec))
    words = set(re.findall(r"[A-Za-z_]\w*", re.sub(r"--[^\n]*", "", a.prelude + "\n" + sec.sql)))
    owner = sql_lib.owners()
    missing = sorted({owner[w] for w in words & set(owner)} - included)
    if missing:
        raise QueryError(f"{path}: {a.query_name(sec)} reads views of queries/lib/ modules it does "
                         f"not include: {', '.join(missing)}",
                         f"add `-- @include {', '.join(missing)}` to its header")


class _AnalysisReader:
    """The lines of an analysis after its first, one at a time: comment prose, directives
    (one helper per kind), @columns blocks and the SQL of the prelude and the sections."""

    def __init__(self, a, path):
        self.a, self.path = a, path
        self.target = a.common     # where directives go: the file, or the current section
        self.in_prelude = False
        self.body = []             # SQL lines of the prelude or the current section
        self.block = None          # the @columns block being read
        self.prose = a.text        # where comment prose goes
        self.in_code = False       # past the header (a SELECT or a @prelude began)
        self.directives = {"param": self._param, "columns": self._columns,
                           "section": self._section, "prelude": self._prelude,
                           "timed_by": self._timed_by,
                           **{key: self._needs for key in REQ_KEYS}}

    def line(self, line):
        d = _DIRECTIVE.match(line)
        if self.block is not None and not d:
            if self.block.feed(line):
                return
            self.block = None
        if d:
            key, rest = d.group(1), d.group(2).strip()
            if key not in self.directives:
                raise QueryError(f"{self.path}: unknown directive @{key}")
            self.directives[key](key, rest, line)
        elif not line.startswith("--"):
            self._sql(line)
        elif not self.in_code:
            self.prose.append(line[3:] if line.startswith("-- ") else line[2:])
        else:
            self.body.append(line)

    def _sql(self, line):
        """A line of SQL: the first one of a file without @section starts its only section."""
        if self.target is self.a.common and not self.in_prelude and line.strip():
            self.target = Section("", self.a.description)
            self.a.sections.append(self.target)
        if line.strip():
            self.in_code = True
        self.body.append(line)

    def _param(self, key, rest, line):
        p = _parse_param(self.path, self.a.name, line, rest)
        self.a.params[p.name] = p

    def _needs(self, key, rest, line):
        """@requires, @optional, @any_of, @derived, @include: names, by spaces or commas."""
        getattr(self.target, key).extend(rest.replace(",", " ").split())

    def _timed_by(self, key, rest, line):
        kind, *events = rest.split()
        if not events:
            raise QueryError(f"{self.path}: @timed_by names a kind and its events: {line}")
        self.a.timed_by[kind] = tuple(events)

    def _columns(self, key, rest, line):
        if rest or self.target.columns is not None:
            raise QueryError(f"{self.path}: one bare `-- @columns` line per section: {line}")
        self.block = ColumnBlock(self.path)
        self.target.columns = self.block.columns

    def _prelude(self, key, rest, line):
        self.flush()
        self.body, self.in_code, self.in_prelude = [], True, True

    def _section(self, key, rest, line):
        self.flush()
        self.body, self.in_code, self.in_prelude = [], False, False
        sm = re.match(r"(\w+)\s*:?\s*(.*)", rest)
        if not sm:
            raise QueryError(f"{self.path}: bad @section line: {line}")
        self.target = Section(sm.group(1), sm.group(2).strip())
        self.a.sections.append(self.target)
        self.prose = self.target.notes

    def flush(self):
        """The SQL read so far to where it belongs: the prelude or the current section."""
        sql = "\n".join(self.body).strip()
        if self.in_prelude:
            self.a.prelude = sql
        elif self.target is not self.a.common:
            self.target.sql = sql


def _place_columns(a, path):
    """The header's @columns belong to a file's only section (tests/test_query_docs.py checks
    that every section has them and that they match what it returns)."""
    if a.common.columns is not None:
        if len(a.sections) != 1 or a.sections[0].columns is not None:
            raise QueryError(f"{path}: @columns in the header of a file with sections: "
                             "put it after each @section line")
        a.sections[0].columns, a.common.columns = a.common.columns, None
    for sec in a.sections:
        if sec.columns is None:
            continue
        names = [c.name for c in sec.columns]
        if {"run_id", "labels"} & set(names) or len(set(names)) != len(names):
            raise QueryError(f"{path}: section {sec.name or a.name}: columns repeated "
                             "(run_id and labels come first without being listed)")
        sec.columns = [Column(*c) for c in RUN_COLUMNS] + sec.columns


def _trim(lines):
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _split_caveats(lines):
    """(prose, caveats): the paragraph that starts with `Caveats` apart from the rest."""
    prose: list = []
    caveats: list = []
    inside = False
    for line in lines:
        if line.startswith("Caveats"):
            inside = True
        elif not line.strip():
            inside = False
        (caveats if inside else prose).append(line)
    return _trim(re.sub(r"\n{3,}", "\n\n", "\n".join(prose)).split("\n")), _trim(caveats)


def load_analyses():
    out = {}
    for path in sorted(QUERY_DIR.glob("*.sql")):
        if not path.name.startswith("_"):
            a = parse_analysis(path)
            out[a.name] = a
    return out


def list_queries():
    """[(name, one-line description)] for every analysis and every extra section."""
    out = []
    for a in load_analyses().values():
        out.append((a.name, a.description))
        for sec in a.sections[1:]:
            out.append((f"{a.name}.{sec.name}", sec.description))
    return out


def find_analysis(name):
    """(Analysis, Section) for `NAME` or `NAME.SECTION`, or a QueryError that suggests names."""
    analyses = load_analyses()
    base, _, sec = str(name).partition(".")
    a = analyses.get(base)
    if a is None:
        every = [n for an in analyses.values() for n in [an.name] + [f"{an.name}.{s.name}"
                                                                   for s in an.sections if s.name]]
        close = difflib.get_close_matches(str(name), every, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else "list them with `kmemscope queries`"
        raise QueryError(f"unknown query {name!r}", hint)
    if not sec:
        return a, a.sections[0]
    for s in a.sections:
        if s.name == sec:
            return a, s
    close = difflib.get_close_matches(sec, [s.name for s in a.sections if s.name], n=1)
    raise QueryError(f"query {base} has no section {sec!r}",
                     (f"did you mean {base}.{close[0]}? " if close else "") +
                     "sections: " + ", ".join(f"{base}.{s.name}" for s in a.sections[1:]))


# ---------------------------------------------------------------- describing

def describe(name):
    """An analysis's documentation as plain data (the JSON of `kmemscope queries NAME`).

    `NAME.SECTION` keeps that section only.
    """
    a, chosen = find_analysis(name)
    return describe_analysis(a, chosen if "." in str(name) else None)


def describe_analysis(a, only=None):
    """describe() of a parsed Analysis; `only`: keep this Section alone."""
    params = []
    for p in a.params.values():
        params.append({
            "name": p.name, "type": p.type,
            # typed; a FILE's as written (relative to queries/), not this machine's path
            "default": p.default_text if p.type == "FILE" and p.default is not None else p.default,
            "choices": list(p.choices) or None,
            "min": p.bounds[0] if p.bounds else None,
            "max": p.bounds[1] if p.bounds else None,
            "description": p.doc})
    sections = []
    for sec in a.sections:
        if only is not None and sec is not only:
            continue
        needs = a.needs(sec)
        sections.append({
            "query": a.query_name(sec), "section": sec.name or None,
            "description": sec.description,
            "requires": needs.requires, "any_of": needs.any_of,
            "optional": needs.optional, "derived": needs.derived,
            "modules": a.modules(sec),
            "columns": None if sec.columns is None else [
                {"name": c.name, "unit": c.unit, "description": c.doc} for c in sec.columns],
            "notes": "\n".join(sec.notes) or None})
    return {"name": a.name, "description": a.description,
            "path": f"queries/{a.path.name}", "text": "\n".join(a.text) or None,
            "parameters": params, "sections": sections,
            "caveats": "\n".join(a.caveats) or None}


def _aligned(rows, indent):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]
            for r in rows]


def format_description(doc):
    """The text `kmemscope queries NAME` prints for `describe(NAME)`."""
    out = [f"{doc['name']}: {doc['description']}", ""]
    if doc["text"]:
        out += [doc["text"], ""]
    if doc["parameters"]:
        out.append("Parameters (--param NAME=VALUE):")
        rows = []
        for p in doc["parameters"]:
            if p["choices"]:
                allowed = "one of " + "|".join(p["choices"])
            elif p["min"] is not None:
                allowed = f"{p['min']:g}..{p['max']:g}" if p["type"] == "DOUBLE" else \
                    f"{p['min']}..{p['max']}"
            elif p["type"] == "FILE":
                allowed = "a file"
            elif p["type"] == "BOOLEAN":
                allowed = "true|false"
            else:
                allowed = "any"
            default = p["default"]
            default = "none" if default is None else str(default).lower() if \
                isinstance(default, bool) else default
            rows.append((p["name"], p["type"].lower(), f"default {default}", allowed,
                         p["description"]))
        out += _aligned(rows, "  ") + [""]
    for sec in doc["sections"]:
        out.append(f"{sec['query']}: {sec['description']}")
        needs = [("needs", sec["requires"]), ("needs one of", sec["any_of"]),
                 ("uses if present", sec["optional"]), ("derived tables", sec["derived"]),
                 ("SQL modules", sec["modules"])]
        for label, tables in needs:
            if tables:
                out.append(f"  {label}: {', '.join(tables)}")
        if sec["columns"] is None:
            out.append("  (columns not documented)")
        else:
            out += _aligned([("column", "unit", "description")] +
                            [(c["name"], c["unit"], c["description"]) for c in sec["columns"]], "  ")
        if sec["notes"]:
            out += ["  " + line if line else "" for line in sec["notes"].split("\n")]
        out.append("")
    if doc["caveats"]:
        out += [doc["caveats"], ""]
    out.append(f"Run it: kmemscope query {doc['sections'][0]['query']} DATASET "
               "[--run ID | --label K=V] [--param NAME=VALUE]")
    return "\n".join(out) + "\n"


def column_rows(doc):
    """One row per output column of every section in `doc`, for csv/jsonl/parquet."""
    return [{"query": sec["query"], "column": c["name"], "unit": c["unit"],
             "description": c["description"]}
            for sec in doc["sections"] for c in sec["columns"] or []]
