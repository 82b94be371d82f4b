"""The SQL modules of queries/lib/: views the analyses include by name, run only when included.

As in Perfetto's SQL standard library, an analysis names the modules it uses
(`-- @include allocs, compaction` in its header, queries/catalog.py) and only
those run before it, each after the modules it includes. Ad-hoc SQL (`kmemscope
sql`, Dataset.sql) gets every module that builds on no derived table.

Each module is a .sql file whose header declares what it needs and defines:

    -- lib/NAME: one-line description.
    -- include: OTHER, ...           modules whose views this one reads, or (none): the
                                     word analyses use for modules (`@include`); `requires`
                                     names tables there, and is refused here
    -- derived: TABLE, ...           derived tables (queries/derived_tables.py) it builds on: the
                                     runner makes them for the runs before the module runs
    -- views: NAME, ...              views for analyses and ad-hoc SQL (documented in the
                                     dataset format page; a trace's event may not take one's name)
    -- internal: _NAME, ...          helpers of this module and the analyses, `_`-prefixed: no
                                     table name of a dataset can start with `_`; views, tables
                                     or macros (a kernel rule that analyses apply to rows of
                                     their own: CREATE TEMP MACRO, scalar or table)

Each public view says above its CREATE statement what it holds and, in a
`-- @columns` block (the analyses' format: NAME UNIT description), what each
of its columns holds; tools/gen_docs.py writes that into docs/dataset-format.md.

Before the modules run, the runner (runner.py) has made a view of each dataset
table over the chosen runs and registered, per run:
  run_facts(run_id, labels, kernel_release, highatomic_era, highatomic_era_note,
            extfrag_era, pageblock_order, pageblock_order_source, first_ts,
            last_ts, duration_s)                 -- eras.py
  migratetype_names(run_id, migratetype, name, source)
  extfrag_ownership(extfrag_era, change_ownership, meaning)
and the derived tables the included modules name. Kernel-era rules:
queries/KERNEL-ERAS.md, cited by section. A module that names an unknown
module, or a cycle, is an error.
"""
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from kmemscope.common.errors import QueryError

from .columns import ColumnBlock

LIB_DIR = Path(__file__).resolve().parent / "lib"
_HEADER = re.compile(r"--\s*(include|derived|views|internal):\s*(.*)")
# `requires` names tables in an analysis' header (catalog.py): a module says `include`
_OLD_HEADER = re.compile(r"--\s*requires:")
_CREATED = re.compile(r"(?im)^CREATE\s+(?:OR\s+REPLACE\s+)?TEMP\s+(?:VIEW|TABLE|MACRO)\s+(\w+)")


@dataclass(frozen=True)
class View:
    """A public view of a module as its comment documents it."""
    name: str
    doc: str               # the prose above its CREATE statement
    columns: tuple         # columns.Column, in the view's order


@dataclass(frozen=True)
class Module:
    name: str
    description: str
    includes: tuple        # modules whose views it reads
    derived: tuple         # derived tables (queries/derived_tables.py) it reads
    views: tuple           # public
    internal: tuple        # `_`-prefixed
    sql: str
    docs: tuple = ()       # View, one per public view

    @property
    def defines(self):
        return self.views + self.internal


def _names(text):
    text = text.strip()
    return () if text in ("", "(none)") else tuple(n.strip() for n in text.split(",") if n.strip())


def _view_docs(lines, where):
    """{view: View} from the comment block right above each CREATE statement."""
    out = {}
    for i, line in enumerate(lines):
        m = _CREATED.match(line)
        if not m:
            continue
        j = i
        while j > 0 and lines[j - 1].startswith("--"):
            j -= 1
        prose, block, reading = [], None, False
        for text in lines[j:i]:
            if re.match(r"--\s*@columns\s*$", text):
                if block is not None:
                    raise QueryError(f"{where}: one `-- @columns` block per view: {m.group(1)}")
                block, reading = ColumnBlock(where), True
            elif reading and block is not None and block.feed(text):
                continue
            else:
                reading = False
                prose.append(text[3:] if text.startswith("-- ") else text[2:])
        out[m.group(1)] = View(m.group(1), "\n".join(prose).strip(),
                               tuple(block.columns) if block else ())
    return out


def parse_module(path):
    """A Module from a lib/*.sql file; QueryError when its header and its SQL disagree."""
    sql = Path(path).read_text()
    where = f"queries/lib/{Path(path).name}"
    lines = sql.splitlines()
    first = re.match(r"--\s*lib/(\w+):\s*(.*)", lines[0] if lines else "")
    if not first or first.group(1) != Path(path).stem:
        raise QueryError(f"{where}: the first line must be `-- lib/{Path(path).stem}: <description>`")
    fields: dict[str, tuple] = {"include": (), "derived": (), "views": (), "internal": ()}
    for line in lines[1:]:
        if not line.startswith("--"):
            break
        if _OLD_HEADER.match(line):
            raise QueryError(f"{where}: a module names the modules it reads with `-- include:` "
                             "(`requires` names tables, in an analysis' header)")
        m = _HEADER.match(line)
        if m:
            fields[m.group(1)] = _names(m.group(2))
    docs = _view_docs(lines, where)
    mod = Module(Path(path).stem, first.group(2).strip(), fields["include"], fields["derived"],
                 fields["views"], fields["internal"], sql,
                 tuple(docs[v] for v in fields["views"] if v in docs))
    created = _CREATED.findall(sql)
    if sorted(created) != sorted(mod.defines):
        raise QueryError(f"{where}: its header lists {sorted(mod.defines)} but it creates "
                         f"{sorted(created)}")
    bad = [v for v in mod.views if v.startswith("_")] + [v for v in mod.internal
                                                         if not v.startswith("_")]
    if bad:
        raise QueryError(f"{where}: public views never start with '_', internal ones always: {bad}")
    return mod


@functools.lru_cache(maxsize=None)
def modules():
    """{name: Module} of queries/lib/, in dependency order."""
    found = {p.stem: parse_module(p) for p in sorted(LIB_DIR.glob("*.sql"))}
    ordered: dict = {}
    state: dict = {}

    def visit(name, chain):
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise QueryError(f"queries/lib: modules include each other: {' -> '.join(chain + [name])}")
        if name not in found:
            raise QueryError(f"queries/lib/{chain[-1]}.sql includes {name!r}, which is no module")
        state[name] = "visiting"
        for dep in found[name].includes:
            visit(dep, chain + [name])
        state[name] = "done"
        ordered[name] = found[name]

    for name in found:
        visit(name, [])
    return ordered


def closure(names, who="an analysis"):
    """The modules `names` with every module they include, in the order they must run."""
    mods = modules()
    unknown = [n for n in names if n not in mods]
    if unknown:
        raise QueryError(f"{who} includes {', '.join(map(repr, unknown))}, which is no module of "
                         f"queries/lib (modules: {', '.join(mods)})")
    wanted = set()

    def add(name):
        if name not in wanted:
            wanted.add(name)
            for dep in mods[name].includes:
                add(dep)

    for name in names:
        add(name)
    return [m for m in mods.values() if m.name in wanted]


def derived_of(names):
    """The derived tables the modules `names` (and those they include) build on."""
    return list(dict.fromkeys(t for m in closure(names) for t in m.derived))


def script(names):
    """The statements of the modules `names` and those they include, each after its needs."""
    return "\n".join(m.sql for m in closure(names))


def adhoc_modules():
    """The modules ad-hoc SQL gets: every one that builds on no derived table, directly or
    through a module it includes (ad-hoc SQL builds no derived table)."""
    return [m.name for m in modules().values() if not derived_of([m.name])]


def common_sql():
    """The statements of the modules ad-hoc SQL gets (adhoc_modules), in dependency order."""
    return script(adhoc_modules())


def owners():
    """{view: the name of the module that defines it}, public and internal views alike."""
    return {v: m.name for m in modules().values() for v in m.defines}


def public_views():
    """The views analyses and ad-hoc SQL may read by name."""
    return {v for m in modules().values() for v in m.views}


def definition(name):
    """The statement of queries/lib/ that creates `name` (a view, table or macro), for SQL
    that runs outside an analysis and applies the same rule (queries/derived_tables.py
    defines lib/allocs.sql's _failed_pfn on the connection that pairs page frames)."""
    mod = modules()[owners()[name]] if name in owners() else None
    if mod is None:
        raise QueryError(f"queries/lib defines no {name!r}")
    lines = mod.sql.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if (m := _CREATED.match(line)) and m.group(1) == name)
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith(";"))
    return "\n".join(lines[start:end + 1])

