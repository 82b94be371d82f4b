"""Every file kmemscope writes outside a dataset (a report, an export, a bundle's files, a
packed bundle, a rendered output file) is written the one way here.

The folder is opened once; the file is created inside that open folder (openat) under an
unpredictable temporary name with O_CREAT|O_EXCL|O_NOFOLLOW, so that a link or file someone
planted at a name they guessed is never written through or truncated; it is written,
synced, then renamed over its name inside the same folder (renameat: a link at the final
name is replaced, not followed). A failure at any step (a full disk) removes the temporary
file: nothing is left behind, and an older file of that name stays as it was.

Standard library only, Python 3.8: the record .pyz carries this module.
"""
import os
import secrets
import typing

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
NEW_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def temp_name(name):
    """`.<name>.<32 random hex digits>.tmp`: no one can guess it ahead."""
    return ".%s.%s.tmp" % (name, secrets.token_hex(16))


class NewFile:
    """`with NewFile(path) as f: f.write(...)`: f is a binary file object of a new temporary
    file beside `path`; on a clean exit it is synced and renamed to `path`, on an error it is
    removed. `anchored` is the temporary file's path through the open folder
    (/proc/self/fd/N/name) for code that wants a path."""

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

    @property
    def anchored(self):
        return "/proc/self/fd/%d/%s" % (self.dir_fd, self.tmp)

    def __enter__(self):
        self.dir_fd = os.open(self.folder, DIR_FLAGS)
        try:
            self.tmp = temp_name(self.name)
            fd = os.open(self.tmp, NEW_FLAGS, self.mode, dir_fd=self.dir_fd)
            self.file = os.fdopen(fd, "w+b")
        except BaseException:
            os.close(self.dir_fd)
            raise
        return self.file

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.file.flush()
                os.fsync(self.file.fileno())
                self.file.close()
                os.rename(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                self.renamed = True
        finally:
            if not self.renamed:
                try:
                    self.file.close()
                except OSError:
                    pass
                try:
                    os.unlink(self.tmp, dir_fd=self.dir_fd)
                except OSError:
                    pass
            os.close(self.dir_fd)
        return False


def write_file(path, data, mode=0o644):
    """Write bytes (or str, as UTF-8) `data` as the file `path` (NewFile)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with NewFile(path, mode) as f:
        f.write(data)
    return path
