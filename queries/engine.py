"""Run the named analyses in queries/*.sql over a dataset with DuckDB.

queries/catalog.py reads an analysis's header (parameters, table needs,
sections, columns); this module runs it. Parameters are DuckDB named
parameters (`$top_n`), bound at execution, never pasted into SQL text, also in
@prelude statements (CREATE TABLE ... AS SELECT; a view cannot hold a parameter).

Before the analysis runs, the engine registers per-run facts (queries/eras.py)
and the views of queries/_common.sql. Every table that the SQL names gets a view
over the selected runs; one they lack is an empty stand-in with the columns of
TABLE_COLUMNS. Results are pyarrow Tables that start with run_id and labels;
notes about what a run lacks travel in the schema metadata under
b"kmemscope.notes" (a JSON list of strings; see `notes_of`).
"""
import json
import re

from kmemscope.errors import DatasetError, QueryError

from . import dataset as ds
from . import derive
from . import eras
from .catalog import QUERY_DIR, convert_param, find_analysis
from .selection import select_runs

COMMON_SQL = QUERY_DIR / "_common.sql"
NOTES_KEY = b"kmemscope.notes"
PROCFS_TABLES = ("vmstat", "pagetypeinfo_free", "pagetypeinfo_blocks", "buddyinfo")

# Columns the analyses read, with the type a stand-in gets when a run's format
# lacks the column (an older kernel) or the dataset lacks the table.
_EVENT = {"ts": "BIGINT", "cpu": "INTEGER", "pid": "INTEGER", "comm": "VARCHAR"}
TABLE_COLUMNS = {
    "mm_page_alloc": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER",
                      "gfp_flags": "UBIGINT", "migratetype": "INTEGER"},
    "mm_page_free": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER"},
    "mm_page_alloc_extfrag": {**_EVENT, "pfn": "UBIGINT", "alloc_order": "INTEGER",
                              "fallback_order": "INTEGER", "alloc_migratetype": "INTEGER",
                              "fallback_migratetype": "INTEGER", "change_ownership": "INTEGER"},
    "mm_page_alloc_zone_locked": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER",
                                  "migratetype": "INTEGER", "percpu_refill": "INTEGER"},
    "mm_page_pcpu_drain": {**_EVENT, "pfn": "UBIGINT", "order": "UINTEGER", "migratetype": "INTEGER"},
    "mm_compaction_begin": {**_EVENT, "zone_start": "UBIGINT", "migrate_pfn": "UBIGINT",
                            "free_pfn": "UBIGINT", "zone_end": "UBIGINT", "sync": "UTINYINT"},
    "mm_compaction_end": {**_EVENT, "zone_start": "UBIGINT", "migrate_pfn": "UBIGINT",
                          "free_pfn": "UBIGINT", "zone_end": "UBIGINT", "sync": "UTINYINT",
                          "status": "INTEGER"},
    "mm_compaction_try_to_compact_pages": {**_EVENT, "order": "INTEGER", "gfp_mask": "UBIGINT",
                                           "prio": "INTEGER"},
    "mm_compaction_deferred": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "considered": "UINTEGER", "defer_shift": "UINTEGER",
                               "order_failed": "INTEGER"},
    "mm_compaction_defer_compaction": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER",
                                       "order": "INTEGER", "considered": "UINTEGER",
                                       "defer_shift": "UINTEGER", "order_failed": "INTEGER"},
    "mm_compaction_defer_reset": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                                  "considered": "UINTEGER", "defer_shift": "UINTEGER",
                                  "order_failed": "INTEGER"},
    "mm_compaction_finished": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "ret": "INTEGER"},
    "mm_compaction_suitable": {**_EVENT, "nid": "INTEGER", "idx": "UINTEGER", "order": "INTEGER",
                               "ret": "INTEGER"},
    "mm_compaction_kcompactd_wake": {**_EVENT, "nid": "INTEGER", "order": "INTEGER",
                                     "highest_zoneidx": "UINTEGER"},
    "mm_compaction_wakeup_kcompactd": {**_EVENT, "nid": "INTEGER", "order": "INTEGER",
                                       "highest_zoneidx": "UINTEGER"},
    "mm_vmscan_wakeup_kswapd": {**_EVENT, "nid": "INTEGER", "zid": "INTEGER", "order": "INTEGER",
                                "gfp_flags": "UBIGINT"},
    "mm_vmscan_kswapd_wake": {**_EVENT, "nid": "INTEGER", "zid": "INTEGER", "order": "INTEGER"},
    "mm_vmscan_direct_reclaim_begin": {**_EVENT, "order": "INTEGER", "gfp_flags": "UBIGINT"},
    "mm_vmscan_direct_reclaim_end": {**_EVENT, "nr_reclaimed": "UBIGINT"},
    "runs": {"kernel_release": "VARCHAR", "arch": "VARCHAR", "first_ts": "BIGINT",
             "last_ts": "BIGINT", "pageblock_order": "INTEGER", "manifest": "VARCHAR",
             "migratetypes": "VARCHAR[]", "labels": "MAP(VARCHAR, VARCHAR)",
             "lost_events": "BIGINT", "sha256": "VARCHAR"},
    "print_flags": {"event": "VARCHAR", "field": "VARCHAR", "kind": "VARCHAR",
                    "value": "UBIGINT", "name": "VARCHAR"},
    "lost_events": {"cpu": "INTEGER", "ts": "BIGINT", "missed": "BIGINT"},
    "vmstat": {"ts": "BIGINT", "name": "VARCHAR", "value": "BIGINT"},
    "pagetypeinfo_free": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR",
                          "migratetype": "VARCHAR", "order": "INTEGER", "count": "BIGINT"},
    "pagetypeinfo_blocks": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR",
                            "migratetype": "VARCHAR", "blocks": "BIGINT"},
    "buddyinfo": {"ts": "BIGINT", "node": "INTEGER", "zone": "VARCHAR", "order": "INTEGER",
                  "count": "BIGINT"},
}
_SQL_TYPE = {"FILE": "VARCHAR"}
_PARAM_REF = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _named_tables(sql, known):
    """The tables of `known` that `sql` names (comments aside): they get a view."""
    return set(_WORD.findall(re.sub(r"--[^\n]*", "", sql))) & set(known)


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
                raise DatasetError(f"{_runs_text(chosen)} {verb} no procfs tables (no {t})",
                                   "capture with `kmemscope record`")
            if t not in parts:
                raise DatasetError(f"dataset has no {t} events",
                                   f"record with the {t} tracepoint enabled")
            raise DatasetError(f"{_runs_text(chosen)} {verb} no {t} events",
                               f"record with the {t} tracepoint enabled")
        for r in lacking(t):
            notes.append(f"run {r} has no procfs tables (capture with `kmemscope record`): "
                         "it is left out" if procfs else
                         f"run {r} has no {t} events: its rows are empty or zero")
    if needs.any_of and not any(runs_with(t) for t in needs.any_of):
        raise DatasetError(f"{_runs_text(chosen)}: no events of any of {', '.join(needs.any_of)}",
                           "record with those tracepoints enabled")
    # procfs notes first: they explain most of what a run lacks
    for t in sorted(dict.fromkeys(needs.any_of + needs.optional), key=lambda t: t not in PROCFS_TABLES):
        for r in lacking(t):
            if t in PROCFS_TABLES:
                notes.append(f"run {r} has no procfs table {t} (capture with `kmemscope record`): "
                             "the columns from it are NULL")
            elif t.startswith("mm_"):
                notes.append(f"run {r} has no {t} events: counted as none")
    return notes


def _runs_text(chosen):
    if len(chosen) == 1:
        return f"run {chosen[0]}"
    return f"runs {', '.join(chosen[:5])}{' ...' if len(chosen) > 5 else ''}"


def _register_facts(con, chosen):
    import pyarrow as pa

    cols = ["run_id", "kernel_release", "arch", "first_ts", "last_ts", "pageblock_order",
            "manifest", "migratetypes"]
    rows = con.sql("SELECT " + ", ".join(cols) + " FROM runs").fetchall()
    facts, mts = eras.run_facts([dict(zip(cols, r)) for r in rows])
    facts_t = pa.Table.from_pylist(facts, schema=pa.schema([
        ("run_id", pa.string()), ("kernel_release", pa.string()),
        ("highatomic_era", pa.string()), ("highatomic_era_note", pa.string()),
        ("extfrag_era", pa.string()), ("pageblock_order", pa.int32()),
        ("pageblock_order_source", pa.string()), ("first_ts", pa.int64()),
        ("last_ts", pa.int64()), ("duration_s", pa.float64())]))
    mts_t = pa.Table.from_pylist(mts, schema=pa.schema([
        ("run_id", pa.string()), ("migratetype", pa.int32()), ("name", pa.string()),
        ("source", pa.string())]))
    meanings = [{"extfrag_era": e, "change_ownership": c, "meaning": m}
                for (e, c), m in eras.OWNERSHIP_MEANING.items()]
    con.register("_facts_in", facts_t)
    con.register("_mts_in", mts_t)
    con.register("_ownership_in", pa.Table.from_pylist(meanings))
    con.execute("CREATE TEMP TABLE run_facts AS SELECT f.run_id, r.labels, f.* EXCLUDE (run_id) "
                "FROM _facts_in AS f JOIN runs AS r USING (run_id)")
    con.execute("CREATE TEMP TABLE migratetype_names AS SELECT * FROM _mts_in")
    con.execute("CREATE TEMP TABLE extfrag_ownership AS SELECT * FROM _ownership_in")
    for name in ("_facts_in", "_mts_in", "_ownership_in"):
        con.unregister(name)
    return facts


def _assumption_notes(con, facts, needs):
    """Notes for per-run facts that were assumed rather than read from the run."""
    notes = []
    if "mm_page_alloc_extfrag" in needs.requires:
        for f in facts:
            if f["pageblock_order_source"].startswith("assumed"):
                notes.append(f"run {f['run_id']}: pageblock_order {f['pageblock_order_source']}")
    if {"mm_page_alloc_extfrag", "mm_page_pcpu_drain", "mm_page_alloc_zone_locked"} & set(needs.requires):
        rows = con.sql("SELECT DISTINCT run_id FROM migratetype_names "
                       "WHERE source LIKE 'KERNEL-ERAS.md%' ORDER BY run_id").fetchall()
        for (run,) in rows:
            notes.append(f"run {run}: no migratetype list in the run (no manifest): names follow "
                         "the upstream enum (0 Unmovable, 1 Movable, 2 Reclaimable, 3 HighAtomic)")
    return notes


def _table_runs(dataset):
    """ds.table_runs() once a commit that a killed parse left half done is finished."""
    ds.finish_interrupted_commits(dataset)
    return ds.table_runs(dataset)


def open_run_set(dataset, run_ids=None, labels=None, tables=None, threads=None):
    """Connection over the selected runs with run_facts and _common.sql views.

    Returns (connection, chosen run ids, table partitions, run facts). tables:
    the views to make besides those _common.sql reads (default: every table).
    For notebooks and ad-hoc SQL that want the same per-run facts as the analyses.
    """
    parts = _table_runs(dataset)
    chosen = select_runs(dataset, parts, run_ids, labels)
    common = COMMON_SQL.read_text()
    known = set(TABLE_COLUMNS) | set(parts)
    wanted = set(tables) if tables is not None else known
    wanted |= {"runs"} | _named_tables(common, known)
    columns = {t: TABLE_COLUMNS[t] for t in wanted if t in TABLE_COLUMNS}
    con = ds.connect(dataset, threads=threads, run_ids=chosen, columns=columns, tables=wanted)
    facts = _register_facts(con, chosen)
    for stmt in _statements(common):
        con.execute(stmt)
    return con, chosen, parts, facts


def run_query(name, dataset, run_ids=None, labels=None, params=None, threads=None,
              progress=None):
    """Run analysis `name` (or `name.section`) over `dataset` -> pyarrow.Table.

    run_ids: a run id (or unique prefix) or a list of them; labels: {k: v} or
    ["k=v", ...]; a run must match all. params: {name: value}, values as
    strings from a command line or typed. progress(message) hears about slow
    one-time work (building a run's derived tables) before it starts.
    """
    a, section = find_analysis(name)
    qname = a.query_name(section)
    bound = {}
    params = dict(params or {})
    for key in params:
        if key not in a.params:
            known = ", ".join(a.params) or "none"
            raise QueryError(f"query {a.name} has no parameter {key!r}",
                             f"its parameters: {known}; see `kmemscope queries {a.name}`")
    for p in a.params.values():
        bound[p.name] = convert_param(p, params[p.name], qname) if p.name in params else p.default

    needs = a.needs(section)
    parts = _table_runs(dataset)
    chosen = select_runs(dataset, parts, run_ids, labels)
    notes = _check_tables(needs, parts, chosen)
    tables = _named_tables(a.prelude + "\n" + section.sql, set(TABLE_COLUMNS) | set(parts))
    tables |= set(needs.requires + needs.any_of + needs.optional)
    con, chosen, parts, facts = open_run_set(dataset, chosen, None, tables, threads)
    notes += _assumption_notes(con, facts, needs)
    try:
        for name in needs.derived:
            _derived_view(con, dataset, name, chosen, parts, threads, progress)
        # Parameters also live in a one-row table, so prelude views can read them.
        cols = ", ".join(f"CAST(${p.name} AS {_SQL_TYPE.get(p.type, p.type)}) AS {p.name}"
                         for p in a.params.values())
        # sql-safe: parameter names match \w+ in our own .sql headers, types come from catalog.TYPES
        con.execute(f"CREATE TEMP TABLE query_params AS SELECT {cols or '1 AS none'}", bound)
        for stmt in _statements(a.prelude):
            con.execute(stmt, _used(stmt, bound) or None)
        table = ds.query_arrow(con, section.sql, _used(section.sql, bound))
    except Exception as exc:   # duckdb.Error subclasses; keep the first line only
        raise QueryError(f"query {qname} failed: {ds.sql_error_text(exc)}") from exc
    finally:
        con.close()
    meta = dict(table.schema.metadata or {})
    meta[NOTES_KEY] = json.dumps(notes).encode()
    meta[b"kmemscope.query"] = qname.encode()
    return table.replace_schema_metadata(meta)


DERIVED_COLUMNS = {
    "page_pairs": {"pfn": "UBIGINT", "reuse": "BOOLEAN", "interval_ns": "BIGINT",
                   "same_cpu": "BOOLEAN", "order": "UTINYINT", "cpu": "INTEGER"},
    "pfn_allocs": {"pfn": "UBIGINT", "allocs": "BIGINT", "rank": "BIGINT"},
    "alloc_stacks": {"stack_id": "INTEGER", "frames": "VARCHAR[]", "addresses": "UBIGINT[]"},
    "alloc_stack_ids": {"ts": "BIGINT", "cpu": "INTEGER", "pfn": "UBIGINT", "order": "UINTEGER",
                        "stack_id": "INTEGER"},
    "stack_pairing": {"stacks": "BIGINT", "stacks_alloc": "BIGINT", "stacks_other": "BIGINT",
                      "stacks_unpaired": "BIGINT", "stacks_mismatched": "BIGINT",
                      "allocs": "BIGINT", "allocs_with_stack": "BIGINT"},
}


def _derived_view(con, dataset, name, chosen, parts, threads, progress=None):
    if name not in DERIVED_COLUMNS:
        raise QueryError(f"unknown derived table {name}")
    if name in derive.STACK_TABLES:
        files = derive.stack_files(dataset, name, chosen, parts, threads, progress)
    else:
        files = derive.derived_files(dataset, name, chosen, parts, threads, progress)
    view = ds.quote_ident(name)
    if files:
        listed = ", ".join(ds.quote_literal(f) for f in files.values())
        # sql-safe: view is quote_ident(), listed joins quote_literal() paths
        con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM read_parquet([{listed}], "
                    "hive_partitioning = true, hive_types = {'run_id': VARCHAR})")
    else:
        cols = ", ".join(["CAST(NULL AS VARCHAR) AS run_id"] +
                         [f"CAST(NULL AS {t}) AS {ds.quote_ident(c)}"
                          for c, t in DERIVED_COLUMNS[name].items()])
        # sql-safe: view is quote_ident(); cols casts NULL to quote_ident() columns
        con.execute(f"CREATE TEMP VIEW {view} AS SELECT {cols} WHERE false")


def _used(sql, bound):
    names = set(_PARAM_REF.findall(re.sub(r"--[^\n]*", "", sql)))
    return {k: v for k, v in bound.items() if k in names}


def _statements(sql):
    return [s for s in (x.strip() for x in re.sub(r"--[^\n]*", "", sql).split(";")) if s]


def notes_of(table):
    """The notes run_query attached to a result (runs lacking tables, assumptions)."""
    raw = (table.schema.metadata or {}).get(NOTES_KEY)
    return json.loads(raw) if raw else []
