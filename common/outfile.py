"""Every file kmemscope writes outside a dataset (a report, an export, a bundle's files, a
packed bundle, a rendered output file) is written the one way here.

The folder is opened once; the file is created inside that open folder (openat) under an
unpredictable temporary name with O_CREAT|O_EXCL|O_NOFOLLOW, so that a link or file someone
planted at a name they guessed is never written through or truncated; it is written,
synced, then renamed over its name inside the same folder (renameat: a link at the final
name is replaced, not followed). A failure at any step (a full disk) removes the temporary
file: nothing is left behind, and an older file of that name stays as it was. A regular
file replaced keeps its permissions and, where this process may give it, its owner.

The temporary file is flock()ed while its writer lives: the next write of the same name in
that folder removes the temporary files of writers that were killed (SIGKILL runs no
clean-up), and leaves a live writer's alone.

Only files are replaced. What is not one is written through as a stream, as Unix tools do,
or refused: `-` is standard output; a name that reaches this process's standard output or
error (/dev/stdout, /dev/fd/2) writes to it; a character device (/dev/null, /dev/full) or a
FIFO, or a link to one that its owner or root made, is opened and written; a block device,
a socket, or a link to a device that someone else made is refused (UnwritableOutput).

Standard library only, Python 3.8: the record .pyz carries this module.
"""
import errno
import fcntl
import os
import re
import secrets
import stat
import sys
import typing

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
NEW_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
STREAM_FLAGS = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC
PROBE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

NAME_MAX = 255                      # bytes in one name (ext4, xfs, btrfs, tmpfs)
_TAG = 32                           # random hex digits in a temporary name
_SUFFIX_BYTES = 1 + 1 + _TAG + 4    # "." + name + "." + tag + ".tmp"
STDOUT = "-"


class UnwritableOutput(OSError):
    """An output name that is no file and not one to write through (a block device, a
    socket, a link to a device that someone else made). str() is one line."""

    def __init__(self, path, what, hint):
        super().__init__(errno.EINVAL, what, path)
        self.hint = hint

    def __str__(self):
        return "%s is %s: kmemscope writes files and streams only (%s)" % (
            self.filename, self.strerror, self.hint)


def _temp_prefix(name):
    """The part of `name` that a temporary name carries: all of it, or as many of its first
    bytes as fit in NAME_MAX with the rest of the temporary name (the final name is kept
    whole; only the temporary one is shortened)."""
    raw = os.fsencode(name)
    room = NAME_MAX - _SUFFIX_BYTES
    return name if len(raw) <= room else os.fsdecode(raw[:room])


def temp_name(name):
    """`.<name>.<32 random hex digits>.tmp`: no one can guess it ahead; it fits in one name
    (NAME_MAX bytes) however long `name` is."""
    return ".%s.%s.tmp" % (_temp_prefix(name), secrets.token_hex(_TAG // 2))


def _temp_names_of(name):
    """A pattern of the temporary names that writers of `name` use."""
    return re.compile(r"\.%s\.[0-9a-f]{%d}\.tmp" % (re.escape(_temp_prefix(name)), _TAG), re.S)


def remove_stale_temps(dir_fd, name):
    """Remove the temporary files of `name` in the folder `dir_fd` whose writer is gone (a
    regular file whose flock can be taken, still the file the name gives) -> their names."""
    pattern, removed = _temp_names_of(name), []
    for entry in os.listdir(dir_fd):
        if not pattern.fullmatch(entry):
            continue
        try:
            fd = os.open(entry, PROBE_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue                    # a link (O_NOFOLLOW), or gone meanwhile
        try:
            held = os.fstat(fd)
            if not stat.S_ISREG(held.st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            now = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                os.unlink(entry, dir_fd=dir_fd)
                removed.append(entry)
        except OSError:                 # BlockingIOError: a live writer's
            pass
        finally:
            os.close(fd)
    return removed


def _is_stream(mode):
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _same(a, b):
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _standard_stream(st):
    """sys.stdout or sys.stderr when `st` is the file behind descriptor 1 or 2, else None."""
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        try:
            if _same(os.fstat(fd), st):
                return stream
        except OSError:
            pass
    return None


class NewFile:
    """`with NewFile(path) as f: f.write(...)`: f is a binary file object of a new temporary
    file beside `path`; on a clean exit it is synced and renamed to `path`, on an error it is
    removed. `anchored` is the temporary file's path through the open folder
    (/proc/self/fd/N/name) for code that wants a path. Where `path` is a stream (`-`, a
    character device, a FIFO: see the module's docstring) f writes to it, and `streamed` is
    True."""

    def __init__(self, path, mode=0o644):
        self.path = os.fspath(path)
        folder, self.name = os.path.split(self.path)
        if not self.name:
            raise IsADirectoryError(21, "not a file name", self.path)
        self.mode = mode
        self.folder = folder or "."
        self.dir_fd = -1
        self.tmp = ""
        self.file = None  # type: typing.Any
        self.renamed = False
        self.streamed = False
        self._close_stream = False

    @property
    def anchored(self):
        return "/proc/self/fd/%d/%s" % (self.dir_fd, self.tmp)

    def __enter__(self):
        if self.path == STDOUT:
            return self._through_standard(sys.stdout)
        try:
            self.dir_fd = os.open(self.folder, DIR_FLAGS)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "No such folder for the output (create it "
                                    "first)", self.folder) from None
        try:
            there = self._lstat()
            if there is not None and not stat.S_ISREG(there.st_mode) \
                    and not stat.S_ISDIR(there.st_mode):
                stream = self._open_stream(there)
                if stream is not None:
                    os.close(self.dir_fd)
                    self.dir_fd = -1
                    return stream
            remove_stale_temps(self.dir_fd, self.name)
            self.tmp = temp_name(self.name)
            fd = os.open(self.tmp, NEW_FLAGS, self.mode, dir_fd=self.dir_fd)
            self.file = os.fdopen(fd, "w+b")
            fcntl.flock(fd, fcntl.LOCK_EX)     # held until the rename: a live writer's
            if there is not None and stat.S_ISREG(there.st_mode):
                self._keep_mode_of(there)
        except BaseException:
            self._discard()
            if self.dir_fd >= 0:
                os.close(self.dir_fd)
            self.dir_fd, self.file = -1, None
            raise
        return self.file

    def _lstat(self):
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _through_standard(self, stream):
        stream.flush()
        self.file, self.streamed = stream.buffer, True
        return self.file

    def _open_stream(self, there):
        """The stream to write for a name that is no regular file (`there`, its lstat), or
        None for a link to replace; UnwritableOutput for what is neither."""
        link = stat.S_ISLNK(there.st_mode)
        try:
            target = os.stat(self.name, dir_fd=self.dir_fd) if link else there
        except OSError:
            return None                 # a dangling link (or a loop): replaced
        standard = _standard_stream(target)
        if standard is not None:
            return self._through_standard(standard)
        if link and not _is_stream(target.st_mode) and not stat.S_ISBLK(target.st_mode) \
                and not stat.S_ISSOCK(target.st_mode):
            return None                 # a link to a file or folder: replaced, not followed
        kind = _kind(target.st_mode)
        if not _is_stream(target.st_mode):
            raise UnwritableOutput(self.path, kind, "give a file name")
        if link and there.st_uid not in (0, os.geteuid()):
            raise UnwritableOutput(self.path, "a link to %s that another user made" % kind,
                                   "remove the link, or give the device itself")
        fd = os.open(self.name, STREAM_FLAGS | (0 if link else os.O_NOFOLLOW),
                     dir_fd=self.dir_fd)
        if not _same(os.fstat(fd), target):     # swapped since it was looked at
            os.close(fd)
            raise UnwritableOutput(self.path, "a name that changed while it was opened",
                                   "try again")
        self.file, self.streamed, self._close_stream = os.fdopen(fd, "wb"), True, True
        return self.file

    def _keep_mode_of(self, old):
        """Give the new file the replaced file's permissions (a private caller's stay
        private) and, where this process may, its owner."""
        fd = self.file.fileno()
        if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
            try:
                os.fchown(fd, old.st_uid, old.st_gid)
            except OSError:
                pass                    # not root: the file becomes the writer's
        keep = old.st_mode & 0o777
        if not self.mode & 0o077:
            keep &= 0o700
        os.fchmod(fd, keep)

    def __exit__(self, exc_type, exc, tb):
        if self.file is None:
            return False                # __enter__ failed and cleaned up after itself
        if self.streamed:
            return self._end_stream(exc_type)
        try:
            if exc_type is None:
                self.file.flush()
                os.fsync(self.file.fileno())
                # renamed while the file is open and locked: no cleaner removes it first
                os.rename(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                self.renamed = True
                self.file.close()
        finally:
            if not self.renamed:
                self._discard()
            os.close(self.dir_fd)
        return False

    def _end_stream(self, exc_type):
        try:
            self.file.flush()
        except OSError as e:
            if exc_type is None:
                raise OSError(e.errno, e.strerror, self.path) from e
        finally:
            if self._close_stream:
                try:
                    self.file.close()
                except OSError:
                    pass            # the flush above already said it
        return False

    def _discard(self):
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
        if self.tmp:
            try:
                os.unlink(self.tmp, dir_fd=self.dir_fd)
            except OSError:
                pass


def _kind(mode):
    return ("a character device" if stat.S_ISCHR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a special file")


def write_file(path, data, mode=0o644):
    """Write bytes (or str, as UTF-8) `data` as the file `path` (NewFile)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with NewFile(path, mode) as f:
        f.write(data)
    return path
