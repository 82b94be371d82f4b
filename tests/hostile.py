"""Hostile inputs made at test time from real traces: nothing of the kind is committed.

A v6 trace.dat keeps each event system's name as a NUL-terminated string in
its format section, followed by the system's format count (4 bytes) and the
first format's size (8 bytes) and text (`name: ...`). Renaming a system or an
event to a name of the same length leaves every offset of the file valid, so
libtracecmd and kmemscope read the file as before, with the new names.
"""
import re
import tarfile
from pathlib import Path


def rename_system(data, old, new):
    """Rename event system `old` to `new` (same length) in a v6 trace's format section."""
    old, new = old.encode(), new.encode()
    assert len(old) == len(new), "renames must keep the length"
    pattern = re.compile(rb"(?<![a-z0-9_])" + re.escape(old) + rb"\x00(?=.{12}name: )", re.S)
    hits = list(pattern.finditer(data))
    assert len(hits) == 1, f"system {old!r} found {len(hits)} times"
    pos = hits[0].start()
    return data[:pos] + new + data[pos + len(new):]


def rename_event(data, old, new):
    """Rename event `old` to `new` (same length) in its format text."""
    old_line, new_line = f"name: {old}\nID: ".encode(), f"name: {new}\nID: ".encode()
    assert len(old_line) == len(new_line), "renames must keep the length"
    assert data.count(old_line) == 1, f"event {old} found {data.count(old_line)} times"
    return data.replace(old_line, new_line)


def write_tar(path, members, compression="gz"):
    """Write a tar archive of {name: bytes, or (size, pattern[, prefix]): `prefix` and then
    `pattern` (a byte, a line) repeated, `size` bytes in all} members."""
    import pyarrow as pa

    codec = "zstd" if compression == "zst" else "gzip"
    with pa.output_stream(str(path), compression=codec) as raw, \
            tarfile.open(fileobj=raw, mode="w|") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(content, tuple):
                info.size = content[0]
                tar.addfile(info, _Repeat(*content))
            else:
                info.size = len(content)
                tar.addfile(info, _Bytes(content))
    return Path(path)


def pax_header_bomb(path, size, members, compression="zst"):
    """A tar archive that opens with a pax extended header of `size` bytes (one valid
    `comment` record, produced as it is written), then `members` as write_tar writes them."""
    import gzip

    import pyarrow as pa

    head = tarfile.TarInfo("././@PaxHeader")
    head.type, head.size = tarfile.XHDTYPE, size
    prefix = f"{size} comment=".encode()
    # gzip at level 1: a GiB of one letter in seconds, not the quarter minute of level 9
    opened = (pa.output_stream(str(path), compression="zstd") if compression == "zst"
              else gzip.open(path, "wb", compresslevel=1))
    with opened as raw:
        raw.write(head.tobuf(format=tarfile.USTAR_FORMAT))
        raw.write(prefix)
        left, chunk = size - len(prefix) - 1, b"a" * (4 << 20)
        while left:
            n = min(left, len(chunk))
            raw.write(chunk[:n])
            left -= n
        raw.write(b"\n" + b"\0" * (-size % 512))
        with tarfile.open(fileobj=raw, mode="w|") as tar:
            for name, content in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, _Bytes(content))
    return Path(path)


class _Bytes:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def read(self, n=-1):
        n = len(self.data) - self.pos if n < 0 else n
        chunk = self.data[self.pos:self.pos + n]
        self.pos += len(chunk)
        return chunk


class _Repeat:
    """A file object of `size` bytes: `prefix`, then `pattern` over and over, produced as it
    is read."""

    def __init__(self, size, pattern, prefix=b""):
        self.pattern, self.left, self.pos, self.prefix = pattern, size, 0, prefix

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left)
        out = self.prefix[:n]
        self.prefix = self.prefix[len(out):]
        need = n - len(out)
        if need:
            reps = (self.pos + need) // len(self.pattern) + 1
            out += (self.pattern * reps)[self.pos:self.pos + need]
            self.pos = (self.pos + need) % len(self.pattern)
        self.left -= n
        return out


# ---------------------------------------------------------------- datasets and bundles

def tree_state(root):
    """{relative path: what is there} for everything under `root`, links never followed.

    A file maps to its sha256, a directory to "dir", a symbolic link to its
    target, a FIFO or device to its kind: any move, deletion, write or new entry
    shows as a difference.
    """
    import hashlib
    import os
    import stat

    root = Path(root)
    out = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link -> " + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = f"special {stat.S_IFMT(st.st_mode):o}"
    return out


def plant_work_dir(dataset, name, journal=None, stage=None):
    """A work folder `DATASET/NAME` as a dead parse would leave it.

    journal: the commit.json contents (a dict, or raw text) or None for none;
    stage: a path that `stage` links to, or None for a real, empty stage folder.
    Its owner.lock is present and unlocked (the parse is gone).
    """
    import json
    import os

    work = Path(dataset) / name
    work.mkdir()
    (work / "owner.lock").touch()
    if stage is None:
        (work / "stage").mkdir()
    else:
        os.symlink(stage, work / "stage")
    if journal is not None:
        text = journal if isinstance(journal, str) else json.dumps(journal)
        (work / "commit.json").write_text(text)
    return work


# ---------------------------------------------------------------- event formats and runs

def v6_copy(trace, dest):
    """`trace` rewritten by trace-cmd as an uncompressed v6 file (its formats are plain text)."""
    import subprocess

    subprocess.run(["trace-cmd", "convert", "-i", str(trace), "-o", str(dest),
                    "--file-version", "6", "--compression", "none"],
                   check=True, capture_output=True)
    return Path(dest).read_bytes()


def alter_field(data, event, old, new):
    """Replace field declaration `old` (e.g. "unsigned int order;") of `event` by `new`,
    padded with blanks to the same length, so that every offset of the file stays valid."""
    start = data.index(f"name: {event}\nID: ".encode())
    end = data.index(b"print fmt:", start)
    old_b = f"field:{old}\t".encode()
    new_b = f"field:{new[:-1].ljust(len(old) - 1)};\t".encode()
    assert len(new_b) == len(old_b), f"{new!r} is longer than {old!r}"
    pos = data.index(old_b, start, end)
    return data[:pos] + new_b + data[pos + len(old_b):]


def replace_part(dataset, table, run, columns):
    """Replace a run's partition of `table` by one Parquet file of `columns` ({name: pa.Array})."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    part = Path(dataset) / table / f"run_id={run}"
    for f in part.glob("*.parquet"):
        f.unlink()
    pq.write_table(pa.table(columns), part / "part-0.parquet")
    return part / "part-0.parquet"


# ---------------------------------------------------------------- races and bombs

class Swapper:
    """Swap the folder `path` with a link to `target` and back, over and over, in a thread:
    the race of a writer that checks a folder, then writes through its path.

        with hostile.Swapper(ds / "_derived/page_pairs/run_id=X", outside) as swap:
            ... run the writer ...
        assert swap.swaps > 0

    The real folder waits beside it (`<name>.real`) while the link is in place."""

    def __init__(self, path, target):
        self.path, self.target = Path(path), Path(target)
        self.aside = self.path.with_name(self.path.name + ".real")
        self.swaps = 0

    def _once(self):
        import os

        try:
            if self.path.is_dir() and not self.path.is_symlink():
                os.rename(self.path, self.aside)
            tmp = self.path.with_name(".swap-link")
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(self.target, tmp)
            os.rename(tmp, self.path)          # the link takes the folder's place
            self.swaps += 1
            os.sched_yield()
            os.unlink(self.path)
            if self.aside.is_dir():
                os.rename(self.aside, self.path)   # and the folder is back
        except OSError:
            pass                               # the writer made or moved something: go on

    def _loop(self):
        while not self._stop.is_set():
            self._once()

    def __enter__(self):
        import threading

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        import os

        self._stop.set()
        self._thread.join()
        if self.path.is_symlink():
            os.unlink(self.path)
        if self.aside.is_dir() and not os.path.lexists(self.path):
            os.rename(self.aside, self.path)
        return False


class WorkFolderSwapper(Swapper):
    """A Swapper of whichever work folder (DATASET/.parse-<12 hex>) a running parse has made:
    each round finds the folder anew, moves it aside and puts a link to `target` in its place."""

    def __init__(self, dataset, target):
        super().__init__(Path(dataset) / ".parse-none", target)
        self.dataset = Path(dataset)

    def _once(self):
        import os
        import re

        try:
            names = [n for n in os.listdir(self.dataset) if re.fullmatch(r"\.parse-[0-9a-f]{12}", n)]
        except OSError:
            names = []
        if not names:
            os.sched_yield()
            return
        self.path = self.dataset / names[0]
        self.aside = self.path.with_name(self.path.name + ".real")
        super()._once()


def row_bomb(dataset, table, run, rows):
    """Replace a run's partition of `table` by one small file of `rows` copies of its first
    row (runs of equal values compress to almost nothing: 200 M rows are a few MB)."""
    import duckdb

    part = Path(dataset) / table / f"run_id={run}"
    files = sorted(part.glob("*.parquet"))
    bomb = part / "bomb.tmp"
    con = duckdb.connect()
    try:
        src = "'" + str(files[0]).replace("'", "''") + "'"
        dest = "'" + str(bomb).replace("'", "''") + "'"
        con.execute(f"COPY (SELECT s.* FROM (SELECT * FROM read_parquet({src}, "
                    f"hive_partitioning = false) LIMIT 1) s, range({int(rows)})) TO {dest} "
                    "(FORMAT parquet, ROW_GROUP_SIZE 1000000)")
    finally:
        con.close()
    for f in files:
        f.unlink()
    bomb.rename(part / "part-0.parquet")
    return part / "part-0.parquet"


def wide_table(dataset, table, run, columns):
    """A partition of `table` holding one row of `columns` integer columns (a footer of
    tens of MB that any reader has to parse)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    part = Path(dataset) / table / f"run_id={run}"
    part.mkdir(parents=True, exist_ok=True)
    arr = pa.array([1], pa.int8())
    pq.write_table(pa.table([arr] * columns, names=[f"c{i}" for i in range(columns)]),
                   part / "part-0.parquet")
    return part / "part-0.parquet"


def long_host(dataset, run, length):
    """Rewrite a run's runs file with a host of `length` characters (one repeated letter)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = next((Path(dataset) / "runs" / f"run_id={run}").glob("*.parquet"))
    t = pq.read_table(f, partitioning=None)
    i = t.schema.get_field_index("host")
    t = t.set_column(i, t.schema.field(i), pa.array(["h" * length], pa.string()))
    pq.write_table(t, f, compression="zstd")
    return f


def sparse_part(path, size):
    """Replace the file at `path` by a sparse file of `size` bytes (no disk used)."""
    import os

    os.unlink(path)
    with open(path, "wb") as f:
        f.truncate(size)
    return Path(path)


def _tree(pid):
    """`pid` and its descendants, from /proc/<pid>/task/<tid>/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                pass
    return out


def run_measured(argv, timeout=900):
    """Run `argv` -> (returncode, stdout, stderr, peak RSS in MiB, seconds).

    The peak is the largest VmHWM (an address space's high-water mark, which starts afresh
    at exec) among the command's process and its children (the parse's decoder child, where
    unpacking and decoding happen), read every 20 ms while it runs: getrusage's maxrss
    would also count the memory of the process that started it (it survives exec)."""
    import subprocess
    import tempfile
    import time

    peak = 0
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        while proc.poll() is None:
            for pid in _tree(proc.pid):
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]))
                except (OSError, ValueError):
                    pass
            if time.monotonic() - started > timeout:
                proc.kill()
            time.sleep(0.02)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), peak / 1024, seconds
