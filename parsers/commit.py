"""Crash-safe commits of parsed runs into a dataset, and recovery from dead parses.

Each parse works in its own directory inside the dataset, `.parse-<id>/`:

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
file system, and rolling forward is idempotent: whoever finds a dead parse's
journal finishes its commit; a dead parse without a journal never touched the
dataset and its directory is simply removed. Readers see a run once its
`runs` partition is in place (queries/dataset.py reads only those runs), so
they see the old run, the new one, or, for the moment of a replacement,
neither; never half of one.

Commits and recovery hold the dataset's lock file, `.kmemscope.lock`.
"""
import fcntl
import json
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path

RUNS_TABLE = "runs"
RUN_PREFIX = "run_id="
WORK_PREFIX = ".parse-"
LOCK_NAME = ".kmemscope.lock"
JOURNAL = "commit.json"
# Left by kmemscope before work directories had owners and journals.
LEGACY_PREFIXES = (".staging-", ".trash-")


class WorkDir:
    """One parse's private directory in the dataset, locked for its lifetime."""

    def __init__(self, dataset):
        self.dataset = Path(dataset)
        self.path = self.dataset / f"{WORK_PREFIX}{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        self._lock = os.open(self.path / "owner.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.stage = self.path / "stage"
        self.scratch = self.path
        self.stage.mkdir()

    def remove(self):
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


@contextmanager
def dataset_lock(dataset, blocking=True):
    """Hold the dataset's commit lock; yields False when not blocking and it is busy."""
    fd = os.open(Path(dataset) / LOCK_NAME, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _write_journal(work, run_id, tables):
    tmp = work / (JOURNAL + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"run_id": run_id, "tables": sorted(tables)}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, work / JOURNAL)
    _fsync_dir(work)


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _table_dirs(dataset):
    return sorted(p for p in Path(dataset).iterdir()
                  if p.is_dir() and not p.name.startswith((".", "_")))


def _retire(old, trash, table):
    """Move an old partition into the trash (under a fresh name if one is there)."""
    trash.mkdir(exist_ok=True)
    dest = trash / table
    if dest.exists():
        dest = trash / f"{table}.{uuid.uuid4().hex[:6]}"
    os.rename(old, dest)


# Test hook: raise SystemExit after this many renames of a commit (crash tests).
_CRASH_AFTER = os.environ.get("KMEMSCOPE_TEST_CRASH_AFTER_RENAMES")


def _renamed(counter):
    counter[0] += 1
    if _CRASH_AFTER is not None and counter[0] >= int(_CRASH_AFTER):
        os._exit(99)


def roll_forward(dataset, work):
    """Finish the commit journaled in `work` (idempotent); returns True if a run was replaced."""
    dataset, work = Path(dataset), Path(work)
    journal = json.loads((work / JOURNAL).read_text())
    run_id, tables = journal["run_id"], journal["tables"]
    if not isinstance(run_id, str) or not run_id.isalnum() or not all(
            isinstance(t, str) and "/" not in t and not t.startswith(".") for t in tables):
        raise ValueError(f"{work / JOURNAL}: not a commit journal kmemscope wrote")
    part = RUN_PREFIX + run_id
    stage, trash = work / "stage", work / "trash"
    renames = [0]
    replaced = False
    showing_new = (stage / RUNS_TABLE).exists()
    if showing_new and (dataset / RUNS_TABLE / part).exists():
        _retire(dataset / RUNS_TABLE / part, trash, RUNS_TABLE)      # hide the old run
        _renamed(renames)
        replaced = True
    for table_dir in _table_dirs(dataset):
        old = table_dir / part
        if table_dir.name not in tables and old.exists():
            _retire(old, trash, table_dir.name)       # a table the new parse does not have
            _renamed(renames)
            replaced = True
    for table in sorted(tables, key=lambda t: t == RUNS_TABLE):        # runs last
        new = stage / table
        if not new.exists():
            continue
        dest = dataset / table / part
        if dest.exists():
            _retire(dest, trash, table)
            _renamed(renames)
            replaced = True
        dest.parent.mkdir(exist_ok=True)
        os.rename(new, dest)
        _renamed(renames)
    _fsync_dir(dataset / RUNS_TABLE)
    return replaced


def commit(workdir, run_id):
    """Move the staged run of `workdir` into its dataset; returns True if it replaced one."""
    from kmemscope.parsers import run_metrics

    run_metrics.keep_imported(workdir.dataset, workdir.stage, run_id)   # imports outlive re-parses
    tables = [p.name for p in workdir.stage.iterdir() if p.is_dir()]
    _fsync_dir(workdir.stage)
    _write_journal(workdir.path, run_id, tables)
    return roll_forward(workdir.dataset, workdir.path)


def committed_since(dataset, run_id, since_ns):
    """True if run `run_id`'s runs partition was written after `since_ns` (wall clock)."""
    part = Path(dataset) / RUNS_TABLE / (RUN_PREFIX + run_id)
    try:
        return any(f.stat().st_mtime_ns >= since_ns for f in part.glob("*.parquet"))
    except OSError:
        return False


# ---------------------------------------------------------------- recovery

def _owner_gone(work):
    """True when no live process holds the work directory's owner lock."""
    lock = work / "owner.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return True            # created, killed before its lock file existed
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def recover(dataset):
    """Finish or discard what dead parses left in `dataset`; returns what was done.

    Only work directories whose owner is gone are touched. Call with the
    dataset lock held.
    """
    done = []
    dataset = Path(dataset)
    for work in sorted(dataset.glob(WORK_PREFIX + "*")):
        if not work.is_dir() or not _owner_gone(work):
            continue
        if (work / JOURNAL).is_file():
            try:
                roll_forward(dataset, work)
                done.append(f"finished the interrupted commit of {work.name}")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                done.append(f"could not finish {work.name}: {exc}; left in place")
                continue
        else:
            done.append(f"removed {work.name}, left by a parse that did not finish")
        shutil.rmtree(work, ignore_errors=True)
    for legacy in sorted(p for p in dataset.iterdir() if p.name.startswith(LEGACY_PREFIXES)):
        if legacy.name.startswith(".trash-"):
            _restore_legacy_trash(dataset, legacy)
        shutil.rmtree(legacy, ignore_errors=True)
        done.append(f"removed {legacy.name}, left by an earlier kmemscope")
    return done


def _restore_legacy_trash(dataset, trash):
    """An old-style trash whose run vanished (killed mid-commit) goes back in place."""
    runs = sorted((trash / RUNS_TABLE).glob("*.parquet")) if (trash / RUNS_TABLE).is_dir() else []
    if not runs:
        return
    try:
        import pyarrow.parquet as pq

        sha = pq.read_table(runs[0], columns=["sha256"]).column(0)[0].as_py()
    except Exception:  # unreadable: nothing can be restored from it
        return
    run_id = str(sha)[:16]
    if not run_id.isalnum() or (dataset / RUNS_TABLE / (RUN_PREFIX + run_id)).exists():
        return
    for table in trash.iterdir():
        dest = dataset / table.name / (RUN_PREFIX + run_id)
        if table.is_dir() and not table.name.startswith(".") and not dest.exists():
            dest.parent.mkdir(exist_ok=True)
            os.rename(table, dest)


def pending_commits(dataset):
    """Work directories with a journal whose owner is gone (a reader's warning)."""
    out = []
    for work in Path(dataset).glob(WORK_PREFIX + "*"):
        if (work / JOURNAL).is_file() and _owner_gone(work):
            out.append(work.name)
    return sorted(out)
