"""The ingest key of an input: one sha256 over what a parse is given.

The key covers the input's content (a bundle folder's trace.dat, manifest.json, metrics.json
and procfs/ samples, file by file; a bare trace.dat or a packed bundle, byte for byte) and the
options that shape the run (the labels given, --events, --whole-bundle). A run records the key
it was parsed from (dataset/ingested.py), so parsing the same input with the same options
again is skipped; another label, another sample file or another event filter is a new key,
and the parse replaces the run as before.

Reading is cheap next to decoding (sha256 runs at about 1-2 GB/s, a decode at a fifth of
that) and bounded like parsing itself: files are opened without following links, only regular
files are read, a procfs folder's entries are bounded. An input that cannot be read here gets
no key (None): the parse then reports what is wrong with it, in its own words.
"""
import hashlib
import json
import os
import stat

from kmemscope.parsers.sources import PROCFS_MAX_BYTES

KEY_VERSION = 1
PROCFS_MAX_ENTRIES = 1024        # a bundle has a dozen sample files
BUNDLE_FILES = ("trace.dat", "manifest.json", "metrics.json")
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Unreadable(Exception):
    pass


def _file_sha256(name, dir_fd=None, limit=None):
    """sha256 hex of the regular file `name` (no link followed; None when absent)."""
    try:
        fd = os.open(name, _FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError:
        raise _Unreadable() from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (limit is not None and st.st_size > limit):
            raise _Unreadable()
        os.set_blocking(fd, True)
        h = hashlib.sha256()
        while chunk := f.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


def _bundle_files(folder):
    """{name: sha256} of a bundle folder's files, procfs samples as procfs/<name>."""
    out = {}
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in BUNDLE_FILES:
            sha = _file_sha256(name, dir_fd)
            if sha is not None:
                out[name] = sha
        try:
            procfs = os.open("procfs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=dir_fd)
        except FileNotFoundError:
            return out
        except OSError:
            raise _Unreadable() from None
        try:
            names = sorted(os.listdir(procfs))
            if len(names) > PROCFS_MAX_ENTRIES:
                raise _Unreadable()
            for name in names:
                sha = _file_sha256(name, procfs, limit=PROCFS_MAX_BYTES)
                if sha is not None:
                    out[f"procfs/{name}"] = sha
        finally:
            os.close(procfs)
    finally:
        os.close(dir_fd)
    return out


def ingest_key(source, labels=None, events=None, whole_bundle=False):
    """The ingest key (64 hex) of parsing `source` with these options, or None when the
    input cannot be read here (the parse says why)."""
    try:
        st = os.stat(source)
        if stat.S_ISDIR(st.st_mode):
            files = _bundle_files(source)
            if "trace.dat" not in files:
                return None
        elif stat.S_ISREG(st.st_mode):
            files = {"": _file_sha256(os.fspath(source))}
        else:
            return None
    except (OSError, _Unreadable):
        return None
    doc = {"version": KEY_VERSION, "files": files,
           "labels": sorted((str(k), str(v)) for k, v in (labels or {}).items()),
           "events": sorted(events or []), "whole_bundle": bool(whole_bundle)}
    try:
        text = json.dumps(doc, sort_keys=True, ensure_ascii=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()
