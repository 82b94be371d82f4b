"""Derived per-run tables: work done once per run so that analyses stay fast.

Pairing every free with the next event on the same pfn needs all of a run's
allocations and frees sorted by (pfn, ts): DuckDB takes about 3.5 s for 50 M
events on two cores for that step alone, before any statistics. A run's events
never change once parsed (run ids come from the content), so the pairs are
computed once per run and stored beside the dataset:

    DATASET/_derived/<page_pairs|pfn_allocs>/run_id=<id>/part-0.parquet

Table names starting with "_" are not dataset tables (dataset.table_dirs skips
them). A cache file is trusted only when it is bound to its run: the run's
recorded digests (`runs/run_id=<id>/_files.json`, dataset/digests.py) list it
in their `derived` section with its sha256, size and the signature of what it
was derived from (derivation version, the run's sha256 and the recorded sha256
of every source file). Changing a cache file therefore means rewriting the
run's digests too, which `kmemscope verify` checks against the run's files. A
cache that does not check out (changed, unrecorded, stale, a link on its way) is
never read: the table is rebuilt in a private temporary directory for the life
of the process. So is every cache of a run without recorded digests, of a
dataset that cannot be written, and of a read-only reader. Caches are written
through folders opened without following links from the dataset down
(safefs.Dir), as a temp file renamed inside its folder, and recorded under the
dataset's lock. An s3 dataset's caches are checked by recorded size and
signature only (reading them whole to hash them would cost what rebuilding does).

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
from . import limits, storage
from .safefs import RUN_PREFIX, Dir

DERIVE_VERSION = "2"
DERIVED_TABLES = ("page_pairs", "pfn_allocs")
DERIVED_DIR = "_derived"
SIG_KEY = b"kmemscope.derived_from"
PART = "part-0.parquet"
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
# sha256 of cache files already checked by this process: {(path, dev, ino, size, mtime, ctime)}
_CHECKED = {}
# Tables built privately by this process: {(name, run, signature): path}.
_BUILT = {}


def _size(f):
    return storage.size(f) if storage.is_url_file(f) else os.path.getsize(f)


def _signature(parts, run, sha, doc, sources=SOURCES, version=DERIVE_VERSION):
    """What a run's cache is derived from, as text: the run's recorded digests of the source
    tables when it has them (then the cache may live in the dataset), else their sizes."""
    if doc is not None:
        recorded = {k: v["sha256"] for k, v in sorted(doc["files"].items())
                    if k.split("/", 1)[0] in sources}
        return json.dumps({"version": version, "sha256": sha, "sources": recorded},
                          sort_keys=True)
    sizes = {t: [_size(f) for f in parts.get(t, {}).get(run, [])] for t in sources}
    return json.dumps({"version": version, "sha256": sha, "sizes": sizes}, sort_keys=True)


def _key(name, run):
    """The derived file's key in the run's digests (its path under the dataset)."""
    return f"{DERIVED_DIR}/{name}/{RUN_PREFIX}{run}/{PART}"


def _run_docs(dataset, run_ids):
    """{run: the run's recorded digests, or None} (unreadable digests count as none)."""
    from .digests import DIGESTS, DIGESTS_MAX_BYTES, parse_digests, run_digests

    out = {}
    if storage.is_url(dataset):
        for run in run_ids:
            try:
                data = storage.read_small(dataset, f"runs/{RUN_PREFIX}{run}/{DIGESTS}",
                                          DIGESTS_MAX_BYTES)
                out[run] = parse_digests(data, DIGESTS) if data else None
            except (DatasetError, OSError):
                out[run] = None
        return out
    try:
        root = Dir.root(dataset)
    except OSError:
        return {run: None for run in run_ids}
    with root:
        for run in run_ids:
            try:
                out[run] = run_digests(root, run)
            except (DatasetError, OSError):
                out[run] = None
    return out


def _cached(dataset, name, run, sig, doc):
    """The current, checked cache file of `run` for table `name`, or None.

    In the dataset: recorded in the run's digests with this signature, size and sha256.
    In the private directory: built by this process from the same signature."""
    built = _BUILT.get((name, run, sig))
    if built is not None and os.path.isfile(built):
        return built
    entry = (doc or {}).get("derived", {}).get(_key(name, run))
    if entry is None or entry["from"] != sig:
        return None
    if storage.is_url(dataset):
        bucket, key = storage.split(dataset)
        path = storage.url(bucket, f"{key}/{_key(name, run)}" if key else _key(name, run))
        try:
            return path if storage.size(path) == entry["bytes"] else None
        except (DatasetError, OSError):
            return None
    return _checked_local(dataset, name, run, entry)


def _checked_local(dataset, name, run, entry):
    """The path of the dataset's cache file when its contents match `entry`, else None."""
    from .digests import file_digest

    try:
        with Dir.root(dataset) as root:
            part = root.walk([DERIVED_DIR, name, RUN_PREFIX + run], "a derived cache folder")
            if part is None:
                return None
            with part:
                st = part.lstat(PART)
                if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != entry["bytes"]:
                    return None
                path = Path(dataset) / _key(name, run)
                ident = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                         st.st_ctime_ns)
                if _CHECKED.get(ident) != entry["sha256"]:
                    sha, _size = file_digest(part.fd, PART, entry["bytes"])
                    if sha != entry["sha256"]:
                        return None
                    _CHECKED[ident] = sha
                return path
    except (DatasetError, OSError):
        return None


def _run_shas(dataset, parts, run_ids):
    import duckdb
    files = [f for r in run_ids for f in parts["runs"].get(r, [])]
    if not files:
        return {}
    con = limits.connect()
    try:
        storage.register_duckdb(con, files)
        rows = con.execute(     # sql-safe: scan_sql() quotes every path
            f"SELECT run_id, sha256 FROM {ds.scan_sql(files)}").fetchall()
    finally:
        con.close()
    return dict(rows)


def _may_cache_in_dataset(dataset, doc, name, run, sig):
    """True when a new cache of `run` may go into the dataset: the run has digests, and no
    cache of these very sources is recorded already (one that is, yet did not check out, was
    changed after it was written: it stays as it is for `kmemscope verify` to report)."""
    if doc is None:
        return False
    entry = doc.get("derived", {}).get(_key(name, run))
    return entry is None or entry["from"] != sig or not _present(dataset, name, run)


def _present(dataset, name, run):
    """True when something is at the cache file's place in the dataset (a removed _derived
    is simply built again)."""
    return os.path.lexists(Path(dataset) / _key(name, run))


def _is_private(where):
    return _private_dir is not None and Path(where) == Path(_private_dir)


def _private_root():
    global _private_dir
    if _private_dir is None:
        import atexit
        import shutil

        _private_dir = tempfile.mkdtemp(prefix="kmemscope-derived-")
        # every query of an s3 dataset comes here: leave no directory behind
        atexit.register(shutil.rmtree, _private_dir, ignore_errors=True)
    return Path(_private_dir)


def _target(dataset, runs_with_digests, read_only):
    """Where new caches go: the dataset itself (a Path) when it may be written, else the
    private directory (a Path under /tmp). The dataset's _derived is probed, not trusted."""
    if read_only or storage.is_url(dataset) or not runs_with_digests:
        return _private_root()
    try:
        with Dir.root(dataset) as root, root.sub_or_make(DERIVED_DIR, "the derived cache folder") \
                as top:
            probe = f".probe-{os.getpid()}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=top.fd))
            top.unlink(probe)
        return Path(dataset)
    except (DatasetError, OSError):
        return _private_root()


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
    docs = _run_docs(dataset, run_ids)
    out, todo = {}, []
    for run in run_ids:
        if run not in parts.get("mm_page_alloc", {}) and run not in parts.get("mm_page_free", {}):
            continue
        sig = _signature(parts, run, shas.get(run), docs.get(run))
        found = _cached(dataset, name, run, sig, docs.get(run))
        if found:
            out[run] = found
        else:
            todo.append((run, sig))
    if todo:
        root = _target(dataset, [r for r, _ in todo if docs.get(r)], read_only)
        for run, sig in todo:
            where = root if _may_cache_in_dataset(dataset, docs.get(run), name, run, sig) \
                else _private_root()
            if progress:
                progress(f"run {run}: pairing frees with reallocations, once (cached under "
                         f"{where if _is_private(where) else where / DERIVED_DIR})")
            out[run] = _derive_one(parts, (dataset, where), run, sig, threads)[name]
    return out


def _derive_one(parts, target, run, sig, threads):
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
    con = limits.connect()
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
            out[name] = _write(target, name, run, sig, _batches(con, sql))
    finally:
        con.close()
    return out


def _batches(con, sql):
    """The result of `sql` as a stream of Arrow record batches: a large table is never held
    whole in Python (DuckDB works within its memory limit, spilling to its private folder)."""
    if hasattr(con, "sql"):
        rel = con.sql(sql)
        reader = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader
        return reader(1 << 16)
    return con.execute(sql).fetch_record_batch(1 << 16)


class _Hashing:
    """A binary file that hashes what is written through it (the digest of what was
    written, not of what a file at that name holds later)."""

    def __init__(self, f):
        import hashlib

        self.f, self.h, self.n, self.closed = f, hashlib.sha256(), 0, False

    def write(self, data):
        self.h.update(data)
        self.n += len(data)
        return self.f.write(data)

    def tell(self):
        return self.n

    def flush(self):
        self.f.flush()

    def writable(self):
        return True

    def close(self):
        self.closed = True


def _write(target, name, run, sig, batches):
    """Write derived table `name` of `run` from `batches` (an Arrow RecordBatchReader) into
    the target -> its path. target: (dataset, where), where is the dataset (a Path: the
    file goes to its _derived and is recorded in the run's digests) or the private folder.

    A link or non-folder on the way in the dataset: the file goes to the private folder."""
    import pyarrow.parquet as pq

    from kmemscope.dataset.commit import dataset_lock

    from .digests import record_derived

    dataset, where = target
    private = Path(where) != Path(dataset)
    folders = [name, RUN_PREFIX + run] if private else [DERIVED_DIR, name, RUN_PREFIX + run]
    schema = batches.schema.with_metadata({**(batches.schema.metadata or {}), SIG_KEY: sig.encode()})
    written = {}

    def write(f):
        out = _Hashing(f)
        with pq.ParquetWriter(out, schema, write_page_checksum=True) as w:
            for batch in batches:
                w.write_batch(batch, row_group_size=1 << 16)
        written.update(sha256=out.h.hexdigest(), bytes=out.n)

    try:
        base = Dir.root(where)
        try:
            part = base.walk(folders, "a derived cache folder", make=True)
        finally:
            base.close()
    except (DatasetError, OSError):
        if private:
            raise
        # A link (or a file) where kmemscope's folder belongs: nothing is written through it.
        return _write((dataset, _private_root()), name, run, sig, batches)
    with part:
        part.write_atomic(PART, write)
    if private:
        path = Path(where) / name / f"{RUN_PREFIX}{run}" / PART
        if _is_private(where):
            _BUILT[(name, run, sig)] = path
        return path
    entry = {"sha256": written["sha256"], "bytes": written["bytes"], "from": sig}
    with Dir.root(dataset) as root, dataset_lock(dataset):
        record_derived(root, run, _key(name, run), entry)
    return Path(dataset) / _key(name, run)


def same_as_rederived(dataset, name, run, cached):
    """True when the cache file `cached` of table `name` holds the rows that deriving run
    `run` again gives (`kmemscope verify --deep`); the new table is built in a private
    folder removed after, and rows are compared in DuckDB (within its memory limit)."""
    import shutil

    import duckdb

    if name not in DERIVED_TABLES + STACK_TABLES:
        raise DatasetError(f"{name} is not a table kmemscope's dataset layer derives")
    parts = ds.table_runs(dataset)
    shas = _run_shas(dataset, parts, [run])
    doc = _run_docs(dataset, [run]).get(run)
    scratch = Path(tempfile.mkdtemp(prefix="kmemscope-verify-"))
    try:
        if name in STACK_TABLES:
            sources = sorted(_stack_sources(parts, run))
            sig = _signature(parts, run, shas.get(run), doc, sources, STACK_DERIVE_VERSION)
            fresh = _derive_stacks(parts, (dataset, scratch), run, sig, None)[name]
        else:
            sig = _signature(parts, run, shas.get(run), doc)
            fresh = _derive_one(parts, (dataset, scratch), run, sig, None)[name]
        con = limits.connect()
        try:
            a, b = ds.quote_literal(cached), ds.quote_literal(fresh)
            # sql-safe: a and b are quote_literal() paths
            differ = con.execute(
                f"SELECT count(*) FROM ((FROM read_parquet({a}) EXCEPT ALL FROM read_parquet({b})) "
                f"UNION ALL (FROM read_parquet({b}) EXCEPT ALL FROM read_parquet({a})))"
            ).fetchone()[0]
        except duckdb.Error as exc:
            raise DatasetError(ds.sql_error_text(exc)) from None
        finally:
            con.close()
        return differ == 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
               "extfrag_unusable_index", "extfrag_index", "run_metrics"}

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


def stack_files(dataset, name, run_ids, parts=None, threads=None, progress=None,
                read_only=False):
    """Like derived_files for the stack tables; runs without kernel_stack are left out."""
    if name not in STACK_TABLES:
        raise ValueError(f"no stack table {name}")
    parts = parts or ds.table_runs(dataset)
    if "runs" not in parts:
        raise DatasetError(f"dataset {dataset} has no runs table")
    shas = _run_shas(dataset, parts, run_ids)
    docs = _run_docs(dataset, run_ids)
    out = {}
    for run in run_ids:
        if run not in parts.get("kernel_stack", {}) or run not in parts.get("mm_page_alloc", {}):
            continue
        sources = sorted(_stack_sources(parts, run))
        sig = _signature(parts, run, shas.get(run), docs.get(run), sources, STACK_DERIVE_VERSION)
        found = _cached(dataset, name, run, sig, docs.get(run))
        if found:
            out[run] = found
            continue
        fresh = _may_cache_in_dataset(dataset, docs.get(run), name, run, sig)
        where = _target(dataset, [run] if fresh else [], read_only)
        if progress:
            progress(f"run {run}: pairing kernel stacks with their allocations, once "
                     f"(cached under {where / DERIVED_DIR if where != _private_root() else where})")
        out[run] = _derive_stacks(parts, (dataset, where), run, sig, threads)[name]
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


def _derive_stacks(parts, target, run, sig, threads):
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
    con = limits.connect()
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
            out[name] = _write(target, name, run, sig, _batches(con, sql))
    finally:
        con.close()
    return out
