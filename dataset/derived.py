"""Derived per-run tables: work done once per run so that analyses stay fast.

Pairing every free with the next event on the same pfn needs all of a run's
allocations and frees sorted by (pfn, ts): DuckDB takes about 3.5 s for 50 M
events on two cores for that step alone, before any statistics. A run's events
never change once parsed (run ids come from the content), so the pairs are
computed once per run and stored beside the dataset:

    DATASET/_derived/<page_pairs|pfn_allocs>/run_id=<id>/part-0.parquet

Table names starting with "_" are not dataset tables (dataset.table_dirs skips
them). Each file records in its Parquet metadata the signature of what it was
derived from (derivation version, the run's sha256, the sizes of the source
partition files); a stale or missing file is recomputed on first use, written
atomically (temp file + rename). Where the dataset is read-only (an s3 dataset
too: current files under its _derived/ are read, never written) the pairs go
to a private temporary directory for the life of the process.

`kmemscope parse` can call `derive_runs(dataset, [run_id])` after writing a run
so the first query does not pay for it.

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
Failed allocations (pfn = -1UL) are not events of any pfn and are left out.
Two frees or two allocations in a row (untraced bulk or compaction pages in
between, KERNEL-ERAS.md section 1) form no pair.

pfn_allocs columns (one row per pfn with a successful allocation):
  pfn          page frame number (head page)
  allocs       successful mm_page_alloc events of this pfn
  rank         1 = most allocated in the run; ties broken by lower pfn
"""
import json
import os
import stat
import tempfile
from pathlib import Path

from kmemscope.errors import DatasetError

from . import reader as ds
from . import storage

DERIVE_VERSION = "2"
DERIVED_TABLES = ("page_pairs", "pfn_allocs")
DERIVED_DIR = "_derived"
SIG_KEY = b"kmemscope.derived_from"
SOURCES = ("mm_page_alloc", "mm_page_free")

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

_private_dir = None


def _size(f):
    return storage.size(f) if storage.is_url_file(f) else os.path.getsize(f)


def _signature(parts, run_id, sha):
    sizes = {t: [_size(f) for f in parts.get(t, {}).get(run_id, [])] for t in SOURCES}
    return json.dumps({"version": DERIVE_VERSION, "sha256": sha, "sizes": sizes}, sort_keys=True)


def _read_signature(path):
    try:
        meta = storage.read_schema(path).metadata or {}
    except (OSError, ValueError, DatasetError):
        return None
    raw = meta.get(SIG_KEY)
    return raw.decode() if raw else None


def _plain(path, top):
    """True when `path` and every folder between it and `top` exist and are no links:
    a link inside _derived is never read through or written through."""
    path, top = Path(path), Path(top)
    while True:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode) or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return False
        if path == top or path == path.parent:
            return True
        path = path.parent


def _target_root(dataset, read_only=False):
    """DATASET/_derived if writable, else a private temporary directory.

    read_only: a reader that must not write the dataset (the private directory).
    `_derived` that is a link, or not a folder, is never written through.
    """
    global _private_dir
    root = Path(dataset) / DERIVED_DIR
    try:
        if storage.is_url(dataset):
            raise PermissionError("an s3 dataset is read only")
        if read_only:
            raise PermissionError("a read-only reader")
        try:
            os.mkdir(root)
        except FileExistsError:
            pass
        if not _plain(root, root):
            raise PermissionError(f"{root} is not a folder of its own")
        fd = os.open(root / f".probe-{os.getpid()}",
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)
        os.unlink(root / f".probe-{os.getpid()}")
        return root
    except OSError:
        if _private_dir is None:
            import atexit
            import shutil

            _private_dir = tempfile.mkdtemp(prefix="kmemscope-derived-")
            # every query of an s3 dataset comes here: leave no directory behind
            atexit.register(shutil.rmtree, _private_dir, ignore_errors=True)
        return Path(_private_dir)


def _cached_roots(dataset):
    """Where current derived files may be: DATASET/_derived, then the private directory.

    An s3 dataset's _derived/ is listed once: {file URL} instead of a request per file.
    """
    if storage.is_url(dataset):
        bucket, key = storage.split(dataset)
        root = storage.url(bucket, f"{key}/{DERIVED_DIR}" if key else DERIVED_DIR)
        roots = [(root, storage.list_files(root))]
    else:
        roots = [(Path(dataset) / DERIVED_DIR, None)]
    if _private_dir:
        roots.append((Path(_private_dir), None))
    return roots


def _cached(roots, name, run, sig):
    """The current derived file of `run` for table `name`, or None."""
    for root, listed in roots:
        if listed is not None:
            path = f"{root}/{name}/run_id={run}/part-0.parquet"
            present = path in listed
        else:
            path = root / name / f"run_id={run}" / "part-0.parquet"
            present = _plain(path, root) and path.is_file()
        if present and _read_signature(path) == sig:
            return path
    return None


def _run_shas(dataset, parts, run_ids):
    import duckdb
    files = [f for r in run_ids for f in parts["runs"].get(r, [])]
    if not files:
        return {}
    con = duckdb.connect()
    try:
        storage.register_duckdb(con, files)
        rows = con.execute(     # sql-safe: scan_sql() quotes every path
            f"SELECT run_id, sha256 FROM {ds.scan_sql(files)}").fetchall()
    finally:
        con.close()
    return dict(rows)


def derived_files(dataset, name, run_ids, parts=None, threads=None, progress=None,
                  read_only=False):
    """Make sure derived table `name` is current for `run_ids`; return {run_id: path}.

    progress(message) is called before a run's tables are built (not when cached).
    read_only: tables that are not current go to a private directory, never the dataset.
    """
    if name not in DERIVED_TABLES:
        raise ValueError(f"no derived table {name}")
    parts = parts or ds.table_runs(dataset)
    if "runs" not in parts:
        raise DatasetError(f"dataset {dataset} has no runs table")
    shas = _run_shas(dataset, parts, run_ids)
    out, todo = {}, []
    roots = _cached_roots(dataset)
    for run in run_ids:
        if run not in parts.get("mm_page_alloc", {}) and run not in parts.get("mm_page_free", {}):
            continue
        sig = _signature(parts, run, shas.get(run))
        found = _cached(roots, name, run, sig)
        if found:
            out[run] = found
        else:
            todo.append((run, sig))
    if todo:
        root = _target_root(dataset, read_only)
        for run, sig in todo:
            if progress:
                progress(f"run {run}: pairing frees with reallocations, once (cached under "
                         f"{root})")
            out[run] = _derive_one(parts, root, run, sig, threads)[name]
    return out


def _derive_one(parts, root, run, sig, threads):
    """Compute every derived table of one run; return {name: path}."""
    import duckdb

    scans = {}
    for table, is_alloc in (("mm_page_alloc", 1), ("mm_page_free", 0)):
        files = parts.get(table, {}).get(run, [])
        listed = ", ".join(ds.quote_literal(f) for f in files)
        if not files:
            # sql-safe: is_alloc is 0 or 1
            scans[table] = ('SELECT CAST(NULL AS UBIGINT) AS pfn, CAST(NULL AS BIGINT) AS ts, '
                            'CAST(NULL AS INTEGER) AS cpu, CAST(NULL AS UINTEGER) AS "order", '
                            f'{is_alloc} AS is_alloc WHERE false')
            continue
        where = " WHERE pfn NOT IN (18446744073709551615, 4294967295)" if is_alloc else ""
        # sql-safe: is_alloc is 0 or 1, listed joins quote_literal() paths, where is a constant
        scans[table] = (f'SELECT pfn, ts, cpu, "order", {is_alloc} AS is_alloc '
                        f"FROM read_parquet([{listed}], union_by_name = true){where}")
    con = duckdb.connect()
    out = {}
    try:
        storage.register_duckdb(con, [f for t in SOURCES for f in parts.get(t, {}).get(run, [])])
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        # sql-safe: the scans are built above from constants and quoted paths
        con.execute(f"CREATE TEMP TABLE allocs AS {scans['mm_page_alloc']}")
        sqls = {
            "page_pairs": _PAIRS_SQL.format(  # sql-safe: the scans built above
                events=f"SELECT * FROM allocs UNION ALL {scans['mm_page_free']}"),
            "pfn_allocs": _PFN_ALLOCS_SQL.format(allocs="SELECT pfn FROM allocs"),
        }
        for name, sql in sqls.items():
            table = ds.query_arrow(con, sql)
            out[name] = _write(root, name, run, sig, table)
    finally:
        con.close()
    return out


def _write(root, name, run, sig, table):
    import pyarrow.parquet as pq

    table = table.replace_schema_metadata({SIG_KEY: sig.encode()})
    part = root / name / f"run_id={run}"
    for d in (root / name, part):
        try:
            os.mkdir(d)
        except FileExistsError:
            pass
        if not _plain(d, root):
            # A link (or a file) where kmemscope's folder belongs: write nothing through it.
            if root == Path(_private_dir or ""):
                raise DatasetError(f"{d} is not a folder of its own")
            return _write(_target_root(root.parent, read_only=True), name, run, sig, table)
    final = part / "part-0.parquet"
    fd, tmp = tempfile.mkstemp(prefix=".part-", suffix=".tmp", dir=part)
    try:
        with os.fdopen(fd, "wb") as f:
            pq.write_table(table, f, row_group_size=1 << 16, write_page_checksum=True)
        if os.path.islink(final):
            os.unlink(final)
        os.replace(tmp, final)      # replaces a link by the file itself, never writes through it
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    return final


def derive_runs(dataset, run_ids=None, threads=None):
    """Compute every derived table for `run_ids` (default: all runs). For `parse`."""
    parts = ds.table_runs(dataset)
    runs = list(run_ids) if run_ids is not None else sorted(parts.get("runs", {}))
    out = {name: derived_files(dataset, name, runs, parts, threads) for name in DERIVED_TABLES}
    if "kernel_stack" in parts:     # a recording with stacks: intern them too
        out.update({name: stack_files(dataset, name, runs, parts, threads)
                    for name in STACK_TABLES})
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
#     DATASET/_derived/<alloc_stacks|alloc_stack_ids|stack_pairing>/run_id=<id>/part-0.parquet
#
# alloc_stacks (one row per distinct frame sequence of an allocation's stack):
#   stack_id     1, 2, ... in order of first use in the run
#   frames       caller_symbols as recorded: "function+0xoffset", innermost first
#   addresses    caller: the return addresses, innermost first
# alloc_stack_ids (one row per mm_page_alloc of the run):
#   ts, cpu, pfn, order   the allocation (the key back into mm_page_alloc)
#   stack_id     its stack, NULL when no stack paired with it
# stack_pairing (one row): stacks, stacks_alloc (paired with an allocation),
#   stacks_other (paired with another event), stacks_unpaired (no event left
#   at their level: the event was lost or recorded before the capture began),
#   stacks_mismatched (the frame names another event), allocs, allocs_with_stack.

STACK_DERIVE_VERSION = "2"
STACK_TABLES = ("alloc_stacks", "alloc_stack_ids", "stack_pairing")
# Tables of a run that are not events (no cpu/ts ordering to take part in).
_NOT_EVENTS = {"runs", "print_flags", "lost_events", "event_tables", "vmstat",
               "pagetypeinfo_free", "pagetypeinfo_blocks", "buddyinfo", "zoneinfo",
               "run_metrics"}

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
SELECT rid AS stack_rid, prev_rid AS event_rid,
       CASE WHEN prev_is_stack IS NULL OR prev_is_stack THEN 'unpaired'
            WHEN prev_is_alloc THEN 'alloc'
            ELSE 'other' END AS outcome
FROM (
  SELECT rid, is_stack,
         lag(rid) OVER w AS prev_rid,
         lag(is_stack) OVER w AS prev_is_stack,
         lag(is_alloc) OVER w AS prev_is_alloc
  FROM seq
  WINDOW w AS (PARTITION BY cpu, level ORDER BY ts, is_stack, rid)
) AS s
WHERE is_stack
"""


def _stack_sources(parts, run):
    """{table: files} of the run's event tables (every table with cpu and ts)."""
    return {t: runs[run] for t, runs in parts.items()
            if t not in _NOT_EVENTS and not t.startswith("_") and run in runs}


def _stack_signature(parts, run, sha):
    sizes = {t: [_size(f) for f in files]
             for t, files in sorted(_stack_sources(parts, run).items())}
    return json.dumps({"version": STACK_DERIVE_VERSION, "sha256": sha, "sizes": sizes},
                      sort_keys=True)


def stack_files(dataset, name, run_ids, parts=None, threads=None, progress=None,
                read_only=False):
    """Like derived_files for the stack tables; runs without kernel_stack are left out."""
    if name not in STACK_TABLES:
        raise ValueError(f"no stack table {name}")
    parts = parts or ds.table_runs(dataset)
    if "runs" not in parts:
        raise DatasetError(f"dataset {dataset} has no runs table")
    shas = _run_shas(dataset, parts, run_ids)
    roots = _cached_roots(dataset)
    out = {}
    for run in run_ids:
        if run not in parts.get("kernel_stack", {}) or run not in parts.get("mm_page_alloc", {}):
            continue
        sig = _stack_signature(parts, run, shas.get(run))
        found = _cached(roots, name, run, sig)
        if found:
            out[run] = found
        else:
            if progress:
                progress(f"run {run}: pairing kernel stacks with their allocations, once "
                         f"(cached under {_target_root(dataset, read_only)})")
            out[run] = _derive_stacks(parts, _target_root(dataset, read_only), run, sig,
                                      threads)[name]
    return out


def _rows(src, files, columns):
    """SELECT columns plus rid (source table, file, row in file) over `files`: the same
    rid every time the same files are read."""
    parts = []
    for k, f in enumerate(files):
        # sql-safe: columns are constants of this module; src and k are ints; f is quoted
        parts.append(f"SELECT {columns}, (CAST({int(src)} AS BIGINT) << 48) | "
                     f"(CAST({k} AS BIGINT) << 32) | file_row_number AS rid "
                     f"FROM read_parquet({ds.quote_literal(f)}, file_row_number = true)")
    return " UNION ALL ".join(parts)


# A stack whose innermost frame is another event's trace function.
_MISMATCH = ("coalesce(regexp_matches(caller_symbols[1], '^(trace_event_raw_event_|ftrace_raw_event_)')"
             " AND regexp_replace(caller_symbols[1], '^(trace_event_raw_event_|ftrace_raw_event_)"
             "|[+]0x[0-9a-f]+$', '', 'g') <> 'mm_page_alloc', false)")


def _derive_stacks(parts, root, run, sig, threads):
    import duckdb

    sources = sorted(_stack_sources(parts, run).items())
    index = {table: i for i, (table, _) in enumerate(sources)}
    scans = []
    for table, files in sources:
        if table == "kernel_stack":
            cols = "cpu, ts, true AS is_stack, false AS is_alloc"
        else:
            cols = ("cpu, ts, false AS is_stack, " +
                    ("true" if table == "mm_page_alloc" else "false") + " AS is_alloc")
        scans.append(_rows(index[table], files, cols))
    con = duckdb.connect()
    out = {}
    try:
        storage.register_duckdb(con, [f for _, files in sources for f in files])
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        # sql-safe: _rows() builds from constants, ints and quoted paths
        con.execute("CREATE TEMP TABLE recs AS " + " UNION ALL ".join(scans))
        con.execute(_STACK_PAIR_SQL)
        con.execute(_STACK_MATCH_SQL)
        con.execute("CREATE TEMP TABLE allocs AS " + _rows(  # sql-safe: as below
            index["mm_page_alloc"], dict(sources)["mm_page_alloc"], 'ts, cpu, pfn, "order"'))
        # The symbols are the costly column: read once, for the stacks of allocations.
        # sql-safe: _rows() builds from constants, ints and quoted paths; _MISMATCH is a constant
        con.execute("CREATE TEMP TABLE taken AS SELECT m.event_rid, s.caller, s.caller_symbols, "
                    f"{_MISMATCH} AS mismatched FROM ("
                    + _rows(index["kernel_stack"], dict(sources)["kernel_stack"],
                            "caller, caller_symbols")
                    + ") AS s JOIN matched AS m ON m.stack_rid = s.rid AND m.outcome = 'alloc'")
        con.execute("CREATE TEMP TABLE paired AS SELECT event_rid, caller, caller_symbols "
                    "FROM taken WHERE NOT mismatched")
        con.execute("""
            CREATE TEMP TABLE interned AS
            SELECT caller, row_number() OVER (ORDER BY first_ts, first_rid) AS stack_id, frames
            FROM (SELECT p.caller, min(a.ts) AS first_ts, min(p.event_rid) AS first_rid,
                         any_value(p.caller_symbols) AS frames
                  FROM paired AS p JOIN allocs AS a ON a.rid = p.event_rid
                  GROUP BY p.caller)""")
        tables = {
            "alloc_stacks": """
                SELECT CAST(stack_id AS INTEGER) AS stack_id, frames, caller AS addresses
                FROM interned ORDER BY stack_id""",
            "alloc_stack_ids": """
                SELECT a.ts, a.cpu, a.pfn, a."order", CAST(i.stack_id AS INTEGER) AS stack_id
                FROM allocs AS a
                LEFT JOIN paired AS p ON p.event_rid = a.rid
                LEFT JOIN interned AS i ON i.caller = p.caller
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
        for name, sql in tables.items():
            out[name] = _write(root, name, run, sig, ds.query_arrow(con, sql))
    finally:
        con.close()
    return out
