"""How large a flight recorder's ring buffers are: sized to the event rate, bounded, stepped.

Two buffers per CPU, one in each of the recorder's instances (flight.py): the
first rolls the --keep seconds before a trigger, sized from the busiest CPU's
byte rate, the highest seen over the last RATE_HISTORY_S seconds, and never
beyond its share of --max-buffer; the second takes the --after seconds that
follow it and gets its whole share from the start, whatever the rate before:
what follows a trigger is often a burst far above it.

Growing a ring buffer allocates kernel pages, which is exactly what a host
short of memory cannot spare, and a large resize holds the writer for seconds
(about 4 ms per MiB here). So the buffer grows only while MemAvailable and
memory pressure allow, by GROW_STEP_KB per CPU at a time, the recorder
handling its triggers and signals between steps; it shrinks once the rate has
stayed low for RATE_HISTORY_S.
"""
import collections

MIN_BUFFER_KB = 1024
# Below MIN_BUFFER_KB only when --max-disk asks for less (a bundle must fit it while written):
# the least a buffer is sized to, per CPU and instance (16 pages; the kernel's least is 2).
DISK_FLOOR_KB = 64
# Bytes per event assumed when the buffer holds none to measure.
DEFAULT_EVENT_BYTES = 32
# The buffer holds this much more than the seconds asked, for the rate's jitter.
MARGIN = 1.15
# Default --max-buffer: this share of MemTotal for all ring buffers of all CPUs.
DEFAULT_MAX_SHARE = 0.02
GROW_STEP_KB = 16 << 10
# What follows a trigger is often a burst far above the rate before it: the --after buffer
# holds --after seconds at this many times the highest rate of the last minute, within its
# share of --max-buffer (a quiet host's --after buffer so stays small: the whole share was
# 35 MiB per CPU that an idle recorder kept for nothing).
AFTER_BURST = 8
RATE_HISTORY_S = 60.0
# Grow only by more than this factor (a buffer is not resized for every wobble) and
# shrink only when the buffer is more than SHRINK_FACTOR times what it needs.
GROW_FACTOR, SHRINK_FACTOR = 1.1, 2.0
# Memory is short: no growth while MemAvailable would fall under this share of
# MemTotal, or while some task stalled on memory more than this share of the last 10 s.
MIN_AVAILABLE_SHARE = 0.10
MAX_PSI_SOME_AVG10 = 1.0


def default_max_buffer_kb(memtotal_kb, ncpu):
    """--max-buffer when not given: a small share of RAM, at least the minimum both buffers need."""
    return max(2 * MIN_BUFFER_KB * ncpu, int(memtotal_kb * DEFAULT_MAX_SHARE))


# The kernel rounds a size up to whole sub-buffers (4 KiB pages here): each ceiling
# leaves this much room so that what the kernel gives still fits under --max-buffer.
ROUNDING_KB = 8


def split_ceiling(max_total_kb, ncpu, keep, after, min_kb=MIN_BUFFER_KB):
    """(top KiB, after KiB) per CPU that --max-buffer allows, shared in proportion to the seconds."""
    per_cpu = max_total_kb // ncpu
    after_kb = max(min_kb, int(per_cpu * after / (keep + after))) if after > 0 else 0
    top_kb = max(min_kb, per_cpu - after_kb - (2 if after > 0 else 1) * ROUNDING_KB)
    return top_kb, after_kb


def byte_rates(before, after, seconds):
    """{cpu: bytes/s written} between two cpu_stats() readings (overwritten events included)."""
    out = {}
    for cpu, s1 in after.items():
        s0 = before.get(cpu, {})
        written = (s1.get("entries", 0) + s1.get("overrun", 0)) - (s0.get("entries", 0) +
                                                                  s0.get("overrun", 0))
        per_event = (s1["bytes"] / s1["entries"] if s1.get("entries") and s1.get("bytes")
                     else DEFAULT_EVENT_BYTES)
        out[cpu] = max(0, written) * per_event / seconds if seconds > 0 else 0.0
    return out


def size_for(bytes_per_s, seconds, margin=MARGIN):
    """KiB per CPU that hold `seconds` at bytes_per_s."""
    return int(bytes_per_s * seconds * margin / 1024) + 1


def memory_short(meminfo_kb, psi_some_avg10, grow_kb):
    """Why growing the buffers by grow_kb (all CPUs) must wait, or None.

    meminfo_kb: {'MemTotal': kB, 'MemAvailable': kB}; psi_some_avg10: percent or None.
    """
    total, avail = meminfo_kb.get("MemTotal"), meminfo_kb.get("MemAvailable")
    if total and avail is not None and avail - grow_kb < total * MIN_AVAILABLE_SHARE:
        return ("MemAvailable is %d MiB, and growing would leave less than %d%% of memory"
                % (avail >> 10, round(MIN_AVAILABLE_SHARE * 100)))
    if psi_some_avg10 is not None and psi_some_avg10 > MAX_PSI_SOME_AVG10:
        return "tasks stalled on memory %.1f%% of the last 10 s" % psi_some_avg10
    return None


def parse_psi_avg10(text, line="some"):
    """avg10 of the 'some' (or 'full') line of /proc/pressure/memory, or None."""
    for row in text.splitlines():
        words = row.split()
        if words and words[0] == line:
            for word in words[1:]:
                key, _, value = word.partition("=")
                if key == "avg10":
                    try:
                        return float(value)
                    except ValueError:
                        return None
    return None


class BufferPlan:
    """The sizes the two buffers should have, from the rates seen lately.

    observe() takes each rate reading; targets() says the sizes wanted (within
    the ceilings); step() the next size to write on the way from a size to a
    target, or None when it is close enough.
    """

    def __init__(self, keep, after, ncpu, max_total_kb, fixed_top_kb=None, min_kb=MIN_BUFFER_KB):
        self.keep, self.after, self.ncpu, self.min_kb = keep, after, ncpu, min_kb
        self.top_ceiling_kb, self.after_ceiling_kb = split_ceiling(max_total_kb, ncpu, keep, after,
                                                                   min_kb)
        self.fixed_top_kb = fixed_top_kb
        self.history: collections.deque = collections.deque()   # (mono_ns, busiest CPU bytes/s)

    def observe(self, mono_ns, busiest_bytes_per_s):
        self.history.append((mono_ns, busiest_bytes_per_s))
        while self.history and self.history[0][0] < mono_ns - RATE_HISTORY_S * 1e9:
            self.history.popleft()

    def history_s(self):
        if len(self.history) < 2:
            return 0.0
        return (self.history[-1][0] - self.history[0][0]) / 1e9

    def peak_rate(self):
        return max((r for _, r in self.history), default=0.0)

    def wanted(self):
        """(before KiB, after KiB) per CPU, before the ceilings: the first for --keep at the
        peak rate, the --after one for --after at AFTER_BURST times it (its whole share
        until a rate was read)."""
        rate = self.peak_rate()
        top = self.fixed_top_kb or max(self.min_kb, size_for(rate, self.keep))
        if self.after <= 0:
            return top, 0
        if not self.history:
            return top, self.after_ceiling_kb
        return top, max(self.min_kb, size_for(rate * AFTER_BURST, self.after))

    def targets(self):
        top, after = self.wanted()
        return min(top, self.top_ceiling_kb), min(after, self.after_ceiling_kb)

    def capped(self):
        """True when the ceiling keeps the top buffer under what --keep needs."""
        return self.wanted()[0] > self.top_ceiling_kb

    def step(self, current_kb, target_kb):
        """The next size on the way to target_kb: grow by at most GROW_STEP_KB; shrink in one
        write, only once the rate has been low for the whole history. None: stay."""
        if target_kb > current_kb * GROW_FACTOR or (target_kb > current_kb and
                                                      target_kb == self.top_ceiling_kb):
            return min(target_kb, current_kb + GROW_STEP_KB)
        if (target_kb * SHRINK_FACTOR < current_kb and self.history_s() >= RATE_HISTORY_S * 0.9
                and self.fixed_top_kb is None):
            return max(target_kb, self.min_kb)
        return None

    def holds_s(self, top_kb, bytes_per_s):
        """Seconds the top buffer holds at bytes_per_s (None when nothing is written)."""
        if bytes_per_s <= 0:
            return None
        return top_kb * 1024 / bytes_per_s
