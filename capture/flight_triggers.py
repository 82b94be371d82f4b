# (a part of FlightRecorder, capture/flight.py: the attributes it uses are the recorder's)
"""The flight recorder's triggers: conditions evaluated, limits applied, a bundle started.

SIGUSR1, the vmstat and THP conditions (evaluated on each vmstat sample, in the
sampler's thread) and the PSI conditions (the kernel's wake-up confirmed by the
recorder's own readings) all end in _fire(), which applies --cooldown and
--max-per-hour and freezes the first instance.
"""
import collections

from kmemscope.capture import triggers as trig
from kmemscope.capture.flight_bundle import stamp_at
from kmemscope.capture.flight_state import FlightState

# Sources that cost much to read, sampled every SLOW_SOURCE_S and at each trigger instead
# of every --interval: pagetypeinfo walks every pageblock (3 ms of CPU on a 2-CPU 8 GiB VM,
# 10-15 ms on larger hosts), mthp opens some 150 sysfs files (1.2 ms). Read every
# second they alone cost an idle recorder 0.4% of a CPU; both are counters or slow-moving
# state, and a bundle gets a reading at its trigger.
SLOW_SOURCES = ("pagetypeinfo", "mthp")
SLOW_SOURCE_S = 30.0


def _value_text(detail):
    value = detail.get("value")
    if value is None:
        return detail.get("signal", "no value")
    return "value %g" % value



class TriggerHandler(FlightState):
    """The FlightRecorder's part that turns conditions into a pending bundle."""

    def _on_sample(self, texts):
        """Sampler thread: evaluate the vmstat and THP conditions on each vmstat sample."""
        conditions = [t for t in self.opt.triggers if t.kind in ("vmstat", "thp")]
        if not conditions or "vmstat" not in texts:
            return
        mono, text = texts["vmstat"]
        self.vmstat_rows.append((mono, trig.parse_vmstat(text, trig.counters_needed(conditions))))
        longest = max(t.window_s for t in conditions) + 2 * self.opt.interval
        while len(self.vmstat_rows) > 2 and self.vmstat_rows[1][0] < mono - longest * 1e9:
            self.vmstat_rows.popleft()
        rows = list(self.vmstat_rows)
        for t in conditions:
            detail = trig.evaluate(t, rows)
            if detail is not None:
                self.fired.put((t.as_dict(), detail, mono))

    def _fire(self, info, detail, when):
        """A condition held at `when`: start a bundle unless limits say no."""
        opt = self.opt
        if self.pending is not None:
            also = self.pending["trigger"].setdefault("also_fired", [])
            if len(also) < 20:
                also.append(dict(reason=info["reason"], mono_ns=when,
                                 **({"value": detail["value"]} if "value" in detail else {})))
            if len(also) <= 20 or info["reason"] == "manual":
                self.say("trigger %s (%s) while the bundle of trigger %s is pending: noted in "
                         "its trigger.also_fired, no bundle of its own"
                         % (info["reason"], _value_text(detail), self.pending["trigger"]["reason"]))
            return
        while self.trigger_times and self.trigger_times[0] < when - 3600e9:
            self.trigger_times.popleft()
        why = None
        if self.last_trigger_ns is not None and when - self.last_trigger_ns < opt.cooldown * 1e9:
            why = "cooldown"
        elif len(self.trigger_times) >= opt.max_per_hour:
            why = "max-per-hour"
        if why:
            if not self.suppressed[why] % 50 or info["reason"] == "manual":
                self.say("trigger %s (%s) ignored: %s" % (info["reason"], _value_text(detail),
                                                          "--cooldown %g s" % opt.cooldown
                                                          if why == "cooldown" else
                                                          "--max-per-hour %d reached" % opt.max_per_hour))
            self.suppressed[why] += 1
            return
        self._check_instances()   # as set up right up to the trigger, or a blind stretch
        frozen, after_on = self._freeze()
        for name in SLOW_SOURCES:
            self.sampler.want(name)   # the bundle gets one at its trigger
        since_last = self.suppressed - self.suppressed_at_last_bundle
        self.suppressed_at_last_bundle: collections.Counter = collections.Counter(self.suppressed)
        trigger = dict(info, time=stamp_at(when), detail=detail,
                       suppressed_before=dict(since_last))
        if "value" in detail:
            trigger["value"] = detail["value"]
        self.pending = {"trigger": trigger, "mono_ns": when, "until": when + int(opt.after * 1e9),
                        "frozen_ns": frozen, "after_on_ns": after_on}
        self.last_trigger_ns = when
        self.trigger_times.append(when)
        self.say("trigger %s (%s) at %s: writing a bundle in %g s"
                 % (info["reason"], _value_text(detail), trigger["time"]["wall"], opt.after))

    def _on_psi(self, watch, now):
        """The kernel's PSI trigger fired: fire ours if a full window of readings confirms it."""
        t = watch.trigger
        self.psi.read(now)
        if self.psi_armed_ns is None or now < self.psi_armed_ns:
            # Registering a trigger, or stalls from before the recorder began, can wake
            # poll() at once: count only what a whole window measured here says.
            self.not_armed += 1
            return
        self.psi_woken[watch] = now
        self._confirm_psi(now)

    def _confirm_psi(self, now):
        """Fire each PSI condition the kernel signalled within its window once the readings show it
        (the kernel does not signal again within a window, so a borderline one is checked again)."""
        for watch, woken in list(self.psi_woken.items()):
            t = watch.trigger
            detail = self.psi.check(t.name, t.window_s, t.threshold)
            if detail is not None:
                del self.psi_woken[watch]
                detail["source"] = "kernel PSI trigger, confirmed from %s totals" % trig.PSI_PATH
                self._fire(t.as_dict(), detail, now)
            elif now - woken > t.window_s * 1e9:
                del self.psi_woken[watch]
                self.unconfirmed += 1
