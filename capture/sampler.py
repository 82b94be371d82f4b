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
"""
import collections
import os
import threading
import time

HEADER = "#kmemscope-sample"
SOURCES = ("vmstat", "pagetypeinfo", "buddyinfo")
# CONFIG_DEBUG_FS and CONFIG_COMPACTION kernels, with debugfs mounted
EXTFRAG_DIR = "/sys/kernel/debug/extfrag"
EXTFRAG_SOURCES = ("unusable_index", "extfrag_index")


def header_line(mono_ns, realtime_ns):
    return "%s mono_ns=%d realtime_ns=%d\n" % (HEADER, mono_ns, realtime_ns)


class ProcfsSampler:
    """A thread that appends one sample of each source every `interval` seconds."""

    def __init__(self, out_dir, interval, zoneinfo=False, proc="/proc"):
        self.out_dir, self.interval, self.proc = out_dir, interval, proc
        self.sources = SOURCES + (("zoneinfo",) if zoneinfo else ())
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
        for name, out in self._files.items():
            mono_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            realtime_ns = time.time_ns()
            with open(os.path.join(self.proc, name)) as f:
                text = f.read()
            # One write per sample, flushed: a killed record leaves whole samples.
            out.write(header_line(mono_ns, realtime_ns) + text)
            out.flush()
            self._taken[name] = (mono_ns, realtime_ns, text)
        self._sample_extfrag()
        self.samples += 1

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
            except OSError as exc:
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
                 every_s=None):
        super().__init__(None, interval, zoneinfo, proc)
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
            if not self._due(name, mono_ns):
                continue
            self._wanted.discard(name)
            self._last_read[name] = mono_ns
            stamp = (time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.time_ns())
            with open(os.path.join(self.proc, name)) as f:
                texts[name] = (stamp, f.read())
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
