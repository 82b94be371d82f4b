"""The cache of derived per-run tables: work done once per run so that analyses stay fast.

A run's events never change once parsed (run ids come from the content), so a
table computed from them is computed once per run and stored beside the dataset:

    DATASET/_derived/<table>/run_id=<id>/part-0.parquet

Tables built together from the same sources are a family (Family, at the end). What
a family holds and how it is built is not this layer's business: the query layer
defines the families (queries/derived_tables.py, where their kernel rules are) and
hands one to derived_files(ref, family, table, runs), which makes the table
current for the runs the family applies to. Every public function here takes the
dataset's handle (dataset/handle.py), never a bare location.

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

"""
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kmemscope.common.errors import DatasetError
from kmemscope.common.scratch import ScratchFolder

from . import reader as ds
from . import cache_write, limits, storage
from .commit import DERIVED_DIR
from .safefs import RUN_PREFIX, Dir

SIG_KEY = b"kmemscope.derived_from"
PART = "part-0.parquet"

_private_dir = None
_private_folder: list = []      # its ScratchFolder, which holds the folder's lock
# sha256 of cache files already checked by this process: {(path, dev, ino, size, mtime, ctime)}
_CHECKED: dict = {}
# Tables built privately by this process: {(name, run, signature): path}.
_BUILT: dict = {}


def _size(f):
    return storage.size(f) if storage.is_url_file(f) else os.path.getsize(f)


def _signature(parts, run, sha, doc, sources, version):
    """What a run's cache is derived from, as text: the run's recorded digests of the source
    tables when it has them (then the cache may live in the dataset), else their sizes."""
    if doc is not None:
        recorded = {k: v["sha256"] for k, v in sorted(doc["files"].items())
                    if k.split("/", 1)[0] in sources}
        return json.dumps({"version": version, "sha256": sha, "sources": recorded},
                          sort_keys=True)
    sizes = {t: [_size(f) for f in parts.get(t, {}).get(run, [])] for t in sources}
    return json.dumps({"version": version, "sha256": sha, "sizes": sizes}, sort_keys=True)


def signed_by(sig, doc):
    """True when the run's digests `doc` still record the files the signature `sig` was
    made from (a run parsed again since has other digests): a cache is recorded only in the
    digests of the run it was computed from (cache_write.write_recorded's `current`)."""
    try:
        made = json.loads(sig)
        now = {k: v["sha256"] for k, v in doc["files"].items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    if "files" in made:                 # an analysis's kept rows: every file of the run
        return made["files"] == now
    if "sources" in made:               # a derived table: its source tables' files
        tables = {k.split("/", 1)[0] for k in made["sources"]}
        return made["sources"] == {k: v for k, v in now.items() if k.split("/", 1)[0] in tables}
    return False                        # signed by sizes: never recorded in a dataset


def _key(name, run):
    """The derived file's key in the run's digests (its path under the dataset)."""
    return f"{DERIVED_DIR}/{name}/{RUN_PREFIX}{run}/{PART}"


def _run_docs(ref, run_ids, as_listed=True):
    """{run: the run's recorded digests, or None} (unreadable digests count as none).

    as_listed: the digests as they were when the command listed the run (held open by its
    snapshot, dataset/snapshot.py): what its files are. Else as they are now: the caches
    recorded since (by this command too) are in them, and so, when a parse replaced the
    run, are the new run's files, which no signature of the listed run matches."""
    from .digests import DIGESTS, DIGESTS_MAX_BYTES, parse_digests, run_digests

    out = {}
    dataset = ref.location
    if ref.is_s3:
        for run in run_ids:
            try:
                data = storage.read_small(dataset, f"runs/{RUN_PREFIX}{run}/{DIGESTS}",
                                          DIGESTS_MAX_BYTES)
                out[run] = parse_digests(data, DIGESTS) if data else None
            except (DatasetError, OSError):
                out[run] = None
        return out
    listed = ref.listing.get("runs", {}) if as_listed else {}
    pins = ref.snapshot
    for run in run_ids:
        if run not in listed or pins is None or not pins.open \
                or pins.pinned(listed[run][0]) is None:
            continue
        # the record as it was when the run was listed, not one a later commit wrote
        record = Path(listed[run][0]).parent / DIGESTS
        try:
            data = pins.read(record, DIGESTS_MAX_BYTES)
            out[run] = None if data is None else parse_digests(data, record)
        except (DatasetError, OSError):
            out[run] = None
    todo = [run for run in run_ids if run not in out]
    if not todo:
        return out
    try:
        root = Dir.root(dataset)
    except OSError:
        return {**out, **{run: None for run in todo}}
    with root:
        for run in todo:
            try:
                out[run] = run_digests(root, run)
            except (DatasetError, OSError):
                out[run] = None
    return out


def _cached(ref, name, run, sig, doc):
    """The current, checked cache file of `run` for table `name`, or None.

    In the dataset: recorded in the run's digests with this signature, size and sha256.
    In the private directory: built by this process from the same signature."""
    built = _BUILT.get((name, run, sig))
    if built is not None and os.path.isfile(built):
        return built
    entry = (doc or {}).get("derived", {}).get(_key(name, run))
    if entry is None or entry["from"] != sig:
        return None
    dataset = ref.location
    if ref.is_s3:
        bucket, key = storage.split(dataset)
        path = storage.url(bucket, f"{key}/{_key(name, run)}" if key else _key(name, run))
        try:
            return path if storage.size(path) == entry["bytes"] else None
        except (DatasetError, OSError):
            return None
    return _checked_local(dataset, name, run, entry, ref.snapshot)


def read_checked(ref, name, wanted, max_bytes):
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
    got = _in_table_folder(ref.location, name, lambda top: {
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


def read_part(ref, name, run, max_bytes):
    """The bytes of `run`'s cache file of table `name` in the local dataset, read through the
    confined folder walk (no link followed), or None when it is missing, unreadable or
    larger than `max_bytes`. Nothing is checked against the digests: for a caller that has
    (verify). A file the command's snapshot holds (verify pins what it checked) is read as
    held, whatever a parse moved since."""
    pins = ref.snapshot
    if pins is not None:
        data = pins.read(Path(ref.location) / _key(name, run), max_bytes)
        if data is not None:
            return data if len(data) <= max_bytes else None
    return _in_table_folder(ref.location, name, lambda top: _read_part(top, run, None, max_bytes))


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


def _checked_local(dataset, name, run, entry, snapshot=None):
    """The path of the dataset's cache file when its contents match `entry`, else None.

    snapshot: the command's pinned listing (dataset/snapshot.py): the file checked is held
    open in it and read as checked, even when a parse replaces the run meanwhile (its
    commit moves the run's caches away)."""
    from .digests import file_digest

    path = Path(dataset) / _key(name, run)
    held = snapshot.pinned(path) if snapshot is not None else None
    if held is not None:
        return held
    try:
        with Dir.root(dataset) as root:
            part = root.walk([DERIVED_DIR, name, RUN_PREFIX + run], "a derived cache folder")
            if part is None:
                return None
            with part, part.open_file(PART, "a derived cache file") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_size != entry["bytes"]:
                    return None
                ident = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                         st.st_ctime_ns)
                if _CHECKED.get(ident) != entry["sha256"]:
                    sha, _size = file_digest(part.fd, PART, entry["bytes"])
                    now = part.lstat(PART)
                    if sha != entry["sha256"] or now is None or now.st_ino != st.st_ino:
                        return None        # hashed another file than the one held
                    if not _signed(f, entry):
                        return None
                    _CHECKED[ident] = sha
                if snapshot is None:
                    return path
                return snapshot.pin(path, _key(name, run), os.dup(f.fileno()))
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

        # every query of an s3 dataset comes here: leave no directory behind, not even when
        # killed (the next process's ScratchFolder removes a folder whose owner is gone)
        folder = ScratchFolder("kmemscope-derived-")
        atexit.register(folder.remove)
        _private_dir, _private_folder[:] = folder.path, [folder]
    return Path(_private_dir)


def forget_private_root():
    """Remove the private folder now (a program run in-process ends here, not at exit)."""
    global _private_dir
    for folder in _private_folder:
        folder.remove()
    _private_folder.clear()
    _private_dir = None


def _target(ref, runs_with_digests, read_only):
    """Where new caches go: the dataset itself (a Path) when it may be written, else the
    private directory (a Path under /tmp). The dataset's _derived is probed, not trusted."""
    if read_only or ref.is_s3 or not runs_with_digests:
        return _private_root()
    dataset = ref.location
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


def derived_files(ref, family, name, run_ids, parts=None, threads=None, progress=None,
                  read_only=False):
    """Make sure derived table `name` of `family` is current for `run_ids`; return
    {run_id: path}. Runs the family does not apply to are left out.

    progress(message) is called before a run's tables are built (not when cached).
    read_only: tables that are not current go to a private directory, never the dataset.
    """
    parts = parts or ref.listing
    dataset = ref.location
    if "runs" not in parts:
        raise DatasetError(f"dataset {dataset} has no runs table")
    shas = _run_shas(dataset, parts, run_ids)
    docs = ref.run_docs(run_ids)                    # the files as listed: the signatures
    now = _run_docs(ref, run_ids, as_listed=False)  # the caches recorded until now
    out, todo = {}, []
    for run in run_ids:
        if not family.applies(parts, run):
            continue
        sig = _signature(parts, run, shas.get(run), docs.get(run), family.sources(parts, run),
                         family.version)
        found = _cached(ref, name, run, sig, now.get(run))
        if found:
            out[run] = found
        else:
            todo.append((run, sig))
    if todo:
        root = _target(ref, [r for r, _ in todo if now.get(r)], read_only)
        for run, sig in todo:
            where = root if _may_cache_in_dataset(dataset, now.get(run), name, run, sig) \
                else _private_root()
            if progress:
                progress(f"run {run}: {family.doing}, once (cached under "
                         f"{where if _is_private(where) else where / DERIVED_DIR})")
            built = _build(family, parts, dataset, where, run, sig, threads, progress)[name]
            out[run] = _held(ref, family, parts, name, run, sig, built, threads)
    return out


def _held(ref, family, parts, name, run, sig, built, threads):
    """The cache file just written into the dataset, held open in the command's snapshot
    (dataset/snapshot.py) before the query reads it: a parse that replaces the run moves
    its caches away. Moved already (between its write and now): built again privately."""
    pins = ref.snapshot
    if pins is None or _is_private(Path(built).parent.parent.parent):
        return built
    try:
        return pins.pin(built, _key(name, run))
    except OSError:
        return family.build(parts, (ref.location, _private_root()), run, sig, threads)[name]


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
    started: list = []

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
                                          run, _key(name, run), write, extra,
                                          current=lambda doc: signed_by(sig, doc))
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


def same_as_rederived(ref, family, name, run, cached):
    """True when the cache file `cached` of table `name` of `family` holds the rows that
    deriving run `run` again gives (`kmemscope verify --deep`); the new table is built in a
    private folder removed after, and rows are compared in DuckDB (within its memory limit).
    What a derived table answers is its name and run: its record adds nothing to ask."""
    import duckdb

    parts = ref.listing
    dataset = ref.location
    shas = _run_shas(dataset, parts, [run])
    doc = ref.run_docs([run]).get(run)
    scratch_folder = ScratchFolder("kmemscope-verify-")      # a killed verify leaves none
    scratch = Path(scratch_folder.path)
    try:
        sig = _signature(parts, run, shas.get(run), doc, family.sources(parts, run), family.version)
        try:
            fresh = family.build(parts, (dataset, scratch), run, sig, None)[name]
        except duckdb.Error as exc:     # e.g. a footer claiming 10^12 rows: "Out of buffer"
            raise DatasetError(ds.sql_error_text(exc)) from None
        con = limits.connect()
        try:
            a, b = ds.quote_literal(ds.scan_path(cached)), ds.quote_literal(ds.scan_path(fresh))
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
        scratch_folder.remove()


def derive_runs(ref, families, run_ids=None, threads=None):
    """Compute every table of each of `families` for `run_ids` (default: all runs), each
    for the runs its family applies to. For `parse`."""
    parts = ref.listing
    runs = list(run_ids) if run_ids is not None else sorted(parts.get("runs", {}))
    return {name: derived_files(ref, family, name, runs, parts, threads)
            for family in families for name in family.tables}


# ---------------------------------------------------------------- for a family's build

def connect(files, threads=None):
    """A DuckDB connection of the dataset layer's limits that can read `files` (local or
    s3), with `threads` threads when given: where a family's build runs its SQL."""
    con = limits.connect()
    try:
        storage.register_duckdb(con, files)
        if threads:
            con.execute(f"SET threads = {int(threads)}")
    except BaseException:
        con.close()
        raise
    return con


def rows_with_rid(src, files, columns):
    """SELECT columns plus rid (source table, file, row in file) over `files`: the same
    rid every time the same files are read. `columns` must be the caller's constants."""
    parts = []
    for k, f in enumerate(files):
        # sql-safe: columns are the caller's constants; src and k are ints; f is quoted
        parts.append(f"SELECT {columns}, (CAST({int(src)} AS BIGINT) << 48) | "
                     f"(CAST({k} AS BIGINT) << 32) | file_row_number AS rid "
                     f"FROM read_parquet({ds.quote_literal(ds.scan_path(f))}, file_row_number = true)")
    return " UNION ALL ".join(parts)


def write_query(target, name, run, sig, con, sql):
    """Write the result of `sql` on `con` as derived table `name` of `run` into the target
    (_write) -> its path, streamed in Arrow batches."""
    return _write(target, name, run, sig, _batches(con, sql))


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


def has_any(*tables):
    """applies(): the run has one of `tables` at least."""
    return lambda parts, run: any(run in parts.get(t, {}) for t in tables)


def has_all(*tables):
    """applies(): the run has every one of `tables`."""
    return lambda parts, run: all(run in parts.get(t, {}) for t in tables)
