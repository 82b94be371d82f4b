"""Run the named analyses of queries/*.sql over a dataset, on any engine.

This module is the one home of what an analysis means, whichever engine runs
it: header directives and parameters (queries/catalog.py; parameters are always
bound, never pasted into SQL text), run and label selection (selection.py), the
check that the chosen runs have the tables a section needs and the notes about
what they lack, and the per-run era facts (eras.py). A backend only registers
views and Arrow tables, executes statements written in DuckDB's dialect,
returns Arrow, and builds the derived tables (the interface: engines/base.py):

  engines/duckdb_engine.py   DuckDB in this process (the default)
  engines/spark_engine.py    Apache Spark, local or a cluster: a named analysis is one
                             task per group of runs (cut by bytes, a few per core), each
                             running `run_local` (DuckDB) once over its group on an executor;
                             ad-hoc SQL is translated by engines/spark_sql.py

    prepare(name, dataset, ...)   -> Plan: the section, bound parameters, chosen runs, notes
    run_query(name, dataset, ..., engine=EngineSpec(...) | "duckdb" | "spark" | an Engine)
                                  -> pyarrow.Table

Every table that an analysis names gets a view over the selected runs; one
they lack is an empty stand-in with the columns of schema.TABLE_COLUMNS. Before
the analysis runs, the backend gets the per-run facts (run_facts,
migratetype_names, extfrag_ownership), the derived tables it and its modules
need, the queries/lib/ modules it includes (sql_lib.py: those alone, each
after the ones it requires) and a one-row query_params table (prelude views
read parameters from it). Ad-hoc SQL gets every module that needs no derived
table. Results
start with run_id and labels; notes about what a run lacks travel in the schema
metadata under b"kmemscope.notes" (a JSON list of strings; see `notes_of`).
"""
import contextvars
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass

from kmemscope.dataset import reader as ds
from kmemscope.dataset.handle import DatasetRef
from kmemscope.dataset.schema import DERIVED_COLUMNS, TABLE_COLUMNS
from kmemscope.common.errors import DatasetError, KmemscopeError, QueryError
from kmemscope.queries.derived_tables import SOURCE_FIELDS

from . import engines, eras, result_cache, sql_lib
from .catalog import convert_param, find_analysis
from .selection import select_runs

NOTES_KEY = b"kmemscope.notes"
PROCFS_TABLES = ("vmstat", "pagetypeinfo_free", "pagetypeinfo_blocks", "buddyinfo")
# The cost samples: in bundles of `kmemscope record`, where the kernel has their source.
COST_TABLES = {"psi_memory": "/proc/pressure/memory (CONFIG_PSI, Linux 4.20+)",
               "cpu_stat": "/proc/stat",
               "kthread_cpu": "kswapd, kcompactd or khugepaged threads",
               "mthp_stats": "per-size mTHP statistics (Linux 6.10+)"}


class NoSuchEvents(DatasetError):
    """No chosen run has a table the analysis requires: the runs did not record those
    events (or procfs samples). The one dataset error a caller may read as "no rows"; a
    file that cannot be read or is gone is never one."""


_PARAM_REF = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _named_tables(sql, known):
    """The tables of `known` that `sql` names (comments aside): they get a view."""
    return set(_WORD.findall(re.sub(r"--[^\n]*", "", sql))) & set(known)


# Columns every event table has from the record itself or the common fields (not the event's
# own format), and kernel_stack, whose shape the stack family judges (dataset/derived.py).
_NOT_FORMAT_FIELDS = {"ts", "cpu", "pid", "comm"}
# Columns a later kmemscope added to a table: a run parsed before has none, and reads them as
# NULL (the analyses say what they fall back to).
ADDED_COLUMNS = {"kthread_cpu": {"run_ns"}}


def _named_fields(sql, tables):
    """{table: the fields of known event `table` (of `tables`) that `sql` names (comments
    aside)} that every kernel era declares: the fields a run must have to answer it."""
    words = set(_WORD.findall(re.sub(r"--[^\n]*", "", sql)))
    out = {}
    for table in tables:
        known = TABLE_COLUMNS.get(table, {})
        if "ts" not in known or table == "kernel_stack":
            continue        # not an event's table
        named = ((words & set(known)) - _NOT_FORMAT_FIELDS - eras.ERA_FIELDS.get(table, set())
                 - ADDED_COLUMNS.get(table, set()))
        if named:
            out[table] = named
    return out


def _check_tables(needs, parts, chosen):
    """Raise for required tables no chosen run has; notes for the runs that lack one.

    needs: a catalog Section with the effective requirements. Procfs tables
    (PROCFS_TABLES) come only from `kmemscope record` bundles and say so.
    """
    notes = []

    def runs_with(table):
        return [r for r in chosen if r in parts.get(table, {})]

    def lacking(table):
        return [r for r in chosen if r not in parts.get(table, {})]

    verb = "has" if len(chosen) == 1 else "have"
    for t in needs.requires:
        procfs = t in PROCFS_TABLES
        if not runs_with(t):
            if procfs:
                raise NoSuchEvents(f"{_runs_text(chosen)} {verb} no procfs tables (no {t})",
                                   "capture with `kmemscope record`")
            if t not in parts:
                raise NoSuchEvents(f"dataset has no {t} events",
                                   f"record with the {t} tracepoint enabled")
            raise NoSuchEvents(f"{_runs_text(chosen)} {verb} no {t} events",
                               f"record with the {t} tracepoint enabled")
        for r in lacking(t):
            notes.append(f"run {r} has no procfs tables (capture with `kmemscope record`): "
                         "it is left out" if procfs else
                         f"run {r} has no {t} events: its rows are empty or zero")
    if needs.any_of and not any(runs_with(t) for t in needs.any_of):
        raise NoSuchEvents(f"{_runs_text(chosen)}: no events of any of {', '.join(needs.any_of)}",
                           "record with those tracepoints enabled")
    cost = [t for t in COST_TABLES if t in needs.any_of + needs.optional]
    for r in chosen:
        missing = [t for t in cost if r not in parts.get(t, {})]
        if missing:
            notes.append(f"run {r} has no cost samples of {', '.join(missing)} (`kmemscope record` "
                         "takes them where the kernel has their source: "
                         f"{'; '.join(COST_TABLES[t] for t in missing)}): the columns from them are NULL")
    # procfs notes first: they explain most of what a run lacks
    for t in sorted(dict.fromkeys(needs.any_of + needs.optional), key=lambda t: t not in PROCFS_TABLES):
        for r in lacking(t):
            if t in PROCFS_TABLES:
                notes.append(f"run {r} has no procfs table {t} (capture with `kmemscope record`): "
                             "the columns from it are NULL")
            elif t in COST_TABLES:
                continue        # one note for them all, below
            elif t.startswith("mm_"):
                notes.append(f"run {r} has no {t} events: counted as none")
    return notes


def _runs_text(chosen):
    if len(chosen) == 1:
        return f"run {chosen[0]}"
    return f"runs {', '.join(chosen[:5])}{' ...' if len(chosen) > 5 else ''}"


def _arrow_types():
    import pyarrow as pa
    return {"INTEGER": pa.int32(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(),
            "VARCHAR": pa.string(), "FILE": pa.string(), "BOOLEAN": pa.bool_()}


# The per-run fact tables: name -> columns with their DuckDB types.
_FACT_TABLES = {
    "_facts_in": (("run_id", "VARCHAR"), ("kernel_release", "VARCHAR"),
                  ("highatomic_era", "VARCHAR"), ("highatomic_era_note", "VARCHAR"),
                  ("extfrag_era", "VARCHAR"), ("pageblock_order", "INTEGER"),
                  ("pageblock_order_source", "VARCHAR"), ("first_ts", "BIGINT"),
                  ("last_ts", "BIGINT"), ("duration_s", "DOUBLE")),
    "migratetype_names": (("run_id", "VARCHAR"), ("migratetype", "INTEGER"),
                          ("name", "VARCHAR"), ("source", "VARCHAR")),
    "extfrag_ownership": (("extfrag_era", "VARCHAR"), ("change_ownership", "INTEGER"),
                          ("meaning", "VARCHAR")),
}


def _facts_rows(rows):
    """eras.run_facts of the runs table's rows -> (facts, mts, {fact table: its rows})."""
    facts, mts = eras.run_facts(rows)
    meanings = [{"extfrag_era": e, "change_ownership": c, "meaning": m}
                for (e, c), m in eras.OWNERSHIP_MEANING.items()]
    return facts, mts, {"_facts_in": facts, "migratetype_names": mts,
                        "extfrag_ownership": meanings}


def _facts_tables(rows):
    """eras.run_facts of the runs table's rows -> (facts, mts, Arrow tables to register)."""
    import pyarrow as pa

    facts, mts, tables = _facts_rows(rows)
    arrow = {}
    for name, data in tables.items():
        schema = pa.schema([(c, _arrow_types()[t]) for c, t in _FACT_TABLES[name]])
        arrow[name] = pa.Table.from_pylist(data, schema=schema)
    return facts, mts, arrow


def _create_fact_table(con, name, data):
    """Temp table `name` of _FACT_TABLES holding `data` (dicts) on DuckDB connection `con`.

    The values are bound as one list parameter per column and unnested side by
    side: no Arrow is built from Python values (pyarrow would import pandas for
    that, a quarter of a second of every command).
    """
    columns = _FACT_TABLES[name]
    # sql-safe: the names and types are the constants of _FACT_TABLES
    select = ", ".join(f"unnest(CAST(? AS {t}[])) AS {ds.quote_ident(c)}" for c, t in columns)
    # sql-safe: select is built above from constants and quote_ident(); values are bound
    con.execute(f"CREATE OR REPLACE TEMP TABLE {ds.quote_ident(name)} AS SELECT {select}",
                [[row[c] for row in data] for c, _t in columns])


_FACT_COLUMNS = ("kernel_release", "highatomic_era", "highatomic_era_note", "extfrag_era",
                 "pageblock_order", "pageblock_order_source", "first_ts", "last_ts", "duration_s")
# run_facts: the facts with each run's labels, computed once
_RUN_FACTS_SQL = ("CREATE TEMP TABLE run_facts AS SELECT f.run_id, r.labels, "
                  + ", ".join(f"f.{c}" for c in _FACT_COLUMNS)
                  + " FROM _facts_in AS f JOIN runs AS r ON r.run_id = f.run_id")


def _register_facts(backend):
    cols = ["run_id", "kernel_release", "arch", "first_ts", "last_ts", "pageblock_order",
            "manifest", "migratetypes"]
    rows = backend.query_arrow("SELECT " + ", ".join(cols) + " FROM runs", None).to_pylist()
    if backend.name == "duckdb":
        facts, mts, tables = _facts_rows(rows)
        for name, data in tables.items():
            _create_fact_table(backend.con, name, data)
    else:                         # Spark: small Arrow tables become its temp views
        facts, mts, tables = _facts_tables(rows)
        for name, table in tables.items():
            backend.register_arrow(name, table)
    backend.run_script(_RUN_FACTS_SQL, {})
    return facts, mts


def _assumption_notes(facts, mts, needs):
    """Notes for per-run facts that were assumed rather than read from the run."""
    notes = []
    if "mm_page_alloc_extfrag" in needs.requires:
        for f in facts:
            if f["pageblock_order_source"].startswith("assumed"):
                notes.append(f"run {f['run_id']}: pageblock_order {f['pageblock_order_source']}")
    if {"mm_page_alloc_extfrag", "mm_page_pcpu_drain", "mm_page_alloc_zone_locked"} & set(needs.requires):
        for run in sorted({m["run_id"] for m in mts if m["source"].startswith("KERNEL-ERAS.md")}):
            notes.append(f"run {run}: no migratetype list in the run (no manifest): names follow "
                         "the upstream enum (0 Unmovable, 1 Movable, 2 Reclaimable, 3 HighAtomic)")
    return notes


def _drop_unfit(parts, chosen, tables, read=None, kept=(), recorded=None, fields=None):
    """(chosen runs whose `tables` a query can read, notes on those left out).

    A run whose schema does not fit (a dataset someone else wrote:
    reader.unfit_runs) is dropped with a note, so that the other runs answer.
    read: the tables whose rows the query reads (default: `tables`), judged by
    their files' footers; the rest by what the runs' records state. kept: runs whose
    rows of the query are kept (result_cache): none of their files is read, so what
    their records state judges them all. recorded: the runs' records (DatasetRef.footers),
    read already for this listing. fields: {table: fields} the query reads (_named_fields).
    """
    compute = set(chosen) - set(kept)
    bad = ds.unfit_runs(parts, set(tables), compute, None if read is None else set(read),
                        recorded, fields) if compute else {}
    if set(chosen) & set(kept):
        bad.update(ds.unfit_runs(parts, set(tables), set(chosen) & set(kept), set(),
                                 recorded, fields))
    if not bad:
        return chosen, []
    kept = [r for r in chosen if r not in bad]
    if not kept:
        run = next(r for r in chosen if r in bad)
        raise DatasetError(f"run {run} cannot be read: {bad[run]}",
                           "parse its trace again, or remove the run's partitions")
    return kept, [f"run {r} is left out: {bad[r]}" for r in chosen if r in bad]


# Words of ad-hoc SQL that look at the catalog itself (SHOW TABLES, duckdb_views(), a
# table named by a string): such SQL gets every view, as it always did.
_CATALOG_WORDS = frozenset({"information_schema", "show", "describe", "summarize", "pragma",
                            "query_table", "query", "getvariable"})
_CATALOG_PREFIXES = ("duckdb_", "pg_", "sqlite_")
_FACT_VIEWS = frozenset(_FACT_TABLES) | {"run_facts"}


@dataclass
class Scope:
    """What ad-hoc SQL reads: the dataset tables, queries/lib/ modules and run facts it
    names (adhoc_scope). Only those are made before it runs (`kmemscope sql "SELECT 1"`
    opens no table); the rest are made if DuckDB finds a name missing (widen)."""
    tables: set            # once opened: the tables that have a view
    modules: list
    facts: bool


def adhoc_scope(sql, parts):
    """The Scope of ad-hoc SQL text over a dataset listed as `parts`; None when it may
    look at the catalog (every view is made, as for SQL that names them all)."""
    words = {w.lower() for w in _WORD.findall(sql)}     # comments too: a few views more
    if words & _CATALOG_WORDS or any(w.startswith(_CATALOG_PREFIXES) for w in words):
        return None
    owners = sql_lib.owners()
    adhoc = set(sql_lib.adhoc_modules())
    modules = sorted({owners[w] for w in words if w in owners} & adhoc)
    tables = words & (set(TABLE_COLUMNS) | set(parts))
    return Scope(tables, modules, bool(modules) or bool(words & _FACT_VIEWS))


def widen(backend, chosen, parts, scope):
    """Make on `backend` (DuckDB) every view and run fact ad-hoc SQL of `scope` did not
    name, as if it had named them all; -> the Scope of everything.

    Their files' footers are read first, like those of the views made at open: a run
    that the records called fit and its footers do not stops the SQL (its rows are in
    views made already, so it cannot be left out quietly now)."""
    every = sql_lib.adhoc_modules()
    done = {m.name for m in sql_lib.closure(scope.modules)}
    script = "\n".join(m.sql for m in sql_lib.closure(every) if m.name not in done)
    known = set(TABLE_COLUMNS) | set(parts)
    rest = known - scope.tables
    bad = ds.unfit_runs(parts, rest, set(chosen))
    if bad:
        run = min(bad)
        raise DatasetError(f"run {run} cannot be read: {bad[run]}",
                           "parse its trace again, or remove the run's partitions")
    ds.add_views(backend.con, parts, chosen, {t: TABLE_COLUMNS[t] for t in rest if t in TABLE_COLUMNS},
                 rest)
    if not scope.facts:
        _register_facts(backend)
    backend.run_script(script, {})
    return Scope(known, every, True)


def open_runs(dataset, run_ids=None, labels=None, tables=None, threads=None, engine=None,
              parts=None, notes=None, modules=None, derived=(), progress=None, what=None,
              scope=None):
    """A backend over the selected runs with run_facts and the views of queries/lib/ modules.

    Returns (backend, chosen run ids, table partitions, run facts, migratetypes).
    tables: the views to make besides those the modules read (default: every
    table). parts: the dataset's listing when the caller has it (prepare's,
    whose runs are checked already); without it, runs whose schema does not fit
    are left out, and a note for each is appended to the list `notes` if given.
    modules: the names of the modules to run (with those they require); None:
    those ad-hoc SQL gets (sql_lib.adhoc_modules). derived: the derived tables
    to build (progress hears about slow ones) before the modules run; it must
    hold those the modules build on. what: the work their errors name (default: reading
    the runs table). scope: ad-hoc SQL's Scope (adhoc_scope), instead of tables and
    modules: its views alone are made and, unless it names them, no run facts; the runs
    that answer are judged over every table all the same. The caller closes the backend.
    """
    eng = engines.resolve(engine)
    ref = DatasetRef.of(dataset)
    checked = parts is not None
    parts = ref.listing if parts is None else parts
    chosen = select_runs(ref, parts, run_ids, labels)
    if scope is not None:
        tables, modules = scope.tables, scope.modules
    if modules is None:             # what ad-hoc SQL gets (on Spark, macros written out)
        modules = sql_lib.adhoc_modules()
    script = sql_lib.script(modules)
    known = set(TABLE_COLUMNS) | set(parts)
    wanted = set(tables) if tables is not None else known
    wanted |= _named_tables(script, known)
    if scope is None or scope.facts:
        wanted.add("runs")              # the run facts read it
    if scope is not None:
        scope.tables = wanted           # what widen need not make again
    if not checked and wanted:
        # every table's fitness (from the records where they say it), so the same runs
        # answer whatever the SQL names; the footers of the tables read, before their rows.
        # SQL that names no table nor run fact (`SELECT 1`) reads no run: none is judged
        # (widen judges them all by their footers if a statement names one after all).
        chosen, dropped = _drop_unfit(parts, chosen, known if scope else wanted, wanted)
        if notes is not None:
            notes.extend(dropped)
    backend = eng.open(ref, chosen, parts, wanted, threads)
    try:
        # A damaged page of a runs file is one line, like any failure of the engine.
        facts, mts = [], []
        with backend_errors(backend, "reading the runs table"):
            if scope is None or scope.facts:
                facts, mts = _register_facts(backend)
        with backend_errors(backend, what or "reading the runs table"):
            for name in derived:
                if name not in DERIVED_COLUMNS:
                    raise QueryError(f"unknown derived table {name}")
                # derived tables are built where DuckDB runs (DuckDBBackend; a Spark task
                # runs this same DuckDB path), never by the Spark SQL backend of ad-hoc SQL
                backend.derived(name, progress)  # type: ignore[attr-defined]
            backend.run_script(script, {})
    except BaseException:
        backend.close()
        raise
    return backend, chosen, parts, facts, mts


def open_run_set(dataset, run_ids=None, labels=None, tables=None, threads=None, notes=None):
    """DuckDB connection over the selected runs with run_facts and the shared views of queries/lib/.

    Returns (connection, chosen run ids, table partitions, run facts); for
    notebooks and ad-hoc SQL that want the same per-run facts as the analyses.
    notes: a list that gets a note for each run left out (open_runs).
    """
    backend, chosen, parts, facts, _mts = open_runs(dataset, run_ids, labels, tables, threads,
                                                    notes=notes)
    return backend.con, chosen, parts, facts


# ---------------------------------------------------------------- one analysis

@dataclass
class Plan:
    """What running one analysis section needs, decided the same way for every engine."""
    analysis: object          # catalog.Analysis
    section: object           # catalog.Section
    qname: str                # name.section as the user writes it
    bound: dict               # parameter -> typed value (defaults filled in)
    needs: object             # the section's effective table needs
    chosen: list              # run ids
    parts: dict               # table -> {run_id: [files]}
    tables: set               # dataset tables the SQL names
    notes: list               # what the chosen runs lack
    modules: list             # the queries/lib/ modules it includes, in the order they run


def prepare(name, dataset, run_ids=None, labels=None, params=None):
    """Resolve analysis `name` (or `name.section`), its parameters and runs -> Plan.

    Raises QueryError for an unknown analysis or parameter, DatasetError when
    no chosen run has a table the section requires.
    """
    a, section = find_analysis(name)
    qname = a.query_name(section)
    params = dict(params or {})
    for key in params:
        if key not in a.params:
            names = ", ".join(a.params) or "none"
            raise QueryError(f"query {a.name} has no parameter {key!r}",
                             f"its parameters: {names}; see `kmemscope queries {a.name}`")
    bound = {p.name: convert_param(p, params[p.name], qname) if p.name in params else p.default
             for p in a.params.values()}
    needs = a.needs(section)
    ref = DatasetRef.of(dataset)
    parts = ref.listing
    chosen = select_runs(ref, parts, run_ids, labels)
    tables = _named_tables(a.prelude + "\n" + section.sql, set(TABLE_COLUMNS) | set(parts))
    tables |= set(needs.requires + needs.any_of + needs.optional)
    known = set(TABLE_COLUMNS) | set(parts)
    modules = a.modules(section)
    read = tables | {"runs"} | _named_tables(sql_lib.script(modules), known)
    fields = _named_fields("\n".join((a.prelude, section.sql, sql_lib.script(modules))), read)
    if needs.derived:
        read |= {"mm_page_alloc", "mm_page_free"}      # what the derived tables are built from
        for source, wanted in SOURCE_FIELDS.items():
            fields[source] = fields.get(source, set()) | set(wanted)
    kept: set | tuple = ()
    if chosen and result_cache.enabled_for(a, ref):
        fp = result_cache.fingerprint_of(qname, modules, a.prelude, section.sql, bound)
        kept = {r for r, (_sig, rows) in result_cache.kept_runs(ref, qname, fp, chosen).items()
                if rows is not None}
    # the runs' records, read once per command
    chosen, dropped = _drop_unfit(parts, chosen, read, kept=kept, recorded=ref.footers(),
                                  fields=fields)
    notes = (ref.reader_notes() + dropped
             + _check_tables(needs, parts, chosen))
    return Plan(a, section, qname, bound, needs, chosen, parts, tables, notes, modules)


def _register_params(backend, plan):
    """query_params: one row, one column per parameter, typed as the header declares.

    On DuckDB a statement with bound values makes it (an Arrow table built from
    Python values would have pyarrow import pandas: a quarter of a second)."""
    ps = list(plan.analysis.params.values())
    if backend.name != "duckdb":
        backend.register_arrow("query_params", _params_table(plan))
        return
    if not ps:
        backend.con.execute("CREATE OR REPLACE TEMP TABLE query_params AS SELECT 1::INTEGER AS \"none\"")
        return
    # parameter names match the header's [a-z_][a-z0-9_]*, types are catalog.TYPES keys
    cols = ", ".join(f"CAST(? AS {'VARCHAR' if p.type == 'FILE' else p.type}) AS {ds.quote_ident(p.name)}"
                     for p in ps)
    # sql-safe: cols is built above from quote_ident() names and catalog types; values are bound
    backend.con.execute(f"CREATE OR REPLACE TEMP TABLE query_params AS SELECT {cols}",
                        [plan.bound[p.name] for p in ps])


def _params_table(plan):
    """The bound parameters as a one-row Arrow table (query_params)."""
    import pyarrow as pa

    types = _arrow_types()
    ps = list(plan.analysis.params.values())
    if not ps:
        return pa.table({"none": pa.array([1], pa.int32())})
    return pa.table({p.name: pa.array([plan.bound[p.name]], types[p.type]) for p in ps})


# The steps of a long answer (compare, a report's comparison): every analysis run under
# reporting(progress) tells `progress` that it starts, over how many runs, and what slow
# one-time work it does. A plain query's progress hears only of that work.
_STEPS: "contextvars.ContextVar" = contextvars.ContextVar("kmemscope_steps", default=None)


@contextmanager
def reporting(progress):
    """Every run_query inside tells progress(message) of its step and of its slow work."""
    token = _STEPS.set(progress)
    try:
        yield
    finally:
        _STEPS.reset(token)


def run_query(name, dataset, run_ids=None, labels=None, params=None, threads=None,
              progress=None, engine=None):
    """Run analysis `name` (or `name.section`) over `dataset` -> pyarrow.Table.

    run_ids: a run id (or unique prefix) or a list of them; labels: {k: v} or
    ["k=v", ...]; a run must match all. params: {name: value}, values as
    strings from a command line or typed. progress(message) hears about slow
    one-time work (building a run's derived tables) before it starts. engine:
    an engines.EngineSpec, "duckdb" (default), "spark", or an engine object;
    it runs the plan with `run_local` (engines/base.py: DuckDB over every run
    here, or on Spark one task per group of runs).
    """
    ref = DatasetRef.of(dataset)
    plan = prepare(name, ref, run_ids, labels, params)
    steps = _STEPS.get()
    if steps is not None:
        steps(f"{plan.qname} over {len(plan.chosen)} run{'s' if len(plan.chosen) != 1 else ''}")
        progress = progress or steps
    eng = engines.resolve(engine)
    rows = eng.run_plan(plan, ref, run_local_cached, threads, progress)
    facts = sorted(rows.facts, key=lambda f: f["run_id"])
    notes = list(dict.fromkeys(plan.notes + _assumption_notes(facts, rows.mts, plan.needs)))
    table = rows.table
    meta = dict(table.schema.metadata or {})
    meta[NOTES_KEY] = json.dumps(notes).encode()
    meta[b"kmemscope.query"] = plan.qname.encode()
    meta[b"kmemscope.engine"] = eng.name.encode()
    return table.replace_schema_metadata(meta)


def run_local_cached(plan, dataset, threads=None, progress=None):
    """run_local over the runs whose rows are not kept from before (result_cache.py)."""
    return result_cache.run_cached(plan, dataset, threads, progress, run_local,
                                   engines.plan_of_runs)


def rows_of_run(name, dataset, run, params=None):
    """Section `name`'s rows of one run, computed as a question over the whole dataset
    computes them (planned over every run, run on this one): what result_cache keeps."""
    plan = prepare(name, dataset, params=params)
    if run not in plan.chosen:
        raise DatasetError(f"run {run} is not one that {plan.qname} reads")
    return run_local(engines.plan_of_runs(plan, [run]), dataset).table


def run_local(plan, dataset, threads=None, progress=None):
    """Run `plan`'s section with DuckDB in this process over plan.chosen -> engines.PlanRows.

    The one way an analysis runs: the DuckDB engine calls it over every chosen
    run, Spark's executors over one group of runs each (a plan whose chosen and
    parts hold that group). It builds the runs' derived tables where they are missing,
    then runs the modules the analysis includes.
    """
    backend, _chosen, _parts, facts, mts = open_runs(
        dataset, plan.chosen, None, plan.tables, threads, "duckdb", plan.parts,
        modules=plan.modules, derived=plan.needs.derived, progress=progress,
        what=f"query {plan.qname}")
    bound = plan.bound
    try:
        with backend_errors(backend, f"query {plan.qname}"):
            _register_params(backend, plan)
            if plan.analysis.prelude.strip():
                backend.run_script(plan.analysis.prelude, bound)
            table = backend.query_arrow(plan.section.sql, _used(plan.section.sql, bound))
    finally:
        backend.close()
    return engines.PlanRows(table, facts, mts)


@contextmanager
def backend_errors(backend, what):
    """A backend's own error (DuckDB's, Spark's, a translation's) as one QueryError line."""
    try:
        yield
    except KmemscopeError:
        raise
    except Exception as exc:
        text = backend.error_text(exc)
        if text is None:           # not the engine's: a bug, let it through
            raise
        raise QueryError(f"{what} failed{backend.where}: {text}") from exc


def _used(sql, bound):
    """The parameters that `sql` refers to ($name, comments aside)."""
    names = set(_PARAM_REF.findall(re.sub(r"--[^\n]*", "", sql)))
    return {k: v for k, v in (bound or {}).items() if k in names}


def notes_of(table):
    """The notes run_query attached to a result (runs lacking tables, assumptions)."""
    raw = (table.schema.metadata or {}).get(NOTES_KEY)
    return json.loads(raw) if raw else []
