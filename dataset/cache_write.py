"""Writing one cache file into a dataset so that the file and its record always agree.

A derived cache (dataset/derived.py: derived tables and the analyses' kept rows) is a
file `_derived/<table>/run_id=<id>/part-0.parquet` and an entry in its run's digests
(`runs/run_id=<id>/_files.json`, `derived` section). Two files cannot change in one
step, so the steps go in an order where every failure leaves the old file and its
record, or a state the next writer finishes:

  1. under the dataset lock: remove the folder's stale temp files (below), then create
     the new temp file (O_EXCL, no link followed) and flock() it. A lock that cannot be
     taken (a FIFO or link in its place) fails here, before anything is written;
  2. without the lock: write the temp file and fsync it (a cache of a large run takes
     seconds: a parse may commit meanwhile);
  3. under the lock: record the new entry in the run's digests (an atomic rename), then
     rename the temp file over the cache file. When the rename fails the old entry is
     put back; when recording fails the temp file goes. Either way the old file and
     its record stay.

A parse may replace the run while its cache is computed or written (its digests are then
the new run's): `current(doc)`, the writer's test that what the cache was computed from is
what the run's digests record, is asked at step 1 (nothing is written when it fails) and
again at step 3 under the lock (the temp file goes, RunReplaced is raised). Without it a
cache of the old run was recorded in the new run's digests as if derived from them: the
query after used it, and `verify --deep` found its rows differ from the new run's.

Killed between the two renames of step 3, the record is new and the file old: `verify`
reports the file changed and the temp file stale, and the next query that needs the cache
writes it again (a cache that does not match its record is otherwise left for `verify` to
report: derived.py).

A temp file whose writer is gone is stale: its flock() can be taken. A writer creates and
locks its temp file while it holds the dataset lock, so a writer holding that lock sees
every live writer's temp file locked, and removes only the dead ones' (`kmemscope verify`
reports them; it takes no lock and may see one a writer created a microsecond before
locking it).
"""
import errno
import hashlib
import os

from kmemscope.common.errors import DatasetError

from .digests import DIGESTS, _write_digests as write_digests, read_digests_in
from .safefs import RUN_PREFIX, RUNS_TABLE, Dir

def stale_temps(folder):
    """The names of the stale temp files in `folder` (a Dir): safefs.Dir.stale_temps, the one
    rule for every dataset writer's temp files."""
    return folder.stale_temps()


def _clean(folder):
    """Remove the stale temp files of `folder` (a Dir). Call with the dataset lock held."""
    folder.remove_stale_temps()


def interrupted(dataset, folders):
    """True when the cache folder at `folders` under `dataset` holds a stale temp file: a
    write there was cut short (perhaps between recording the new file and renaming it into
    place), so a cache that does not match its record may be written again."""
    try:
        with Dir.root(dataset) as root:
            folder = root.walk(folders, "a derived cache folder")
            if folder is None:
                return False
            with folder:
                return bool(stale_temps(folder))
    except (DatasetError, OSError):
        return False


class _Hashing:
    """A binary file that hashes what is written through it (the digest of what was
    written, not of what a file at that name holds later)."""

    def __init__(self, f):
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


class RunReplaced(OSError):
    """The run was replaced (parsed again) while its cache was written: nothing was kept."""


def _runs_folder(root, run):
    return root.walk([RUNS_TABLE, RUN_PREFIX + run], "a runs folder")


def write_recorded(dataset, folders, part_name, run, key, write, extra, current=None):
    """Write a cache file of run `run` at `folders`/`part_name` under `dataset` with
    write(file) and record it under `key` in the run's digests, with `extra` (what it was
    derived from, what was asked) beside its sha256 and bytes -> True; False when the run
    has no digests, or they fail `current(doc)` before anything is written (nothing is left
    then). Raises DatasetError or OSError (RunReplaced when `current` fails at the end),
    leaving the old file and its record, when a step fails (see the module's docstring).
    """
    from .commit import dataset_lock

    with Dir.root(dataset) as root:
        with dataset_lock(dataset):
            runs = _runs_folder(root, run)
            if runs is None:
                return False
            with runs:
                doc = read_digests_in(runs)
            if doc is None or (current is not None and not current(doc)):
                return False
            part = root.walk(folders, "a derived cache folder", make=True)
            try:
                _clean(part)
                tmp, fd = part.create_temp(part_name)
            except BaseException:
                part.close()
                raise
        with part, os.fdopen(fd, "wb") as f:
            try:
                out = _Hashing(f)
                write(out)
                f.flush()
                os.fsync(f.fileno())
                entry = {"sha256": out.h.hexdigest(), "bytes": out.n, **extra}
                with dataset_lock(dataset):
                    _record_then_rename(root, run, key, entry, part, tmp, part_name, current)
            except BaseException:
                _unlink_quietly(part, tmp)
                raise
    return True


def _record_then_rename(root, run, key, entry, part, tmp, part_name, current=None):
    """Step 3: the new entry into the run's digests, then the temp file over the cache
    file; the old entry is put back when the rename fails. Dataset lock held."""
    runs = _runs_folder(root, run)
    if runs is None:
        raise FileNotFoundError(errno.ENOENT, f"run {run} was removed", DIGESTS)
    with runs:
        doc = read_digests_in(runs)
        if doc is None:
            raise FileNotFoundError(errno.ENOENT, f"run {run} has no digests now", DIGESTS)
        if current is not None and not current(doc):
            raise RunReplaced(errno.ESTALE, f"run {run} was parsed again while its cache was "
                              "written: the cache is not kept", DIGESTS)
        derived = doc.setdefault("derived", {})
        old = derived.get(key)
        derived[key] = entry
        write_digests(runs, doc)
        try:
            os.rename(tmp, part_name, src_dir_fd=part.fd, dst_dir_fd=part.fd)
        except BaseException:
            if old is None:
                derived.pop(key)
            else:
                derived[key] = old
            write_digests(runs, doc)
            raise
    try:
        os.fsync(part.fd)
    except OSError:
        pass


def _unlink_quietly(folder, name):
    try:
        folder.unlink(name)
    except OSError:
        pass


def embedded(data_or_file, key):
    """The value of schema metadata `key` (bytes) of the Parquet file (bytes or an open
    binary file), or None when it has none or is not Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = pa.BufferReader(data_or_file) if isinstance(data_or_file, bytes) else data_or_file
    try:
        return (pq.read_schema(source).metadata or {}).get(key)
    except (OSError, ValueError, pa.ArrowException):
        return None
