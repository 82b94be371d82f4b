"""Copy /proc allocator files into the bundle every interval, on the trace's clock.

Each sample is preceded by one header line:

    #kmemscope-sample mono_ns=<CLOCK_MONOTONIC ns> realtime_ns=<CLOCK_REALTIME ns>

followed by the file's text as the kernel printed it. The trace is recorded
with trace-cmd's `mono` clock, so mono_ns places the sample on the same
timeline as the events (parsers/procfs.py reads these files).
"""
import os
import threading
import time

HEADER = "#kmemscope-sample"
SOURCES = ("vmstat", "pagetypeinfo", "buddyinfo")


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
        self.samples += 1

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
