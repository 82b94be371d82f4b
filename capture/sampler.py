"""Copy /proc allocator files into the bundle every interval, on the trace's clock.

Each sample is preceded by one header line:

    #kmemscope-sample mono_ns=<CLOCK_MONOTONIC ns> realtime_ns=<CLOCK_REALTIME ns>

followed by the file's text as the kernel printed it. The trace is recorded
with trace-cmd's `mono` clock, so mono_ns places the sample on the same
timeline as the events (parsers/procfs.py reads these files).

When debugfs is mounted, the kernel's own fragmentation measures
(extfrag/unusable_index and extfrag/extfrag_index, mm/vmstat.c) are sampled
beside /proc/buddyinfo, into procfs/unusable_index and procfs/extfrag_index.
/proc/buddyinfo is read again after them: when it is unchanged, the readings
describe the same free lists as the buddyinfo sample of that pass and carry
its header's timestamps; otherwise they carry the time they were read.

Beside the counts, what they cost, wherever the kernel has it (cost sources,
each probed once when the sampler is made; an absent one is named with why in
the manifest, and one that fails mid-capture stops alone, the capture goes on):

    pressure_memory  /proc/pressure/memory as printed (CONFIG_PSI, 4.20+)
    stat             the `cpu` and `cpuN` lines of /proc/stat (clock ticks)
    kthreads         one line `PID COMM UTIME STIME` (clock ticks, fields 14 and 15
                     of /proc/PID/stat) per kswapd*, kcompactd* and khugepaged kernel
                     thread, followed by ` ns=RUN_NS` where /proc/PID/schedstat exists
                     (its first field: the thread's time on a CPU in nanoseconds, which
                     a 10 ms tick cannot resolve); the threads are found by name at start and again when
                     kthreadd's children change (or every KTHREAD_RESCAN_S without
                     CONFIG_PROC_CHILDREN), and a thread that exits is dropped
    mthp             one line `SIZE_KB COUNTER VALUE` per file of
                     /sys/kernel/mm/transparent_hugepage/hugepages-<SIZE>kB/stats/
                     (6.10+), sizes and counters as listed at start
"""
import collections
import os
import re
import threading
import time

from kmemscope.common.errors import CaptureError

from kmemscope.capture.tracefs import read_text as _read_text  # os.read: cheap, for days

HEADER = "#kmemscope-sample"
SOURCES = ("vmstat", "pagetypeinfo", "buddyinfo")
# CONFIG_DEBUG_FS and CONFIG_COMPACTION kernels, with debugfs mounted
EXTFRAG_DIR = "/sys/kernel/debug/extfrag"
EXTFRAG_SOURCES = ("unusable_index", "extfrag_index")


# Cost sources, in the order they are sampled (module docstring); the absent ones say why.
COST_SOURCES = ("pressure_memory", "stat", "kthreads", "mthp")
COST_ABSENT = {
    "pressure_memory": "no /proc/pressure/memory: kernel without CONFIG_PSI (4.20+) or booted "
                       "with psi=0; no memory pressure samples",
    "stat": "no /proc/stat; no CPU time samples",
    "kthreads": "no /proc/PID folders to find kswapd, kcompactd and khugepaged in; no kernel "
                "thread CPU samples",
    "mthp": "no /sys/kernel/mm/transparent_hugepage/hugepages-*kB/stats/ (mTHP statistics, "
            "6.10+ with CONFIG_TRANSPARENT_HUGEPAGE); no per-size mTHP samples",
}
THP_SYSFS = "kernel/mm/transparent_hugepage"
KTHREAD_RESCAN_S = 10.0
PF_KTHREAD = 0x00200000          # include/linux/sched.h: a kernel thread (field 9 of /proc/PID/stat)
# The kernel threads that do the allocator's background work, by their comm: kswapdN
# (kswapdN:M on kernels with several per node), kcompactdN and khugepaged.
KTHREAD_NAMES = (("kswapd", re.compile(r"kswapd\d+(:\d+)?")),
                 ("kcompactd", re.compile(r"kcompactd\d+")),
                 ("khugepaged", re.compile(r"khugepaged")))


def kthread_kind(comm):
    """'kswapd', 'kcompactd' or 'khugepaged' for such a thread's comm, else None."""
    for kind, pattern in KTHREAD_NAMES:
        if pattern.fullmatch(comm):
            return kind
    return None


def header_line(mono_ns, realtime_ns):
    return "%s mono_ns=%d realtime_ns=%d\n" % (HEADER, mono_ns, realtime_ns)


def cpu_lines(text):
    """The `cpu` and `cpuN` lines of /proc/stat text (the rest counts interrupts, not time)."""
    return "".join(line for line in text.splitlines(True) if line.startswith("cpu"))


def stat_fields(text):
    """(comm, fields after the comm) of /proc/PID/stat text: the comm is between the first
    '(' and the last ')', so a comm with spaces or parentheses still splits right."""
    left, right = text.find("("), text.rfind(")")
    if left < 0 or right < left:
        return None, []
    return text[left + 1:right], text[right + 1:].split()


class KernelThreads:
    """The kswapd*, kcompactd* and khugepaged kernel threads of a /proc and their CPU time."""

    def __init__(self, proc="/proc"):
        self.proc = proc
        self.pids = {}                   # pid -> comm
        self._children = None            # kthreadd's children as last read
        self._scanned_at = None          # monotonic s of the last full scan (no children file)

    def available(self):
        try:
            return any(name.isdigit() for name in os.listdir(self.proc))
        except OSError:
            return False

    def _thread(self, pid):
        """(comm, utime, stime, run_ns) of a kernel thread of ours with `pid`, else None;
        run_ns None where the kernel has no schedstat (CONFIG_SCHED_INFO)."""
        try:
            comm, fields = stat_fields(_read_text(os.path.join(self.proc, str(pid), "stat")))
        except (OSError, UnicodeDecodeError):
            return None               # exited (ENOENT, ESRCH) or not a process folder
        if comm is None or len(fields) < 13 or kthread_kind(comm) is None:
            return None
        try:
            flags, utime, stime = int(fields[6]), int(fields[11]), int(fields[12])
        except ValueError:
            return None
        if not flags & PF_KTHREAD:
            return None               # a user task that named itself like one
        return comm, utime, stime, self._run_ns(pid)

    def _run_ns(self, pid):
        """The first field of /proc/PID/schedstat (sum_exec_runtime: ns on a CPU), or None."""
        try:
            fields = _read_text(os.path.join(self.proc, str(pid), "schedstat")).split()
        except (OSError, UnicodeDecodeError):
            return None
        return int(fields[0]) if fields and fields[0].isdigit() else None

    def _candidates(self):
        """The pids to look at for new threads now, or () when nothing may have appeared."""
        try:
            text = _read_text(os.path.join(self.proc, "2", "task", "2", "children"))
        except (OSError, UnicodeDecodeError):
            text = None               # no CONFIG_PROC_CHILDREN: list /proc now and then
        if text is not None:
            if text == self._children:
                return ()
            self._children = text
            return [int(t) for t in text.split() if t.isdigit()]
        now = time.monotonic()
        if self._scanned_at is not None and now - self._scanned_at < KTHREAD_RESCAN_S:
            return ()
        self._scanned_at = now
        try:
            return [int(n) for n in os.listdir(self.proc) if n.isdigit()]
        except OSError:
            return ()

    def read(self):
        """One line `PID COMM UTIME STIME[ ns=RUN_NS]` per thread, pids in order."""
        for pid in self._candidates():
            if pid not in self.pids:
                found = self._thread(pid)
                if found is not None:
                    self.pids[pid] = found[0]
        lines = []
        for pid in sorted(self.pids):
            found = self._thread(pid)
            if found is None or found[0] != self.pids[pid]:
                del self.pids[pid]       # exited (or its pid reused): look again next time
                self._children = None
                continue
            comm, utime, stime, run_ns = found
            ns = "" if run_ns is None else " ns=%d" % run_ns
            lines.append("%d %s %d %d%s\n" % (pid, comm, utime, stime, ns))
        return "".join(lines)


class MthpStats:
    """The per-size mTHP counters of a sysfs: hugepages-<N>kB/stats/<counter>, as listed at start."""

    def __init__(self, sys="/sys"):
        self.files = []                  # (size_kb, counter, path), by size then counter
        top = os.path.join(sys, THP_SYSFS)
        try:
            names = os.listdir(top)
        except OSError:
            return
        for name in names:
            m = re.fullmatch(r"hugepages-(\d+)kB", name)
            stats = os.path.join(top, name, "stats")
            if not m or not os.path.isdir(stats):
                continue
            try:
                counters = sorted(os.listdir(stats))
            except OSError:
                continue
            self.files += [(int(m.group(1)), c, os.path.join(stats, c)) for c in counters]
        self.files.sort()

    def read(self):
        """One line `SIZE_KB COUNTER VALUE` per counter file."""
        return "".join("%d %s %s\n" % (size, counter, _read_small(path))
                       for size, counter, path in self.files)


def _read_small(path):
    """A one-value sysfs file's text, stripped: os.open and one os.read, half the time of
    open() on the ~150 files of a 6.18 kernel's mTHP stats (1 ms a sample here)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        os.close(fd)


def cost_readers(proc="/proc", sys="/sys"):
    """({cost source: a function giving one sample's text}, {absent cost source: why}) of
    this kernel, probed now."""
    readers, absent = {}, {}
    pressure, stat = os.path.join(proc, "pressure", "memory"), os.path.join(proc, "stat")
    threads, mthp = KernelThreads(proc), MthpStats(sys)
    probes = {
        "pressure_memory": (lambda: _read_text(pressure), lambda: _read_text(pressure)),
        "stat": (lambda: _read_text(stat), lambda: cpu_lines(_read_text(stat))),
        "kthreads": (lambda: threads.available() or None, threads.read),
        "mthp": (lambda: mthp.files or None, mthp.read),
    }
    for name in COST_SOURCES:
        probe, reader = probes[name]
        try:
            ok = probe() is not None
        except (OSError, ValueError):
            ok = False
        if ok:
            readers[name] = reader
        else:
            absent[name] = COST_ABSENT[name]
    return readers, absent


class ProcfsSampler:
    """A thread that appends one sample of each source every `interval` seconds."""

    def __init__(self, out_dir, interval, zoneinfo=False, proc="/proc", sys="/sys"):
        self.out_dir, self.interval, self.proc = out_dir, interval, proc
        self._readers, self.cost_absent = cost_readers(proc, sys)
        self.sources = SOURCES + (("zoneinfo",) if zoneinfo else ()) + tuple(self._readers)
        self.cost_errors = {}            # cost source -> why it stopped mid-capture
        self.samples = 0
        self.error = None
        self._stop = threading.Event()
        self._thread = None
        self._files = {}

    def open(self):
        os.makedirs(self.out_dir, mode=0o700, exist_ok=True)
        for name in self.sources:
            fd = os.open(os.path.join(self.out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._files[name] = os.fdopen(fd, "w")
        self._open_extfrag()

    def sample(self):
        """Take one sample of every source now (also called for the first and last)."""
        for name, out in list(self._files.items()):
            mono_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            realtime_ns = time.time_ns()
            text = self._read(name)
            if text is None:
                out.close()
                del self._files[name]
                continue
            # One write per sample, flushed: a killed record leaves whole samples.
            out.write(header_line(mono_ns, realtime_ns) + text)
            out.flush()
            self._taken[name] = (mono_ns, realtime_ns, text)
        self._sample_extfrag()
        self.samples += 1

    def _read(self, name):
        """The text of one sample of `name`; None for a cost source that failed (it stops
        alone: cost_errors says why). A failed read of the allocator's files raises."""
        if name in self.cost_errors:
            return None
        reader = self._readers.get(name)
        if reader is None:
            return _read_text(os.path.join(self.proc, name))
        try:
            return reader()
        except (OSError, ValueError) as exc:     # ValueError: a file that is not text
            self.cost_errors[name] = str(exc)
            del self._readers[name]
            return None

    def cost_manifest(self):
        """The manifest's `cost_samples`: what was sampled, what is absent and why, what stopped."""
        return {"sampled": [n for n in COST_SOURCES if n in self.sources],
                "absent": dict(self.cost_absent), "stopped": dict(self.cost_errors)}

    # ------------------------------------------------------------ debugfs extfrag indices
    extfrag_dir = EXTFRAG_DIR
    extfrag_samples = 0         # written with the buddyinfo sample's timestamps
    extfrag_unmatched = 0       # written with their own: buddyinfo changed while they were read
    extfrag_error = None        # a read that failed: extfrag sampling stopped, the capture goes on
    _extfrag_files: dict = {}         # these two are per instance from open() on
    _taken: dict = {}                 # source -> (mono_ns, realtime_ns, text) of this pass

    def _open_extfrag(self):
        """Open procfs/<name> for each extfrag index debugfs shows (none: debugfs not mounted)."""
        self._extfrag_files, self._taken = {}, {}
        for name in EXTFRAG_SOURCES:
            path = os.path.join(self.extfrag_dir, name)
            if not (os.path.isfile(path) and os.access(path, os.R_OK)):
                continue
            fd = os.open(os.path.join(self.out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._extfrag_files[name] = os.fdopen(fd, "w")

    def _sample_extfrag(self):
        if not self._extfrag_files or "buddyinfo" not in self._taken:
            return
        mono_ns, realtime_ns, buddyinfo = self._taken["buddyinfo"]
        try:
            read_at = (time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.time_ns())
            texts = {}
            for name in self._extfrag_files:
                with open(os.path.join(self.extfrag_dir, name)) as f:
                    texts[name] = f.read()
            with open(os.path.join(self.proc, "buddyinfo")) as f:
                same = f.read() == buddyinfo
        except OSError as exc:
            self.extfrag_error = exc
            self._close_extfrag()
            return
        stamp = (mono_ns, realtime_ns) if same else read_at
        for name, out in self._extfrag_files.items():
            out.write(header_line(*stamp) + texts[name])
            out.flush()
        if same:
            self.extfrag_samples += 1
        else:
            self.extfrag_unmatched += 1

    def _close_extfrag(self):
        for out in self._extfrag_files.values():
            out.close()
        self._extfrag_files = {}

    def _run(self):
        next_at = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            try:
                self.sample()
            except (OSError, CaptureError) as exc:   # CaptureError: on_sample's, a bad counter
                self.error = exc  # the recorder sees this and stops the capture
                return
            next_at += self.interval
            if next_at < time.monotonic():  # fell behind (a stalled disk): skip, don't burst
                next_at = time.monotonic() + self.interval

    def start(self):
        self._thread = threading.Thread(target=self._run, name="kmemscope-sampler", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self):
        self.stop()
        for out in self._files.values():
            out.close()
        self._files = {}
        self._close_extfrag()


class RollingSampler(ProcfsSampler):
    """The same samples kept in memory for the last `keep_s` seconds only (a flight recorder).

    Nothing is written until write_window() copies the samples of a window
    into a bundle, in the format of ProcfsSampler's files. on_sample({source:
    (mono_ns, text)}) is called from the sampler thread after each sample.

    every_s: {source: seconds} for sources read less often than every interval
    (pagetypeinfo costs 10-15 ms of CPU a read, a recorder runs for days);
    want() asks for them at the next sample anyway (a trigger's moment).
    """

    def __init__(self, interval, keep_s, zoneinfo=False, proc="/proc", on_sample=None,
                 every_s=None, sys="/sys"):
        super().__init__(None, interval, zoneinfo, proc, sys)
        self.every_ns = {name: int(s * 1e9) for name, s in (every_s or {}).items()}
        self._last_read = {}
        self._wanted = set()
        self.keep_ns = int(keep_s * 1e9)
        # A bound on the count too, so a clock step cannot grow the store.
        self.max_rows = int(keep_s / interval) + 4
        self.rows: collections.deque = collections.deque()
        self.on_sample = on_sample
        self._lock = threading.Lock()

    def open(self):
        pass

    def want(self, name):
        """Read `name` at the next sample even if it is not due."""
        self._wanted.add(name)

    def _due(self, name, mono_ns):
        every = self.every_ns.get(name)
        if every is None or name in self._wanted:
            return True
        last = self._last_read.get(name)
        return last is None or mono_ns - last >= every - self.interval * 1e9 / 2

    def sample(self):
        texts = {}
        mono_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        for name in self.sources:
            if name in self.cost_errors or not self._due(name, mono_ns):
                continue
            self._wanted.discard(name)
            self._last_read[name] = mono_ns
            stamp = (time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.time_ns())
            text = self._read(name)
            if text is not None:
                texts[name] = (stamp, text)
        with self._lock:
            self.rows.append((mono_ns, texts))
            while self.rows and (len(self.rows) > self.max_rows or
                                 self.rows[0][0] < mono_ns - self.keep_ns):
                self.rows.popleft()
        self.samples += 1
        if self.on_sample is not None:
            # each source with the CLOCK_MONOTONIC time its header in the bundle carries
            self.on_sample({name: (stamp[0], text) for name, (stamp, text) in texts.items()})

    def bytes_held(self):
        with self._lock:
            return sum(len(text) for _, texts in self.rows for _, text in texts.values())

    def write_window(self, out_dir, start_ns, end_ns):
        """Write the samples taken in [start_ns, end_ns] (and the one before) to out_dir; their count."""
        with self._lock:
            rows = list(self.rows)
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
        count = 0
        for name in self.sources:
            # each source's own samples: a slower one has fewer, and its own one before the window
            have = [r for r in rows if name in r[1]]
            chosen = [r for r in have if r[0] < start_ns][-1:] + \
                [r for r in have if start_ns <= r[0] <= end_ns]
            fd = os.open(os.path.join(out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                for _, texts in chosen:
                    (mono_ns, realtime_ns), text = texts[name]
                    out.write(header_line(mono_ns, realtime_ns) + text)
            count = max(count, len(chosen))
        return count

    def close(self):
        self.stop()
