"""Open a kmemscope dataset in DuckDB with every table as a view of its own name.

A dataset is `DATASET/<table>/run_id=<run_id>/part-<n>.parquet` (README). Each
table directory becomes one view over all its runs. Only folders of kmemscope's own
names are listed (table names [a-z][a-z0-9_]*, run folders run_id=<id> of the same
alphabet); others are left out with a note (listing_notes). DuckDB gets the listed
files and reads no partition from their paths: `run_id` is the listed run folder's
id, as text (scan_sql). `union_by_name` lets one view span kernels
whose event formats differ (gfp_flags is 4 bytes on 5.15 and 8 on 6.x) in a
dataset of format 1, and columns kmemscope does not know in any format
(dataset/format.py; a newer format than this kmemscope reads is refused).

`connect(..., run_ids=[...])` builds the views over those runs' partitions only,
so a query over one run of a hundred reads one run's files. The run ids that
reach the SQL text are directory names found on disk, never user input: callers
match what the user asked for against `table_runs()` first.

A local dataset is untrusted: before DuckDB opens anything, every table folder,
`run_id=` folder and part file that a view would read is checked without
following links, and a symbolic link, FIFO, device or socket among them is an
error naming it (a FIFO would block the reader forever; a link would read, or
let a later parse write, outside the dataset). A local listing is taken holding the
commit lock shared and its files are held open for the command (dataset/snapshot.py):
whatever a parse commits afterwards, the command reads the state it listed; open a
listed file through os.fspath(f), name it with str(f). Readers write nothing: an
interrupted commit is left to the next parse (dataset/commit.py) and only
reported by finish_interrupted_commits().
"""
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

from kmemscope.common.errors import DatasetError, QueryError
from kmemscope.common.text import printable, quote_ident, quote_literal  # noqa: F401  (reader.quote_* for its users)
from kmemscope.dataset.format import (FILE_COLUMN, FORMAT_FILE, MAX_FILE_BYTES, parse_format, read_format,
                                      unfit_reason)

from . import limits, storage
from .safefs import RUN_FOLDER, RUN_PREFIX, SAFE_TABLE, is_data_file, shown_name


def _ref(dataset):
    """The dataset handle every reader takes (a handle.DatasetRef, which imports this module):
    local or s3 was decided once, where the command made it. A path here is the caller's
    mistake (a handle is no os.PathLike)."""
    if isinstance(dataset, (str, bytes, os.PathLike)):
        raise TypeError(f"readers take the dataset's handle (DatasetRef.of(path)), not "
                        f"{type(dataset).__name__}")
    return dataset


def table_dirs(ref):
    """Map table name -> directory (an s3:// URL for an s3 dataset) for every table with a run."""
    where = _ref(ref).location
    if ref.is_s3:
        _read_url_format(where)
        bucket, key = storage.split(where)
        return {name: storage.url(bucket, f"{key}/{name}" if key else name)
                for name in _url_tables(where)}
    return {name: where / name for name in _local_tables(where)}


def table_runs(ref):
    """Map table name -> {run_id: [parquet files]} for every table of the dataset of `ref`
    (a listing: DatasetRef.listing takes it once and keeps it).

    A run counts once its `runs` partition is in place (the commit puts it
    there last): partitions of a run being committed or replaced are left out.
    Files of an s3 dataset are s3:// URLs (dataset/storage.py).
    """
    where = _ref(ref).location
    if ref.is_s3:
        _read_url_format(where)
        return _visible(_url_tables(where))
    from .commit import readers_lock
    from .snapshot import adopted

    shared = adopted(where)             # the report's notebooks: its listing, pinned once
    if shared is not None:
        # (a copy per handle: the tables' dicts are the handle's own)
        return {table: dict(runs) for table, runs in shared[1].items()}
    # Listed with no commit half done, and every file opened before a commit may move it:
    # the listing reads the state it was taken in to the end (dataset/snapshot.py).
    with readers_lock(where):
        out = _with_replaced_runs(where, _local_tables(where))
        if "runs" not in out:
            # Every run hidden: say why when a parse was interrupted while committing one.
            pending = finish_interrupted_commits(ref)
            if pending:
                raise DatasetError(f"dataset {where} holds no finished run: {pending[0]}")
        out = _visible(out)
        snapshot = ref.snapshot
        if snapshot is None:
            return out
        out = _pinned(snapshot, where, out)
        # taken under the lock, with the listing: what DatasetRef.again compares
        snapshot.stamp = folders_stamp(where, out)
        return out


# A listing is served again to the next call of an open Dataset (DatasetRef.again) only when
# the folders it was read from are as they were, and had been for this long when it was taken:
# a change made after the listing then bears a later time than any the stamp holds, whatever
# the file system's timestamp granularity (a second or two on some).
SETTLED_NS = 2 * 10**9
# A larger listing (a fleet's) is not kept between calls: its pins would hold thousands of fds
# that another Dataset's snapshot may need, and listing it again costs little beside its queries.
MAX_KEPT_FOLDERS = 2000


def folders_stamp(where, listing):
    """(inode, mtime, ctime) of every folder a local listing was read from: the dataset's, its
    table folders and each listed run's partition folders; None when one of them changed too
    recently to tell a later change from it, or a listed file is not held open. Whatever
    changes the listing renames something in one of them: a commit or a removal (the runs
    folder), a metrics import or a recorded cache (a run's partition folder), a new table (the
    dataset's folder)."""
    from .snapshot import PinnedFile

    root = os.path.abspath(where)
    folders = {root}
    try:
        with os.scandir(root) as entries:
            folders.update(e.path for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        return None
    for runs in listing.values():
        for files in runs.values():
            for f in files:
                if not isinstance(f, PinnedFile) or f.fd is None:
                    return None        # read by its name: a later call must list again
            if files:
                folders.add(os.path.dirname(os.path.abspath(str(files[0]))))
    if len(folders) > MAX_KEPT_FOLDERS:
        return None
    stamp = _stat_folders(folders)
    if stamp is None or time.time_ns() - max(c for _i, _m, c in stamp.values()) < SETTLED_NS:
        return None
    return stamp


def _stat_folders(folders):
    out = {}
    for folder in folders:
        try:
            st = os.stat(folder, follow_symlinks=False)
        except OSError:
            return None
        out[folder] = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    return out


def unchanged_since(stamp):
    """True when the dataset's folders are as `stamp` (folders_stamp) found them: nothing
    committed, removed, imported or recorded since, no table folder added (the dataset's
    folder would have changed)."""
    return stamp is not None and _stat_folders(stamp) == stamp


def _pinned(snapshot, where, listing):
    """`listing` with each file pinned in `snapshot` (a PinnedFile), and each run's recorded
    digests (runs/run_id=<id>/_files.json) pinned beside them. A file gone since it was
    listed (removed by hand: commits wait for the lock) is ListedFileGone."""
    from .digests import DIGESTS

    root = os.path.abspath(where)

    def pin(f, required=True):
        try:
            return snapshot.pin(f, os.path.relpath(os.path.abspath(f), root))
        except FileNotFoundError:
            if not required:
                return None
            raise ListedFileGone(f"{f} is gone since the dataset was listed: a parse replaced "
                                 "or removed its run while this command read it",
                                 "run the command again") from None
        except OSError as exc:
            raise DatasetError(f"cannot read {printable(str(f))}: {exc.strerror or exc}") from None

    out = {table: {run: [pin(f) for f in files] for run, files in runs.items()}
           for table, runs in listing.items()}
    for run, files in listing.get("runs", {}).items():
        if files:
            pin(Path(files[0]).parent / DIGESTS, required=False)
    return out


def _with_replaced_runs(dataset, tables):
    """`tables` ({table: {run: files}}) with each run whose replacement a killed parse left
    half done read as it was before: its old partitions from the parse's trash, none of the
    new ones moved in already (dataset/commit.py replaced_runs). The next parse finishes the
    replacement; until then readers keep the old run, as docs/safety.md promises."""
    from kmemscope.dataset import commit

    for run, (old, moved) in commit.replaced_runs(dataset).items():
        for table in set(tables) | set(old):
            runs = tables.setdefault(table, {})
            if old.get(table):
                runs[run] = old[table]
            elif table in old or table in moved:
                runs.pop(run, None)
            if not runs:
                del tables[table]
    return tables


def _local_tables(dataset):
    """{table: {run_id: [files]}} of a local dataset, for tables with at least one run.

    Raises DatasetError naming the first link or special file where a table
    folder, run folder or part file could be (regular files beside them, a
    note or a README, are not part of the dataset and are passed over).
    """
    root = Path(dataset)
    if not root.exists():
        raise DatasetError(f"dataset {dataset} does not exist",
                           "create it with `kmemscope parse TRACE -o DATASET`")
    if not root.is_dir():
        raise DatasetError(f"dataset {dataset} is not a directory",
                           "give the directory that `kmemscope parse -o` wrote")
    read_format(root)      # refuses a newer format, or a damaged format file
    tables, notes = {}, []
    for table in _entries(root):
        if table.name.startswith((".", "_")) or _checked(table, "a table folder") != "dir":
            continue
        if not SAFE_TABLE.fullmatch(table.name):
            notes.append(f"folder {shown_name(table.name)} is left out: not a table name "
                         "kmemscope writes ([a-z][a-z0-9_]*)")
            continue
        runs = {}
        for part in _entries(table.path):
            if not part.name.startswith(RUN_PREFIX) or _checked(part, "a run folder") != "dir":
                continue
            if not RUN_FOLDER.fullmatch(part.name):
                # DuckDB's partition parsing would fail every run on `run_id=a=b`, or read
                # `run_id=NULL` as no run: only kmemscope's own names are listed.
                notes.append(f"folder {table.name}/{shown_name(part.name)} is left out: not a "
                             "run folder kmemscope writes (run_id=<hex digits>)")
                continue
            files = []
            for f in _entries(part.path):
                if is_data_file(f.name):
                    if _checked(f, "a Parquet file", True):
                        files.append(Path(f.path))
                elif f.name.endswith(".parquet"):
                    notes.append(f"file {table.name}/{shown_name(part.name)}/{shown_name(f.name)} "
                                 "is left out: not a file name kmemscope writes (`kmemscope "
                                 "verify` reports it)")
            if files:
                runs[part.name[len(RUN_PREFIX):]] = files
        if runs:
            tables[table.name] = runs
    _NAME_NOTES[os.path.abspath(dataset)] = notes
    if not tables:
        raise DatasetError(f"dataset {dataset} holds no tables",
                           "parse a trace into it with `kmemscope parse TRACE -o DATASET`")
    return tables


# Notes of the last listing of each local dataset in this process: the names it left out.
_NAME_NOTES: dict = {}


def listing_notes(ref):
    """Notes on the folders of the dataset that readers leave out (odd names), one per folder."""
    if _ref(ref).is_s3:
        return []
    key = os.path.abspath(ref.location)
    if key not in _NAME_NOTES:
        try:
            _local_tables(ref.location)
        except DatasetError:
            return []
    return list(_NAME_NOTES.get(key, []))


def reader_notes(ref):
    """Everything a reader leaves out and says so: interrupted commits, odd folder names."""
    return finish_interrupted_commits(ref) + listing_notes(ref)


def _entries(path):
    try:
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror or exc}") from None


def _checked(entry, what, file=False):
    """'dir' or 'file' for an entry of the dataset (links not followed); refuses the rest.

    file: a part file, which must be a regular file (anything else is refused).
    """
    if entry.is_symlink():
        raise DatasetError(f"{printable(entry.path)}: a symbolic link inside the dataset where {what} "
                           "belongs", "kmemscope writes no links in a dataset: remove it, or put "
                           "a copy of what it points to in its place")
    if entry.is_dir(follow_symlinks=False):
        if file:
            raise DatasetError(f"{printable(entry.path)}: a folder inside the dataset where {what} belongs, "
                               "not a regular file", "remove it")
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    from kmemscope.dataset.safefs import kind_of

    kind = kind_of(entry.stat(follow_symlinks=False).st_mode)
    raise DatasetError(f"{printable(entry.path)}: {kind} inside the dataset where {what} belongs, not a "
                       "regular file or folder", "remove it: kmemscope reads only regular files")


def _visible(out):
    if "runs" in out:
        visible = set(out["runs"])
        out = {name: {run: files for run, files in runs.items() if run in visible}
               for name, runs in out.items()}
        out = {name: runs for name, runs in out.items() if runs}
    return out


# Footer schemas read in this process: {(path, device, inode, size, mtime, ctime): schema or
# the one line why it cannot be read}. A run's files are never rewritten in place (a new parse
# of the same trace commits new files), and any replacement changes the file's identity, so a
# second query of the same process reads no footer twice.
_SCHEMAS: dict = {}
_SCHEMAS_MAX = 200_000


def _file_key(f):
    """A local file's identity (path, device, inode, size, times): a replaced or rewritten file
    gets another key. None for an s3 object or a file that cannot be stat'ed (not remembered)."""
    if storage.is_url_file(str(f)):
        return None
    try:
        fd = getattr(f, "fd", None)      # a pinned file: the file as listed, not its place now
        st = os.fstat(fd) if fd is not None else os.stat(f, follow_symlinks=False)
    except OSError:
        return None
    return (str(f), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class ListedFileGone(DatasetError):
    """A file the command's listing named is gone: its run was committed again or removed
    since the listing (DatasetRef.outdated), not damaged."""


def _file_schema(f, footer=False):
    """(Arrow schema, None) of Parquet file `f`, or (None, why) when its footer cannot be read.

    The footer's own schema once it has been read; before that, what the file's run
    records about it (recorded_footers), unless `footer`: then the footer is read, as
    it must be before DuckDB reads the file's rows (a record is the dataset's word, not
    the file's). Local files are remembered by their identity (_SCHEMAS); s3 objects
    are read every time. Raises DatasetError when the object store does not answer
    (not the run's fault).
    """
    key = _file_key(f)
    if key is not None and key in _SCHEMAS:
        return _SCHEMAS[key]
    if not footer and key is not None and key in _FROM_RECORDS:
        return _FROM_RECORDS[key], None
    try:
        got: tuple = (storage.read_schema(os.fspath(f)), None)
    except DatasetError:
        raise
    except FileNotFoundError:
        # not a damaged run: the listing is older than the dataset (Dataset reads again)
        raise ListedFileGone(f"{f} is gone since the dataset was listed: a parse replaced or "
                             "removed its run while this command read it",
                             "run the command again") from None
    except Exception as exc:    # pyarrow's ArrowInvalid, OSError: a damaged file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        got = (None, first)
    if key is not None:
        if len(_SCHEMAS) >= _SCHEMAS_MAX:
            _SCHEMAS.clear()
        _SCHEMAS[key] = got
    return got


# Runs' records read in this process: {identity of a _files.json: its "files" map}, the
# schemas they state: {base64 text: Arrow schema} (most runs of a dataset share a few), and
# what they state of each file: {identity of the file: Arrow schema} (footers not yet read).
_RECORDS: dict = {}
_RECORDED_SCHEMAS: dict = {}
_FROM_RECORDS: dict = {}
_RECORDS_MAX = 100_000


def recorded_footers(parts, run_ids=None, docs=None):
    """{file: (Arrow schema, rows)} of the local files of `run_ids` (default: all) whose footer
    their run's own record (runs/run_id=<id>/_files.json, dataset/digests.py) states.

    A record counts for a file only when the file still has the size it records
    (a replaced or rewritten file is read from its footer again; `kmemscope
    verify` compares contents). What a record states is also remembered as that
    file's schema (_FROM_RECORDS), so unfit_runs() plans from one small file per
    run; the footers of the files a query reads are still read before their rows
    are (unfit_runs' `read`): a record can say what its file is not. A record
    that is missing, damaged or not kmemscope's counts for nothing: those files'
    footers are read as before. docs: {run: its record, or None}, read already (the
    dataset handle's run_docs): those runs' records are not read again.
    """
    import base64
    import binascii

    from .digests import DIGESTS

    out = {}
    for run, run_files in parts.get("runs", {}).items():
        if (run_ids is not None and run not in run_ids) or not run_files \
                or storage.is_url_file(str(run_files[0])):
            continue
        if docs is not None and run in docs:
            recorded = (docs[run] or {}).get("files", {})
        else:
            recorded = _record_of(Path(run_files[0]).parent / DIGESTS)
        if recorded is None:
            continue
        for table, runs in parts.items():
            for f in runs.get(run, []):
                entry = recorded.get(f"{table}/{Path(f).name}")
                key = _file_key(f)
                if not entry or key is None or key[3] != entry["bytes"]:
                    continue
                rows, text = entry.get("rows"), entry.get("schema")
                if type(rows) is not int or rows < 0 or not isinstance(text, str):
                    continue
                schema = _RECORDED_SCHEMAS.get(text)
                if schema is None:
                    try:
                        schema = _schema_of_record(base64.b64decode(text, validate=True))
                    except (binascii.Error, ValueError):
                        continue
                    if len(_RECORDED_SCHEMAS) >= _RECORDS_MAX:
                        _RECORDED_SCHEMAS.clear()
                    _RECORDED_SCHEMAS[text] = schema
                out[f] = (schema, rows)
                if len(_FROM_RECORDS) >= _SCHEMAS_MAX:
                    _FROM_RECORDS.clear()
                _FROM_RECORDS[key] = schema
                # not _ROWS: a runs partition's size check needs its footer's value bytes,
                # which the record does not state (one small file per run)
    return out


def _record_of(record):
    """The "files" map of the run's record at path `record` ({} for none), remembered by the
    record's identity; None when it cannot be read."""
    from .digests import read_digests
    from .safefs import UnsafeEntry

    rkey = _file_key(record)
    if rkey is None:
        return None
    recorded = _RECORDS.get(rkey)
    if recorded is None:
        try:
            doc = read_digests(record)
        except (OSError, UnsafeEntry):
            return None
        if len(_RECORDS) >= _RECORDS_MAX:
            _RECORDS.clear()
        recorded = _RECORDS[rkey] = doc["files"] if doc else {}
    return recorded


def _schema_of_record(data):
    """The Arrow schema of IPC bytes from a run's record; ValueError when they are not one."""
    import pyarrow as pa

    try:
        return pa.ipc.read_schema(pa.py_buffer(data))
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(str(exc)) from None


def unfit_runs(parts, tables=None, run_ids=None, read=None, recorded=None, fields=None):
    """{run_id: why} for the runs whose files of `tables` a query cannot read with the others.

    A dataset someone else wrote may hold a run whose table has a known column of
    another kind, a column named run_id, or a Parquet file whose footer cannot be
    read: one such run would make every query over the table fail, so callers
    leave it out with a note (queries/runner.py). Reads each file's footer only,
    once per process (_file_schema), and judges each distinct schema of a table once.
    parts: table_runs(); tables, run_ids: the ones to check (default: all).
    read: the tables whose rows will be read (default: `tables`): their files are judged
    by their footers; the others' by what their runs' records state where they do
    (recorded_footers), which plans a query without opening every file. A runs
    partition's rows and size (from its footers) are checked where runs is read.
    recorded: what the runs' records state of their files (recorded_footers), when the caller
    has read them for this listing already (DatasetRef.footers): a file judged by its record
    is then judged from it as it is (no second stat of every file for every analysis).
    fields: {table: names} of the fields the caller's query reads: a run whose file of that
    table lacks one (its trace's format of the event did not declare it) is unfit for it.
    """
    if recorded is None:
        recorded = recorded_footers(parts, run_ids)
    read = tables if read is None else read
    out = {}
    # Schemas stated by records are shared objects (one per distinct schema text), alive in
    # `recorded` for this call: each one's shape is worked out once, not once per file.
    shapes: dict = {}
    for table, runs in sorted(parts.items()):
        if tables is not None and table not in tables:
            continue
        verdicts = {}           # (names, types) -> unfit_reason: most runs share a schema
        for run, files in sorted(runs.items()):
            if run in out or (run_ids is not None and run not in run_ids):
                continue
            footer = read is None or table in read
            for f in files:
                if not footer and f in recorded:
                    schema, error = recorded[f][0], None
                else:
                    schema, error = _file_schema(f, footer)
                if error is not None:
                    out[run] = f"{f} is not a readable Parquet file ({error})"
                    break
                shape = shapes.get(id(schema))
                if shape is None or shape[0] is not schema:
                    shape = (schema, _shape(schema))
                    shapes[id(schema)] = shape
                shape = shape[1]
                if shape not in verdicts:
                    verdicts[shape] = (unfit_reason(table, schema.names, schema.types)
                                       or _missing_fields(schema.names, (fields or {}).get(table)))
                why = verdicts[shape]
                if why:
                    out[run] = f"its table {table} does not fit the dataset ({f}): {why}"
                    break
            if table == "runs" and run not in out and footer:
                rows, size = _rows_of(files)
                if rows != 1:
                    # every join on run_id would multiply (or lose) the run's rows
                    out[run] = f"its runs partition holds {rows} rows, not one"
                elif size > RUNS_MAX_BYTES:
                    # host, labels and manifest are short text: a 512 MiB host would take
                    # gigabytes to read and print
                    out[run] = (f"its runs partition declares {size} bytes of values, more "
                                f"than the {RUNS_MAX_BYTES} a run's host, labels and manifest "
                                "may take")
    return out


def _missing_fields(names, needed):
    """Why a table of columns `names` cannot answer a query reading fields `needed`, or None."""
    missing = sorted(set(needed or ()) - set(names))
    if not missing:
        return None
    listed = ", ".join(shown_name(m) for m in missing[:5])
    return (f"it has no field {listed}, which the query reads (the trace's format of the "
            "event does not declare it)")


_ROWS: dict = {}
_ROWS_MAX = 200_000
# What a runs partition's values may take: its manifest is at most 1 MiB when parsed
# (parsers/sources.py), the rest a few KiB.
RUNS_MAX_BYTES = 4 << 20


def _rows_of(files):
    """(rows, uncompressed bytes) of `files` from their footers (local files remembered by
    their identity); rows is "unknown" when a footer cannot be counted."""
    total, size = 0, 0
    for f in files:
        key = _file_key(f)
        if key is None or key not in _ROWS:
            try:
                n = storage.parquet_bytes(os.fspath(f))
            except DatasetError:
                raise
            except Exception:   # a footer _file_schema could read but not count: not one row
                n = (-1, 0)
            if key is not None:
                if len(_ROWS) >= _ROWS_MAX:
                    _ROWS.clear()
                _ROWS[key] = n
        else:
            n = _ROWS[key]
        if n[0] < 0:
            return "unknown", 0
        total += n[0]
        size += n[1]
    return total, size


def _shape(schema):
    """What of an Arrow schema decides how DuckDB reads it: names and types, in order."""
    return tuple(schema.names), tuple(str(t) for t in schema.types)


def _one_shape(files):
    """The column names when every file of `files` has the same names and types, else None.

    Then a view reads them without union_by_name, whose binding reads every file's footer
    again each time a query names the view (seconds over hundreds of runs). s3 files, and
    a file whose footer cannot be read, give None (the view unites by name, as it always may).
    """
    shapes = set()
    for f in files:
        if storage.is_url_file(str(f)):
            return None
        schema, error = _file_schema(f)
        if error is not None:
            return None
        shapes.add(_shape(schema))
        if len(shapes) > 1:
            return None
    return list(next(iter(shapes))[0]) if shapes else None


def _read_url_format(dataset):
    """The format file of an s3 dataset, validated like a local one's."""
    data = storage.read_small(dataset, FORMAT_FILE, MAX_FILE_BYTES)
    if data is not None:
        if len(data) > MAX_FILE_BYTES:
            raise DatasetError(f"{dataset}/{FORMAT_FILE}: not a valid kmemscope dataset format "
                               f"file: more than {MAX_FILE_BYTES} bytes")
        parse_format(data, f"{dataset.rstrip('/')}/{FORMAT_FILE}")


def _url_tables(dataset):
    tables = storage.list_tables(dataset)
    if not tables:
        raise DatasetError(f"dataset {dataset} holds no tables",
                           "copy a dataset that `kmemscope parse -o` wrote under that prefix")
    return tables


# The column DuckDB names each row's file in (a run whose table has a column of that
# name does not fit: format.unfit_reason).
# A part file's run, from the listing's own names: .../run_id=<id>/<file>.parquet.
_RUN_OF_FILE = r"run_id=([0-9a-z][0-9a-z_]*)/[^/]*$"


def scan_sql(files, by_name=True):
    """SQL reading Parquet `files` (from table_runs()) with their run's id as column run_id.

    The run comes from the listing's folder names, which table_runs() admits only in
    safefs.RUN_FOLDER's alphabet: DuckDB's own hive partitioning (off here) would read any
    `key=value` folder on the path, the dataset's parents too, as a column.
    """
    listed = ", ".join(quote_literal(scan_path(f)) for f in files)
    # sql-safe: listed joins quote_literal() paths; by_name is a bool; the rest are constants
    return (f"(SELECT * EXCLUDE ({FILE_COLUMN}), "
            f"regexp_extract({FILE_COLUMN}, '{_RUN_OF_FILE}', 1) AS run_id "
            f"FROM read_parquet([{listed}], hive_partitioning = false, "
            f"filename = '{FILE_COLUMN}', union_by_name = {'true' if by_name else 'false'}))")


_scan = scan_sql


def scan_path(f):
    """The path DuckDB reads a listed file by: a pinned file as listed, under a path ending
    like its place (`<table>/run_id=<id>/<file>`, dataset/snapshot.py); else the file."""
    return getattr(f, "scan_path", None) or os.fspath(f)


def sql_error_text(exc):
    """DuckDB's error as one line, keeping its hints ("Did you mean", candidate bindings)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    hints = [line for line in lines[1:] if line.startswith(("Did you mean", "Candidate bindings",
                                                            "Candidate tables"))]
    return " ".join([lines[0], *hints])


def finish_interrupted_commits(ref):
    """Notes on commits that killed parses left unfinished; checks only, writes nothing.

    Readers never recover: the next `kmemscope parse` into the dataset does
    (dataset/commit.py). Until then an interrupted commit's run is left out
    (its `runs` partition is hidden first), or shown as it was before it; a
    work folder that kmemscope did not leave as it is gets a note too.
    """
    from kmemscope.dataset import commit

    if _ref(ref).is_s3:
        return []                  # no commit to finish: an s3 run is shown by one PUT
    root = Path(ref.location)
    if not root.is_dir():
        return []
    return commit.unfinished_commits(root)


@contextmanager
def sql_session(con, memory_limit=None):
    """Give `con` a private temporary directory (removed on exit, with `con` closed) and a
    memory limit in bytes: DuckDB would otherwise spill into ./.tmp of the working directory."""
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="kmemscope-sql-")
    try:
        con.execute(f"SET temp_directory = {quote_literal(tmp)}")    # sql-safe: quoted path
        if memory_limit:
            con.execute(f"SET memory_limit = '{int(memory_limit)}B'")   # sql-safe: an int
        yield con
    finally:
        con.close()
        shutil.rmtree(tmp, ignore_errors=True)


class _Stopped(Exception):
    """A signal arrived while guarded() statements ran (the signal is raised again after)."""


@contextmanager
def guarded(con, timeout=None):
    """Run statements on `con` that SIGTERM, SIGINT, SIGHUP and `timeout` seconds stop at once.

    DuckDB turns a Python exception raised by a signal handler during a query
    into RuntimeError("Query interrupted"): here a signal interrupts the query,
    and once it has stopped the signal is raised again for the caller's own
    handler (the CLI exits 128+n in one line). A query that outlives `timeout`
    is stopped with a QueryError.
    """
    import signal
    import threading

    state = {"signum": None, "late": False, "guarding": True}
    done = threading.Event()

    def keep_interrupting():
        # A signal can land in a window where interrupt() has nothing to stop yet (the
        # statement is about to start, or a library swallowed _Stopped): interrupt again
        # until the guarded work is over, so that no statement outlives a stop signal.
        while not done.wait(0.05):
            con.interrupt()

    def on_signal(signum, frame):
        if state["signum"] is None:
            state["signum"] = signum
            threading.Thread(target=keep_interrupting, daemon=True).start()
        con.interrupt()
        # Between statements (or before the first has started) there is nothing to
        # interrupt: stop the Python code that would start the next one. Once the guarded
        # work is over (the finally below) there is none: raising there would escape as an
        # internal error; the signal is raised again for the caller's handler all the same.
        if state["guarding"]:
            raise _Stopped()

    def on_timeout():
        state["late"] = True
        con.interrupt()

    timer = None
    if timeout:
        timer = threading.Timer(timeout, on_timeout)
        timer.daemon = True
        timer.start()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_IGN:     # nohup, a background job
                previous[sig] = signal.signal(sig, on_signal)
    failure = None
    try:
        yield con
    except Exception as exc:     # duckdb's InterruptException, RuntimeError, the caller's errors
        state["guarding"] = False
        failure = exc
    finally:
        state["guarding"] = False
        done.set()
        if timer is not None:
            timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if state["signum"] is not None:
        signal.raise_signal(state["signum"])    # the caller's handler ends the command
    if failure is not None and state["late"]:
        raise QueryError(f"the query ran longer than {timeout:g} s and was stopped",
                         "raise --timeout, or narrow the query") from None
    if failure is not None:
        raise failure


def _statement_type(st):
    """DuckDB's type of a statement, or None for one its Python enum has no name for (UPDATE
    EXTENSIONS is type 29 in DuckDB 2.0, and reading it raises ValueError)."""
    try:
        return st.type.name
    except ValueError:
        return None


# A statement's leading words, after its comments. DuckDB types INSTALL, FORCE INSTALL and
# LOAD alike (LOAD): a refusal names what was written, not the type.
_STATEMENT_HEAD = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*"
                             r"(FORCE\s+INSTALL|UPDATE\s+EXTENSIONS|[A-Za-z_]+)", re.S | re.I)


def _statement_name(st):
    """What a refused statement is, as its text names it: INSTALL, FORCE INSTALL, LOAD, COPY..."""
    m = _STATEMENT_HEAD.match(st.query)
    if m:
        return " ".join(m.group(1).upper().split())[:24]
    return _statement_type(st) or "a statement of another kind"


def confine(con, ref, sql):
    """Restrict `con` to SELECTs that read files of the dataset only (`sql --read-only`)."""
    import duckdb

    try:
        refused = sorted({_statement_name(st) for st in con.extract_statements(sql)
                          if _statement_type(st) != "SELECT"})
    except duckdb.Error as exc:
        raise QueryError(f"SQL failed: {sql_error_text(exc)}") from None
    if refused:
        raise QueryError(f"--read-only allows SELECT statements only, not {', '.join(refused)}")
    if _ref(ref).is_s3:
        roots = [storage.url(*storage.split(ref.location)) + "/"]
    else:
        roots = [os.path.realpath(ref.location) + os.sep]
        pins = ref.snapshot.folder if ref.snapshot is not None else None
        if pins is not None:
            # the links to the files the command pinned (dataset/snapshot.py): nothing else
            roots.append(os.path.realpath(pins) + os.sep)
    listed = ", ".join(quote_literal(r) for r in roots)
    con.execute(f"SET allowed_directories = [{listed}]")       # sql-safe: quoted paths
    for setting in ("autoinstall_known_extensions", "autoload_known_extensions",
                    "enable_external_access"):
        con.execute(f"SET {setting} = false")      # sql-safe: setting names are constants
    con.execute("SET lock_configuration = true")


def connect(ref, threads=None, run_ids=None, columns=None, tables=None, parts=None):
    """Return a DuckDB connection where each table of the dataset of `ref` is a view.

    run_ids: restrict every view to these runs (ids as found on disk).
    columns: {table: {column: sql_type}} that must exist. A view whose runs lack
      such a column (an older kernel's format) gets it as NULL; a table that none
      of the runs has becomes an empty view with run_id and these columns.
    tables: create views for these tables only (default: all).
    parts: the listing to use (default: the handle's, ref.listing).
    """
    import duckdb

    if parts is None:
        parts = _ref(ref).listing
    con = limits.connect(database=":memory:")
    if _ref(ref).is_s3:
        storage.register_duckdb(con, [storage.url(*storage.split(ref.location))])
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    add_views(con, parts, run_ids, columns, tables)
    return con


def add_views(con, parts, run_ids=None, columns=None, tables=None):
    """Create on `con` the views of `connect` (same arguments) for `tables` (default: all)."""
    wanted = None if run_ids is None else set(run_ids)
    columns = columns or {}
    present = set()
    for name, runs in parts.items():
        if tables is not None and name not in tables:
            continue
        files = [f for run, fs in runs.items() if wanted is None or run in wanted for f in fs]
        if not files:
            continue
        names = _one_shape(files)
        scan = _scan(files, by_name=names is None)
        extra = ""
        need = columns.get(name)
        if need and names is not None:
            extra = "".join(f", CAST(NULL AS {typ}) AS {quote_ident(col)}"
                            for col, typ in need.items() if col not in names)
        # One footer tells most of the time: in a format-2 dataset every run of a table
        # has the known columns. Otherwise DESCRIBE reads every file's footer.
        elif need and not set(need) <= set(_first_names(files[0])):
            # sql-safe: scan is _scan()'s quoted file list
            have = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
            extra = "".join(f", CAST(NULL AS {typ}) AS {quote_ident(col)}"
                            for col, typ in need.items() if col not in have)
        # sql-safe: extra casts quote_ident() columns to types of TABLE_COLUMNS; scan is _scan()'s
        con.execute(f"CREATE VIEW {quote_ident(name)} AS SELECT *{extra} FROM {scan}")
        present.add(name)
    for name, need in columns.items():
        if name in present or (tables is not None and name not in tables):
            continue
        cols = ", ".join(["CAST(NULL AS VARCHAR) AS run_id"] +
                         [f"CAST(NULL AS {typ}) AS {quote_ident(col)}" for col, typ in need.items()])
        # sql-safe: cols casts NULL to quote_ident() columns of the types callers declare
        con.execute(f"CREATE VIEW {quote_ident(name)} AS SELECT {cols} WHERE false")


def _first_names(f):
    schema, error = _file_schema(f)
    if error is not None:
        return storage.read_schema(os.fspath(f)).names      # the reader's own error
    return schema.names


# DuckDB types whose Python values (fetchall) are those Arrow's to_pylist gives, and the
# kind format_table shows them as (HUGEINT and DECIMAL become Arrow decimals: not here).
_PLAIN_KINDS = {**dict.fromkeys(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT",
                                 "USMALLINT", "UINTEGER", "UBIGINT"), "int"),
                "FLOAT": "float", "DOUBLE": "float", "VARCHAR": "text", "BOOLEAN": "bool"}


def query_rows(con, sql, params=None, max_rows=None):
    """Like query_arrow, but a result of plain scalar columns comes back as tables.Rows
    (no pyarrow imported for it); others as an Arrow table. The statement runs once.
    max_rows: fetch no more than this many rows (the rest are never made)."""
    from .rows import Rows

    if not hasattr(con, "sql"):
        return query_arrow(con, sql, params)
    rel = con.sql(sql, params=params) if params else con.sql(sql)
    if rel is None:
        return None
    kinds = [_PLAIN_KINDS.get(str(t)) for t in rel.types]
    if None in kinds or not hasattr(rel, "fetchall"):
        if max_rows is None:
            return _relation_arrow(rel)
        return _first_rows(_relation_batches(rel), max_rows)
    if max_rows is not None:
        rel = rel.limit(max_rows)       # the rest of the result is never made
    return Rows(rel.columns, kinds, rel.fetchall())


# Rows per Arrow batch of a streamed result: a few MB for a typical row, big enough that
# the per-batch cost of the writers (a CSV or Parquet write call) does not show.
BATCH_ROWS = 65536


def query_batches(con, sql, params=None, batch_rows=BATCH_ROWS):
    """Run `sql` with bound `params` -> a pyarrow.RecordBatchReader that fetches the result
    from DuckDB a batch at a time as it is read (None for a statement without a result).

    Only the batch in hand is in Python's memory, whatever the size of the result; DuckDB's
    own memory stays under its memory_limit. Read it before `con` closes."""
    rel = con.sql(sql, params=params) if params else con.sql(sql)
    if rel is None:
        return None
    return _relation_batches(rel, batch_rows)


def _relation_batches(rel, batch_rows=BATCH_ROWS):
    if hasattr(rel, "to_arrow_reader"):             # DuckDB 2
        return rel.to_arrow_reader(batch_rows)
    return rel.fetch_record_batch(batch_rows)       # DuckDB 1


def _first_rows(batches, max_rows):
    """The first `max_rows` rows of a RecordBatchReader as an Arrow table; the rest unread."""
    import pyarrow as pa

    kept, count = [], 0
    for batch in batches:
        if count >= max_rows:
            break
        kept.append(batch.slice(0, max_rows - count))
        count += kept[-1].num_rows
    return pa.Table.from_batches(kept, schema=batches.schema)


def _relation_arrow(rel):
    if hasattr(rel, "to_arrow_table"):
        return rel.to_arrow_table()
    table = rel.arrow()
    return table.read_all() if hasattr(table, "read_all") else table


def query_arrow(con, sql, params=None):
    """Run `sql` with bound `params` and return an Arrow table (None for a statement without one).

    DuckDB 2 prefers relations (`con.sql(...).to_arrow_table()`); DuckDB 1 has
    `execute(...).fetch_arrow_table()`. Both bind parameters, never paste them.
    """
    rel_api = hasattr(con, "sql")
    if rel_api:
        rel = con.sql(sql, params=params) if params else con.sql(sql)
        if rel is None:
            return None           # a statement without a result (CREATE, SET...): it ran
        if hasattr(rel, "to_arrow_table") or hasattr(rel, "arrow"):
            return _relation_arrow(rel)
    return con.execute(sql, params or []).fetch_arrow_table()
