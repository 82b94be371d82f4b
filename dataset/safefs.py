"""The names kmemscope gives things in a dataset, and folders opened without following links.

Everything that walks or writes a dataset goes through these: a folder is opened
with O_NOFOLLOW|O_DIRECTORY relative to its parent's descriptor (`Dir.sub`), so a
link or special file on the way is refused with UnsafeEntry instead of followed.
"""
import errno
import os
import re
import stat
from pathlib import Path

from kmemscope.common.errors import DatasetError
from kmemscope.common.text import printable

RUNS_TABLE = "runs"
RUN_PREFIX = "run_id="
SAFE_TABLE = re.compile(r"[a-z][a-z0-9_]{0,127}")
SAFE_RUN_ID = re.compile(r"[0-9a-f]{1,64}")
# The only run folder names a reader lists. `parse` names a run by 16 hex digits of the
# trace's sha256; hand-made datasets (kmemscope's synthetic era fixtures) use short lowercase
# ids of the same alphabet as table names. Anything else (`run_id=a=b`, `run_id=NULL`,
# `run_id=__HIVE_DEFAULT_PARTITION__`, `run_id=abc%27`) is left out with a note.
RUN_FOLDER = re.compile(r"run_id=[0-9a-z][0-9a-z_]{0,63}")
# The files a reader reads in a partition folder, and the only ones a run's digests record:
# Parquet files named in this alphabet (kmemscope writes `part-<n>.parquet`). One rule for
# every reader, verify, the digests and the caches: a dot-file (`.x.parquet`), a name with a
# glob character DuckDB would expand, a note beside the files is no part of the run (verify
# reports it `extra`; readers leave it out).
DATA_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,200}\.parquet")
# Every temporary file a dataset writer makes: a dot, the name it will be renamed to, a
# random tag, `.tmp` (`._files.json.0f3a...tmp`, `.part-0.parquet.9c1e...tmp`). The writer
# holds an flock on it while it lives, so the next writer in that folder (write_atomic,
# cache_write) removes the ones whose writer is gone and verify reports them. Tags of 8-32
# hex digits: earlier kmemscope versions wrote 8 and 12.
TEMP_FILE = re.compile(r"\.(?P<target>[A-Za-z0-9_][A-Za-z0-9_.-]{0,200})\.[0-9a-f]{8,32}\.tmp")


def is_data_file(name):
    """True for a name a reader reads in a partition folder (DATA_FILE)."""
    return bool(DATA_FILE.fullmatch(name))


def is_temp_file(name):
    """True for a name of a dataset writer's temporary file (TEMP_FILE)."""
    return bool(TEMP_FILE.fullmatch(name))


def temp_name(name):
    """An unpredictable temporary name for a file that will be renamed to `name`."""
    import uuid

    return f".{name}.{uuid.uuid4().hex[:16]}.tmp"


# Longest name shown in a note or error about a name found in a dataset.
NAME_SHOWN_MAX = 80


def shown_name(name):
    """A name found in a dataset as a note may show it: control characters escaped, and
    cut at NAME_SHOWN_MAX characters."""
    text = printable(str(name))
    return text if len(text) <= NAME_SHOWN_MAX else text[:NAME_SHOWN_MAX] + "..."

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeEntry(DatasetError):
    """Something in a dataset that kmemscope did not write as it is (a link, a FIFO, a
    journal of another shape): recovery leaves it alone, a commit refuses to start."""


def kind_of(mode):
    """What a file of this st_mode is, for a message."""
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a folder" if stat.S_ISDIR(mode)
            else "a regular file" if stat.S_ISREG(mode) else "a special file")


class Dir:
    """A folder opened without following links, and the path it is shown by in messages."""

    def __init__(self, fd, path):
        self.fd, self.path = fd, Path(path)

    @classmethod
    def root(cls, dataset):
        """The dataset folder itself (the path the user gave, links and all)."""
        return cls(os.open(dataset, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), dataset)

    @classmethod
    def of(cls, folder):
        """A Dir of its own for `folder`: a Dir (its descriptor duplicated, so the caller
        may close it) or a path opened as root() opens one."""
        if isinstance(folder, Dir):
            return cls(os.dup(folder.fd), folder.path)
        return cls.root(folder)

    def anchored(self, *names):
        """A path that reaches `names` through this folder's descriptor (/proc/self/fd/N/...),
        for code that opens by path (libtracecmd, pyarrow): a folder renamed or swapped for
        a link after it was opened does not change what the path reaches. Valid while this
        Dir is open, in this process and the children it forks."""
        return Path(f"/proc/self/fd/{self.fd}", *names)

    def lstat(self, name):
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def sub(self, name, what="a folder"):
        """The real folder `name` in this one; UnsafeEntry when it is anything else."""
        try:
            return Dir(os.open(name, DIR_FLAGS, dir_fd=self.fd), self.path / name)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            st = self.lstat(name)
            kind = kind_of(st.st_mode) if st else "missing"
            raise UnsafeEntry(f"{printable(self.path / name)} is {kind} where {what} belongs",
                              HINT_LINK if st and stat.S_ISLNK(st.st_mode) else HINT) from None

    def sub_or_make(self, name, what="a folder", mode=0o755):
        """The real folder `name` in this one, made first when missing (mkdirat)."""
        try:
            os.mkdir(name, mode, dir_fd=self.fd)
        except FileExistsError:
            pass
        return self.sub(name, what)

    def walk(self, names, what="a folder", make=False):
        """The folder at the relative path `names` (a list), each step opened without
        following links; made where missing when `make`. None when missing and not `make`."""
        d = Dir(os.dup(self.fd), self.path)
        try:
            for name in names:
                if not make and d.lstat(name) is None:
                    d.close()
                    return None
                nxt = d.sub_or_make(name, what) if make else d.sub(name, what)
                d.close()
                d = nxt
        except BaseException:
            d.close()
            raise
        return d

    def open_file(self, name, what="a file"):
        """A binary file object of the regular file `name` in this folder (no link followed,
        no FIFO opened for long: O_NONBLOCK); UnsafeEntry when it is anything else."""
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise UnsafeEntry(f"{printable(self.path / name)} is a symbolic link where {what} belongs",
                              HINT_LINK) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise UnsafeEntry(f"{printable(self.path / name)} is {kind_of(st.st_mode)} where {what} "
                              "belongs", HINT)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def create(self, name, mode=0o644):
        """A new binary file `name` in this folder, opened for writing (openat with O_EXCL and
        O_NOFOLLOW: a file or link already there is an error, never truncated or followed)."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=self.fd)
        return os.fdopen(fd, "wb")

    def create_temp(self, name, mode=0o644):
        """(temp name, fd) of a new temporary file for `name` in this folder (TEMP_FILE):
        created with O_EXCL and no link followed, open for reading and writing, and flock()ed
        for as long as the fd is open, so that remove_stale_temps() leaves it alone. A cleaner
        that took the lock between the create and the flock and removed the file is seen
        here (no link left to the file): then another name is taken."""
        import fcntl

        for _attempt in range(16):
            tmp = temp_name(name)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         mode, dir_fd=self.fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.fstat(fd).st_nlink:
                    return tmp, fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        raise OSError(errno.EAGAIN, "a temporary file kept being removed", str(self.path / name))

    def write_atomic(self, name, write):
        """Replace `name` in this folder by what write(file object) writes: a temp file made
        here (create_temp), synced, then renamed over `name` inside this folder (renameat: a
        link at `name` is replaced, never written through). The temp files of writers of
        this folder killed before (SIGKILL runs no cleanup) are removed first."""
        self.remove_stale_temps()
        tmp, fd = self.create_temp(name)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
                os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            raise

    def stale_temps(self):
        """Names of the temporary files (TEMP_FILE) in this folder whose writer is gone: a
        regular file whose flock can be taken. A live writer's is not among them."""
        return [e.name for e in self.entries()
                if is_temp_file(e.name) and self._writer_gone(e.name)]

    def _writer_gone(self, name, remove=False):
        import fcntl

        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=self.fd)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return False     # a link or special file is never a writer's: verify reports it
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if remove:
                # Still the file the name gives (held locked: no live writer renames it now)
                now = self.lstat(name)
                if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    return False
                os.unlink(name, dir_fd=self.fd)
            return True
        except OSError:          # BlockingIOError: a live writer's; gone meanwhile
            return False
        finally:
            os.close(fd)

    def remove_stale_temps(self):
        """Remove the temporary files of this folder whose writer is gone -> their names."""
        return [e.name for e in self.entries()
                if is_temp_file(e.name) and self._writer_gone(e.name, remove=True)]

    def unlink(self, name):
        os.unlink(name, dir_fd=self.fd)

    def entries(self):
        with os.scandir(self.fd) as it:
            return sorted(it, key=lambda e: e.name)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


HINT = "kmemscope keeps only its own files and folders in a dataset: remove it"
HINT_LINK = "kmemscope writes no links in a dataset: remove it, or put a copy in its place"
