"""Check a dataset's files against the digests recorded when each run was committed.

    kmemscope verify DATASET

Every commit writes `runs/run_id=<id>/_files.json` (dataset/commit.py): the
sha256 and size of every file of the run's partitions. verify() walks the dataset without
following links and reports, per file, what no longer matches:

  missing     recorded at commit, not there now
  changed     there, with other contents (or a link, FIFO or folder in its place)
  extra       in a run's partition (or a partition of no committed run), never recorded
  unrecorded  a run committed by a kmemscope that recorded no digests (parse it again)

Parquet pages also carry CRC checksums since the same version (written at parse); a file
of a run without digests is read through with pyarrow's page checksum verification.
"""
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kmemscope.errors import DatasetError

from . import digests, safefs, storage


@dataclass
class Verification:
    runs: int = 0
    files: int = 0
    problems: list = field(default_factory=list)    # [(kind, path relative to the dataset)]

    @property
    def ok(self):
        return not self.problems


def _partitions(root):
    """{run_id: {table: path}} of every run_id= folder of every table folder (no links followed)."""
    out = {}
    for table in sorted(os.listdir(root)):
        path = root / table
        if table.startswith((".", "_")) or not stat.S_ISDIR(os.lstat(path).st_mode):
            continue
        for part in sorted(os.listdir(path)):
            if part.startswith(safefs.RUN_PREFIX):
                out.setdefault(part[len(safefs.RUN_PREFIX):], {})[table] = path / part
    return out


def _listing(part):
    """{name: st_mode} of a partition folder's entries; a link in place of the folder is one entry."""
    st = os.lstat(part)
    if not stat.S_ISDIR(st.st_mode):
        return None
    return {e.name: e.stat(follow_symlinks=False).st_mode for e in os.scandir(part)
            if not e.name.startswith(".")}


def _crc_ok(path):
    import pyarrow.parquet as pq

    try:
        pq.read_table(path, page_checksum_verification=True)
        return True
    except Exception:    # pyarrow's errors of a damaged file
        return False


def verify(dataset):
    """Compare every file of `dataset` with what its commits recorded -> Verification."""
    if storage.is_url(dataset):
        raise DatasetError("verify reads local datasets", "copy the dataset here first")
    root = Path(dataset)
    if not root.is_dir():
        raise DatasetError(f"dataset {dataset} does not exist or is not a directory")
    result = Verification()
    parts = _partitions(root)
    committed = {run for run, tables in parts.items() if safefs.RUNS_TABLE in tables}
    if not committed:
        raise DatasetError(f"dataset {dataset} holds no committed run",
                           "give the directory that `kmemscope parse -o` wrote")
    for run, tables in sorted(parts.items()):
        if run not in committed:
            for table, part in sorted(tables.items()):
                result.problems.append(("extra", str(part.relative_to(root))))
            continue
        result.runs += 1
        try:
            doc = digests.read_digests(tables[safefs.RUNS_TABLE] / digests.DIGESTS)
        except (OSError, safefs.UnsafeEntry) as exc:
            result.problems.append(("changed", f"{safefs.RUNS_TABLE}/{safefs.RUN_PREFIX}{run}/"
                                    f"{digests.DIGESTS} ({str(exc).split(' (')[0]})"))
            continue
        if doc is None:
            result.problems.append(("unrecorded", f"run {run}"))
            for table, part in sorted(tables.items()):
                for name, mode in sorted((_listing(part) or {}).items()):
                    if stat.S_ISREG(mode) and name.endswith(".parquet"):
                        result.files += 1
                        if not _crc_ok(part / name):
                            result.problems.append(("changed", str((part / name).relative_to(root))))
            continue
        recorded = doc["files"]
        seen = set()
        for table, part in sorted(tables.items()):
            listing = _listing(part)
            rel_part = part.relative_to(root)
            if listing is None:
                result.problems.append(("changed", f"{rel_part} (not a folder)"))
                continue
            for name, mode in sorted(listing.items()):
                if table == safefs.RUNS_TABLE and name == digests.DIGESTS:
                    continue
                key = f"{table}/{name}"
                seen.add(key)
                rel = f"{rel_part}/{name}"
                if key not in recorded:
                    result.problems.append(("extra", rel))
                    continue
                result.files += 1
                if not stat.S_ISREG(mode):
                    result.problems.append(("changed", f"{rel} ({safefs.kind_of(mode)})"))
                    continue
                fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    sha, size = digests.file_digest(fd, name)
                finally:
                    os.close(fd)
                if (sha, size) != (recorded[key]["sha256"], recorded[key]["bytes"]):
                    result.problems.append(("changed", rel))
        for key in sorted(set(recorded) - seen):
            table, _, name = key.partition("/")
            result.problems.append(("missing", f"{table}/{safefs.RUN_PREFIX}{run}/{name}"))
    return result
