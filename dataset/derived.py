"""Derived per-run tables: work done once per run so that analyses stay fast.

Pairing every free with the next event on the same pfn needs all of a run's
allocations and frees sorted by (pfn, ts): DuckDB takes about 3.5 s for 50 M
events on two cores for that step alone, before any statistics. A run's events
never change once parsed (run ids come from the content), so the pairs are
computed once per run and stored beside the dataset:

    DATASET/_derived/<table>/run_id=<id>/part-0.parquet

Tables built together from the same sources are a family (FAMILIES, at the end:
the page tables, page_pairs and pfn_allocs, below; the stack tables, with the
stacks section); derived_files(dataset, table, runs) makes any of them current
by name, for the runs its family applies to.

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
(safefs.Dir), as a temp file renamed inside its folder, in an order that leaves the old
file and its record, or neither, whatever step fails (cache_write.py). The file states
inside it the signature it was written with (SIG_KEY): a record that says otherwise is
not taken. An s3 dataset's caches are checked by recorded size and
signature only (reading them whole to hash them would cost what rebuilding does).

`kmemscope parse` can call `derive_runs(dataset, [run_id])` after writing a run
so the first query does not pay for it: every table of every family that applies.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kmemscope.common.errors import DatasetError

from . import reader as ds
from . import cache_write, limits, storage
from .safefs import RUN_PREFIX, Dir

DERIVE_VERSION = "2"
DERIVED_DIR = "_derived"
SIG_KEY = b"kmemscope.derived_from"
PART = "part-0.parquet"
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


def read_checked(dataset, name, wanted, max_bytes):
    """{run: the bytes of its cache file of table `name` in the local dataset, or None} for
    `wanted` ({run: (signature, the run's digests)}): bytes only when the run's digests
    record the file with that signature and the bytes match the recorded size (at most
    `max_bytes`) and sha256.

    One confined open and one read serve both the check and the caller (who parses the
    bytes): nothing is opened again by path, so a folder swapped for a link after the
    check cannot hand over another file. The table's folder is opened once for all runs."""
    import hashlib

    out = dict.fromkeys(wanted)
    entries = {}
    for run, (sig, doc) in wanted.items():
        entry = (doc or {}).get("derived", {}).get(_key(name, run))
        if entry is not None and entry["from"] == sig and 0 < entry["bytes"] <= max_bytes:
            entries[run] = entry
    if not entries:
        return out
    got = _in_table_folder(dataset, name, lambda top: {
        run: _read_part(top, run, entry) for run, entry in entries.items()}) or {}
    for run, data in got.items():
        if data is not None and hashlib.sha256(data).hexdigest() == entries[run]["sha256"] \
                and _signed(data, entries[run]):
            out[run] = data
    return out


def _signed(data, entry):
    """True when the cache file (its bytes, or an open file) says it was derived from what
    its record says: a record given another question's signature is not taken."""
    return cache_write.embedded(data, SIG_KEY) == entry["from"].encode()


def read_part(dataset, name, run, max_bytes):
    """The bytes of `run`'s cache file of table `name` in the local dataset, read through the
    confined folder walk (no link followed), or None when it is missing, unreadable or
    larger than `max_bytes`. Nothing is checked against the digests: for a caller that has
    (verify)."""
    return _in_table_folder(dataset, name, lambda top: _read_part(top, run, None, max_bytes))


def _in_table_folder(dataset, name, read):
    """read(the Dir of _derived/<name>) in the local dataset, or None when that folder is
    missing or cannot be opened without following a link."""
    try:
        with Dir.root(dataset) as root:
            top = root.walk([DERIVED_DIR, name], "a derived cache folder")
            if top is None:
                return None
            with top:
                return read(top)
    except (DatasetError, OSError):
        return None


def _read_part(top, run, entry, max_bytes=None):
    """The bytes of run `run`'s part file under the table folder `top` (a Dir) when it has
    the size `entry` records (entry None: any size up to `max_bytes`), else None."""
    try:
        part = top.walk([RUN_PREFIX + run], "a derived cache folder")
        if part is None:
            return None
        with part, part.open_file(PART, "a derived cache file") as f:
            size = os.fstat(f.fileno()).st_size
            if (size != entry["bytes"]) if entry is not None else (size > max_bytes):
                return None
            data = f.read(size + 1)
    except (DatasetError, OSError):
        return None
    return data if len(data) == size else None


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
                    with part.open_file(PART, "a derived cache file") as f:
                        if not _signed(f, entry):
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
    changed after it was written: it stays as it is for `kmemscope verify` to report), unless
    a write of it was cut short there (cache_write.interrupted)."""
    if doc is None:
        return False
    entry = doc.get("derived", {}).get(_key(name, run))
    return (entry is None or entry["from"] != sig or not _present(dataset, name, run)
            or cache_write.interrupted(dataset, [DERIVED_DIR, name, RUN_PREFIX + run]))


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
    """Make sure derived table `name` (of any family in FAMILIES) is current for `run_ids`;
    return {run_id: path}. Runs the table's family does not apply to are left out.

    progress(message) is called before a run's tables are built (not when cached).
    read_only: tables that are not current go to a private directory, never the dataset.
    """
    family = family_of(name)
    parts = parts or ds.table_runs(dataset)
    if "runs" not in parts:
        raise DatasetError(f"dataset {dataset} has no runs table")
    shas = _run_shas(dataset, parts, run_ids)
    docs = _run_docs(dataset, run_ids)
    out, todo = {}, []
    for run in run_ids:
        if not family.applies(parts, run):
            continue
        sig = _signature(parts, run, shas.get(run), docs.get(run), family.sources(parts, run),
                         family.version)
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
                progress(f"run {run}: {family.doing}, once (cached under "
                         f"{where if _is_private(where) else where / DERIVED_DIR})")
            out[run] = _build(family, parts, dataset, where, run, sig, threads, progress)[name]
    return out


def _build(family, parts, dataset, where, run, sig, threads, progress):
    """family.build into `where`; when writing into the dataset fails (its disk is full, or
    someone moved or removed its _derived folder under the writer), the tables are built
    again in the private folder: the query still answers, and the dataset gets no cache."""
    try:
        return family.build(parts, (dataset, where), run, sig, threads)
    except OSError as exc:
        if _is_private(where):
            raise
        if progress:
            progress(f"run {run}: could not write its cache into the dataset "
                     f"({exc.strerror or exc}); built under {_private_root()} instead")
        return family.build(parts, (dataset, _private_root()), run, sig, threads)


def _derive_pages(parts, target, run, sig, threads):
    """Compute the page tables (page_pairs, pfn_allocs) of one run; return {name: path}."""
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


def _write(target, name, run, sig, batches, asked=None):
    """Write derived table `name` of `run` from `batches` (an Arrow RecordBatchReader) into
    the target -> its path. target: (dataset, where), where is the dataset (a Path: the
    file goes to its _derived and is recorded in the run's digests, cache_write.py) or the
    private folder. asked: what question the file answers, recorded beside it (the
    analyses' kept rows: {"query", "params"}).

    When nothing could be written into the dataset (a link or non-folder on the way, its
    lock not a lock file, the run without digests) the file goes to the private folder;
    a failure after the rows were written raises OSError, the dataset's old file and its
    record left as they were."""
    import pyarrow.parquet as pq

    dataset, where = target
    private = Path(where) != Path(dataset)
    schema = batches.schema.with_metadata({**(batches.schema.metadata or {}), SIG_KEY: sig.encode()})
    started = []

    def write(f):
        started.append(True)
        with pq.ParquetWriter(f, schema, write_page_checksum=True) as w:
            for batch in batches:
                w.write_batch(batch, row_group_size=1 << 16)

    if private:
        base = Dir.root(where)
        try:
            part = base.walk([name, RUN_PREFIX + run], "a derived cache folder", make=True)
        finally:
            base.close()
        with part:
            part.write_atomic(PART, write)
        path = Path(where) / name / f"{RUN_PREFIX}{run}" / PART
        if _is_private(where):
            _BUILT[(name, run, sig)] = path
        return path
    extra = {"from": sig, **({"asked": asked} if asked is not None else {})}
    try:
        kept = cache_write.write_recorded(dataset, [DERIVED_DIR, name, RUN_PREFIX + run], PART,
                                          run, _key(name, run), write, extra)
    except OSError:
        if started:
            raise
        kept = False
    except DatasetError as exc:     # the lock file or a folder is not what kmemscope made
        if started:
            raise OSError(str(exc)) from exc
        kept = False
    if not kept:
        return _write((dataset, _private_root()), name, run, sig, batches)
    return Path(dataset) / _key(name, run)


def same_as_rederived(dataset, name, run, cached, _entry=None):
    """True when the cache file `cached` of table `name` holds the rows that deriving run
    `run` again gives (`kmemscope verify --deep`); the new table is built in a private
    folder removed after, and rows are compared in DuckDB (within its memory limit).
    What a derived table answers is its name and run: the record adds nothing to ask."""
    import shutil

    import duckdb

    if name not in DERIVED_TABLES:
        raise DatasetError(f"{name} is not a table kmemscope's dataset layer derives")
    parts = ds.table_runs(dataset)
    shas = _run_shas(dataset, parts, [run])
    doc = _run_docs(dataset, [run]).get(run)
    family = family_of(name)
    scratch = Path(tempfile.mkdtemp(prefix="kmemscope-verify-"))
    try:
        sig = _signature(parts, run, shas.get(run), doc, family.sources(parts, run), family.version)
        try:
            fresh = family.build(parts, (dataset, scratch), run, sig, None)[name]
        except duckdb.Error as exc:     # e.g. a footer claiming 10^12 rows: "Out of buffer"
            raise DatasetError(ds.sql_error_text(exc)) from None
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
    """Compute every derived table of every family for `run_ids` (default: all runs), each
    for the runs its family applies to. For `parse`."""
    parts = ds.table_runs(dataset)
    runs = list(run_ids) if run_ids is not None else sorted(parts.get("runs", {}))
    return {name: derived_files(dataset, name, runs, parts, threads) for name in DERIVED_TABLES}


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
               "extfrag_unusable_index", "extfrag_index", "run_metrics", STACKS_TABLE}

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


def _stack_shape(con, run, files, stacks_files):
    """'interned' (kernel_stack has stack_id, the run has a stacks table) or 'recorded'
    (kernel_stack has caller and caller_symbols: parsed before stacks were interned).
    Anything else, or files of both shapes in one run, is refused in one line."""
    import duckdb

    listed = ", ".join(ds.quote_literal(f) for f in files)
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
        scans.append(_rows(index[table], files, cols))
    con = limits.connect()
    out = {}
    try:
        storage.register_duckdb(con, [f for _, files in sources for f in files] + stacks_files)
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        if _stack_shape(con, run, stack_files, stacks_files) == "interned":
            listed = ", ".join(ds.quote_literal(f) for f in stacks_files)
            # sql-safe: _rows() builds from constants, ints and quoted paths; listed likewise
            con.execute("CREATE TEMP TABLE ks AS " + _rows(
                index["kernel_stack"], stack_files, "cpu, ts, CAST(stack_id AS INTEGER) AS sid"))
            con.execute("CREATE TEMP TABLE stacks_run AS SELECT CAST(stack_id AS INTEGER) AS "
                        "stack_id, frames, addresses FROM read_parquet([" + listed + "])")
            rows, ids = con.execute("SELECT count(*), count(DISTINCT stack_id) "
                                    "FROM stacks_run").fetchone()
            if rows != ids:
                raise DatasetError(f"run {run}: its {STACKS_TABLE} table gives one stack_id "
                                   "to two stacks", "parse its trace again with `kmemscope parse`")
        else:
            # sql-safe: _rows() builds from constants, ints and quoted paths
            con.execute(_OLD_SHAPE_SQL.format(ks=_rows(
                index["kernel_stack"], stack_files, "cpu, ts, caller, caller_symbols")))
        # sql-safe: _rows() builds from constants, ints and quoted paths
        con.execute("CREATE TEMP TABLE recs AS SELECT cpu, ts, true AS is_stack, "
                    "false AS is_alloc, sid, rid FROM ks"
                    + "".join(" UNION ALL " + scan for scan in scans))
        con.execute(_STACK_PAIR_SQL)
        con.execute(_STACK_MATCH_SQL)
        con.execute("CREATE TEMP TABLE allocs AS " + _rows(  # sql-safe: as above
            index["mm_page_alloc"], dict(sources)["mm_page_alloc"], 'ts, cpu, pfn, "order"'))
        con.execute(_STACK_INTERN_SQL)
        for name, sql in _STACK_TABLES_SQL.items():
            out[name] = _write(target, name, run, sig, _batches(con, sql))
    finally:
        con.close()
    return out


# ---------------------------------------------------------------- the families

@dataclass(frozen=True)
class Family:
    """Derived tables built together from the same sources of one run.

    applies(parts, run): the run has what the family is built from.
    sources(parts, run): the tables whose recorded digests sign its caches.
    build(parts, (dataset, where), run, signature, threads) -> {table: path}: every table.
    """
    name: str
    tables: tuple
    version: str
    applies: Callable
    sources: Callable
    build: Callable
    doing: str          # what building it does, for progress messages


def _has_any(*tables):
    return lambda parts, run: any(run in parts.get(t, {}) for t in tables)


def _has_all(*tables):
    return lambda parts, run: all(run in parts.get(t, {}) for t in tables)


FAMILIES = (
    Family("pages", ("page_pairs", "pfn_allocs"), DERIVE_VERSION,
           _has_any(*SOURCES), lambda parts, run: SOURCES, _derive_pages,
           "pairing frees with reallocations"),
    Family("stacks", STACK_TABLES, STACK_DERIVE_VERSION,
           _has_all("kernel_stack", "mm_page_alloc"), _stack_signature_sources, _derive_stacks,
           "pairing kernel stacks with their allocations"),
)
DERIVED_TABLES = tuple(t for f in FAMILIES for t in f.tables)


def family_of(name):
    """The family that builds derived table `name`."""
    for family in FAMILIES:
        if name in family.tables:
            return family
    raise ValueError(f"no derived table {name}")
