"""Private scratch folders in the temp folder (/tmp) that a killed kmemscope does not leave
behind for good: DuckDB's spill folder, the report's working folder.

A process that is SIGKILLed (or OOM-killed) runs no clean-up, so an atexit or a `with`
block alone leaves its folder in /tmp forever. Each folder here holds a lock file, `.owner`,
that its maker flock()s for as long as it lives; the kernel drops the lock when the process
ends, however it ends. Making a folder first removes the folders of the same prefix whose
lock can be taken: their maker is gone. The lock file is made and locked under a name no
cleaner looks at, then renamed to `.owner`, so no cleaner ever finds a live folder unlocked;
a folder without one (being made, or an older kmemscope's) is left alone.
Only folders of this user are removed, and never through a link.
"""
import fcntl
import os
import shutil
import stat
import tempfile

OWNER = ".owner"
_MAKING = ".owner-making"
LOCK_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC


class ScratchFolder:
    """A folder `<prefix><random>` in the temp folder, locked by this process until
    remove() (or the process's end, when the next maker of that prefix removes it)."""

    def __init__(self, prefix):
        self.prefix, self._lock = prefix, None
        remove_abandoned(prefix)
        self.path = tempfile.mkdtemp(prefix=prefix)      # 0700: no one else writes in it
        try:
            # locked under another name, then named `.owner`: a cleaner never finds the
            # lock file of a live folder unlocked
            self._lock = os.open(os.path.join(self.path, _MAKING), LOCK_FLAGS | os.O_CREAT
                                 | os.O_EXCL, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            os.rename(os.path.join(self.path, _MAKING), os.path.join(self.path, OWNER))
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def remove(self):
        """Remove the folder and drop its lock (idempotent)."""
        if self._lock is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            os.close(self._lock)
            self._lock = None

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        self.remove()
        return False


def remove_abandoned(prefix, parent=None):
    """Remove this user's folders `<prefix>*` in the temp folder whose owner is gone (their
    `.owner` lock can be taken) -> the paths removed. A folder without a lock file (an older
    kmemscope's, or not ours) is left alone."""
    parent = parent or tempfile.gettempdir()
    removed: list = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            fd = os.open(os.path.join(path, OWNER), LOCK_FLAGS)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:                  # held: its owner lives
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)   # while locked: no second cleaner races
            removed.append(path)
        finally:
            os.close(fd)
    return removed
