# (a part of FlightRecorder, capture/flight.py: the attributes it uses are the recorder's)
"""The flight recorder's two tracefs instances: set up, armed, frozen, and watched.

BEFORE_INSTANCE runs in overwrite mode and holds the seconds before a trigger;
AFTER_INSTANCE, set up by the same `trace-cmd start`, waits with its events off
and records the --after seconds while the first is frozen. Every RATE_CHECK_S
(and at each trigger) the recorder reads back what it set in them
(instance.py): something else that removed or changed them is said, undone,
and the stretch counted as blind for every bundle whose window overlaps it.
"""
import os
import time

from kmemscope.capture import instance
from kmemscope.capture import tracefs as tfs
from kmemscope.capture.flight_heartbeat import HEARTBEAT_S
from kmemscope.capture.flight_state import FlightState
from kmemscope.capture.tracecmd import (_spec_enabled, _tracing_on, check_filters, failure_reason,
                                        run_once)
from kmemscope.common.errors import CaptureError

# The tracefs instances the recorder owns: the --keep seconds before a trigger roll in the
# first; the second records the --after seconds while the first is frozen.
BEFORE_INSTANCE = "kmemscope-flight"
AFTER_INSTANCE = "kmemscope-flight-after"
INSTANCES = (BEFORE_INSTANCE, AFTER_INSTANCE)
# Blind stretches kept for the manifests (a window reaches back --keep seconds at most).
MAX_BLIND = 100
# How often the whole of what the recorder set is read back (about ten reads per instance
# and one per event filter: settings(); 1.3 ms of CPU on a loaded 2-CPU VM), and how often
# the first instance's enabled events, tracing_on and buffer size are (set_event lists the
# enabled events in the kernel, one read: 40 us, where opening each of 2,300 events'
# enable files took 60 ms). A change undone inside these can go unseen: a bundle's
# manifest states it (window.detection_granularity_s).
CHECK_S = 4.0
EVENTS_CHECK_S = 1.0
# Setting the instances up again while something else changes them: the pause after the
# Nth try in a row that failed the same way; SETUP_TRIES such tries (6.3 s of pauses) end
# the recorder. The problems kept for the blind stretch's text are bounded.
SETUP_BACKOFF_S = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
SETUP_TRIES = len(SETUP_BACKOFF_S) + 1
MAX_SETUP_CHANGES = 10
# How long one try waits for trace-cmd start's events and tracing_on to show.
SETUP_WAIT_S = 3.0


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def changed_since(tracefs, name, before):
    """True when tracefs/name no longer reads `before` (unreadable counts as unchanged)."""
    try:
        return tfs.read(tracefs, name) != before
    except OSError:
        return False



class InstanceKeeper(FlightState):
    """The FlightRecorder's part that sets up, arms, freezes and checks its instances.

    Uses the recorder's tracefs, trace_cmd, specs, host_flags, stacktrace, out and opt;
    keeps buffer_kb, after_kb, want, after_events, blind, last_good_ns, tracing_since, and
    the heartbeat (flight_heartbeat.py): heart, beat_ok (instance -> mono_ns of the last
    heartbeat that went in) and beat_gap (instance -> (since, what) while they are refused).
    """

    def _start_args(self, kb, after_kb):
        """trace-cmd start: the events into BEFORE_INSTANCE and, with --after, AFTER_INSTANCE
        (no event before the first -B: the top level is left alone)."""
        args = [self.trace_cmd, "start"] + list(self.host_flags)
        sizes = [(BEFORE_INSTANCE, kb)] + ([(AFTER_INSTANCE, after_kb)] if self.opt.after > 0 else [])
        for name, size in sizes:
            args += ["-B", name, "-C", "mono", "-b", str(size)] + (["-T"] if self.stacktrace else [])
            for spec in self.specs:
                args += spec.trace_cmd_args()
        return args

    def _before_dir(self):
        return tfs.instance_dir(self.tracefs, BEFORE_INSTANCE)

    def _after_dir(self):
        return tfs.instance_dir(self.tracefs, AFTER_INSTANCE)

    def _start_tracing(self, kb, after_kb):
        """`trace-cmd start` into the instances; returns once the kernel traces into the first
        as asked (or a stop signal came), or raises CaptureError when the kernel refused.

        What the instances should hold comes from the options (_wanted()), never from
        reading them back: a change that lands while they are set up (another tool's
        write, a `trace-cmd reset`) shows as a difference, and the setup is tried again
        after a backoff. Only the same problem SETUP_TRIES times in a row ends the
        recorder (a refusal for good: a rejected filter, a trace-cmd that fails, a size
        the kernel will not give); another tool's changes, each different, do not. Every
        problem seen is left in self.setup_changes for the caller's blind stretch.
        """
        self.setup_changes = []
        same = 0
        while True:
            problem = self._setup_once(kb, after_kb)
            if problem is None:
                return
            same = same + 1 if self.setup_changes and problem == self.setup_changes[-1] else 1
            self.setup_changes.append(problem)
            del self.setup_changes[:-MAX_SETUP_CHANGES]
            if same >= SETUP_TRIES:
                raise CaptureError("the tracefs instances of the flight recorder could not be set "
                                   "up in %d tries: %s" % (same, problem),
                                   "see %s" % os.path.join(self.out, ".trace-cmd.log"))
            if self.stop_reason is not None:
                return     # stopping: the instances go anyway
            time.sleep(SETUP_BACKOFF_S[min(same, len(SETUP_BACKOFF_S)) - 1])

    def _wanted(self, kb, after_kb):
        """{instance: instance.wanted()} as the options ask, idle (no trigger pending)."""
        events = instance.spec_events(self.tracefs, self.specs)
        want = {BEFORE_INSTANCE: instance.wanted(events, kb, True, True, True)}
        if self.opt.after > 0:
            want[AFTER_INSTANCE] = instance.wanted(events, after_kb, False, False, False)
        return want

    def _setup_once(self, kb, after_kb):
        """One try of _start_tracing: None when the instances are as asked, else what differs."""
        kept = []
        for name in INSTANCES:   # a restart after something else changed them: from scratch
            for pause in (0.01, 0.05, None):
                # (another process reading one of its files holds it: EBUSY for a moment)
                problem = tfs.remove_instance(self.tracefs, name)
                if problem is None:
                    break
                if pause is None:
                    kept.append(problem)
                    break
                time.sleep(pause)
        log = os.path.join(self.out, ".trace-cmd.log")
        status, output = run_once(self._start_args(kb, after_kb), log, cwd=self.out, timeout=60)
        if status != 0:
            return "trace-cmd start failed with status %s: %s" % (status,
                                                                  failure_reason(status, output))
        want = self._wanted(kb, after_kb)
        before = self._before_dir()
        try:
            # an instance that could not be removed keeps the filters written into it, and
            # trace-cmd start writes only those it is given: clear the others
            for name in want:
                for event, texts in want[name]["filters"].items():
                    if texts == ("none",):
                        rel = "events/%s/filter" % event.replace(":", "/")
                        if tfs.read(tfs.instance_dir(self.tracefs, name), rel) != "none":
                            tfs.write(tfs.instance_dir(self.tracefs, name), rel, "0")
            tfs.write(before, "options/overwrite", "1")
            if self.opt.after > 0:
                inst = self._after_dir()
                tfs.write(inst, "tracing_on", "0")
                # Keep the first events after a trigger: a full instance drops, never overwrites.
                tfs.write(inst, "options/overwrite", "0")
                tfs.write(inst, "events/enable", "0")
                tfs.write(inst, "trace", "")   # what it took before tracing_on went to 0
        except OSError as exc:
            return "setting up %s: %s" % (exc.filename or "an instance", exc.strerror)
        deadline = time.monotonic() + SETUP_WAIT_S
        while not (_tracing_on(before) and all(_spec_enabled(before, s) for s in self.specs)):
            if time.monotonic() > deadline:
                return "tracing did not start after trace-cmd start"
            time.sleep(0.05)
        try:
            check_filters(before, self.specs)
        except CaptureError as exc:
            return str(exc)
        checked = mono_ns()
        differs = self._drift(want)
        if differs:
            return differs + ("" if not kept else " (not removed before: %s)" % ", ".join(kept))
        self.want = want
        self.after_events = sorted(want.get(AFTER_INSTANCE, {}).get("filters", ()))
        self.tracing_since = checked
        self.buffer_kb = self._kernel_kb(before, kb)
        if self.opt.after > 0:
            self.after_kb = self._kernel_kb(self._after_dir(), after_kb)
        self.last_good_ns = checked
        self.beat_ok[BEFORE_INSTANCE] = checked
        self.last_rate_check = (checked, tfs.cpu_stats(before))
        return None

    def _kernel_kb(self, inst, asked):
        """The buffer size the kernel gave for `asked` (checked to fit by _drift), KiB per CPU."""
        try:
            text = tfs.read(inst, "buffer_size_kb")
        except OSError:
            return asked
        return int(tfs.parse_buffer_size(text)[0]) if instance.buffer_fits(asked, text) else asked

    def _drift(self, want):
        """What differs between the instances and `want`, in one line ('' when nothing)."""
        out = []
        for name, wanted in want.items():
            now = instance.settings(tfs.instance_dir(self.tracefs, name), list(wanted["filters"]))
            differs = instance.drift(wanted, now)
            if differs:
                out.append("%s: %s" % (name, ", ".join(differs)))
        return "; ".join(out)

    def _arm(self):
        """Enable the --after instance's events (its tracing_on still 0): a few writes."""
        for event in self.after_events:
            try:
                tfs.write(self._after_dir(), "events/%s/enable" % event.replace(":", "/"), "1")
            except OSError as exc:
                self.warn("could not enable %s in the --after instance: %s" % (event, exc.strerror))

    def _check_instances(self):
        """Read back the instances; undo what something else changed, and count it as blind.

        About ten small reads per instance (instance.settings()). tracing_on alone is
        written back; anything else (events, filters, buffer size, clock, the instance
        removed) sets both instances up again: what the first held since it changed
        cannot be trusted, and the stretch from the last good reading to now is blind
        either way.
        """
        checked = mono_ns()   # before reading: the instances were as set up at least until then
        changed = {}
        for name, want in self.want.items():
            inst = tfs.instance_dir(self.tracefs, name)
            now = instance.settings(inst, list(want["filters"]))
            differs = instance.drift(want, now)
            if differs:
                changed[name] = (inst, want, now, differs)
        if not changed:
            self.last_good_ns = checked
            return
        since = self.last_good_ns       # (setting them up again moves it)
        what = "; ".join("%s: %s" % (name, ", ".join(d)) for name, (_, _, _, d) in changed.items())
        if all(instance.only_tracing_on(want, now) for _, want, now, _ in changed.values()):
            for inst, want, _, _ in changed.values():
                tfs.write(inst, "tracing_on", want["tracing_on"])
            how = "wrote tracing_on back"
            # the last heartbeat that went in says tracing was on later than the last check
            since = max(since, self.beat_ok.get(BEFORE_INSTANCE, since))
        else:
            try:
                self._start_tracing(self.buffer_kb, self.after_kb)
            finally:
                # every change seen while setting up again is part of the same stretch
                for more in self.setup_changes:
                    what += "; then, while setting up again: " + more
            # sql-safe: a sentence of the manifest, not SQL
            how = "set both instances up again (the first starts empty%s)" % (
                ", after %d tries" % (len(self.setup_changes) + 1) if self.setup_changes else "")
        blind = self._add_blind(since, mono_ns(), what)
        self.beat_gap.pop(BEFORE_INSTANCE, None)     # this stretch covers the refused heartbeats
        self.last_good_ns = blind["to_mono_ns"]
        self.instance_restored += 1
        self.warn("the tracefs instances of the flight recorder were changed by something else "
                  "(%s); %s. Bundles whose window includes the %.1f s since the last check say "
                  "they are incomplete" % (what, how, (blind["to_mono_ns"] - blind["from_mono_ns"])
                                           / 1e9))

    def _check_events(self):
        """Between the checks of everything: the first instance's enabled events, tracing_on
        and buffer size (an events/enable write does not stop the heartbeat, a trace_marker
        print: only reading them finds it)."""
        want = self.want.get(BEFORE_INSTANCE)
        if want is None:
            return
        inst = self._before_dir()
        try:
            ok = tfs.set_events(inst) == want["events"] and \
                tfs.read(inst, "tracing_on") == want["tracing_on"] and \
                instance.buffer_fits(want["buffer_size_kb"], tfs.read(inst, "buffer_size_kb"))
        except OSError:
            ok = False
        if not ok:
            self._check_instances()   # blind from the last whole check: the safe side

    def _freeze(self):
        """Stop the first instance (the seconds before the trigger) and start the --after one.

        Its events are enabled first, its tracing_on still 0; then the first instance
        stops and the second starts: a few microseconds fall between the two writes,
        and no event is in both. Returns their CLOCK_MONOTONIC times, each taken on the
        safe side of its write: the first's after it stopped, the second's before it
        started (an event can land before the write returns).
        """
        if self.opt.after > 0:
            self._arm()
        tfs.write(self._before_dir(), "tracing_on", "0")
        frozen = mono_ns()
        gap = self.beat_gap.pop(BEFORE_INSTANCE, None)
        if gap is not None:
            self._add_blind(gap[0], frozen, gap[1])
        if self.opt.after <= 0:
            return frozen, None
        after_on = mono_ns()
        tfs.write(self._after_dir(), "tracing_on", "1")
        self.after_filled = {}
        return frozen, after_on

    def _watch_after(self, now):
        """While a bundle is pending: note when each CPU's --after buffer began to drop."""
        for cpu, st in tfs.cpu_stats(self._after_dir()).items():
            if cpu not in self.after_filled and st.get("dropped_events"):
                self.after_filled[cpu] = now

    def _add_blind(self, lo, hi, what):
        """Count [lo, hi] as blind: one stretch with the newest when they overlap. Returns it."""
        last = self.blind[-1] if self.blind else None
        if last is not None and lo <= last["to_mono_ns"] and hi >= last["from_mono_ns"]:
            last["from_mono_ns"] = min(lo, last["from_mono_ns"])
            last["to_mono_ns"] = max(hi, last["to_mono_ns"])
            if what not in last["what"]:
                last["what"] += "; " + what
            return last
        blind = {"from_mono_ns": lo, "to_mono_ns": hi, "what": what}
        self.blind.append(blind)
        return blind

    def _heartbeat(self):
        """Write the next heartbeat into the instance that records, when one is due.

        A refused one in the first instance means it is not tracing (tracing_on 0, or
        gone): its instances are checked at once, not at the next RATE_CHECK_S, and the
        stretch since the last heartbeat that went in is blind. A refused one in the
        --after instance is its buffer full (counted from its stats), or its tracing_on
        turned off by something else (written back, and blind).
        """
        now = mono_ns()
        if not self.heart.due(now):
            return
        if self.pending is None:
            name = BEFORE_INSTANCE
        elif self.opt.after > 0:
            name = AFTER_INSTANCE
        else:
            return
        inst = tfs.instance_dir(self.tracefs, name)
        refused = self.heart.write(inst, name, now)
        if refused is None:
            self.beat_ok[name] = now
            gap = self.beat_gap.pop(name, None)
            if gap is not None:
                self._add_blind(gap[0], now, gap[1])
            return
        if name in self.beat_gap:
            return
        since = self.beat_ok.get(name, now)
        what = "%s: a heartbeat was refused (%s): the instance was not recording" % (name, refused)
        if name == BEFORE_INSTANCE:
            self.beat_gap[name] = (since, what)
            self._check_instances()
        else:
            try:
                off = tfs.read(inst, "tracing_on") == "0"
                if off:
                    tfs.write(inst, "tracing_on", "1")
            except OSError:
                off = True
            if off:
                self.beat_gap[name] = (since, what)
                self.warn("the --after instance %s was turned off by something else; turned it "
                          "on again (blind since %.1f s before)" % (name, (now - since) / 1e9))

    def _heartbeats_of(self, window_start, frozen, after_on, stop):
        """window.heartbeat of a bundle: the heartbeats that went into each instance inside
        its part of the window, for parse to find in the data."""
        written = {BEFORE_INSTANCE: self.heart.between(BEFORE_INSTANCE, window_start, frozen)}
        if after_on is not None:
            written[AFTER_INSTANCE] = self.heart.between(AFTER_INSTANCE, after_on, stop)
        return {"interval_s": HEARTBEAT_S, "text": "kmemscope-heartbeat INSTANCE N",
                "written": written}
