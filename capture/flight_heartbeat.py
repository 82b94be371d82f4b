"""The flight recorder's heartbeat: a mark in its own instance every HEARTBEAT_S.

The recorder writes `kmemscope-heartbeat INSTANCE N` to the trace_marker of the
instance that is recording (the first one between triggers, the --after one
while a bundle is pending), N counting up. What the write says is known at
once: the kernel refuses it (EBADF) while the instance's tracing_on is 0, or
its non-overwriting buffer is full. What a write that went in says is known
from the data: each one is an ftrace print event in the instance's buffer, so
a heartbeat written inside a bundle's window and missing from its trace.dat
means the instance lost what it held there (cleared, consumed by a reader,
removed, or off between two of the recorder's checks). A bundle's manifest
lists the heartbeats that went in (window.heartbeat); parse finds the missing
ones (parsers/flight_window.py).

Cost: one open, write and close of a ~40-byte text, twice a second (9 µs of
the recorder's CPU each over 2000 writes in a row, 55 µs each in an idle
recorder on a loaded host, where the caches are cold, and as much again for
the wake-up that writes it: an idle recorder's wake-ups are most of what it
costs, so HEARTBEAT_S is the tracing_on granularity a bundle states and no
less), and 2 print events a second in the buffer (65 bytes each: 0.13 KiB/s).
No tracepoint is enabled for it.
"""
import collections
import errno
import os

HEARTBEAT_S = 0.5
PREFIX = "kmemscope-heartbeat"


def beat_text(name, seq):
    return "%s %s %d\n" % (PREFIX, name, seq)


class Heartbeat:
    """The heartbeats written, per instance, for as long as a window reaches back."""

    def __init__(self, keep_s):
        self.seq = 0
        self.last_ns = None
        self.keep_ns = int(keep_s * 1e9)
        self.written: dict = {}        # instance name -> deque of (seq, mono_ns) that went in
        self.refused = 0

    def due(self, now):
        # (a wake-up a little early still writes: one every HEARTBEAT_S, not every two)
        return self.last_ns is None or now - self.last_ns >= HEARTBEAT_S * 0.75e9

    def write(self, inst_dir, name, now):
        """Write the next heartbeat into instance `name` at `now` (taken just before the
        write: the event's time is later). Returns None when it went in, else the errno
        name (EBADF: not tracing, or a full buffer that does not overwrite)."""
        self.last_ns = now
        self.seq += 1
        try:
            fd = os.open(os.path.join(inst_dir, "trace_marker"), os.O_WRONLY)
            try:
                os.write(fd, beat_text(name, self.seq).encode())
            finally:
                os.close(fd)
        except OSError as exc:
            self.refused += 1
            return errno.errorcode.get(exc.errno or 0, str(exc.errno))
        beats = self.written.setdefault(name, collections.deque())
        beats.append((self.seq, now))
        while beats and beats[0][1] < now - self.keep_ns:
            beats.popleft()
        return None

    def between(self, name, lo, hi):
        """[[seq, mono_ns]] of the heartbeats written into `name` in [lo, hi]."""
        return [[seq, t] for seq, t in self.written.get(name, ()) if lo <= t <= hi]
