"""What was committed: the sha256 and size of every file of a run.

`runs/run_id=<id>/_files.json` is written into the staged runs partition before
the commit's journal, so it lands with the run (runs last); `kmemscope verify`
(dataset/verify.py) tells what changed since, and a metrics import keeps it current.
Its `derived` section records each derived cache file built from the run (sha256,
bytes, and the signature of the sources it came from): a cache is used only when it
matches, so changing one means rewriting the run's digests too (dataset/derived.py).
Every file is read and written through folders opened without following links.
For a Parquet file it also records what the file's footer says: its rows and its
Arrow schema (IPC bytes, base64), so that a reader can check a run's schema and
count its rows from one small file instead of every footer (reader.py).
"""
import errno
import json
import os
import stat

from .safefs import (FILE_FLAGS, HINT, HINT_LINK, RUN_PREFIX, RUNS_TABLE, Dir, UnsafeEntry, is_data_file,
                     kind_of)

DIGESTS = "_files.json"
DIGESTS_MAX_BYTES = 1 << 20


def file_digest(dir_fd, name, expect_bytes=None):
    """(sha256 hex, bytes) of the regular file `name` in the folder `dir_fd` (no link followed).

    expect_bytes: the size the caller expects; a file of another size is not hashed
    (returns (None, its size)): a 64 GiB sparse file in a part file's place is told at once.
    """
    import hashlib

    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeEntry(f"{name} is {kind_of(st.st_mode)}, not a regular file", HINT)
        if expect_bytes is not None and st.st_size != expect_bytes:
            return None, st.st_size
        os.set_blocking(fd, True)
        h = hashlib.sha256()
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest(), st.st_size


def parquet_facts(f):
    """{"bytes": size, "rows": n, "schema": base64 of the Arrow schema's IPC bytes} of the
    open Parquet file `f`, from its footer; {} when it has none."""
    import base64

    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(f).metadata
    except Exception:      # pyarrow's ArrowInvalid: not Parquet; the reader will say so
        return {}
    schema = meta.schema.to_arrow_schema().remove_metadata()
    return {"bytes": os.fstat(f.fileno()).st_size, "rows": meta.num_rows,
            "schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")}


def staged_footers(stage):
    """{"table/file": parquet_facts and "sha256"} of the Parquet files staged under `stage`:
    the parse's decoder process, which wrote them, has pyarrow loaded and the files in its
    page cache, reads and hashes them for record_digests while the parent waits anyway
    (one thread per core: hashing lets go of the GIL).
    Read through folders opened without following links, like every other walk here."""
    from concurrent.futures import ThreadPoolExecutor

    def facts_of(job):
        _table, folder, name = job
        with os.fdopen(os.open(name, FILE_FLAGS, dir_fd=folder.fd), "rb") as fh:
            facts = parquet_facts(fh)
        if facts:
            facts["sha256"], _ = file_digest(folder.fd, name, expect_bytes=facts["bytes"])
        return facts

    folders, jobs = [], []
    with Dir.of(stage) as st:
        try:
            for entry in st.entries():
                if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                    continue
                folders.append(st.sub(entry.name, "a staged table folder"))
                jobs += [(entry.name, folders[-1], f.name) for f in folders[-1].entries()
                         if is_data_file(f.name) and f.is_file(follow_symlinks=False)]
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                found = list(pool.map(facts_of, jobs))
        finally:
            for d in folders:
                d.close()
    return {f"{table}/{name}": facts for (table, _, name), facts in zip(jobs, found) if facts}


def _table_digests(folder, footers=None):
    """{file: {"sha256", "bytes"[, "rows", "schema"]}} of the files of the table folder
    `folder` (a Dir). footers: what staged_footers() said (footer facts and sha256), used for
    a regular file that still has the size it had then; other files are read here."""
    out = {}
    table = folder.path.name
    for entry in folder.entries():
        if not is_data_file(entry.name):
            continue        # what readers leave out is never recorded (verify: extra)
        known = (footers or {}).get(f"{table}/{entry.name}") or {}
        st = entry.stat(follow_symlinks=False)
        if known.get("sha256") and stat.S_ISREG(st.st_mode) and known.get("bytes") == st.st_size:
            sha, size = known["sha256"], st.st_size      # hashed by the decoder process
        else:
            sha, size = file_digest(folder.fd, entry.name)
        out[entry.name] = {"sha256": sha, "bytes": size}
        if not entry.name.endswith(".parquet"):
            continue
        if known.get("bytes") != size:
            with os.fdopen(os.open(entry.name, FILE_FLAGS, dir_fd=folder.fd), "rb") as f:
                known = parquet_facts(f)
        out[entry.name].update({k: v for k, v in known.items() if k not in ("bytes", "sha256")})
    return out


def _write_digests(folder, doc):
    """Write `doc` as the digests file of the folder `folder` (a Dir), atomically."""
    folder.write_atomic(DIGESTS, lambda f: f.write(json.dumps(doc, sort_keys=True,
                                                              indent=0).encode()))


def record_digests(stage, run_id, tables, footers=None, extra=None):
    """Write the staged run's digests into its staged runs partition (footers: see
    staged_footers; without them each Parquet footer is read here). extra: more keys of
    the document (`ingest`: dataset/ingested.py)."""
    files = {}
    with Dir.of(stage) as st:
        for table in sorted(tables):
            with st.sub(table, "a staged table folder") as d:
                for name, digest in _table_digests(d, footers).items():
                    files[f"{table}/{name}"] = digest
        with st.sub(RUNS_TABLE, "the staged runs folder") as runs:
            _write_digests(runs, {**(extra or {}), "run_id": run_id, "files": files})


def _read_doc(f, shown):
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeEntry(f"{shown} is {kind_of(st.st_mode)}", HINT)
    return parse_digests(f.read(DIGESTS_MAX_BYTES + 1), shown)


def parse_digests(data, shown):
    """The digests document of the bytes `data` (validated); UnsafeEntry when it is no such."""
    bad = UnsafeEntry(f"{shown} is not a digests file kmemscope wrote", HINT)
    if len(data) > DIGESTS_MAX_BYTES:
        raise bad
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise bad from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("sha256"), str)
            and type(v.get("bytes")) is int for k, v in files.items()):
        raise bad
    derived = doc.get("derived", {})
    if not isinstance(derived, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("sha256"), str)
            and type(v.get("bytes")) is int and isinstance(v.get("from"), str)
            for k, v in derived.items()):
        raise bad
    return doc


def read_digests(path):
    """The digests document at `path` (a regular file, bounded, validated), or None if absent."""
    try:
        fd = os.open(path, FILE_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeEntry(f"{path} is a symbolic link", HINT_LINK) from None
        raise
    with os.fdopen(fd, "rb") as f:
        return _read_doc(f, path)


def read_digests_in(folder):
    """The digests document of the runs partition `folder` (a Dir), or None if absent."""
    if folder.lstat(DIGESTS) is None:
        return None
    with folder.open_file(DIGESTS, "a digests file") as f:
        return _read_doc(f, folder.path / DIGESTS)


def run_digests(root, run_id):
    """The digests document of run `run_id` of the dataset folder `root` (a Dir), or None."""
    runs = root.walk([RUNS_TABLE, RUN_PREFIX + run_id], "a runs folder")
    if runs is None:
        return None
    with runs:
        return read_digests_in(runs)


def update_digests(root, table, run_id, part):
    """After a committed run's partition `part` (a Dir) of `table` was rewritten (a metrics
    import): record its files' new digests in the run's digests, if the run has them."""
    runs = root.walk([RUNS_TABLE, RUN_PREFIX + run_id], "a runs folder")
    if runs is None:
        return
    with runs:
        try:
            doc = read_digests_in(runs)
        except (OSError, UnsafeEntry):
            return
        if doc is None:
            return
        files = {k: v for k, v in doc["files"].items() if not k.startswith(table + "/")}
        for name, digest in _table_digests(part).items():
            files[f"{table}/{name}"] = digest
        doc["files"] = files
        _write_digests(runs, doc)
