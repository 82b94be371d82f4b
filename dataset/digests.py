"""What was committed: the sha256 and size of every file of a run.

`runs/run_id=<id>/_files.json` is written into the staged runs partition before
the commit's journal, so it lands with the run (runs last); `kmemscope verify`
(dataset/verify.py) tells what changed since, and a metrics import keeps it current.
For a Parquet file it also records what the file's footer says: its rows and its
Arrow schema (IPC bytes, base64), so that a reader can check a run's schema and
count its rows from one small file instead of every footer (reader.py).
"""
import errno
import json
import os
import stat
import uuid
from pathlib import Path

from .safefs import DIR_FLAGS, FILE_FLAGS, HINT, HINT_LINK, RUNS_TABLE, Dir, UnsafeEntry, kind_of

DIGESTS = "_files.json"
DIGESTS_MAX_BYTES = 1 << 20


def file_digest(dir_fd, name):
    """(sha256 hex, bytes) of the regular file `name` in the folder `dir_fd` (no link followed)."""
    import hashlib

    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeEntry(f"{name} is {kind_of(st.st_mode)}, not a regular file", HINT)
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
    """{"table/file": parquet_facts} of the Parquet files staged under `stage`: the parse's
    decoder process, which wrote them and has pyarrow loaded, reads them for record_digests."""
    out = {}
    for path in sorted(Path(stage).glob("*/*.parquet")):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as f:
                facts = parquet_facts(f)
            if facts:
                out[f"{path.parent.name}/{path.name}"] = facts
    return out


def _table_digests(folder, footers=None):
    """{file: {"sha256", "bytes"[, "rows", "schema"]}} of a table folder. footers: what
    staged_footers() said, used for a file that still has the size it had then."""
    out = {}
    table = Path(folder).name
    with Dir(os.open(folder, DIR_FLAGS), folder) as d:
        for entry in d.entries():
            if entry.name.startswith(".") or entry.name == DIGESTS:
                continue
            sha, size = file_digest(d.fd, entry.name)
            out[entry.name] = {"sha256": sha, "bytes": size}
            if not entry.name.endswith(".parquet"):
                continue
            known = (footers or {}).get(f"{table}/{entry.name}")
            if known is None or known.get("bytes") != size:
                with os.fdopen(os.open(entry.name, FILE_FLAGS, dir_fd=d.fd), "rb") as f:
                    known = parquet_facts(f)
            out[entry.name].update({k: v for k, v in known.items() if k != "bytes"})
    return out


def _write_digests(folder, doc):
    tmp = Path(folder) / f".{DIGESTS}.{uuid.uuid4().hex[:8]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, sort_keys=True, indent=0)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, Path(folder) / DIGESTS)


def record_digests(stage, run_id, tables, footers=None):
    """Write the staged run's digests into its staged runs partition (footers: see
    staged_footers; without them each Parquet footer is read here)."""
    stage = Path(stage)
    files = {}
    for table in sorted(tables):
        for name, digest in _table_digests(stage / table, footers).items():
            files[f"{table}/{name}"] = digest
    _write_digests(stage / RUNS_TABLE, {"run_id": run_id, "files": files})


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
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeEntry(f"{path} is {kind_of(st.st_mode)}", HINT)
        data = f.read(DIGESTS_MAX_BYTES + 1)
    bad = UnsafeEntry(f"{path} is not a digests file kmemscope wrote", HINT)
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
    return doc


def update_digests(part_dir):
    """After a committed run's partition `DATASET/<table>/run_id=<id>` was rewritten (a
    metrics import): record its files' new digests, if the run has digests."""
    part_dir = Path(part_dir)
    table, dataset = part_dir.parent.name, part_dir.parent.parent
    runs_part = dataset / RUNS_TABLE / part_dir.name
    try:
        doc = read_digests(runs_part / DIGESTS)
    except (OSError, UnsafeEntry):
        return
    if doc is None:
        return
    files = {k: v for k, v in doc["files"].items() if not k.startswith(table + "/")}
    for name, digest in _table_digests(part_dir).items():
        files[f"{table}/{name}"] = digest
    doc["files"] = files
    _write_digests(runs_part, doc)
