"""One committed state of a local dataset, held open for as long as a command reads it.

A parse that commits a run again moves the old run's partitions away and deletes
them (dataset/commit.py); a reader that listed them before would then find its
files gone, or read the new run's files under the old listing. So a reader pins
what it lists: `reader.table_runs` lists the dataset holding the commit lock
shared (commit.readers_lock, so no commit is half done in what it sees) and opens
every listed file (and each run's `_files.json`) before it lets go. An open file
stays readable after a rename or an unlink: the listing keeps answering with the
state it was taken in, whatever writers do afterwards, and writers never wait for
readers beyond the listing itself.

A pinned file is a `PinnedFile`: a Path whose text (str) is where it was listed,
`DATASET/<table>/run_id=<id>/part-<n>.parquet`, for messages, records and the run
id, and whose os.fspath() is where to open it, `/proc/<pid>/fd/<fd>`: open() reads the
file this process holds, even when that file has no name any more. Its `scan_path` is
a link to that in the snapshot's private folder
(`/tmp/kmemscope-snapshot-<pid>-*/<table>/run_id=<id>/part-<n>.parquet`), which keeps the
listing's `run_id=<id>/<file>` tail that scan_sql reads a row's run from; any process of
this user on this host can open either. (The Spark engine reads by name: its executors
may run elsewhere.) Code that opens a listed file says os.fspath(f) (pyarrow, os.stat
and open() do it themselves); code that names it says str(f).

The pins go when nothing holds the Snapshot any more (every PinnedFile holds it):
the fds are closed and the private folder removed. A file beyond the process's
open-file limit is left unpinned (a plain Path): it is read by its name, as before,
and a file of it that a parse removes meanwhile is ListedFileGone (kmemscope/api.py
lists again). s3 datasets are not pinned: nothing writes them (docs/safety.md).
"""
import os
import resource
import shutil
import stat
import tempfile
import weakref
from pathlib import PosixPath

# Pins are kept this far below the process's open-file limit: DuckDB, pyarrow and the
# engines open files of their own.
SPARE_FDS = 256


class PinnedFile(PosixPath):
    """A listed file: str() is its place in the dataset, os.fspath() the file as listed
    (/proc/<pid>/fd/<fd>: open() reads it; os.link() of it fails, EXDEV, rather than link
    a link), scan_path the same file under a path that ends like its place."""

    # (Snapshot, link in the snapshot's folder, fd); paths derived from one (.parent) have none
    _pin: "tuple | None" = None

    def __fspath__(self):
        pin = self._held()
        return f"/proc/{os.getpid()}/fd/{pin[2]}" if pin is not None else str(self)

    @property
    def scan_path(self):
        """The file as listed under a path ending `<table>/run_id=<id>/<file>`, the link in
        the snapshot's folder: what DuckDB reads a row's run from (reader.scan_sql)."""
        pin = self._held()
        return pin[1] if pin is not None else str(self)

    @property
    def fd(self):
        """The open fd of the file as listed (None for a path derived from one, or once its
        snapshot is closed: then it is read by its name)."""
        pin = self._held()
        return pin[2] if pin is not None else None

    def _held(self):
        pin = self._pin
        return pin if pin is not None and pin[0].open else None

    def __reduce__(self):
        # Another process gets the listed place (a pickled fd means nothing there).
        return (PosixPath, tuple(self.parts))


def _close_all(fds, folder):
    # The links first: a link left to a closed fd would open whatever file gets its number.
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    del fds[:]


PREFIX = "kmemscope-snapshot-"
SHM = "/dev/shm"


def _links_base():
    """Where the link folders go: $TMPDIR when the user set one, else /dev/shm when it is a
    writable sticky folder (a tmpfs: a command pins hundreds of files, and a link or folder
    made there costs microseconds where /tmp on a journaling disk costs a third of a
    millisecond), else the system's temporary folder."""
    if os.environ.get("TMPDIR"):
        return tempfile.gettempdir()
    try:
        st = os.stat(SHM)
    except OSError:
        return tempfile.gettempdir()
    if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and os.access(SHM, os.W_OK | os.X_OK):
        return SHM
    return tempfile.gettempdir()


def _key(path):
    """A listed file's place as the snapshot knows it: str(), never os.fspath(), which is
    the held file's /proc path for a PinnedFile."""
    return os.path.abspath(str(path))
_swept = False


def _sweep():
    """Remove the link folders of this user's commands that were killed (SIGKILL runs no
    finalizer): once per process, only folders whose process is gone."""
    global _swept
    if _swept:
        return
    _swept = True
    top = _links_base()
    try:
        names = os.listdir(top)
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if not name.startswith(PREFIX) or not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        path = os.path.join(top, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)


class Snapshot:
    """The pinned files of one listing of a local dataset."""

    def __init__(self, dataset):
        self.dataset = dataset
        self._fds: list = []
        self._folder = None
        # absolute listed path -> (link, fd); the PinnedFiles hold the snapshot, never the
        # other way round: no cycle, so the fds go as soon as the last user lets go
        self._by_name: dict = {}
        self._finalizer = weakref.finalize(self, _close_all, self._fds, None)
        self._room = None
        self._dirs: set = set()     # link folders made already (one mkdir each, not per file)
        self.shared = False         # adopted from a parent (adopted()): close() leaves it open
        self.stamp: "dict | None" = None     # its folders when listed (reader.folders_stamp)

    @property
    def folder(self):
        """The private folder of links (None before the first pin)."""
        return self._folder

    def _make_folder(self):
        if self._folder is None:
            _sweep()
            self._folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=_links_base())
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _close_all, self._fds, self._folder)
        return self._folder

    def _has_room(self):
        if self._room is None:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if hard != resource.RLIM_INFINITY and soft < hard:
                try:        # a dataset of thousands of runs pins thousands of files
                    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                    soft = hard
                except (ValueError, OSError):
                    pass
            self._room = soft - SPARE_FDS if soft != resource.RLIM_INFINITY else 1 << 20
        return len(self._fds) < self._room

    def pin(self, path, rel, fd=None):
        """`path` (a file under the dataset, `rel` its path inside it) opened and pinned ->
        a PinnedFile; the plain Path when it cannot be (gone: FileNotFoundError is raised;
        no fd left: a Path). fd: an fd of the file opened already, which the snapshot takes."""
        key = _key(path)
        if not self.open:
            if fd is not None:
                os.close(fd)
            return PosixPath(path)
        if key in self._by_name:
            if fd is not None:
                os.close(fd)
            return self._file(path, *self._by_name[key])
        if fd is None:
            if not self._has_room():
                return PosixPath(path)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileNotFoundError(f"{path} is not a regular file")
            link = os.path.join(self._make_folder(), rel)
            parent = os.path.dirname(link)
            if parent not in self._dirs:
                os.makedirs(parent, 0o700, exist_ok=True)
                self._dirs.add(parent)
            os.symlink(f"/proc/{os.getpid()}/fd/{fd}", link)
        except BaseException:
            os.close(fd)
            raise
        self._fds.append(fd)
        self._by_name[key] = (link, fd)
        return self._file(path, link, fd)

    def _file(self, path, link, fd):
        pinned = PinnedFile(path)
        pinned._pin = (self, link, fd)
        return pinned

    def pinned(self, path):
        """The PinnedFile of `path` (its place in the dataset), or None."""
        held = self._by_name.get(_key(path))
        return self._file(path, *held) if held is not None else None

    def read(self, path, limit):
        """Up to `limit` + 1 bytes of the pinned file at `path`, from its start; None when
        it is not pinned."""
        pinned = self.pinned(path)
        if pinned is None or pinned.fd is None:
            return None
        chunks, at = [], 0
        while at <= limit:
            chunk = os.pread(pinned.fd, min(1 << 20, limit + 1 - at), at)
            if not chunk:
                break
            chunks.append(chunk)
            at += len(chunk)
        return b"".join(chunks)

    @property
    def open(self):
        return self._finalizer.alive

    def close(self):
        """Close every pin now (the files are read by their names again); a snapshot adopted
        from a parent (adopted()) stays open: every listing of this process reads it."""
        if not self.shared:
            self._finalizer()


# ---------------------------------------------------------------- shared with child processes

# A snapshot handed to the processes a command starts (the report's notebook kernels): the
# path of a file written by export(). A child lists a dataset of that location from it (its
# files opened through the parent's links) instead of the dataset, so every call of every
# notebook reads the state the command listed.
ENV = "KMEMSCOPE_SNAPSHOT"
_EXPORT = "snapshot.json"


def export(snapshot, listing):
    """Write the listing and every pin of `snapshot` for child processes -> the file's path
    (in the snapshot's private folder: it goes with the pins)."""
    import json

    doc = {"dataset": os.path.abspath(snapshot.dataset),
           "pins": {key: [os.path.relpath(link, snapshot.folder)]
                    for key, (link, _fd) in snapshot._by_name.items()},
           "listing": {table: {run: [_key(f) for f in files]
                               for run, files in runs.items()}
                       for table, runs in listing.items()}}
    path = os.path.join(snapshot._make_folder(), _EXPORT)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return path


# Adopted once per process: {(the export's file, dataset): (Snapshot, listing) or None}. The
# parent's snapshot stays as it was listed for as long as the parent lives, so every listing
# of the dataset in this process (a notebook makes one per call) is the same one: opening
# and linking each pinned file once, not once per call, is what makes it cheap.
_adopted: dict = {}


def adopted(dataset):
    """(this process's Snapshot of the listing a parent exported (ENV) for `dataset`, that
    listing) or None when none was exported for it; adopted on the first call, then kept."""
    path = os.environ.get(ENV)
    if not path:
        return None
    key = (path, os.path.abspath(dataset))
    if key not in _adopted:
        snapshot = Snapshot(dataset)
        listing = adopted_listing(dataset, snapshot)
        if listing is not None:
            snapshot.shared = True
        _adopted[key] = None if listing is None else (snapshot, listing)
    return _adopted[key]


def forget_adopted(path):
    """Drop what this process adopted from the export file `path` (its exporter ends the
    export: shared_with_children): those pins then go when no handle holds them, as any."""
    for key in [k for k in _adopted if k[0] == path]:
        held = _adopted.pop(key)
        if held is not None:
            held[0].shared = False


def adopted_listing(dataset, snapshot):
    """The listing a parent process exported (ENV) for `dataset`, its files pinned in this
    process's `snapshot`; None when none was exported for this dataset."""
    import json

    from kmemscope.common.errors import DatasetError

    path = os.environ.get(ENV)
    if not path or snapshot is None:
        return None
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        raise DatasetError(f"the snapshot of the dataset in ${ENV} ({path}) cannot be read",
                           "its command has ended: run this one on its own") from None
    if doc.get("dataset") != os.path.abspath(dataset):
        return None
    folder = os.path.dirname(path)
    for key, (rel,) in doc["pins"].items():
        try:
            # the parent's link to its open file: this process opens the same file
            fd = os.open(os.path.join(folder, rel), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise DatasetError(f"the snapshot of the dataset in ${ENV} cannot be read: {exc}",
                               "its command has ended: run this one on its own") from None
        snapshot.pin(key, rel, fd)
    listing: dict = {}
    for table, runs in doc["listing"].items():
        listing[table] = {}
        for run, files in runs.items():
            listing[table][run] = [snapshot.pinned(f) or PosixPath(f) for f in files]
    return listing
