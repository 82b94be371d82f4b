"""What makes a flight recorder write a bundle: the conditions and how each is watched.

    psi.memory.some>PCT[%][@WINDOW]   share of WINDOW in which some task stalled on memory
    psi.memory.full>PCT[%][@WINDOW]   ... in which every non-idle task stalled on memory
    vmstat.NAME>RATE[/s][@WINDOW]     increase of /proc/vmstat's NAME per second over WINDOW
    thp.fallback>PCT[%][@WINDOW]      share of THP faults that fell back to small pages
                                      (thp_fault_fallback / (thp_fault_alloc + thp_fault_fallback))
    manual                            SIGUSR1 (always on)

PSI conditions use the kernel's own trigger interface: `some STALL_US WINDOW_US`
written to /proc/pressure/memory, then poll(2) for POLLPRI. The kernel takes
windows of 0.5-10 s, and from a process without CAP_SYS_RESOURCE only whole
multiples of 2 s. A wake-up is only a hint: the condition holds when the
file's `total=` microseconds, read by the recorder itself, show the threshold
over a whole window of its own readings (PsiHistory.check); that share is the
value recorded. Until the readings span one window the condition is not armed,
so stalls from before the start (or the kernel waking a fresh trigger) do not fire.

vmstat and THP conditions are computed from the flight recorder's own vmstat
samples (the ones the bundle holds), between the newest sample and the newest
one at least WINDOW older; the value recorded is that rate or share.
"""
import errno
import os
import re
import select

from kmemscope.common.errors import CaptureError
from kmemscope.capture.units import parse_duration

PSI_PATH = "/proc/pressure/memory"
CAP_SYS_RESOURCE = 24
PSI_MIN_WINDOW_S, PSI_MAX_WINDOW_S = 0.5, 10.0
# A THP ratio over fewer faults than this says nothing: it does not fire.
THP_MIN_FAULTS = 8
DEFAULT_WINDOW_S = {"psi": 2.0, "vmstat": 5.0, "thp": 10.0}

_SPEC = re.compile(r"^\s*(?P<name>[a-z][a-z0-9_.]*)\s*>\s*(?P<value>\d+(?:\.\d+)?)\s*"
                   r"(?P<unit>%|/s)?\s*(?:@\s*(?P<window>\S+))?\s*$")
SYNTAX = ("write psi.memory.some>PCT%, psi.memory.full>PCT%, vmstat.NAME>RATE/s or "
          "thp.fallback>PCT%, each optionally @WINDOW (e.g. vmstat.compact_stall>20/s@5s)")


class Trigger:
    """One condition: kind ('psi', 'vmstat', 'thp'), name, threshold, window."""

    def __init__(self, kind, name, threshold, window_s, unit):
        self.kind, self.name, self.threshold = kind, name, threshold
        self.window_s, self.unit = window_s, unit

    @property
    def reason(self):
        """A short name for directories and labels: 'vmstat.compact_stall'."""
        return {"psi": "psi.memory.", "vmstat": "vmstat.", "thp": "thp."}[self.kind] + self.name

    @property
    def condition(self):
        """The condition as the command line writes it, normalised."""
        return "%s>%g%s@%gs" % (self.reason, self.threshold, self.unit, self.window_s)

    def as_dict(self):
        return {"reason": self.reason, "condition": self.condition, "kind": self.kind,
                "threshold": self.threshold, "unit": self.unit, "window_s": self.window_s}


def parse_trigger(text):
    """'vmstat.compact_stall>20/s@5s' -> Trigger; CaptureError naming what is wrong."""
    m = _SPEC.match(text)
    if not m:
        raise CaptureError("bad trigger %r" % text, SYNTAX)
    name, value, unit = m.group("name"), float(m.group("value")), m.group("unit")
    if name in ("psi.memory.some", "psi.memory.full"):
        kind, short, want_unit = "psi", name.rsplit(".", 1)[1], "%"
    elif name.startswith("vmstat.") and re.fullmatch(r"[a-z0-9_]+", name[len("vmstat."):]):
        kind, short, want_unit = "vmstat", name[len("vmstat."):], "/s"
    elif name == "thp.fallback":
        kind, short, want_unit = "thp", "fallback", "%"
    else:
        raise CaptureError("unknown trigger %r" % name, SYNTAX)
    if unit is not None and unit != want_unit:
        raise CaptureError("trigger %r takes a threshold in %s, not %s" % (name, want_unit, unit),
                           SYNTAX)
    if want_unit == "%" and not 0 < value < 100:
        raise CaptureError("trigger %r: %g%% is not a share between 0 and 100" % (name, value))
    if want_unit == "/s" and value <= 0:
        raise CaptureError("trigger %r: the rate must be positive" % name)
    window = parse_duration(m.group("window")) if m.group("window") else DEFAULT_WINDOW_S[kind]
    if window <= 0:
        raise CaptureError("trigger %r: the window must be positive" % name)
    if kind == "psi":
        check_psi_window(window)
    return Trigger(kind, short, value, window, want_unit)


def has_capability(bit, status_path="/proc/self/status"):
    """True when this process's effective capabilities include `bit`."""
    try:
        with open(status_path) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def check_psi_window(window_s, privileged=None):
    """Refuse a window the kernel would refuse, saying why (before anything changes)."""
    if not PSI_MIN_WINDOW_S <= window_s <= PSI_MAX_WINDOW_S:
        raise CaptureError("a PSI trigger window must be 0.5-10 s, not %g s" % window_s,
                           "write e.g. psi.memory.some>10%@2s")
    if privileged is None:
        privileged = has_capability(CAP_SYS_RESOURCE)
    us = round(window_s * 1e6)
    if not privileged and us % 2000000:
        raise CaptureError("without CAP_SYS_RESOURCE the kernel takes only PSI windows that are "
                           "multiples of 2 s, not %g s" % window_s,
                           "write @2s, @4s, ... or run with CAP_SYS_RESOURCE")


# ---------------------------------------------------------------- PSI

# digits of the largest counter the kernel prints (2**64 - 1)
COUNTER_DIGITS = 20


def counter(value, path, number):
    """The int of a counter's text (ASCII digits, a '-' first allowed), None for other text.

    A number longer than any counter is refused in one line naming the file and line, the
    number clipped: Python's int() would refuse 4300 digits and more with a message that
    names neither."""
    digits = value[1:] if value.startswith("-") else value
    if not (digits.isascii() and digits.isdigit()):
        return None
    if len(digits.lstrip("0")) > COUNTER_DIGITS:
        shown = value if len(value) <= 24 else "%s... (%d characters)" % (value[:24], len(value))
        raise CaptureError("%s: line %d: %s is out of range for a counter" % (path, number, shown),
                           "the file is not a /proc file as the kernel prints it")
    return int(value)


def parse_pressure(text, path=PSI_PATH):
    """/proc/pressure/memory -> {'some': total_us, 'full': total_us}."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        for word in words[1:]:
            key, _, value = word.partition("=")
            total = counter(value, path, number) if key == "total" else None
            if total is not None and total >= 0:
                out[words[0]] = total
    return out


class PsiWatch:
    """The kernel's PSI trigger for one condition: an fd to poll for POLLPRI."""

    def __init__(self, trigger, path=PSI_PATH):
        self.trigger, self.path, self.fd = trigger, path, None

    def open(self):
        t = self.trigger
        window_us = round(t.window_s * 1e6)
        stall_us = max(1, round(window_us * t.threshold / 100.0))
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise CaptureError("cannot open %s: %s" % (self.path, exc.strerror),
                               "this kernel has no pressure stall information (CONFIG_PSI, "
                               "psi=1 on the kernel command line)")
        try:
            os.write(self.fd, ("%s %d %d\0" % (t.name, stall_us, window_us)).encode())
        except OSError as exc:
            self.close()
            hint = ("the kernel refuses this window without CAP_SYS_RESOURCE: use a multiple of 2 s"
                    if exc.errno == errno.EINVAL else "check the trigger")
            raise CaptureError("the kernel refused the PSI trigger %s: %s" % (t.condition, exc.strerror),
                               hint)
        return self

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class PsiHistory:
    """(mono_ns, {'some': us, 'full': us}) readings, to put a number on a PSI event."""

    def __init__(self, max_age_s, path=PSI_PATH):
        self.path, self.max_age_ns, self.rows = path, int(max_age_s * 1e9), []

    def read(self, mono_ns):
        try:
            with open(self.path) as f:
                totals = parse_pressure(f.read())
        except OSError:
            return
        self.rows.append((mono_ns, totals))
        while self.rows and self.rows[0][0] < mono_ns - self.max_age_ns:
            self.rows.pop(0)

    def share(self, name, window_s):
        """Percent of the last window_s that `name` ('some'/'full') was stalled, or None."""
        return stall_share(self.rows, name, window_s)

    def check(self, name, window_s, threshold):
        """The detail of a condition that held, measured from the readings; None otherwise.

        The stall share over the newest reading and the newest one at least
        window_s older (a span of a whole window or a little more) must reach
        `threshold` percent: 'value' is that share, never None.
        """
        pair = _baseline(self.rows, window_s)
        if pair is None:
            return None
        (t0, v0), (t1, v1) = pair
        if name not in v0 or name not in v1 or t1 <= t0:
            return None
        stall_us = v1[name] - v0[name]
        value = 100.0 * stall_us / ((t1 - t0) / 1e3)
        if value < threshold:
            return None
        return {"value": round(value, 3), "stall_us": stall_us, "over_s": round((t1 - t0) / 1e9, 3),
                "from_mono_ns": t0, "to_mono_ns": t1}


def stall_share(rows, name, window_s):
    """Percent stalled between the newest reading and the newest one window_s older."""
    if len(rows) < 2:
        return None
    now_ns, now = rows[-1]
    then = None
    for mono_ns, totals in rows:
        if mono_ns <= now_ns - window_s * 1e9:
            then = (mono_ns, totals)
    if then is None:
        then = rows[0]
    dt_us = (now_ns - then[0]) / 1e3
    if dt_us <= 0 or name not in now or name not in then[1]:
        return None
    return 100.0 * (now[name] - then[1][name]) / dt_us


class PsiPoller:
    """poll(2) over the PSI fds: which triggers fired within a timeout.

    wake_fd: the read end of a pipe that signal.set_wakeup_fd() writes to: a signal
    (SIGUSR1, a stop signal) ends the wait at once, so the wait between idle checks can
    be long without delaying a trigger.
    """

    def __init__(self, watches, wake_fd=None):
        self.watches = {w.fd: w for w in watches}
        self.wake_fd = wake_fd
        self.poll = select.poll()
        for fd in self.watches:
            self.poll.register(fd, select.POLLPRI)
        if wake_fd is not None:
            self.poll.register(wake_fd, select.POLLIN)

    def wait(self, timeout_s):
        """Sleep up to timeout_s, or until a PSI trigger or a signal; returns the PsiWatches
        whose condition held."""
        if not self.watches and self.wake_fd is None:
            import time
            time.sleep(timeout_s)
            return []
        fired = []
        for fd, mask in self.poll.poll(int(timeout_s * 1000)):
            if fd == self.wake_fd:
                try:
                    while os.read(fd, 512):
                        pass
                except (BlockingIOError, InterruptedError):
                    pass
                continue
            if mask & (select.POLLERR | select.POLLNVAL):
                raise CaptureError("the kernel dropped the PSI trigger %s"
                                   % self.watches[fd].trigger.condition)
            if mask & select.POLLPRI:
                fired.append(self.watches[fd])
        return fired


# ---------------------------------------------------------------- vmstat and THP

def parse_vmstat(text, names=None, path="/proc/vmstat"):
    """/proc/vmstat text -> {name: int} (only `names` when given)."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        key, _, value = line.partition(" ")
        if names is None or key in names:
            found = counter(value.strip(), path, number)
            if found is not None:
                out[key] = found
    return out


def counters_needed(triggers):
    names = set()
    for t in triggers:
        if t.kind == "vmstat":
            names.add(t.name)
        elif t.kind == "thp":
            names.update(("thp_fault_alloc", "thp_fault_fallback"))
    return names


def check_counters(triggers, vmstat_text):
    """Refuse a vmstat or THP condition on a counter this kernel does not have."""
    have = parse_vmstat(vmstat_text)
    for t in triggers:
        if t.kind in ("vmstat", "thp"):
            for name in sorted(counters_needed([t])):
                if name not in have:
                    raise CaptureError("this kernel's /proc/vmstat has no %s (trigger %s)"
                                       % (name, t.condition), "see /proc/vmstat for its counters")


def _baseline(rows, window_s):
    """(then, now) rows: the newest row and the newest one at least window_s older."""
    if len(rows) < 2:
        return None
    now = rows[-1]
    then = None
    for row in rows[:-1]:
        if row[0] <= now[0] - window_s * 1e9:
            then = row
    return (then, now) if then is not None else None


def evaluate(trigger, rows):
    """A vmstat or THP condition over rows [(mono_ns, {counter: value})]: detail dict when it holds.

    The detail carries 'value' (the rate or share that crossed the threshold)
    and the counters it came from; None when it does not hold or cannot tell yet.
    """
    pair = _baseline(rows, trigger.window_s)
    if pair is None:
        return None
    (t0, v0), (t1, v1) = pair
    dt = (t1 - t0) / 1e9
    if trigger.kind == "vmstat":
        if trigger.name not in v0 or trigger.name not in v1:
            return None
        delta = v1[trigger.name] - v0[trigger.name]
        value = delta / dt
        detail = {"counter": trigger.name, "increase": delta}
    else:
        alloc = v1.get("thp_fault_alloc", 0) - v0.get("thp_fault_alloc", 0)
        fallback = v1.get("thp_fault_fallback", 0) - v0.get("thp_fault_fallback", 0)
        if alloc + fallback < THP_MIN_FAULTS:
            return None
        value = 100.0 * fallback / (alloc + fallback)
        detail = {"thp_fault_alloc": alloc, "thp_fault_fallback": fallback}
    if value <= trigger.threshold:
        return None
    detail.update({"value": round(value, 3), "over_s": round(dt, 3), "from_mono_ns": t0,
                   "to_mono_ns": t1})
    return detail
