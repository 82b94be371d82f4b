"""The derived tables' rules: what each family of per-run derived tables pairs, and how.

The dataset layer (dataset/derived.py) caches per-run tables without knowing what
they hold: it is handed a family (derived.Family: its tables, the sources that sign
them, the function that builds them) and keeps the built files current, checked and
recorded. The kernel rules those tables follow are written here, in the query layer,
beside the SQL modules they share rules with (lib/allocs.sql's _failed_pfn).

Pairing every free with the next event on the same pfn needs all of a run's
allocations and frees sorted by (pfn, ts): DuckDB takes about 3.5 s for 50 M
events on two cores for that step alone, before any statistics. So the pairs are
computed once per run and cached by the dataset layer:

    DATASET/_derived/<table>/run_id=<id>/part-0.parquet

Tables built together from the same sources are a family (FAMILIES, at the end:
the page tables, page_pairs and pfn_allocs, below; the stack tables, with the
stacks section); derived_files(dataset, table, runs) makes any of them current
by name, for the runs its family applies to. `kmemscope parse` can call
derive_runs(dataset, [run_id]) after writing a run so the first query does not pay
for it: every table of every family that applies.

page_pairs columns (one row per consecutive pair of events on one pfn whose
kinds differ):
  pfn          page frame number (head page)
  reuse        true: a free then an allocation (a reuse, interval = time free);
               false: an allocation then a free (interval = lifetime)
  interval_ns  time between the two events, ns
  same_cpu     the second event ran on the CPU of the first
  order        the allocation's order (of the later event for reuse, the
               earlier for lifetime)
  cpu          CPU of the first event of the pair
Failed allocations (lib/allocs.sql _failed_pfn) are not events of any pfn and are left out.
Two frees or two allocations in a row (untraced bulk or compaction pages in
between, KERNEL-ERAS.md section 1) form no pair.

pfn_allocs columns (one row per pfn with a successful allocation):
  pfn          page frame number (head page)
  allocs       successful mm_page_alloc events of this pfn
  rank         1 = most allocated in the run; ties broken by lower pfn
"""
from kmemscope.common.errors import DatasetError
from kmemscope.dataset import derived
from kmemscope.dataset.handle import DatasetRef
from kmemscope.dataset import reader as ds

from . import sql_lib

DERIVE_VERSION = "2"
SOURCES = ("mm_page_alloc", "mm_page_free")
# The fields of their own formats the derived tables read (a run without one is left out of
# the analyses built on them: queries/runner.py).
SOURCE_FIELDS = {"mm_page_alloc": ("pfn", "order"), "mm_page_free": ("pfn", "order")}

_PAIRS_SQL = """
SELECT
  pfn,
  is_alloc = 1 AS reuse,
  ts - prev_ts AS interval_ns,
  cpu = prev_cpu AS same_cpu,
  CAST(CASE WHEN is_alloc = 1 THEN "order" ELSE prev_order END AS UTINYINT) AS "order",
  CAST(prev_cpu AS INTEGER) AS cpu
FROM (
  SELECT pfn, ts, cpu, "order", is_alloc,
         lag(is_alloc) OVER w AS prev_is_alloc,
         lag(ts) OVER w AS prev_ts,
         lag(cpu) OVER w AS prev_cpu,
         lag("order") OVER w AS prev_order
  FROM ({events}) AS e
  WINDOW w AS (PARTITION BY pfn ORDER BY ts, is_alloc)
) AS t
WHERE prev_is_alloc IS NOT NULL AND prev_is_alloc <> is_alloc
"""

_PFN_ALLOCS_SQL = """
SELECT pfn, allocs, row_number() OVER (ORDER BY allocs DESC, pfn) AS rank
FROM (SELECT pfn, count(*) AS allocs FROM ({allocs}) AS a GROUP BY pfn) AS c
ORDER BY rank
"""


def _derive_pages(parts, target, run, sig, threads):
    """Compute the page tables (page_pairs, pfn_allocs) of one run; return {name: path}."""
    scans = {}
    for table, is_alloc in (("mm_page_alloc", 1), ("mm_page_free", 0)):
        files = parts.get(table, {}).get(run, [])
        listed = ", ".join(ds.quote_literal(ds.scan_path(f)) for f in files)
        if not files:
            # sql-safe: is_alloc is 0 or 1
            scans[table] = ('SELECT CAST(NULL AS UBIGINT) AS pfn, CAST(NULL AS BIGINT) AS ts, '
                            'CAST(NULL AS INTEGER) AS cpu, CAST(NULL AS UINTEGER) AS "order", '
                            f'{is_alloc} AS is_alloc WHERE false')
            continue
        where = " WHERE NOT _failed_pfn(pfn)" if is_alloc else ""
        # sql-safe: is_alloc is 0 or 1, listed joins quote_literal() paths, where is a constant
        scans[table] = (f'SELECT pfn, ts, cpu, "order", {is_alloc} AS is_alloc '
                        f"FROM read_parquet([{listed}], union_by_name = true){where}")
    con = derived.connect([f for t in SOURCES for f in parts.get(t, {}).get(run, [])], threads)
    out = {}
    try:
        con.execute(sql_lib.definition("_failed_pfn"))
        # sql-safe: the scans are built above from constants and quoted paths
        con.execute(f"CREATE TEMP TABLE allocs AS {scans['mm_page_alloc']}")
        sqls = {
            "page_pairs": _PAIRS_SQL.format(  # sql-safe: the scans built above
                events=f"SELECT * FROM allocs UNION ALL {scans['mm_page_free']}"),
            "pfn_allocs": _PFN_ALLOCS_SQL.format(allocs="SELECT pfn FROM allocs"),
        }
        for name, sql in sqls.items():
            out[name] = derived.write_query(target, name, run, sig, con, sql)
    finally:
        con.close()
    return out


# ---------------------------------------------------------------- allocation stacks
#
# A recording made with kernel stacks (trace-cmd -T, the atomic-origins preset)
# holds one ftrace kernel_stack record per event. The stack is written after
# its event commits, on the same CPU, once the unwinder is done (microseconds
# later, never before the event). An interrupt that arrives during that unwind
# and traces events of its own nests: per CPU the records read
#     A  B1 S(B1)  B2 S(B2)  S(A)
# so events and stacks pair like brackets, not simply as neighbours. Each run
# keeps, per CPU and in time order (an event before a stack at the same ts),
# the depth = events so far - stacks so far; a stack closes the level it came
# down from, and its event is the record just before it at that level. A stack
# whose innermost frame names another event (trace_event_raw_event_<name>) is
# not taken for an allocation.
#
# The run's kernel_stack rows carry a stack_id into its `stacks` table (one row
# per distinct stack, interned by the decoder), so the pairing reads 4 bytes per
# stack record and the frames once per distinct stack. A run parsed before
# (kernel_stack with `caller` and `caller_symbols`, no `stacks`) gets the same
# two tables made from its own columns first (_OLD_SHAPE_SQL), and the same
# pairing after: its derived rows are the ones the new shape gives.
#
#     DATASET/_derived/<alloc_stacks|alloc_stack_ids|stack_pairing>/run_id=<id>/part-0.parquet
#
# alloc_stacks (one row per distinct frame sequence of an allocation's stack):
#   stack_id     1, 2, ... in order of first use by an allocation in the run
#   frames       as `stacks` holds them: "function+0xoffset", innermost first
#   addresses    the return addresses, innermost first
# alloc_stack_ids (one row per mm_page_alloc of the run):
#   ts, cpu, pfn, order   the allocation (the key back into mm_page_alloc)
#   stack_id     its stack in alloc_stacks, NULL when no stack paired with it
# stack_pairing (one row): stacks, stacks_alloc (paired with an allocation),
#   stacks_other (paired with another event), stacks_unpaired (no event left
#   at their level: the event was lost or recorded before the capture began),
#   stacks_mismatched (the frame names another event), allocs, allocs_with_stack.
#
# alloc_stacks stays a table of its own rather than a view over `stacks`: its
# ids number the stacks of allocations in the order allocations first used them
# (what alloc_origins shows as stack_id, whatever order the decoder threads met
# the stacks in), and it holds only stacks paired with an allocation (what
# alloc_origins.pairing counts as distinct_stacks). It is a few rows per
# distinct stack, made from `stacks` by id.

STACK_DERIVE_VERSION = "3"
STACK_TABLES = ("alloc_stacks", "alloc_stack_ids", "stack_pairing")
STACKS_TABLE = "stacks"
# Tables of a run that are not events (no cpu/ts ordering to take part in).
_NOT_EVENTS = {"runs", "print_flags", "lost_events", "event_tables", "vmstat",
               "pagetypeinfo_free", "pagetypeinfo_blocks", "buddyinfo", "zoneinfo",
               "extfrag_unusable_index", "extfrag_index", "psi_memory", "cpu_stat",
               "kthread_cpu", "mthp_stats", "run_metrics", STACKS_TABLE}

_STACK_PAIR_SQL = """
CREATE TEMP TABLE seq AS
SELECT *,
       sum(CASE WHEN is_stack THEN -1 ELSE 1 END)
         OVER (PARTITION BY cpu ORDER BY ts, is_stack, rid ROWS UNBOUNDED PRECEDING)
       + CASE WHEN is_stack THEN 1 ELSE 0 END AS level
FROM recs
"""

_STACK_MATCH_SQL = """
CREATE TEMP TABLE matched AS
SELECT rid AS stack_rid, sid, prev_rid AS event_rid,
       CASE WHEN prev_is_stack IS NULL OR prev_is_stack THEN 'unpaired'
            WHEN prev_is_alloc THEN 'alloc'
            ELSE 'other' END AS outcome
FROM (
  SELECT rid, sid, is_stack,
         lag(rid) OVER w AS prev_rid,
         lag(is_stack) OVER w AS prev_is_stack,
         lag(is_alloc) OVER w AS prev_is_alloc
  FROM seq
  WINDOW w AS (PARTITION BY cpu, level ORDER BY ts, is_stack, rid)
) AS s
WHERE is_stack
"""

# A run parsed before stacks were interned: its stack records' addresses are
# numbered here (in the order of their first record, by rid), and `stacks`
# takes the symbols recorded with them. {ks} is the scan of kernel_stack with
# cpu, ts, caller, caller_symbols and rid.
_OLD_SHAPE_SQL = """
CREATE TEMP TABLE ks_old AS {ks};
CREATE TEMP TABLE stacks_run AS
SELECT CAST(row_number() OVER (ORDER BY first_rid) AS INTEGER) AS stack_id, frames, addresses
FROM (SELECT caller AS addresses, min(rid) AS first_rid, any_value(caller_symbols) AS frames
      FROM ks_old GROUP BY caller) AS d;
CREATE TEMP TABLE ks AS
SELECT k.cpu, k.ts, k.rid, s.stack_id AS sid
FROM ks_old AS k JOIN stacks_run AS s ON s.addresses = k.caller;
DROP TABLE ks_old;
"""

# Pairs of stacks and allocations, interned by addresses, from recs (every event
# and stack record), ks (stack records: rid, sid), stacks_run and allocs. A
# stack whose innermost frame is another event's trace function is not taken.
_STACK_INTERN_SQL = """
CREATE TEMP TABLE stack_marks AS
SELECT stack_id AS sid, addresses, frames,
       coalesce(regexp_matches(frames[1], '^(trace_event_raw_event_|ftrace_raw_event_)')
                AND regexp_replace(frames[1], '^(trace_event_raw_event_|ftrace_raw_event_)|[+]0x[0-9a-f]+$',
                                   '', 'g') <> 'mm_page_alloc', false) AS mismatched
FROM stacks_run;
CREATE TEMP TABLE taken AS
SELECT m.event_rid, m.sid, k.mismatched
FROM matched AS m JOIN stack_marks AS k ON k.sid = m.sid
WHERE m.outcome = 'alloc';
CREATE TEMP TABLE paired AS SELECT event_rid, sid FROM taken WHERE NOT mismatched;
CREATE TEMP TABLE interned AS
SELECT addresses, row_number() OVER (ORDER BY first_ts, first_rid) AS stack_id, frames
FROM (SELECT k.addresses, min(a.ts) AS first_ts, min(p.event_rid) AS first_rid,
             any_value(k.frames) AS frames
      FROM paired AS p
      JOIN allocs AS a ON a.rid = p.event_rid
      JOIN stack_marks AS k ON k.sid = p.sid
      GROUP BY k.addresses) AS d;
CREATE TEMP TABLE alloc_ids AS
SELECT k.sid, i.stack_id FROM stack_marks AS k JOIN interned AS i ON i.addresses = k.addresses;
"""

_STACK_TABLES_SQL = {
    "alloc_stacks": """
        SELECT CAST(stack_id AS INTEGER) AS stack_id, frames, addresses
        FROM interned ORDER BY stack_id""",
    "alloc_stack_ids": """
        SELECT a.ts, a.cpu, a.pfn, a."order", CAST(i.stack_id AS INTEGER) AS stack_id
        FROM allocs AS a
        LEFT JOIN paired AS p ON p.event_rid = a.rid
        LEFT JOIN alloc_ids AS i ON i.sid = p.sid
        ORDER BY a.ts, a.cpu""",
    "stack_pairing": """
        SELECT
          count(*) AS stacks,
          (SELECT count(*) FROM paired) AS stacks_alloc,
          count(*) FILTER (WHERE outcome = 'other') AS stacks_other,
          count(*) FILTER (WHERE outcome = 'unpaired') AS stacks_unpaired,
          (SELECT count(*) FROM taken WHERE mismatched) AS stacks_mismatched,
          (SELECT count(*) FROM allocs) AS allocs,
          (SELECT count(*) FROM paired) AS allocs_with_stack
        FROM matched""",
}


def _stack_sources(parts, run):
    """{table: files} of the run's event tables (every table with cpu and ts)."""
    return {t: runs[run] for t, runs in parts.items()
            if t not in _NOT_EVENTS and not t.startswith("_") and run in runs}


def _stack_signature_sources(parts, run):
    """What the stack tables of `run` are derived from: its event tables and its stacks."""
    return sorted(_stack_sources(parts, run)) + ([STACKS_TABLE] if run in parts.get(
        STACKS_TABLE, {}) else [])


def _stack_shape(con, run, files, stacks_files):
    """'interned' (kernel_stack has stack_id, the run has a stacks table) or 'recorded'
    (kernel_stack has caller and caller_symbols: parsed before stacks were interned).
    Anything else, or files of both shapes in one run, is refused in one line."""
    import duckdb

    listed = ", ".join(ds.quote_literal(ds.scan_path(f)) for f in files)
    try:
        # sql-safe: listed joins quote_literal() paths
        rows = con.execute(f"SELECT file_name, list(name) FROM parquet_schema([{listed}]) "
                           "GROUP BY file_name").fetchall()
    except duckdb.Error as exc:
        raise DatasetError(ds.sql_error_text(exc)) from None
    shapes = set()
    for _file, names in rows:
        if "stack_id" in names:
            shapes.add("interned")
        elif "caller" in names and "caller_symbols" in names:
            shapes.add("recorded")
        else:
            shapes.add("unknown")
    fix = "parse its trace again with `kmemscope parse`"
    if shapes == {"interned"} and not stacks_files:
        raise DatasetError(f"run {run}: kernel_stack names stack ids but the run has no "
                           f"{STACKS_TABLE} table", fix)
    if len(shapes) != 1 or shapes == {"unknown"}:
        raise DatasetError(f"run {run}: kernel_stack holds neither stack ids nor recorded "
                           "stacks in every file", fix)
    return shapes.pop()


def _derive_stacks(parts, target, run, sig, threads):
    sources = sorted(_stack_sources(parts, run).items())
    index = {table: i for i, (table, _) in enumerate(sources)}
    stack_files = dict(sources)["kernel_stack"]
    stacks_files = parts.get(STACKS_TABLE, {}).get(run, [])
    scans = []
    for table, files in sources:
        if table == "kernel_stack":
            continue
        # sql-safe: a constant per table kind
        cols = ("cpu, ts, false AS is_stack, " +
                ("true" if table == "mm_page_alloc" else "false") + " AS is_alloc, "
                "CAST(NULL AS INTEGER) AS sid")
        scans.append(derived.rows_with_rid(index[table], files, cols))
    con = derived.connect([f for _, files in sources for f in files] + stacks_files, threads)
    out = {}
    try:
        if _stack_shape(con, run, stack_files, stacks_files) == "interned":
            listed = ", ".join(ds.quote_literal(ds.scan_path(f)) for f in stacks_files)
            # sql-safe: derived.rows_with_rid() builds from constants, ints and quoted paths; listed likewise
            con.execute("CREATE TEMP TABLE ks AS " + derived.rows_with_rid(
                index["kernel_stack"], stack_files, "cpu, ts, CAST(stack_id AS INTEGER) AS sid"))
            con.execute("CREATE TEMP TABLE stacks_run AS SELECT CAST(stack_id AS INTEGER) AS "
                        "stack_id, frames, addresses FROM read_parquet([" + listed + "])")
            rows, ids = con.execute("SELECT count(*), count(DISTINCT stack_id) "
                                    "FROM stacks_run").fetchone()
            if rows != ids:
                raise DatasetError(f"run {run}: its {STACKS_TABLE} table gives one stack_id "
                                   "to two stacks", "parse its trace again with `kmemscope parse`")
        else:
            # sql-safe: derived.rows_with_rid() builds from constants, ints and quoted paths
            con.execute(_OLD_SHAPE_SQL.format(ks=derived.rows_with_rid(
                index["kernel_stack"], stack_files, "cpu, ts, caller, caller_symbols")))
        # sql-safe: derived.rows_with_rid() builds from constants, ints and quoted paths
        con.execute("CREATE TEMP TABLE recs AS SELECT cpu, ts, true AS is_stack, "
                    "false AS is_alloc, sid, rid FROM ks"
                    + "".join(" UNION ALL " + scan for scan in scans))
        con.execute(_STACK_PAIR_SQL)
        con.execute(_STACK_MATCH_SQL)
        con.execute("CREATE TEMP TABLE allocs AS " + derived.rows_with_rid(  # sql-safe: as above
            index["mm_page_alloc"], dict(sources)["mm_page_alloc"], 'ts, cpu, pfn, "order"'))
        con.execute(_STACK_INTERN_SQL)
        for name, sql in _STACK_TABLES_SQL.items():
            out[name] = derived.write_query(target, name, run, sig, con, sql)
    finally:
        con.close()
    return out


# ---------------------------------------------------------------- the families

FAMILIES = (
    derived.Family("pages", ("page_pairs", "pfn_allocs"), DERIVE_VERSION,
                   derived.has_any(*SOURCES), lambda parts, run: SOURCES, _derive_pages,
                   "pairing frees with reallocations"),
    derived.Family("stacks", STACK_TABLES, STACK_DERIVE_VERSION,
                   derived.has_all("kernel_stack", "mm_page_alloc"), _stack_signature_sources,
                   _derive_stacks, "pairing kernel stacks with their allocations"),
)
DERIVED_TABLES = tuple(t for f in FAMILIES for t in f.tables)


def family_of(name):
    """The family that builds derived table `name`."""
    for family in FAMILIES:
        if name in family.tables:
            return family
    raise ValueError(f"no derived table {name}")


def derived_files(dataset, name, run_ids, parts=None, threads=None, progress=None,
                  read_only=False):
    """Make derived table `name` current for `run_ids` -> {run_id: path}
    (dataset/derived.py derived_files, for the family that builds it)."""
    return derived.derived_files(DatasetRef.of(dataset), family_of(name), name, run_ids, parts,
                                 threads, progress, read_only)


def derive_runs(dataset, run_ids=None, threads=None):
    """Compute every derived table of every family for `run_ids` (default: all runs), each
    for the runs its family applies to. For `parse`."""
    return derived.derive_runs(DatasetRef.of(dataset), FAMILIES, run_ids, threads)


def same_as_rederived(dataset, name, run, cached, _entry=None):
    """True when the cache file `cached` of table `name` holds the rows that deriving run
    `run` again gives (`kmemscope verify --deep`)."""
    if name not in DERIVED_TABLES:
        raise DatasetError(f"{name} is not a table kmemscope derives")
    return derived.same_as_rederived(DatasetRef.of(dataset), family_of(name), name, run, cached)
