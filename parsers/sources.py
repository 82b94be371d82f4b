"""What `kmemscope parse` accepts, read as untrusted input with every size bounded.

An input is a trace.dat, a bundle directory (trace.dat, manifest.json,
procfs/ samples), a bundle packed as .tar.gz / .tar.zst, or a flight
directory (`record --flight`), whose bundles expand_inputs() lists. Every file is
refused unless it is a regular file (a FIFO or /dev/zero would never end).
A bundle's own files (trace.dat, manifest.json, metrics.json, procfs/ and its
samples) are opened without following symbolic links: a link in a bundle is
one error, never a file of the host that parses it read as the bundle's
(an archive's link members are skipped). Archives are unpacked member by
member with their count and total size bounded before anything is written,
and only the members a bundle has are kept; the manifest is size-bounded and
its shape checked field by field.
"""
import errno
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from kmemscope.common.errors import TraceFileError

MANIFEST_MAX_BYTES = 1 << 20          # a real manifest is 2-5 KB
PROCFS_MAX_BYTES = 1 << 30            # one /proc sample file (about 6 KB a second for vmstat)
ARCHIVE_MAX_MEMBERS = 512
# Unpacked size: at most this many times the archive (trace-cmd's own zstd
# pages compress 8-10x; a bomb compresses a thousandfold) and never more
# than ARCHIVE_MAX_BYTES.
ARCHIVE_MAX_RATIO = 64
ARCHIVE_MIN_BUDGET = 256 << 20
ARCHIVE_MAX_BYTES = 64 << 30
# What tarfile may read for one member's headers: a pax or GNU long-name header is read
# whole into memory (a bundle's are under 1 KiB; tarfile reads 10 KiB blocks ahead).
ARCHIVE_MAX_HEADER_BYTES = 1 << 20
PACKED_SUFFIXES = (".tar.gz", ".tgz", ".tar.zst", ".tar.zstd")
BUNDLE_HINT = "give a trace.dat, a bundle directory or a .tar.gz/.tar.zst bundle"


def regular_file(path, what="file"):
    """Stat `path` (following symlinks: the user named it) and refuse anything but a regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceFileError(f"{path}: no such file or directory", "check the path") from None
    except OSError as exc:
        raise TraceFileError(f"{path}: {exc.strerror}") from None
    _refuse_special(path, st, what)
    return st


def _refuse_special(path, st, what):
    if not stat.S_ISREG(st.st_mode):
        from kmemscope.dataset.safefs import kind_of

        kind = kind_of(st.st_mode)     # never "not a regular file, not a regular file"
        raise TraceFileError(f"{path}: {what} is {kind}, not a regular file",
                             "copy the data to a file first")


LINK_HINT = "copy the file into the bundle in place of the link"


def _link_error(path, what):
    return TraceFileError(f"{path}: {what} is a symbolic link; kmemscope reads only a bundle's "
                          "own files", LINK_HINT)


def open_bundle_file(path, what, dir_fd=None, shown=None):
    """(fd, stat) of a file of a bundle, opened without following a link; only a regular file.

    dir_fd: the folder `path` is relative to; shown: the path messages give
    (default `path`). Raises FileNotFoundError when it is absent,
    TraceFileError for a link, a FIFO, a device or an unreadable file.
    """
    shown = path if shown is None else shown
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(shown, what) from None
        raise TraceFileError(f"{shown}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        _refuse_special(shown, st, what)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


# ---------------------------------------------------------------- flight directories

FLIGHT_FILE = "flight.json"           # what `kmemscope record --flight -o DIR` writes in DIR
FLIGHT_MAX_BUNDLES = 100000


def flight_bundles(path):
    """The bundles of a flight directory, oldest first; None when `path` is not one.

    A flight directory holds flight.json and one bundle folder per trigger
    (<UTC time>-<reason>/). Folders that are links, hidden (a bundle still being
    written is .partial-NAME) or without trace.dat are not bundles.
    """
    p = Path(path)
    try:
        if not p.is_dir() or (p / "trace.dat").exists() or not (p / FLIGHT_FILE).is_file():
            return None
        names = sorted(os.listdir(p))
    except OSError as exc:
        raise TraceFileError(f"{path}: {exc.strerror}") from None
    if len(names) > FLIGHT_MAX_BUNDLES:
        raise TraceFileError(f"{path}: more than {FLIGHT_MAX_BUNDLES} entries in a flight directory")
    out = []
    for name in names:
        child = p / name
        if name.startswith(".") or child.is_symlink() or not child.is_dir():
            continue
        if (child / "trace.dat").is_file() and not (child / "trace.dat").is_symlink():
            out.append(child)
    return out


FOLDER_MAX_INPUTS = 100000


def folder_inputs(path):
    """The inputs of a folder of bundles, by name; None when `path` is no such folder.

    A folder that holds no trace.dat and no flight.json, but bundle folders (with a
    trace.dat), packed bundles (.tar.gz, .tar.zst) or trace files (*.dat): a day's bundles
    copied off a fleet. Hidden entries (a copy still being written) and links are left out,
    and so is anything else (a README). A folder with none of these is not one: the parse
    then says what it lacks."""
    p = Path(path)
    try:
        if not p.is_dir() or (p / "trace.dat").exists() or (p / FLIGHT_FILE).exists():
            return None
        names = sorted(os.listdir(p))
    except OSError as exc:
        raise TraceFileError(f"{path}: {exc.strerror}") from None
    if len(names) > FOLDER_MAX_INPUTS:
        raise TraceFileError(f"{path}: more than {FOLDER_MAX_INPUTS} entries in a folder of "
                             "bundles", "parse it in parts")
    out = []
    for name in names:
        child = p / name
        if name.startswith(".") or child.is_symlink():
            continue
        if child.is_dir():
            trace = child / "trace.dat"
            if trace.is_file() and not trace.is_symlink():
                out.append(child)
        elif child.is_file() and name.endswith(PACKED_SUFFIXES + (".dat",)):
            out.append(child)
    return out or None


def expand_inputs(sources):
    """Inputs with every flight directory and every folder of bundles replaced by its
    bundles (one run each)."""
    out: list = []
    for source in sources:
        inside = folder_inputs(source)
        if inside is not None:
            out.extend(str(b) if isinstance(source, str) else b for b in inside)
            continue
        bundles = flight_bundles(source)
        if bundles is None:
            out.append(source)
        elif not bundles:
            raise TraceFileError(f"{source}: flight directory without a bundle yet",
                                 "a flight recorder writes one when a trigger fires (kill -USR1 it)")
        else:
            out.extend(str(b) if isinstance(source, str) else b for b in bundles)
    return out


@contextmanager
def open_source(path, scratch):
    """Yield (trace_path, bundle_dir or None); packed bundles unpack into `scratch` (a
    dataset.safefs.Dir: the folder handle every unpacked file is made relative to)."""
    p = Path(path)
    if p.is_dir():
        trace = p / "trace.dat"
        try:
            fd, _st = open_bundle_file(trace, "trace.dat")
        except FileNotFoundError:
            raise TraceFileError(f"{path}: directory has no trace.dat",
                                 "give a bundle written by `kmemscope record` or a trace.dat") from None
        os.close(fd)
        yield trace, p
        return
    regular_file(p, "input")
    if p.name.endswith(PACKED_SUFFIXES):
        with scratch.sub_or_make("unpacked", "the unpacked bundle's folder", 0o700) as dest:
            unpack_bundle(p, dest)
            # Read back through the folder's handle too: what is read is what was unpacked.
            root = dest.anchored()
            try:
                yield root / "trace.dat", root
            except TraceFileError as exc:     # named inside the archive, not by the handle
                message = str(exc.args[0]).replace(f"{root}/", f"{path}: ")
                raise type(exc)(message, exc.hint) from None
        return
    yield p, None


# ---------------------------------------------------------------- archives

def _bundle_member(name):
    """The path of an archive member inside its bundle, or None to skip it.

    A bundle packed by `record --pack` holds one top directory, but a bundle
    packed by hand may not; only trace.dat, manifest.json, metrics.json and
    procfs/<name> are kept.
    """
    parts = [p for p in PurePosixPath(name).parts if p not in ("/", ".")]
    if len(parts) > 1 and parts[0] not in ("trace.dat", "manifest.json", "metrics.json", "procfs"):
        parts = parts[1:]          # the bundle's own directory
    if parts in (["trace.dat"], ["manifest.json"], ["metrics.json"]):
        return parts[0]
    if len(parts) == 2 and parts[0] == "procfs" and parts[1].isidentifier():
        return "procfs/" + parts[1]
    return None


def _stream(archive):
    """A decompressing binary stream over the archive (pyarrow's gzip/zstd codecs)."""
    import pyarrow as pa

    codec = "zstd" if archive.name.endswith((".tar.zst", ".tar.zstd")) else "gzip"
    return pa.input_stream(str(archive), compression=codec)


class _Counted:
    """The decompressed stream of an archive, every byte counted against the unpack budget
    (headers, skipped members and kept ones alike); while `header_limit` is set (tarfile
    reading the next member's headers), the bytes read since it was set are bounded too:
    tarfile reads a pax or GNU long-name header whole into memory, whatever size it claims."""

    def __init__(self, raw, budget, archive):
        self.raw, self.budget, self.archive = raw, budget, archive
        self.total = 0
        self.header_limit = None

    def read(self, n=-1):
        if n is None or n < 0:
            n = 1 << 20            # tarfile asks for blocks; never read the rest at once
        data = self.raw.read(n)
        self.total += len(data)
        if self.header_limit is not None and self.total > self.header_limit:
            raise TraceFileError(
                f"{self.archive}: a member's tar headers (pax or GNU long names) take more than "
                f"{ARCHIVE_MAX_HEADER_BYTES >> 10} KiB; refusing a likely header bomb",
                "unpack it yourself if it is genuine and parse the directory")
        if self.total > self.budget:
            raise _bomb(self.archive, self.budget)
        return data

    def headers_next(self, reading):
        self.header_limit = self.total + ARCHIVE_MAX_HEADER_BYTES if reading else None


def _bomb(archive, budget):
    return TraceFileError(f"{archive}: unpacks to more than {budget >> 20} MiB "
                          f"({ARCHIVE_MAX_RATIO}x the archive); refusing a likely archive bomb",
                          "unpack it yourself if it is genuine and parse the directory")


def unpack_budget(archive):
    """Bytes an archive may inflate to, everything in it counted."""
    return min(ARCHIVE_MAX_BYTES,
               max(ARCHIVE_MIN_BUDGET, os.path.getsize(archive) * ARCHIVE_MAX_RATIO))


def unpack_bundle(archive, dest):
    """Extract a packed bundle's members into `dest`, a dataset.safefs.Dir: every folder and
    file is made relative to it (mkdirat, openat with O_EXCL|O_NOFOLLOW), so a folder
    swapped for a link on the way takes no write elsewhere. Skipped members are read
    through and counted, a kept one is written as it is read."""
    import tarfile      # here: a plain trace.dat, the usual input, does not load it

    budget = unpack_budget(archive)
    members, found = 0, set()
    try:
        with _stream(archive) as raw:
            counted = _Counted(raw, budget, archive)
            counted.headers_next(True)
            tar = tarfile.open(fileobj=counted, mode="r|")  # type: ignore[call-overload]  # reads the first headers
            while (member := tar.next()) is not None:
                counted.headers_next(False)
                members += 1
                if members > ARCHIVE_MAX_MEMBERS:
                    raise TraceFileError(f"{archive}: more than {ARCHIVE_MAX_MEMBERS} members; "
                                         "not a kmemscope bundle")
                target = _bundle_member(member.name)
                if target is None or not member.isfile():
                    _read_through(tar, member)     # links, devices, unrelated files: skipped
                    counted.headers_next(True)
                    continue
                if target in found:
                    raise TraceFileError(f"{archive}: {target} appears twice in the archive")
                if counted.total + member.size > budget:
                    raise _bomb(archive, budget)   # before a byte of it is written
                _unpack_member(tar.extractfile(member), dest, target, member.size, archive)
                found.add(target)
                counted.headers_next(True)
    except TraceFileError:
        raise
    except (tarfile.TarError, EOFError, ValueError) as exc:
        raise TraceFileError(f"{archive}: cannot unpack: {exc}") from None
    except OSError as exc:
        if exc.errno == 28:
            raise
        raise TraceFileError(f"{archive}: cannot unpack: {exc.strerror or exc}") from None
    if "trace.dat" not in found:
        raise TraceFileError(f"{archive}: packed bundle has no trace.dat", BUNDLE_HINT)
    return dest


def _read_through(tar, member):
    """Read a skipped member's data (counted as it goes) so that tarfile's next header read
    holds headers only."""
    import tarfile

    if member.isreg() or member.type not in tarfile.SUPPORTED_TYPES:
        src = tar.extractfile(member)
        while src.read(4 << 20):
            pass


def _unpack_member(src, dest, target, size, archive):
    folder, _, name = target.rpartition("/")
    if folder:
        with dest.sub_or_make(folder, "a folder of the unpacked bundle", 0o700) as d:
            with d.create(name, 0o600) as f:
                _copy_exact(src, f, size, archive, target)
        return
    with dest.create(name, 0o600) as f:
        _copy_exact(src, f, size, archive, target)


def _copy_exact(src, dst, size, archive, name):
    left = size
    while left:
        chunk = src.read(min(left, 4 << 20))
        if not chunk:
            raise TraceFileError(f"{archive}: {name} is truncated inside the archive")
        dst.write(chunk)
        left -= len(chunk)


# ---------------------------------------------------------------- manifest

def _bounded_text(path, limit, what, dir_fd=None, name=None):
    """A bundle file's text, at most `limit` bytes; None when it is absent.

    dir_fd, name: the file `name` in the folder opened as dir_fd (`path` is
    then only what messages show).
    """
    try:
        fd, st = open_bundle_file(path if name is None else name, what, dir_fd, shown=path)
    except FileNotFoundError:
        return None
    if st.st_size > limit:
        os.close(fd)
        raise TraceFileError(f"{path}: {what} is {st.st_size >> 10} KiB, more than the "
                             f"{limit >> 10} KiB kmemscope accepts",
                             "parse the trace.dat alone")
    # Read in pieces: read(limit) would reserve the whole limit up front.
    chunks, size = [], 0
    with os.fdopen(fd, "rb") as f:
        while size <= limit and (chunk := f.read(1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    if size > limit:
        raise TraceFileError(f"{path}: {what} grew past the {limit >> 10} KiB kmemscope accepts")
    return b"".join(chunks).decode("utf-8", errors="replace")


def clipped(value, limit=24):
    """A value from untrusted input as an error may echo it: printable, and cut at `limit`
    characters with its length said (a 400-digit number is not shown whole)."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _check(manifest, key, types, path, what):
    value = manifest.get(key)
    if value is not None and not isinstance(value, types):
        raise TraceFileError(f"{path}: manifest field {key!r} must be {what}, "
                             f"not {type(value).__name__}", "re-record the bundle, or parse its "
                             "trace.dat alone")
    return value


def read_manifest(bundle):
    """The bundle's manifest.json as a validated dict, or None when there is none."""
    if bundle is None:
        return None
    path = Path(bundle) / "manifest.json"
    text = _bounded_text(path, MANIFEST_MAX_BYTES, "manifest.json")
    if text is None:
        return None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise TraceFileError(f"{path}: unreadable manifest: {exc}",
                             "re-record the bundle, or parse its trace.dat alone") from None
    if not isinstance(manifest, dict):
        raise TraceFileError(f"{path}: the manifest is not a JSON object",
                             "re-record the bundle, or parse its trace.dat alone")
    labels = _check(manifest, "labels", dict, path, "an object of strings")
    for k, v in (labels or {}).items():
        if not isinstance(v, str):
            raise TraceFileError(f"{path}: manifest label {k!r} must be a string, "
                                 f"not {type(v).__name__}", "re-record the bundle")
    uname = _check(manifest, "uname", dict, path, "an object")
    for k in ("release", "version", "machine"):
        _check(uname or {}, k, str, path, "a string")
    _check(manifest, "host", str, path, "a string")
    order = _check(manifest, "pageblock_order", int, path, "an integer")
    if isinstance(order, bool) or (order is not None and not 0 <= order <= 30):
        raise TraceFileError(f"{path}: manifest pageblock_order {clipped(order)} is out of "
                             "range 0-30")
    ticks = _check(manifest, "clock_ticks_per_s", int, path, "an integer")
    if isinstance(ticks, bool) or (ticks is not None and not 1 <= ticks <= 1_000_000):
        raise TraceFileError(f"{path}: manifest clock_ticks_per_s {clipped(ticks)} is out of "
                             "range 1-1000000")
    mts = _check(manifest, "migratetypes", list, path, "a list of strings")
    if mts is not None and (len(mts) > 64 or not all(isinstance(m, str) for m in mts)):
        raise TraceFileError(f"{path}: manifest migratetypes must be at most 64 strings")
    return manifest


def open_procfs_file(path):
    """One procfs sample file of a bundle (BUNDLE/procfs/NAME) as a binary file object to
    read as a stream (parsers/procfs.py), at most PROCFS_MAX_BYTES; None when absent.

    procfs/ itself is opened without following a link too: a bundle whose
    procfs/ links elsewhere is refused like a linked sample.
    """
    path = Path(path)
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        # A link gives ELOOP or, with O_DIRECTORY, ENOTDIR.
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path.parent):
            raise _link_error(path.parent, path.parent.name) from None
        if exc.errno == errno.ENOTDIR:
            return None            # not a folder of samples: the bundle has none
        raise TraceFileError(f"{path.parent}: {exc.strerror}") from None
    what = f"procfs sample {path.name}"
    try:
        fd, st = open_bundle_file(path.name, what, dir_fd=folder, shown=path)
    except FileNotFoundError:
        return None
    finally:
        os.close(folder)
    if st.st_size > PROCFS_MAX_BYTES:
        os.close(fd)
        raise TraceFileError(f"{path}: {what} is {st.st_size >> 10} KiB, more than the "
                             f"{PROCFS_MAX_BYTES >> 10} KiB kmemscope accepts",
                             "parse the trace.dat alone")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
