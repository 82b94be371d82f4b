# (a part of FlightRecorder, capture/flight.py: the attributes it uses are the recorder's)
"""The flight recorder's ring-buffer sizes: the rate measured, the buffers grown and shrunk.

The first instance is sized for the busiest CPU's byte rate to hold --keep
(ringsize.BufferPlan, within its share of --max-buffer), grown in steps and
only while memory allows; the --after instance gets its whole share at start.
"""
import time

from kmemscope.capture import hostinfo, ringsize
from kmemscope.capture import tracefs as tfs
from kmemscope.capture import triggers as trig
from kmemscope.capture.flight_instances import AFTER_INSTANCE, BEFORE_INSTANCE, mono_ns
from kmemscope.capture.flight_disk import buffer_kb_for_disk, smallest_bundle, smallest_disk_for
from kmemscope.capture.flight_state import FlightState
from kmemscope.capture.instance import buffer_fits
from kmemscope.capture.units import format_size
from kmemscope.common.errors import CaptureError

POLL_S = 0.1         # the loop's wake-ups while a bundle is pending (its --after watched)
# and while it waits for a trigger: each wake-up costs an idle host CPU (a signal ends the
# wait at once: flight.py's wake-up pipe)
IDLE_POLL_S = 0.5
MARGIN = ringsize.MARGIN
MIN_BUFFER_KB = ringsize.MIN_BUFFER_KB
DEFAULT_EVENT_BYTES = ringsize.DEFAULT_EVENT_BYTES
COVERAGE_WARN_EVERY_S = 600.0


def buffer_size_for(rates, seconds, margin=MARGIN):
    """KiB per CPU that hold `seconds` at the busiest CPU's bytes/s in `rates`."""
    busiest = max(rates.values()) if rates else 0.0
    return int(busiest * seconds * margin / 1024) + 1


def measured_rates(before, after, seconds):
    """Per-CPU (events/s, bytes/s) between two cpu_stats() readings."""
    out = {}
    for cpu, s1 in after.items():
        s0 = before.get(cpu, {})
        written = (s1.get("entries", 0) + s1.get("overrun", 0)) - (s0.get("entries", 0) +
                                                                  s0.get("overrun", 0))
        per_event = s1["bytes"] / s1["entries"] if s1.get("entries") and s1.get("bytes") else \
            DEFAULT_EVENT_BYTES
        out[cpu] = (max(0, written) / seconds, max(0, written) * per_event / seconds)
    return out


def _events(before, after):
    """{cpu: events written} between two cpu_stats() readings."""
    out = {}
    for cpu, s1 in after.items():
        s0 = before.get(cpu, {})
        out[cpu] = max(0, s1.get("entries", 0) + s1.get("overrun", 0) - s0.get("entries", 0)
                       - s0.get("overrun", 0))
    return out



class BufferSizer(FlightState):
    """The FlightRecorder's part that measures the event rate and sizes its buffers."""

    def _buffer_plan(self, ncpu, samples_bytes=0):
        """The buffers' ceilings from --max-buffer (default: a small share of RAM) and from
        --max-disk: a bundle takes twice its buffers' pages while written (bundle_bound()),
        so buffers larger than half of --max-disk would fill with what no bundle can hold."""
        opt = self.opt
        total_kb = hostinfo.meminfo_kb("MemTotal") or 0
        if opt.max_buffer is not None:
            max_kb = opt.max_buffer >> 10
        else:
            max_kb = ringsize.default_max_buffer_kb(total_kb, ncpu)
        self.buffer_limit = "--max-buffer %s" % format_size(max_kb << 10) \
            if opt.max_buffer is not None else "the default --max-buffer %s (%g%% of RAM)" % (
                format_size(max_kb << 10), 100 * ringsize.DEFAULT_MAX_SHARE)
        instances = 2 if opt.after > 0 else 1
        min_kb = MIN_BUFFER_KB
        if opt.max_disk is not None:
            disk_kb = buffer_kb_for_disk(opt.max_disk, ncpu, instances, samples_bytes,
                                         self.bundle_room)
            if disk_kb < instances * (MIN_BUFFER_KB + ringsize.ROUNDING_KB) * ncpu:
                # Buffers smaller than the usual least, so that a bundle of full ones fits
                # (_check_max_disk refused a --max-disk below even DISK_FLOOR_KB's).
                min_kb = max(ringsize.DISK_FLOOR_KB,
                             disk_kb // (instances * ncpu) - ringsize.ROUNDING_KB)
            if disk_kb < max_kb:
                max_kb = disk_kb
                self.buffer_limit = "--max-disk %s" % format_size(opt.max_disk)
                self.say("the ring buffers are held to %s in all%s so that a bundle fits "
                         "--max-disk %s while written (twice its buffers, the samples and %s "
                         "of metadata)" % (format_size(max_kb << 10),
                                           " (%d KiB per CPU and instance, under the usual %d)"
                                           % (min_kb, MIN_BUFFER_KB)
                                           if min_kb < MIN_BUFFER_KB else "",
                                           format_size(opt.max_disk),
                                           format_size(self.bundle_room)))
        self._min_buffer_check(max_kb, ncpu, min_kb)
        self.min_kb = min_kb
        plan = ringsize.BufferPlan(opt.keep, opt.after, ncpu, max_kb, fixed_top_kb=opt.buffer_kb,
                                   min_kb=min_kb)
        if opt.buffer_kb and opt.buffer_kb > plan.top_ceiling_kb:
            raise CaptureError("--buffer-kb %d does not fit under --max-buffer %s on %d CPUs (at most "
                               "%d KiB per CPU before the trigger)"
                               % (opt.buffer_kb, format_size(max_kb << 10), ncpu,
                                  plan.top_ceiling_kb),
                               "lower --buffer-kb or raise --max-buffer")
        self.max_buffer_kb = max_kb
        return plan

    def _min_buffer_check(self, max_kb, ncpu, min_kb=MIN_BUFFER_KB):
        least = (2 if self.opt.after > 0 else 1) * (min_kb + ringsize.ROUNDING_KB) * ncpu
        if max_kb < least:
            raise CaptureError("--max-buffer %s is less than the %s that %d CPUs need at least"
                               % (format_size(max_kb << 10), format_size(least << 10), ncpu),
                               "raise --max-buffer")

    def _check_max_disk(self, ncpu, samples_bytes):
        """Refuse a --max-disk that cannot hold a bundle of full ring buffers of the least
        size it allows (DISK_FLOOR_KB per CPU and instance): every bundle the recorder writes
        must fit it while written, temporary copies included. The line names the smallest
        --max-disk that does, for these options on this host."""
        opt = self.opt
        if opt.max_disk is None:
            return
        instances = 2 if opt.after > 0 else 1
        floor_kb = instances * (ringsize.DISK_FLOOR_KB + ringsize.ROUNDING_KB) * ncpu
        need = smallest_disk_for(floor_kb, ncpu, instances, samples_bytes, self.bundle_room)
        if opt.max_disk >= need:
            return
        works = "use --max-disk %dM or more" % -(-need // (1 << 20))
        least = smallest_bundle(ncpu, instances, self.bundle_room)
        if opt.max_disk < least:
            raise CaptureError("--max-disk %s is less than the smallest bundle this host writes, %s "
                               "(trace.dat's kallsyms, event formats and headers, and empty ring "
                               "buffers)" % (format_size(opt.max_disk), format_size(least)), works)
        raise CaptureError("--max-disk %s cannot hold a bundle of the smallest ring buffers once "
                           "full (%d KiB per CPU in %d instance(s) on %d CPUs): a bundle takes "
                           "twice its buffers' data while written, twice the /proc samples (%s "
                           "for --keep and --after) and %s of metadata"
                           % (format_size(opt.max_disk), ringsize.DISK_FLOOR_KB, instances, ncpu,
                              format_size(samples_bytes), format_size(self.bundle_room)), works)

    def _measure_and_size(self):
        """Measure the event rate for --measure seconds; start sizing the buffers for it."""
        opt = self.opt
        seconds = max(0.5, opt.measure)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds and self.stop_reason is None:
            time.sleep(POLL_S)
            self._heartbeat()
            if self.psi_conditions:
                self.psi.read(mono_ns())
        self._read_rate()
        self._adjust_buffers()
        self._update_rate()
        self.last_rate_s = time.monotonic()

    def _read_rate(self):
        """Feed the busiest CPU's byte rate since the last reading to the plan."""
        now, stats = mono_ns(), tfs.cpu_stats(self._before_dir())
        then, before = self.last_rate_check
        self.last_rate_check = (now, stats)
        if now - then < 0.2e9:
            return
        rates = ringsize.byte_rates(before, stats, (now - then) / 1e9)
        busiest = max(rates.values()) if rates else 0.0
        self.plan.observe(now, busiest)
        self.current_rate = {"bytes_per_s": busiest,
                             "events_per_s": sum(_events(before, stats).values()) / ((now - then) / 1e9)}

    def _update_rate(self):
        busiest = self.current_rate["bytes_per_s"]
        holds = self.plan.holds_s(self.buffer_kb, busiest)
        after_holds = self.plan.holds_s(self.after_kb, busiest) if self.after_kb else None
        self.rate = {"events_per_s": round(self.current_rate["events_per_s"], 1),
                     "busiest_cpu_bytes_per_s": round(busiest, 1),
                     "peak_busiest_cpu_bytes_per_s": round(self.plan.peak_rate(), 1),
                     "buffer_kb": self.buffer_kb, "after_buffer_kb": self.after_kb,
                     "max_buffer_kb": self.max_buffer_kb,
                     "ceiling_kb": self.plan.top_ceiling_kb,
                     "after_ceiling_kb": self.plan.after_ceiling_kb,
                     "holds_s": round(holds, 1) if holds else None,
                     # the --after buffer: what it was sized for, and what it holds at the
                     # busiest CPU's rate now
                     "after_sized_for_bytes_per_s": round(self.plan.peak_rate()
                                                          * ringsize.AFTER_BURST, 1),
                     "after_holds_s": round(after_holds, 1) if after_holds else None}

    def _adjust_buffers(self):
        """One step of each buffer toward its target; growth only while memory allows."""
        top_target, after_target = self.plan.targets()
        grew = False
        if self.opt.after > 0:
            size = self.plan.step(self.after_kb, after_target)
            if size is not None:
                grew |= self._resize(size, instance=True)
        size = self.plan.step(self.buffer_kb, top_target)
        if size is not None:
            grew |= self._resize(size)
        if grew:
            self._update_rate()
        self.growing = grew    # the loop takes the next step at once, else at the next reading
        return grew

    def _memory_short(self, grow_kb):
        info = {name: hostinfo.meminfo_kb(name) for name in ("MemTotal", "MemAvailable")}
        try:
            with open(trig.PSI_PATH) as f:
                avg10 = ringsize.parse_psi_avg10(f.read())
        except OSError:
            avg10 = None
        return ringsize.memory_short(info, avg10, grow_kb * self.ncpu)

    def _resize(self, size, instance=False):
        """Ask for `size` KiB per CPU; True when the kernel gave it (the size is what it gave)."""
        current = self.after_kb if instance else self.buffer_kb
        if size > current:
            short = self._memory_short(size - current)
            if short:
                if self.last_memory_note is None or time.monotonic() - self.last_memory_note > \
                        COVERAGE_WARN_EVERY_S:
                    self.last_memory_note = time.monotonic()
                    self.say("not growing the ring buffer past %d KiB per CPU for now: %s"
                             % (current, short))
                self.growth_refused += 1
                return False
        name = AFTER_INSTANCE if instance else BEFORE_INSTANCE
        where = tfs.instance_dir(self.tracefs, name)
        t0 = time.monotonic()
        try:
            tfs.write(where, "buffer_size_kb", str(size))
            self.want[name]["buffer_size_kb"] = size   # our own change: not a drift
            text = tfs.read(where, "buffer_size_kb")
            # what the kernel gave, unless another write landed meanwhile (the next check
            # sees that as a drift): never adopted as asked
            got = int(tfs.parse_buffer_size(text)[0]) if buffer_fits(size, text) else size
            # the write holds the kernel's writers and this loop: the longest says what a step costs
            self.longest_resize_s = max(self.longest_resize_s, time.monotonic() - t0)
        except (OSError, ValueError) as exc:
            self.warn("could not resize the ring buffer to %d KiB per CPU: %s; keeping %d KiB"
                      % (size, getattr(exc, "strerror", None) or exc, current))
            return False
        if instance:
            self.after_kb = got
        else:
            self.buffer_kb = got
            self.resizes += 1
        return True

    def _say_capped(self):
        last = self.last_coverage_warning
        if last is not None and time.monotonic() - last < COVERAGE_WARN_EVERY_S:
            return
        self.last_coverage_warning = time.monotonic()
        self.warn("the ring buffer (%d KiB per CPU, the most %s allows) holds about "
                  "%.1f s at the busiest CPU's %s/s, less than the %g s of --keep (raise "
                  "%s, lower --keep, or use a lighter preset)"
                  % (self.buffer_kb, self.buffer_limit, self.rate["holds_s"],
                     format_size(self.rate["busiest_cpu_bytes_per_s"]), self.opt.keep,
                     self.buffer_limit.split()[-2] if self.buffer_limit.startswith("the default")
                     else self.buffer_limit.split()[0]))
