"""One record at a time per host: an flock on a file in the state directory.

The lock file holds the owner's pid so that a refused record can name it. The
kernel drops the lock when its owner dies, however it dies; the state file
(state.py) is what tells the next record that cleanup is still owed.
"""
import errno
import fcntl
import os

from kmemscope.common.errors import CaptureError

# /run is cleared at boot, as is the kernel's tracing state; /var/tmp is the
# fallback for hosts without a writable /run.
STATE_DIRS = ("/run/kmemscope", "/var/tmp/kmemscope-state")


def state_dir():
    """The directory for the lock and state files, created owner-only."""
    override = os.environ.get("KMEMSCOPE_STATE_DIR")
    for path in ((override,) if override else STATE_DIRS):
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            if os.access(path, os.W_OK):
                return path
        except OSError:
            continue
    raise CaptureError("no writable state directory (tried %s)" % ", ".join(STATE_DIRS),
                       "run as root")


class RecordLock:
    """Exclusive, non-blocking; release() (or process exit) frees it."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "record.lock")
        self.fd = None

    def acquire(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise CaptureError("another kmemscope record is running (pid %s)" % holder,
                                   "wait for it to finish, or stop it with kill -INT %s" % holder)
            raise CaptureError("cannot lock %s: %s" % (self.path, exc.strerror))
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None
