"""Check a dataset's files against the digests recorded when each run was committed.

    kmemscope verify DATASET [--deep]

Every commit writes `runs/run_id=<id>/_files.json` (dataset/commit.py): the
sha256 and size of every file of the run's partitions, and (dataset/derived.py)
of every derived cache file built from the run since. verify() walks the
dataset without following links and reports, per file, what no longer matches:

  missing     recorded, not there now
  changed     there, with other contents (or a link, FIFO or folder in its place)
  extra       in a run's partition, a partition of no committed run, or the derived
              cache, never recorded; any writer's temp file whose writer is gone,
              and every name that is not a file readers read (dot-files too)
  unrecorded  a run committed by a kmemscope that recorded no digests (parse it again)

A file's size is compared before it is hashed (a huge file in a part file's place
is told at once), and files are hashed a MiB at a time. Parquet pages also carry CRC
checksums: a file of a run without digests is read through with pyarrow's page
checksum verification, one batch at a time. A recorded derived cache must also state
inside it the signature its record gives. With deep=True every recorded derived cache is
also derived again from the run's files (privately), an analysis' kept rows by asking the
question its record names, and compared row for row.

What this proves, and what not: see docs/safety.md (the digests are kmemscope's own
record, not a signature: whoever can rewrite the files can rewrite the record).
"""
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from kmemscope.common.errors import DatasetError

from . import cache_write, digests, safefs
from .commit import DERIVED_DIR


@dataclass
class Verification:
    runs: int = 0
    files: int = 0
    problems: list = field(default_factory=list)    # [(kind, path relative to the dataset)]

    @property
    def ok(self):
        return not self.problems


def _partitions(root):
    """{run_id: {table: name}} of the run folders of every table folder (root: a Dir), and
    the odd names that readers leave out (reported as extra)."""
    out: dict = {}
    odd: list = []
    for table in root.entries():
        if table.name.startswith((".", "_")) or not table.is_dir(follow_symlinks=False):
            continue
        if not safefs.SAFE_TABLE.fullmatch(table.name):
            odd.append(table.name)
            continue
        with root.sub(table.name, "a table folder") as t:
            for part in t.entries():
                if not part.name.startswith(safefs.RUN_PREFIX):
                    continue
                if not safefs.RUN_FOLDER.fullmatch(part.name):
                    odd.append(f"{table.name}/{part.name}")
                    continue
                out.setdefault(part.name[len(safefs.RUN_PREFIX):], {})[table.name] = part.name
    return out, odd


def _listing(root, table, part):
    """{name: st_mode} of a partition folder's entries, every one (dot-files too: what a
    reader reads is safefs.DATA_FILE, anything else is extra), but the temp files of live
    writers; None when it is not a real folder."""
    try:
        d = root.walk([table, part])
    except safefs.UnsafeEntry:
        return None, None
    live = _live_temps(d)
    return {e.name: e.stat(follow_symlinks=False).st_mode for e in d.entries()
            if e.name not in live}, d


def _live_temps(folder):
    """Names of the temp files in `folder` that a live writer holds (neither reported nor
    removed: the writer renames or removes it)."""
    stale = set(folder.stale_temps())
    return {e.name for e in folder.entries() if safefs.is_temp_file(e.name)
            and e.name not in stale and e.is_file(follow_symlinks=False)}


STALE_TEMP = ("(left by a write that did not finish: the next write into this folder "
              "removes it)")


def _extra(result, name, rel, mode):
    """Report the unrecorded entry `name` (shown as `rel`, its lstat mode `mode`), saying
    what it is when readers leave it out."""
    if safefs.is_temp_file(name) and stat.S_ISREG(mode):
        result.problems.append(("extra", f"{rel} {STALE_TEMP}"))
    elif safefs.is_temp_file(name):
        # the writers' clean-up removes only regular files (safefs._writer_gone)
        result.problems.append(("extra", f"{rel} ({safefs.kind_of(mode)} at a temporary file's "
                                         "name: kmemscope never writes one there and no write "
                                         "removes it; remove it)"))
    elif not safefs.is_data_file(name):
        result.problems.append(("extra", f"{rel} (not a file kmemscope writes: readers leave "
                                         "it out)"))
    else:
        result.problems.append(("extra", rel))


def _crc_ok(folder, name):
    """True when every page of the Parquet file reads with valid checksums (bounded memory:
    one batch of rows at a time)."""
    import pyarrow.parquet as pq

    try:
        with folder.open_file(name, "a Parquet file") as f:
            pf = pq.ParquetFile(f, page_checksum_verification=True)
            for _batch in pf.iter_batches(batch_size=1 << 16):
                pass
        return True
    except Exception:    # pyarrow's errors of a damaged file
        return False


def _check_file(result, folder, name, mode, recorded, rel):
    """Compare one file with its recorded {sha256, bytes}; a problem is appended.
    True when it matches."""
    result.files += 1
    if not stat.S_ISREG(mode):
        result.problems.append(("changed", f"{rel} ({safefs.kind_of(mode)})"))
        return False
    sha, size = digests.file_digest(folder.fd, name, recorded["bytes"])
    if (sha, size) != (recorded["sha256"], recorded["bytes"]):
        result.problems.append(("changed", rel if sha is not None else
                                f"{rel} ({size} bytes, {recorded['bytes']} recorded)"))
        return False
    return True


def verify(dataset, deep=False, recompute=None):
    """Compare every file of `dataset` with what its commits recorded -> Verification.

    recompute: {folder prefix: check(dataset, name, run, path, entry) -> bool} for the
    derived caches, which layers above this one make (the derived tables of
    queries/derived_tables.py, the analyses' kept rows): deep checks each with the first
    whose prefix its folder starts with (entry: the file's record in the run's digests,
    which says what it answers), and reports a cache no check is given for as one it
    cannot derive again. dataset: a path or the command's handle (dataset/handle.py)."""
    from .handle import DatasetRef

    ref = DatasetRef.of(dataset)
    if ref.is_s3:
        raise DatasetError("verify reads local datasets", "copy the dataset here first")
    dataset = ref.location
    root_path = Path(dataset)
    if not root_path.is_dir():
        raise DatasetError(f"dataset {dataset} does not exist or is not a directory")
    result = Verification()
    from .commit import readers_lock

    # The walk holds the commit lock shared: a parse's commit waits, so the walk sees one
    # committed state. A deep check reads that state after the walk, from the files the
    # walk held open (the listing's and each cache checked), whatever is committed since.
    with readers_lock(dataset), safefs.Dir.root(dataset) as root:
        pins = None
        if deep:
            ref.listing
            pins = ref.snapshot
        parts, odd = _partitions(root)
        for name in odd:
            result.problems.append(("extra", f"{safefs.shown_name(name)} (not a name kmemscope "
                                             "writes: readers leave it out)"))
        committed = {run for run, tables in parts.items() if safefs.RUNS_TABLE in tables}
        if not committed:
            raise DatasetError(f"dataset {dataset} holds no committed run",
                               "give the directory that `kmemscope parse -o` wrote")
        recorded_derived = {}
        for run, tables in sorted(parts.items()):
            if run not in committed:
                for table, part in sorted(tables.items()):
                    result.problems.append(("extra", f"{table}/{part}"))
                continue
            result.runs += 1
            try:
                doc = digests.run_digests(root, run)
            except (OSError, safefs.UnsafeEntry) as exc:
                result.problems.append(("changed", f"{safefs.RUNS_TABLE}/{safefs.RUN_PREFIX}{run}/"
                                        f"{digests.DIGESTS} ({str(exc).split(' (')[0]})"))
                continue
            if doc is None:
                _unrecorded(result, root, run, tables)
                continue
            recorded_derived.update({k: (run, v) for k, v in doc.get("derived", {}).items()})
            _check_run(result, root, run, tables, doc["files"])
        _check_derived(result, root, recorded_derived, pins)
    if deep:
        _rederive(result, ref, recorded_derived, recompute or {})
    return result


def _unrecorded(result, root, run, tables):
    result.problems.append(("unrecorded", f"run {run}"))
    for table, part in sorted(tables.items()):
        listing, d = _listing(root, table, part)
        if d is None:
            continue
        with d:
            for name, mode in sorted(listing.items()):
                if table == safefs.RUNS_TABLE and name == digests.DIGESTS:
                    continue
                if not safefs.is_data_file(name):
                    _extra(result, name, f"{table}/{part}/{safefs.shown_name(name)}", mode)
                elif stat.S_ISREG(mode):
                    result.files += 1
                    if not _crc_ok(d, name):
                        result.problems.append(("changed", f"{table}/{part}/{name}"))


def _check_run(result, root, run, tables, recorded):
    seen = set()
    for table, part in sorted(tables.items()):
        rel_part = f"{table}/{part}"
        listing, d = _listing(root, table, part)
        if d is None:
            result.problems.append(("changed", f"{rel_part} (not a folder)"))
            continue
        with d:
            for name, mode in sorted(listing.items()):
                if table == safefs.RUNS_TABLE and name == digests.DIGESTS:
                    continue
                key = f"{table}/{name}"
                seen.add(key)
                rel = f"{rel_part}/{safefs.shown_name(name)}"
                if key not in recorded:
                    _extra(result, name, rel, mode)
                    continue
                _check_file(result, d, name, mode, recorded[key], rel)
    for key in sorted(set(recorded) - seen):
        table, _, name = key.partition("/")
        result.problems.append(("missing", f"{table}/{safefs.RUN_PREFIX}{run}/{name}"))


def _check_derived(result, root, recorded, pins=None):
    """Every file under _derived is recorded by its run and matches; nothing else is there.
    pins: a snapshot (dataset/snapshot.py) that each matching file is held open in."""
    seen: set = set()
    if root.lstat(DERIVED_DIR) is not None:
        try:
            top = root.sub(DERIVED_DIR, "the derived cache folder")
        except safefs.UnsafeEntry as exc:
            result.problems.append(("changed", f"{DERIVED_DIR} ({exc.args[0]})"))
            top = None
        if top is not None:
            with top:
                _walk_derived(result, top, DERIVED_DIR, recorded, seen, depth=0, pins=pins)
    for key in sorted(set(recorded) - seen):
        result.problems.append(("missing", key))


def _walk_derived(result, folder, rel, recorded, seen, depth, pins=None):
    live = _live_temps(folder)
    for entry in folder.entries():
        if entry.name in live:
            continue
        path = f"{rel}/{safefs.shown_name(entry.name)}"
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode) and depth < 2 and not entry.name.startswith("."):
            with folder.sub(entry.name, "a derived cache folder") as sub:
                _walk_derived(result, sub, f"{rel}/{entry.name}", recorded, seen, depth + 1, pins)
            continue
        key = f"{rel}/{entry.name}"
        if key not in recorded:
            _extra(result, entry.name, path, mode)
            continue
        seen.add(key)
        if _check_file(result, folder, entry.name, mode, recorded[key][1], path):
            if _check_signed(result, folder, entry.name, recorded[key][1], path) and pins:
                fd = os.open(entry.name, safefs.FILE_FLAGS, dir_fd=folder.fd)
                pins.pin(root_path_of(pins.dataset) / key, key, fd)


def _check_signed(result, folder, name, recorded, rel):
    """The cache file says it was derived from what its record says (a record given the
    signature of another question, the file left as it was, is told here)."""
    from .derived import SIG_KEY

    with folder.open_file(name, "a derived cache file") as f:
        said = cache_write.embedded(f, SIG_KEY)
    if said != recorded["from"].encode():
        result.problems.append(("changed", f"{rel} (it was derived from other sources or "
                                "another question than its record says)"))
        return False
    return True


def _rederive(result, ref, recorded, recompute):
    """Derive every recorded cache again, privately, and compare the rows (deep)."""
    for key, (run, entry) in sorted(recorded.items()):
        if any(kind != "extra" and path.split(" ")[0] == key for kind, path in result.problems):
            continue            # already reported
        name = key.split("/")[1]
        check = next((f for prefix, f in recompute.items() if name.startswith(prefix)),
                     _no_check)
        path = root_path_of(ref.location) / key
        held = ref.snapshot.pinned(path) if ref.snapshot is not None else None
        try:
            same = check(ref, name, run, held or path, entry)
        except DatasetError as exc:
            result.problems.append(("changed", f"{key} (cannot derive it again: {exc.args[0]})"))
            continue
        if not same:
            result.problems.append(("changed", f"{key} (its rows differ from the run's)"))


def _no_check(dataset, name, run, path, entry=None):
    raise DatasetError(f"{name} is not a table kmemscope derives")


def root_path_of(dataset):
    return Path(os.path.abspath(dataset))
