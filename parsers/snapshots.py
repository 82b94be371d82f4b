"""/proc snapshots taken beside a bare trace.dat: `parse trace.dat --procfs-start DIR --procfs-end DIR`.

mmtests' monitors and most hand captures keep /proc/vmstat (and pagetypeinfo, buddyinfo)
from just before and just after a capture, beside a trace.dat that knows nothing of them.
Each folder holds copies of the /proc files as the kernel prints them, named as in /proc
(`vmstat`, `pagetypeinfo`, `buddyinfo`: any of them, the same ones in both), and may hold
`hostname` and `boot_id` (copies of /proc/sys/kernel/hostname and
/proc/sys/kernel/random/boot_id), which are then checked.

When each snapshot was taken: its file's mtime, or the times given (`--procfs-times`).
A bare trace has no wall clock, so the two snapshots are placed on the trace's timeline
with their own interval between them, centred on the trace's span: the run's vmstat rows
are the counters' increases over the snapshots' interval (which holds the capture), and
a note says how far the snapshots reach past the trace.

What does not fit is refused in one line before decoding: a file that is not that /proc
file, an end older than its start, an event counter that went backwards (the folders
swapped, or from two boots), two boot ids; and after decoding: a hostname other than the
trace's, snapshots closer together than the trace is long.
"""
import os
from dataclasses import dataclass, field
from pathlib import Path

from kmemscope.common.errors import TraceFileError
from kmemscope.parsers import procfs
from kmemscope.parsers.sources import clipped, open_bundle_file

FILES = ("vmstat", "pagetypeinfo", "buddyinfo")
SNAPSHOT_MAX_BYTES = 4 << 20          # a /proc/pagetypeinfo of a large machine is tens of KB
IDENTITY_MAX_BYTES = 256              # hostname, boot_id
# vmstat event counters, which only rise while a machine is up (the nr_* are gauges).
RISING = ("pgalloc_", "pgfree", "pgfault", "pgmajfault", "pgscan_", "pgsteal_", "pgpgin",
          "pgpgout", "pswpin", "pswpout", "allocstall_", "compact_", "thp_fault", "thp_collapse",
          "kswapd_", "oom_kill", "pgmigrate_")
HINT = "give the folders of /proc copies taken before and after this trace was recorded"


@dataclass
class Snapshot:
    """One folder's /proc copies: {name: text}, {name: when it was taken (Unix ns)}."""
    folder: str
    texts: dict = field(default_factory=dict)
    taken_ns: dict = field(default_factory=dict)
    hostname: str | None = None
    boot_id: str | None = None


@dataclass
class Snapshots:
    start: Snapshot
    end: Snapshot

    @property
    def interval_ns(self):
        name = next(iter(self.start.texts))
        return self.end.taken_ns[name] - self.start.taken_ns[name]

    def check_trace(self, source, host, first_ts, last_ts):
        """Refuse snapshots that cannot have been taken around the trace [first_ts, last_ts]."""
        for snap in (self.start, self.end):
            if snap.hostname and host and snap.hostname != host:
                raise TraceFileError(f"{source}: the snapshot {snap.folder} was taken on host "
                                     f"{clipped(snap.hostname, 64)}, the trace on "
                                     f"{clipped(host, 64)}", HINT)
        if first_ts is None or last_ts is None:
            raise TraceFileError(f"{source}: the trace has no events to place the snapshots by")
        span = last_ts - first_ts
        if self.interval_ns + procfs.SAMPLE_SLACK_NS < span:
            raise TraceFileError(
                f"{source}: the snapshots were taken {self.interval_ns / 1e9:.1f} s apart, the "
                f"trace spans {span / 1e9:.1f} s: they were not taken before and after it",
                "give the times they were taken with --procfs-times START,END when their "
                "files' mtimes are not those times")

    def sample_files(self, first_ts, last_ts):
        """{name: bytes of a kmemscope sample file of the two snapshots}, placed on the trace's
        timeline: their interval centred on the trace's span."""
        out = {}
        middle = (first_ts + last_ts) // 2
        for name, text in self.start.texts.items():
            interval = self.end.taken_ns[name] - self.start.taken_ns[name]
            at = middle - interval // 2
            out[name] = "".join(
                f"#kmemscope-sample mono_ns={mono} realtime_ns={snap.taken_ns[name]}\n"
                f"{snap.texts[name].rstrip(chr(10))}\n"
                for mono, snap in ((at, self.start), (at + interval, self.end))).encode()
        return out


def refuse_a_bundle(source):
    """Snapshots go with a bare trace.dat: a bundle (a folder or a packed one) has its own."""
    from kmemscope.parsers.sources import PACKED_SUFFIXES

    if Path(source).is_dir() or str(source).endswith(PACKED_SUFFIXES):
        raise TraceFileError(f"{source}: a bundle has its own /proc samples; --procfs-start and "
                             "--procfs-end are for a bare trace.dat", "parse the bundle alone")


def read_snapshots(start, end, times=None):
    """The Snapshots of the folders `start` and `end`, checked against each other.

    times: (start, end) Unix seconds the snapshots were taken, or None for their files' mtimes.
    """
    snaps = [_read_folder(folder) for folder in (start, end)]
    first, last = snaps
    if set(first.texts) != set(last.texts):
        raise TraceFileError(f"{start} holds {', '.join(sorted(first.texts)) or 'no /proc copy'}, "
                             f"{end} holds {', '.join(sorted(last.texts)) or 'no /proc copy'}: "
                             "a snapshot needs the same files before and after", HINT)
    if times is not None:
        for snap, when in zip(snaps, times):
            snap.taken_ns = {name: int(when * 1e9) for name in snap.texts}
    for name in first.texts:
        if last.taken_ns[name] < first.taken_ns[name]:
            early = (first.taken_ns[name] - last.taken_ns[name]) / 1e9
            raise TraceFileError(f"the end snapshot {end}/{name} is {early:.1f} s older than the "
                                 f"start snapshot {start}/{name}",
                                 "swap --procfs-start and --procfs-end, or give --procfs-times")
    if first.boot_id and last.boot_id and first.boot_id != last.boot_id:
        raise TraceFileError(f"{start} and {end} were taken in two boots (boot_id "
                             f"{clipped(first.boot_id, 40)} and {clipped(last.boot_id, 40)})", HINT)
    if "vmstat" in first.texts:
        _counters_rise(first, last)
    return Snapshots(first, last)


def _read_folder(folder):
    snap = Snapshot(str(folder))
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise TraceFileError(f"{folder}: {exc.strerror}", HINT) from None
    try:
        for name in FILES:
            text, st = _text(folder, fd, name, SNAPSHOT_MAX_BYTES)
            if text is not None:
                _check_kind(Path(folder) / name, name, text)
                snap.texts[name] = text
                snap.taken_ns[name] = st.st_mtime_ns
        snap.hostname = (_text(folder, fd, "hostname", IDENTITY_MAX_BYTES)[0] or "").strip() or None
        snap.boot_id = (_text(folder, fd, "boot_id", IDENTITY_MAX_BYTES)[0] or "").strip() or None
    finally:
        os.close(fd)
    if not snap.texts:
        raise TraceFileError(f"{folder}: holds none of {', '.join(FILES)}", HINT)
    return snap


def _text(folder, dir_fd, name, limit):
    """(text, stat) of the regular file `name` in the folder (no link followed), or (None, None)."""
    shown = Path(folder) / name
    try:
        fd, st = open_bundle_file(name, f"/proc copy {name}", dir_fd, shown=shown)
    except FileNotFoundError:
        return None, None
    with os.fdopen(fd, "rb") as f:
        os.set_blocking(fd, True)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TraceFileError(f"{shown}: more than {limit >> 10} KiB: not a copy of /proc/{name}",
                             HINT)
    # the line bound of a bundle's sample files (procfs.SampleReader) holds for a copy too
    for number, line in enumerate(data.split(b"\n"), 1):
        if len(line) > procfs.MAX_LINE_BYTES:
            raise TraceFileError(f"{shown}: line {number} is longer than "
                                 f"{procfs.MAX_LINE_BYTES} bytes (a /proc line is under 200): "
                                 f"not a copy of /proc/{name}", HINT)
    return data.decode("utf-8", "replace"), st


_PARSERS = {"vmstat": procfs.parse_vmstat, "pagetypeinfo": procfs.parse_pagetypeinfo,
            "buddyinfo": procfs.parse_buddyinfo}


def _check_kind(path, name, text):
    """Refuse a file that is not the /proc file it is named after (or a kmemscope sample file)."""
    try:
        parsed = _PARSERS[name](text)
    except procfs.OutOfRange as exc:
        raise TraceFileError(f"{path}: line {exc.index + 1}: {exc}", HINT) from None
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if name == "vmstat":
        bad = next((i for i, ln in lines if len(ln.split()) != 2
                    or not procfs._is_int(ln.split()[1])), None)
        ok = bad is None and any(n == "nr_free_pages" for n, _v in parsed)
    elif name == "pagetypeinfo":
        bad, ok = None, bool(parsed[0])
    else:
        bad = next((i for i, ln in lines if not procfs.parse_buddyinfo(ln)), None)
        ok = bad is None and bool(parsed)
    if not ok:
        where = f" (line {bad}: {clipped(dict(lines)[bad], 60)})" if bad else ""
        raise TraceFileError(f"{path} is not a copy of /proc/{name}{where}", HINT)


def _counters_rise(first, last):
    before = dict(procfs.parse_vmstat(first.texts["vmstat"]))
    after = dict(procfs.parse_vmstat(last.texts["vmstat"]))
    fell = sorted(n for n in before.keys() & after.keys()
                  if n.startswith(RISING) and after[n] < before[n])
    if fell:
        n = fell[0]
        others = f" and {len(fell) - 1} more counters" if len(fell) > 1 else ""
        raise TraceFileError(
            f"{last.folder}/vmstat: {n} went backwards ({before[n]} in {first.folder}, "
            f"{after[n]} after){others}: the snapshots are swapped or from two boots", HINT)


def parse_times(text):
    """`START,END` Unix seconds -> (start, end); ValueError when it is not that."""
    start, sep, end = text.partition(",")
    if not sep:
        raise ValueError("give START,END")
    return float(start), float(end)

