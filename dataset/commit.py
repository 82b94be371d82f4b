"""Crash-safe commits of parsed runs into a dataset, and recovery from dead parses.

Each parse works in its own directory inside the dataset, `.parse-<12 hex>/`:

    owner.lock     flock()ed by the parse for as long as it lives (and by its
                   decoder child, which inherits it): a lock that can be taken
                   means the writer is gone, whatever its pid became.
    stage/<table>  the new run's partitions, complete before the commit starts
    unpacked/      a packed bundle's files
    commit.json    the journal: written (atomically) when the commit starts
    trash/<table>  the replaced run's old partitions

A commit writes the journal, then rolls forward: hide the old run (its `runs`
partition first), swap every other table's partition, show the new run
(`runs` last), delete the work directory. Every step is a rename inside one
file system, and rolling forward is idempotent: the next writer (parse) that
finds a dead parse's journal finishes its commit; a dead parse without a
journal never touched the dataset and its directory is simply removed.
Readers see a run once its `runs` partition is in place (dataset/reader.py
reads only those runs), so they see the old run, the new one, or, for the
moment of a replacement, neither; never half of one. Readers never recover:
unfinished_commits() tells them what is pending, and writes nothing.

A dataset is untrusted (someone else may have written it), so recovery and
commits stay inside it: every folder is opened without following symbolic
links (O_NOFOLLOW, then renames relative to the opened folders), a journal is
read only as a small regular file naming a hex run id and tables of the safe
alphabet, and a work folder, journal, stage or table folder that does not fit
is reported and left alone: never moved, never deleted.

Removing runs (`kmemscope prune`, retire_runs) works in a work folder too: its journal,
`prune.json`, names the runs; each run's `runs` partition goes first, then its other
partitions and derived caches, into the folder's trash; recovery rolls it forward the same way.

Commits and recovery hold the dataset's lock file, `.kmemscope.lock`.
"""
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import sys
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .digests import record_digests
from .safefs import (DIR_FLAGS as _DIR_FLAGS, FILE_FLAGS as _FILE_FLAGS, HINT as _HINT,  # noqa: F401
                     HINT_LINK as _HINT_LINK, RUN_PREFIX, RUNS_TABLE, SAFE_RUN_ID, SAFE_TABLE,
                     Dir as _Dir, UnsafeEntry, is_data_file, kind_of)

WORK_PREFIX = ".parse-"
LOCK_NAME = ".kmemscope.lock"
DERIVED_DIR = "_derived"             # the derived caches (dataset/derived.py)
DERIVED_TRASH = "derived-trash"      # a replaced run's caches, in its parse's work folder
JOURNAL = "commit.json"
JOURNAL_MAX_BYTES = 1 << 16           # a real journal names a few dozen tables
# Left by kmemscope before work directories had owners and journals.
LEGACY_PREFIXES = (".staging-", ".trash-")
# What kmemscope itself names things: anything else in those places is not its own.
WORK_NAME = re.compile(r"\.parse-[0-9a-f]{12}")


def _rmtree_at(name, dir_fd):
    """Remove folder `name` of the opened folder `dir_fd`, quietly, never following a link.
    Python 3.10's rmtree has no dir_fd: there the folder is named through /proc/self/fd, the
    same opened folder whatever its path has become since (rmtree works by fd inside)."""
    if sys.version_info >= (3, 11):
        shutil.rmtree(name, ignore_errors=True, dir_fd=dir_fd)
    else:
        shutil.rmtree(f"/proc/self/fd/{dir_fd}/{name}", ignore_errors=True)


def _entry_kind(entry):
    """'dir', 'file' or the kind of anything else, without following a link."""
    if entry.is_symlink():
        return "a symbolic link"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return kind_of(entry.stat(follow_symlinks=False).st_mode)


def _table_folders(root, wanted=()):
    """{name: _Dir} of the dataset's table folders (the caller closes them).

    A link, FIFO, device or socket where a table folder could be is refused, and
    so is a regular file named like one of the tables in `wanted`.
    """
    out = {}
    try:
        for entry in root.entries():
            if entry.name.startswith((".", "_")):
                continue
            kind = _entry_kind(entry)
            if kind == "file" and entry.name not in wanted:
                continue               # a note beside the tables: not a table
            if kind == "dir":
                out[entry.name] = root.sub(entry.name, "a table folder")
                continue
            raise UnsafeEntry(f"{root.path / entry.name} is "
                              f"{'a regular file' if kind == 'file' else kind} where a table "
                              "folder belongs", _HINT_LINK if "link" in kind else _HINT)
    except BaseException:
        for d in out.values():
            d.close()
        raise
    return out


def check_layout(dataset):
    """Raise UnsafeEntry when a table folder of `dataset` is a link or special file.

    A parse calls it before decoding, so that it fails in a second rather than
    after the whole trace (its commit checks again).
    """
    with _Dir.root(dataset) as root:
        for d in _table_folders(root).values():
            d.close()


# ---------------------------------------------------------------- the parse's own folder

class WorkDir:
    """One parse's private directory in the dataset, locked for its lifetime.

    Everything in it is made relative to folder handles opened once, without following
    links (`dir`, `stage_dir`): a work folder renamed or swapped for a link while the parse
    runs takes no write outside the dataset (`path` and `stage` only name them in messages).
    """

    def __init__(self, dataset):
        self.dataset = Path(dataset)
        name = f"{WORK_PREFIX}{uuid.uuid4().hex[:12]}"
        self.path = self.dataset / name
        self.root = _Dir.root(dataset)
        self._lock: int | None = None
        work = None
        try:
            os.mkdir(name, 0o700, dir_fd=self.root.fd)
            work = self.root.sub(name, "a work folder")
            self._lock = os.open("owner.lock", os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, 0o600, dir_fd=work.fd)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            self.stage = self.path / "stage"
            self.stage_dir = work.sub_or_make("stage", "the stage folder")
        except BaseException:
            if work is not None:
                work.close()
            self._release()        # the lock, then the dataset's folder
            raise
        self.dir = work
        self.scratch, self.scratch_dir = self.path, self.dir

    def adopt_stage(self, staged):
        """Put the folder at path `staged` (a stage made elsewhere in the dataset) in place
        of this work folder's empty stage."""
        self.stage_dir.close()
        os.rmdir("stage", dir_fd=self.dir.fd)
        os.rename(staged, "stage", dst_dir_fd=self.dir.fd)
        self.stage_dir = self.dir.sub("stage", "the stage folder")

    def remove(self):
        self._close()
        # By name in the opened dataset folder; rmtree never follows a link.
        _rmtree_at(self.path.name, self.root.fd)
        self._release()

    def abandon(self):
        """A commit cut short: keep a journaled one for the next parse to roll forward."""
        if self.dir.fd is not None and self.dir.lstat(JOURNAL) is not None:
            self._close()
            self._release()
        else:
            self.remove()

    def _close(self):
        self.stage_dir.close()
        self.dir.close()

    def _release(self):
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        self.root.close()


def _take_lock(path, blocking):
    """An fd holding the flock of the lock file at `path`, or None when busy (not blocking).

    A failed parse into a new dataset removes the lock file it made, with the
    lock held: whoever then gets the lock of the removed file tries again.
    """
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeEntry(f"{path} is a symbolic link where the dataset's lock file "
                                  "belongs", _HINT_LINK) from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeEntry(f"{path} is {kind_of(st.st_mode)} where the dataset's lock file "
                                  "belongs", _HINT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return None
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


# Datasets whose commit lock this process holds (exclusive): {absolute path: depth}. A
# reader of one of them in this process (readers_lock) must not wait for itself.
_HELD: dict = {}


@contextmanager
def dataset_lock(dataset, blocking=True):
    """Hold the dataset's commit lock; yields False when not blocking and it is busy."""
    fd = _take_lock(Path(dataset) / LOCK_NAME, blocking)
    key = os.path.abspath(dataset)
    if fd is not None:
        _HELD[key] = _HELD.get(key, 0) + 1
    try:
        yield fd is not None
    finally:
        if fd is not None:
            _HELD[key] -= 1
            if not _HELD[key]:
                del _HELD[key]
            os.close(fd)


# How long a reader waits for a commit to end before it lists anyway (a commit is a few
# renames; a writer stuck that long is better met with the old behaviour than a hang).
READERS_WAIT_S = 60.0


@contextmanager
def readers_lock(dataset):
    """Hold the dataset's commit lock shared while a reader lists and pins its files
    (dataset/snapshot.py): no commit or cache record is half done in what it sees, and
    readers do not wait for each other. Opens the lock file read-only and creates nothing
    (readers write nothing): a dataset without one (never written by a parse, or on
    read-only media without it) is listed as it is. A lock file that is a link or not a
    regular file is not used either (a reader must not block on a FIFO); writers refuse it.
    Yields True when the lock is held."""
    import time

    if os.path.abspath(dataset) in _HELD:      # this process is the writer: nothing moves
        yield True
        return
    try:
        fd = os.open(Path(dataset) / LOCK_NAME,
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        yield False
        return
    try:
        held = False
        if stat.S_ISREG(os.fstat(fd).st_mode):
            deadline = time.monotonic() + READERS_WAIT_S
            pause = 0.001
            while not held:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    held = True
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(pause)       # a commit takes milliseconds
                    pause = min(pause * 2, 0.05)
        yield held
    finally:
        os.close(fd)


def _write_journal(work, run_id, tables):
    """The journal in the work folder `work` (a Dir), written atomically and synced."""
    work.write_atomic(JOURNAL, lambda f: f.write(
        json.dumps({"run_id": run_id, "tables": sorted(tables)}).encode()))
    os.fsync(work.fd)


def _fsync_dir(path):
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------- journals

def _read_journal(work):
    """(run_id, tables) of the journal in `work`, validated; UnsafeEntry when it does not fit."""
    path = work.path / JOURNAL

    def unfit(why):
        return UnsafeEntry(f"{path} is not a commit journal kmemscope wrote: {why}", _HINT)

    try:
        fd = os.open(JOURNAL, _FILE_FLAGS, dir_fd=work.fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise unfit("a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise unfit(kind_of(st.st_mode))
        data = f.read(JOURNAL_MAX_BYTES + 1)
    if len(data) > JOURNAL_MAX_BYTES:
        raise unfit(f"more than {JOURNAL_MAX_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise unfit("not JSON") from None
    if not isinstance(doc, dict) or set(doc) != {"run_id", "tables"}:
        raise unfit("not an object of run_id and tables")
    run_id, tables = doc["run_id"], doc["tables"]
    if not isinstance(run_id, str) or not SAFE_RUN_ID.fullmatch(run_id):
        raise unfit("its run id is not a hex id")
    if (not isinstance(tables, list) or not all(isinstance(t, str) and SAFE_TABLE.fullmatch(t)
                                                 for t in tables)
            or len(set(tables)) != len(tables) or RUNS_TABLE not in tables):
        raise unfit("its tables are not table names, or lack runs")
    return run_id, tables


def _check_stage(stage, tables):
    """The staged tables of `tables` still in `stage`: real folders holding regular files only."""
    staged = set()
    for table in tables:
        st = stage.lstat(table)
        if st is None:
            continue                       # moved in already
        with stage.sub(table, "a staged table folder") as d:
            for entry in d.entries():
                kind = _entry_kind(entry)
                if kind != "file":
                    raise UnsafeEntry(f"{d.path / entry.name} is "
                                      f"{'a folder' if kind == 'dir' else kind} where a staged "
                                      "Parquet file belongs", _HINT)
        staged.add(table)
    return staged


# ---------------------------------------------------------------- rolling forward

class _Counter:
    """Renames done by one roll-forward (the crash tests stop a commit after the n-th)."""

    def __init__(self):
        self.n = 0

    def renamed(self):
        self.n += 1
        if _CRASH_AFTER is not None and self.n >= int(_CRASH_AFTER):
            os._exit(99)


# Test hook: exit after this many renames of a commit (crash tests).
_CRASH_AFTER = os.environ.get("KMEMSCOPE_TEST_CRASH_AFTER_RENAMES")


def _roll_forward(root, work):
    """Finish the commit journaled in `work` (idempotent); True if a run was replaced.

    Everything is checked before the first rename: when something does not fit
    (UnsafeEntry) nothing has moved.
    """
    run_id, tables = _read_journal(work)
    part = RUN_PREFIX + run_id
    with ExitStack() as stack:
        stage = stack.enter_context(work.sub("stage", "the stage folder"))
        staged = _check_stage(stage, tables)
        folders = _table_folders(root, wanted=tables)
        for d in folders.values():
            stack.enter_context(d)
        trash_st = work.lstat("trash")
        trash = [stack.enter_context(work.sub("trash", "the trash folder"))] if trash_st else []

        def retire(folder, table):
            """Move an old partition into the trash as trash/<table>/run_id=<id> (<table>.<hex>
            if one is there): readers find the old run there until the commit is finished."""
            if not trash:
                os.mkdir("trash", 0o700, dir_fd=work.fd)
                trash.append(stack.enter_context(work.sub("trash", "the trash folder")))
            dest = table
            if trash[0].lstat(dest) is not None:
                dest = f"{table}.{uuid.uuid4().hex[:6]}"
            os.mkdir(dest, 0o700, dir_fd=trash[0].fd)
            with trash[0].sub(dest, "a trash folder") as into:
                os.rename(part, part, src_dir_fd=folder.fd, dst_dir_fd=into.fd)
            counter.renamed()

        counter = _Counter()
        replaced = False
        runs = folders.get(RUNS_TABLE)
        if RUNS_TABLE in staged and runs is not None and runs.lstat(part) is not None:
            retire(runs, RUNS_TABLE)                         # hide the old run
            replaced = True
        for name, folder in sorted(folders.items()):
            if name not in tables and folder.lstat(part) is not None:
                retire(folder, name)        # a table the new parse does not have
                replaced = True
        # The old run's derived caches were recorded in its digests, which the new run's
        # replace: left in place they are files no record names (verify: `extra`) until a
        # reader rebuilds them. They go before the new run is shown.
        _drop_caches(root, work, part, stack)
        for table in sorted(tables, key=lambda t: t == RUNS_TABLE):        # runs last
            if table not in staged:
                continue
            folder = folders.get(table)
            if folder is None:
                try:
                    os.mkdir(table, dir_fd=root.fd)
                except FileExistsError:
                    pass
                folder = folders[table] = stack.enter_context(root.sub(table, "a table folder"))
            if folder.lstat(part) is not None:
                retire(folder, table)
                replaced = True
            os.rename(table, part, src_dir_fd=stage.fd, dst_dir_fd=folder.fd)
            counter.renamed()
        if RUNS_TABLE in folders:
            os.fsync(folders[RUNS_TABLE].fd)
    return replaced


def _drop_caches(root, work, part, stack):
    """Move every `_derived/<table>/<part>` folder into the work folder's `derived-trash`
    (removed with it; readers never look there). Idempotent, as rolling forward must be."""
    if root.lstat(DERIVED_DIR) is None:
        return
    derived = stack.enter_context(root.sub(DERIVED_DIR, "the derived cache folder"))
    into = None
    for entry in derived.entries():
        if not SAFE_TABLE.fullmatch(entry.name) or _entry_kind(entry) != "dir":
            continue                # not a cache folder kmemscope makes: verify reports it
        with derived.sub(entry.name, "a derived cache folder") as table:
            if table.lstat(part) is None:
                continue
            if into is None:
                into = stack.enter_context(work.sub_or_make(DERIVED_TRASH,
                                                            "the derived trash folder", 0o700))
            if into.lstat(entry.name) is None:
                os.mkdir(entry.name, 0o700, dir_fd=into.fd)
            with into.sub(entry.name, "a derived trash folder") as dest:
                if dest.lstat(part) is not None:       # an earlier roll forward's, cut short
                    _rmtree_at(part, dest.fd)
                os.rename(part, part, src_dir_fd=table.fd, dst_dir_fd=dest.fd)


def commit(workdir, run_id, footers=None, ingest_key=None):
    """Move the staged run of `workdir` into its dataset; returns True if it replaced one.

    footers: digests.staged_footers() of the stage, when the parse has them.
    ingest_key: what the parse was given (dataset/ingested.py), recorded with the digests.
    Works through the work folder's own handles (WorkDir.dir, stage_dir).

    Raises UnsafeEntry, with nothing moved, when a table folder of the dataset
    is a link or special file.
    """
    from kmemscope.dataset import run_metrics

    check_layout(workdir.dataset)       # keep_imported reads the dataset's run_metrics folder
    stage, work = workdir.stage_dir, workdir.dir
    run_metrics.keep_imported(workdir.dataset, stage, run_id)   # imports outlive re-parses
    tables = [e.name for e in stage.entries() if _entry_kind(e) == "dir"]
    record_digests(stage, run_id, tables, footers,
                   {"ingest": ingest_key} if ingest_key is not None else None)
    os.fsync(stage.fd)
    _write_journal(work, run_id, tables)
    try:
        return _roll_forward(workdir.root, work)
    except UnsafeEntry:
        # Found while checking, before the first rename: with nothing moved, the
        # journal goes and the parse fails; otherwise the next parse rolls it forward.
        if work.lstat("trash") is None and all(stage.lstat(t) is not None for t in tables):
            work.unlink(JOURNAL)
        raise


# ---------------------------------------------------------------- removing runs (prune)

PRUNE_JOURNAL = "prune.json"         # the runs a removal retires, in its work folder


def run_paths(dataset, run_ids):
    """{run_id: [paths relative to the dataset]} of what each committed run has: its
    partition of every table (`runs` first) and every derived cache folder of it. Reads only."""
    out: dict = {run: [] for run in run_ids}
    with _Dir.root(dataset) as root, ExitStack() as stack:
        folders = _table_folders(root)
        for d in folders.values():
            stack.enter_context(d)
        names = sorted(folders, key=lambda t: (t != RUNS_TABLE, t))
        derived = []
        if root.lstat(DERIVED_DIR) is not None:
            top = stack.enter_context(root.sub(DERIVED_DIR, "the derived cache folder"))
            derived = [(e.name, stack.enter_context(top.sub(e.name, "a derived cache folder")))
                       for e in top.entries()
                       if SAFE_TABLE.fullmatch(e.name) and _entry_kind(e) == "dir"]
        for run in run_ids:
            part = RUN_PREFIX + run
            out[run] += [f"{t}/{part}" for t in names if folders[t].lstat(part) is not None]
            out[run] += [f"{DERIVED_DIR}/{t}/{part}" for t, d in sorted(derived)
                         if d.lstat(part) is not None]
    return out


def retire_runs(dataset, run_ids):
    """Take committed runs out of `dataset`; returns the WorkDir holding what was moved,
    for the caller to remove once it has let go of the lock (call holding dataset_lock).

    A journal naming the runs is written first, then each run is hidden (its `runs`
    partition first: readers list a run by it), and its other partitions and derived
    caches follow it into the work folder's trash. Rolling it forward again is
    idempotent: a removal cut short is finished by the next writer's recovery. Readers
    that listed a run before keep reading the files they hold open (dataset/snapshot.py).
    """
    for run in run_ids:
        if not SAFE_RUN_ID.fullmatch(run):
            raise ValueError(f"not a run id: {run!r}")
    work = WorkDir(dataset)
    try:
        work.dir.write_atomic(PRUNE_JOURNAL, lambda f: f.write(
            json.dumps({"runs": sorted(run_ids)}).encode()))
        os.fsync(work.dir.fd)
        _retire(work.root, work.dir, sorted(run_ids))
    except BaseException:
        work._close()          # the journal stays: recovery finishes the removal
        work._release()
        raise
    return work


def _read_prune_journal(work):
    with work.open_file(PRUNE_JOURNAL, "a removal journal") as f:
        data = f.read(JOURNAL_MAX_BYTES * 64 + 1)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if (len(data) > JOURNAL_MAX_BYTES * 64 or not isinstance(runs, list)
            or not all(isinstance(r, str) and SAFE_RUN_ID.fullmatch(r) for r in runs)):
        raise UnsafeEntry(f"{work.path / PRUNE_JOURNAL} is not a removal journal kmemscope "
                          "wrote", _HINT)
    return runs


def _retire(root, work, run_ids):
    with ExitStack() as stack:
        folders = _table_folders(root)
        for d in folders.values():
            stack.enter_context(d)
        trash = stack.enter_context(work.sub_or_make("trash", "the trash folder", 0o700))
        into: dict = {}

        def retire(name, part):
            folder = folders[name]
            if folder.lstat(part) is None:
                return
            if name not in into:
                into[name] = stack.enter_context(trash.sub_or_make(name, "a trash folder", 0o700))
            if into[name].lstat(part) is not None:      # a removal cut short put one there
                _rmtree_at(part, into[name].fd)
            os.rename(part, part, src_dir_fd=folder.fd, dst_dir_fd=into[name].fd)

        # Every run hidden first (readers list a run by its runs partition), synced once;
        # then the rest of each run follows.
        if RUNS_TABLE in folders:
            for run in run_ids:
                retire(RUNS_TABLE, RUN_PREFIX + run)
            os.fsync(folders[RUNS_TABLE].fd)
        others = sorted(t for t in folders if t != RUNS_TABLE)
        for run in run_ids:
            part = RUN_PREFIX + run
            for name in others:
                retire(name, part)
            _drop_caches(root, work, part, stack)
        for name, folder in folders.items():          # a table only the removed runs had
            if name != RUNS_TABLE and not folder.entries():
                try:
                    os.rmdir(name, dir_fd=root.fd)
                except OSError:
                    pass


def committed_since(dataset, run_id, since_ns):
    """True if run `run_id`'s runs partition was written after `since_ns` (wall clock)."""
    part = Path(dataset) / RUNS_TABLE / (RUN_PREFIX + run_id)
    try:
        with os.scandir(part) as it:
            return any(is_data_file(e.name) and e.is_file(follow_symlinks=False)
                       and e.stat(follow_symlinks=False).st_mtime_ns >= since_ns for e in it)
    except OSError:
        return False


# ---------------------------------------------------------------- recovery

def _owner_gone(work):
    """True when no live process holds the work directory's owner lock."""
    try:
        fd = os.open("owner.lock", _FILE_FLAGS, dir_fd=work.fd)
    except FileNotFoundError:
        return True            # created, killed before its lock file existed
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeEntry(f"{work.path / 'owner.lock'} is a symbolic link", _HINT) from None
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeEntry(f"{work.path / 'owner.lock'} is {kind_of(st.st_mode)}", _HINT)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _work_folders(root):
    """The names of the dataset's work folders, current and legacy."""
    return sorted(n for n in os.listdir(root.fd) if n.startswith((WORK_PREFIX,) + LEGACY_PREFIXES))


def recover(dataset):
    """Finish or discard what dead parses left in `dataset`; returns what was done.

    Only work directories whose owner is gone are touched, and only those that
    are what kmemscope writes: anything else is reported and left alone. Call
    with the dataset lock held.
    """
    done = []
    with _Dir.root(dataset) as root:
        for name in _work_folders(root):
            try:
                said = (_recover_work(root, name) if name.startswith(WORK_PREFIX)
                        else _recover_legacy(root, name))
            except UnsafeEntry as exc:
                said = f"left {name} alone: {exc.args[0]}"
            except OSError as exc:
                said = f"could not finish {name}: {exc.strerror or exc}; left in place"
            if said:
                done.append(said)
    return done


def _recover_work(root, name):
    if not WORK_NAME.fullmatch(name):
        raise UnsafeEntry(f"{root.path / name} is not a work folder kmemscope made", _HINT)
    with root.sub(name, "a work folder") as work:
        if not _owner_gone(work):
            return None                # a live parse's
        if work.lstat(JOURNAL) is not None:
            _roll_forward(root, work)
            said = f"finished the interrupted commit of {name}"
        elif work.lstat(PRUNE_JOURNAL) is not None:
            _retire(root, work, _read_prune_journal(work))
            said = f"finished the interrupted removal of runs ({name})"
        else:
            said = f"removed {name}, left by a parse that did not finish"
    # By name in the opened dataset folder; rmtree never follows a link, at the top or inside.
    _rmtree_at(name, root.fd)
    return said


def _recover_legacy(root, name):
    with root.sub(name, "a work folder") as legacy:
        if name.startswith(".trash-"):
            _restore_legacy_trash(root, legacy)
    _rmtree_at(name, root.fd)
    return f"removed {name}, left by an earlier kmemscope"


def _restore_legacy_trash(root, trash):
    """An old-style trash whose run vanished (killed mid-commit) goes back in place."""
    if trash.lstat(RUNS_TABLE) is None:
        return
    with trash.sub(RUNS_TABLE) as runs:
        files = [e.name for e in runs.entries()
                 if is_data_file(e.name) and e.is_file(follow_symlinks=False)]
        if not files:
            return
        try:
            import pyarrow.parquet as pq

            with os.fdopen(os.open(files[0], _FILE_FLAGS, dir_fd=runs.fd), "rb") as f:
                sha = pq.read_table(f, columns=["sha256"]).column(0)[0].as_py()
        except Exception:  # unreadable: nothing can be restored from it
            return
    run_id = str(sha)[:16]
    if not SAFE_RUN_ID.fullmatch(run_id):
        return
    part = RUN_PREFIX + run_id
    tables = [e.name for e in trash.entries()
              if SAFE_TABLE.fullmatch(e.name) and _entry_kind(e) == "dir"]
    with ExitStack() as stack:
        folders = _table_folders(root, wanted=tables)
        for d in folders.values():
            stack.enter_context(d)
        if RUNS_TABLE in folders and folders[RUNS_TABLE].lstat(part) is not None:
            return
        for table in tables:
            folder = folders.get(table)
            if folder is None:
                os.mkdir(table, dir_fd=root.fd)
                folder = stack.enter_context(root.sub(table, "a table folder"))
            if folder.lstat(part) is None:
                os.rename(table, part, src_dir_fd=trash.fd, dst_dir_fd=folder.fd)


# ---------------------------------------------------------------- what readers are told

def replaced_runs(dataset):
    """{run_id: (old, moved)} for each replacement of a run that a dead parse left half
    done: old, {table: [files]} of the old run's partitions in the work folder's trash;
    moved, the tables whose new partition is in the dataset already. Readers read the old
    run from these (dataset/reader.py) until the next parse finishes the commit; writes
    nothing. Only work folders kmemscope made, whose owner is gone, are looked at."""
    out = {}
    for root, name in _each_work_folder(dataset):
        if not WORK_NAME.fullmatch(name):
            continue
        try:
            with root.sub(name, "a work folder") as work:
                found = _replaced_run(root, work)
        except (UnsafeEntry, OSError):
            continue
        if found:
            out[found[0]] = found[1:]
    return out


def _each_work_folder(dataset):
    """(the dataset folder as a Dir, name) of each of its work folders; none when the
    dataset folder cannot be opened."""
    try:
        root = _Dir.root(dataset)
    except OSError:
        return
    with root:
        for name in _work_folders(root):
            yield root, name


def _replaced_run(root, work):
    if not _owner_gone(work) or work.lstat(JOURNAL) is None or work.lstat("trash") is None:
        return None
    run_id, tables = _read_journal(work)
    part = RUN_PREFIX + run_id
    if root.lstat(RUNS_TABLE) is not None:
        with root.sub(RUNS_TABLE, "a table folder") as runs:
            if runs.lstat(part) is not None:
                return None             # the new run is shown: every table is in place
    with work.sub("stage", "the stage folder") as stage, work.sub("trash", "the trash folder") \
            as trash:
        staged = _check_stage(stage, tables)
        old = {}
        for entry in trash.entries():
            table = entry.name.split(".", 1)[0]
            if not SAFE_TABLE.fullmatch(table) or _entry_kind(entry) != "dir":
                continue
            with trash.sub(entry.name, "a trash folder") as held:
                if held.lstat(part) is None:
                    continue            # a trash of an earlier kmemscope's layout
                with held.sub(part, "a trashed partition") as d:
                    old[table] = [work.path / "trash" / entry.name / part / e.name
                                  for e in d.entries()
                                  if is_data_file(e.name) and _entry_kind(e) == "file"]
    if RUNS_TABLE not in old:
        return None
    return run_id, old, set(tables) - staged


def unfinished_commits(dataset):
    """Notes on what dead parses left in `dataset` that readers leave out; writes nothing.

    A reader never recovers (only parse does): an interrupted commit's run is
    left out, or shown as before it, until the next parse finishes the commit.
    """
    notes: list[str] = []
    for root, name in _each_work_folder(dataset):
        try:
            note = _pending_note(root, name)
        except UnsafeEntry as exc:
            note = (f"{exc.args[0]}: ignored; recovery leaves it alone (remove it)")
        except OSError:
            note = None
        if note:
            notes.append(note)
    return notes


def _pending_note(root, name):
    if name.startswith(LEGACY_PREFIXES):
        return (f"{name} was left by an earlier kmemscope's interrupted parse; the next "
                "`kmemscope parse` into this dataset restores or removes it")
    if not WORK_NAME.fullmatch(name):
        raise UnsafeEntry(f"{root.path / name} is not a work folder kmemscope made", _HINT)
    with root.sub(name, "a work folder") as work:
        if not _owner_gone(work) or work.lstat(JOURNAL) is None:
            return None            # a live parse, or a dead one that never touched the dataset
        run_id, tables = _read_journal(work)
        with work.sub("stage", "the stage folder") as stage:
            if not _check_stage(stage, tables):
                return None        # every partition is in place: only the clean-up is left
    if work_has_old_run(root, name, run_id):
        return (f"run {run_id}: its replacement was interrupted ({name}); queries read the run "
                "as it was before until the next `kmemscope parse` into this dataset completes it")
    return (f"run {run_id}: its commit was interrupted ({name}); queries leave out what it had "
            "not finished until the next `kmemscope parse` into this dataset completes it")


def work_has_old_run(root, name, run_id):
    """True when the work folder `name` holds run `run_id`'s old runs partition in its trash."""
    with root.sub(name, "a work folder") as work:
        held = work.walk(["trash", RUNS_TABLE, RUN_PREFIX + run_id], "a trashed partition")
        if held is None:
            return False
        held.close()
        return True
