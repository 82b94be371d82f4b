"""The shared views of the analyses: SQL modules in queries/lib/, run before every query.

Each module is a .sql file whose header declares what it needs and defines:

    -- lib/NAME: one-line description.
    -- requires: OTHER, ...          modules whose views this one reads, or (none)
    -- views: NAME, ...              views for analyses and ad-hoc SQL (documented in the
                                     dataset format page; a trace's event may not take one's name)
    -- internal: _NAME, ...          helpers of this module and the analyses, `_`-prefixed: no
                                     table name of a dataset can start with `_`

Before the modules run, the runner (runner.py) has made a view of each dataset
table over the chosen runs and registered, per run:
  run_facts(run_id, labels, kernel_release, highatomic_era, highatomic_era_note,
            extfrag_era, pageblock_order, pageblock_order_source, first_ts,
            last_ts, duration_s)                 -- eras.py
  migratetype_names(run_id, migratetype, name, source)
  extfrag_ownership(extfrag_era, change_ownership, meaning)
  query_params: one row, one column per parameter of the analysis being run.
Kernel-era rules: queries/KERNEL-ERAS.md, cited by section.

`common_sql()` is every module in an order that puts each after what it
requires; a module that names an unknown module, or a cycle, is an error.
"""
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from kmemscope.errors import QueryError

LIB_DIR = Path(__file__).resolve().parent / "lib"
_HEADER = re.compile(r"--\s*(requires|views|internal):\s*(.*)")
_CREATED = re.compile(r"(?im)^CREATE\s+(?:OR\s+REPLACE\s+)?TEMP\s+(?:VIEW|TABLE)\s+(\w+)")


@dataclass(frozen=True)
class Module:
    name: str
    requires: tuple
    views: tuple           # public
    internal: tuple        # `_`-prefixed
    sql: str

    @property
    def defines(self):
        return self.views + self.internal


def _names(text):
    text = text.strip()
    return () if text in ("", "(none)") else tuple(n.strip() for n in text.split(",") if n.strip())


def parse_module(path):
    """A Module from a lib/*.sql file; QueryError when its header and its SQL disagree."""
    sql = Path(path).read_text()
    fields = {"requires": (), "views": (), "internal": ()}
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        m = _HEADER.match(line)
        if m:
            fields[m.group(1)] = _names(m.group(2))
    mod = Module(Path(path).stem, fields["requires"], fields["views"], fields["internal"], sql)
    created = _CREATED.findall(sql)
    where = f"queries/lib/{Path(path).name}"
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
    ordered, state = {}, {}

    def visit(name, chain):
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise QueryError(f"queries/lib: modules require each other: {' -> '.join(chain + [name])}")
        if name not in found:
            raise QueryError(f"queries/lib/{chain[-1]}.sql requires {name!r}, which is no module")
        state[name] = "visiting"
        for dep in found[name].requires:
            visit(dep, chain + [name])
        state[name] = "done"
        ordered[name] = found[name]

    for name in found:
        visit(name, [])
    return ordered


def common_sql():
    """The statements of every module, each module after those it requires."""
    return "\n".join(m.sql for m in modules().values())


def public_views():
    """The views analyses and ad-hoc SQL may read by name."""
    return {v for m in modules().values() for v in m.views}
