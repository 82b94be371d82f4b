"""What a dataset has ingested already: each committed run's ingest key, and the keys that
live parses are decoding now.

An ingest key names what a parse was given (parsers/ingest_key.py: the input's content and
the options that shape the run); a parse records it in its run's digests
(`runs/run_id=<id>/_files.json`, key `ingest`), so a later parse of the same input with the
same options finds it committed and skips the input instead of decoding it again.

Two parses given the same input at once must not both decode it. Before decoding, a parse
writes its key into its work folder (`.parse-<id>/claim.json`) while holding the dataset's
commit lock; the next parse, under the same lock, finds the claim of a live parse (its owner
lock held, dataset/commit.py), waits for that parse to end, and then finds the run committed
(or, when that parse failed, claims the key itself). A dead parse's claim counts for nothing:
its owner lock can be taken.
"""
import errno
import fcntl
import json
import os
import re
import stat

from .commit import WORK_NAME, _owner_gone, _work_folders
from .digests import DIGESTS, read_digests_in
from .safefs import FILE_FLAGS, RUN_PREFIX, RUNS_TABLE, SAFE_RUN_ID, Dir, UnsafeEntry

INGEST_FIELD = "ingest"          # the key in a run's digests document
CLAIM = "claim.json"             # the key in a live parse's work folder
KEY = re.compile(r"[0-9a-f]{64}")
CLAIM_MAX_BYTES = 4096

# {dataset path: {run_id: ((st_ino, st_mtime_ns, st_size) of its _files.json, key or None)}}:
# a command that ingests a folder reads each run's digests once, then only those that changed.
_SEEN: dict = {}


def committed_keys(dataset):
    """{ingest key: run_id} of the committed runs of the local dataset at `dataset`.

    Call it holding the commit lock for an answer that no commit changes meanwhile. Runs
    committed without a key (an earlier kmemscope, --procfs-start) are not in it."""
    seen = _SEEN.setdefault(os.path.abspath(dataset), {})
    now: dict = {}
    try:
        root = Dir.root(dataset)
    except OSError:
        return {}
    with root:
        runs = root.walk([RUNS_TABLE], "the runs folder")
        if runs is None:
            _SEEN.pop(os.path.abspath(dataset), None)
            return {}
        with runs:
            for entry in runs.entries():
                run_id = entry.name[len(RUN_PREFIX):]
                if not entry.name.startswith(RUN_PREFIX) or not SAFE_RUN_ID.fullmatch(run_id):
                    continue
                now[run_id] = _run_key(runs, entry.name, seen.get(run_id))
    seen.clear()
    seen.update(now)
    return {key: run for run, (_, key) in sorted(now.items()) if key is not None}


def _run_key(runs, name, known):
    """((identity of the run's digests file), its ingest key or None)."""
    try:
        part = runs.sub(name, "a runs partition")
    except (OSError, UnsafeEntry):
        return None, None
    with part:
        st = part.lstat(DIGESTS)
        if st is None or not stat.S_ISREG(st.st_mode):
            return None, None
        ident = (st.st_ino, st.st_mtime_ns, st.st_size)
        if known is not None and known[0] == ident:
            return known
        try:
            doc = read_digests_in(part)
        except (OSError, UnsafeEntry):
            return ident, None
    key = (doc or {}).get(INGEST_FIELD)
    return ident, key if isinstance(key, str) and KEY.fullmatch(key) else None


# ---------------------------------------------------------------- claims of live parses

def write_claim(work, key):
    """Write `key` into the work folder `work` (a Dir) of a parse: the caller holds the
    commit lock, so no other parse claims the same key between its check and this."""
    work.write_atomic(CLAIM, lambda f: f.write(json.dumps({INGEST_FIELD: key}).encode()))


def live_claim(dataset, key):
    """The name of a work folder of `dataset` whose live parse claims `key`, or None."""
    try:
        root = Dir.root(dataset)
    except OSError:
        return None
    with root:
        for name in _work_folders(root):
            if not WORK_NAME.fullmatch(name):
                continue
            try:
                with root.sub(name, "a work folder") as work:
                    if _read_claim(work) == key and not _owner_gone(work):
                        return name
            except (OSError, UnsafeEntry):
                continue
    return None


def _read_claim(work):
    try:
        fd = os.open(CLAIM, FILE_FLAGS, dir_fd=work.fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = f.read(CLAIM_MAX_BYTES + 1)
    try:
        doc = json.loads(data) if len(data) <= CLAIM_MAX_BYTES else None
    except (ValueError, RecursionError):
        return None
    key = doc.get(INGEST_FIELD) if isinstance(doc, dict) else None
    return key if isinstance(key, str) and KEY.fullmatch(key) else None


def wait_for_owner(dataset, name):
    """Block until the parse that owns the work folder `name` of `dataset` has ended (its
    owner lock is let go when its folder is gone, committed or not). Returns at once when
    the folder or its lock is gone already. Ctrl-C interrupts the wait."""
    try:
        root = Dir.root(dataset)
    except OSError:
        return
    with root:
        try:
            with root.sub(name, "a work folder") as work:
                fd = os.open("owner.lock", FILE_FLAGS, dir_fd=work.fd)
        except (OSError, UnsafeEntry):
            return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.set_blocking(fd, True)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)     # granted once the owner's exclusive lock goes
            except OSError as exc:
                if exc.errno not in (errno.EINTR, errno.ENOLCK):
                    raise
    finally:
        os.close(fd)
