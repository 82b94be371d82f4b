"""`kmemscope record --flight -o DIR`: keep the last seconds in the kernel, write a bundle on trouble.

The recorder owns two tracefs instances and leaves the top-level ring buffer
to everyone else: another tool's `trace-cmd record`, `trace-cmd reset` or
tracing_on write does not touch what it keeps. BEFORE_INSTANCE runs in
overwrite mode, sized for --keep seconds at the event rate (ringsize.py:
bounded by --max-buffer, grown in steps and only while memory allows, shrunk
when the rate falls), and nothing reads it in between: no trace-cmd runs while
the recorder waits. AFTER_INSTANCE, set up by the same `trace-cmd start` with
the same events and filters, waits with its events disabled (an idle recorder
pays for one set of tracepoints) and a buffer of its whole share of
--max-buffer. procfs samples go to a rolling store in memory that holds the
same seconds.

A trigger (SIGUSR1, a PSI condition, a vmstat rate, the THP fallback share;
triggers.py) enables the --after instance's events, freezes BEFORE_INSTANCE
(its tracing_on goes to 0) and turns AFTER_INSTANCE on: it keeps the first
events after the trigger (no overwrite), so a burst after the trigger cannot
overwrite the seconds before it; the bundle says how many of the --after
seconds it held before it filled. After --after seconds `trace-cmd extract -B
-B` copies both instances into one DIR/.partial-NAME/trace.dat (parse merges
them by time) and a fresh `trace-cmd start` sets them up again (extract
removes the instances). The samples of the window and a manifest with the
trigger complete the bundle, which is renamed to DIR/<UTC time>-<reason>/.

Every RATE_CHECK_S the recorder reads back what it set in its instances
(instance.py): something else that removed or changed them is said in the log,
undone, and the stretch in which the instances were not as set counts as blind
in the manifest of every bundle whose window it overlaps.

Cooldown, --max-per-hour, --max-bundles and --max-disk bound what triggers
cost: before a bundle is written, the most it can take while trace-cmd
copies and compresses (bundle_bound()) must fit under --max-disk after the
oldest bundles are removed, and above --min-free, or it is refused with one
line. The recorder changes nothing at the top level; its instances are
removed on every way out, by the recorder itself, by its guard process if the
recorder is killed (guard.py), or by `record --cleanup`.
"""
import collections
import os
import queue
import shutil
import signal
import tempfile
import time
from typing import Any

from kmemscope.capture import BUNDLE_FORMAT_VERSION
from kmemscope.capture import bundle as bundle_mod
from kmemscope.capture import cleanup, lock, presets, state, triggers as trig
from kmemscope.capture import tracefs as tfs
from kmemscope.capture.flight_buffers import (  # noqa: F401 (the flight recorder's names)
    COVERAGE_WARN_EVERY_S, DEFAULT_EVENT_BYTES, IDLE_POLL_S, MARGIN, MIN_BUFFER_KB, POLL_S,
    BufferSizer,
    buffer_size_for, measured_rates)
from kmemscope.capture.flight_bundle import (  # noqa: F401
    EXTRACT_TIMEOUT_S, PARTIAL, BundleWriter, _gaps_text, _start_text, bundle_name, stamp_at,
    window_accounting)
from kmemscope.capture.flight_disk import (  # noqa: F401
    BUNDLE_ROOM, DiskBudget, PeakDisk, bundle_bound, disk_use, kallsyms_bytes, list_bundles,
    smallest_bundle, trace_cmd_compresses, trace_dat_metadata, tree_bytes)
from kmemscope.capture.flight_heartbeat import Heartbeat
from kmemscope.capture.flight_instances import (  # noqa: F401
    AFTER_INSTANCE, BEFORE_INSTANCE, CHECK_S, EVENTS_CHECK_S, INSTANCES, MAX_BLIND,
    InstanceKeeper, changed_since, mono_ns)
from kmemscope.capture.flight_state import FlightOptions  # noqa: F401 (command.py's name)
from kmemscope.capture.flight_triggers import (  # noqa: F401
    SLOW_SOURCE_S, SLOW_SOURCES, TriggerHandler, _value_text)
from kmemscope.capture.guard import Guard
from kmemscope.capture.recorder import (Interrupted, Recorder, check_host,
                                        free_space_refusal)
from kmemscope.capture.sampler import RollingSampler
from kmemscope.capture.units import format_size
from kmemscope.common.errors import CaptureError

FLIGHT_FILE = "flight.json"        # marks DIR as a flight directory (parse looks for it)
# How often the rate is read and the buffers' sizes reconsidered (the instances are
# checked every CHECK_S, their enabled events every EVENTS_CHECK_S).
RATE_CHECK_S = 2.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MAX_WARNINGS = 50


def _check_writable(directory):
    """Refuse a directory this process cannot create files in (read-only filesystem, ...)."""
    try:  # root passes access(2) on read-only filesystems: really try
        os.rmdir(tempfile.mkdtemp(prefix=".kmemscope-probe-", dir=directory))
    except OSError as exc:
        raise CaptureError("cannot write bundles in %s: %s" % (directory, exc.strerror),
                           "choose a writable -o")



class FlightRecorder(InstanceKeeper, BufferSizer, TriggerHandler, BundleWriter, Recorder):
    """Run a flight recorder with FlightOptions until a stop signal or --duration.

    Its parts: InstanceKeeper (flight_instances.py), BufferSizer (flight_buffers.py),
    TriggerHandler (flight_triggers.py), BundleWriter (flight_bundle.py) and a
    DiskBudget (flight_disk.py); this class runs them.
    """

    def __init__(self, options, say):
        super().__init__(options, say)
        self.manual: collections.deque = collections.deque()
        self.fired: queue.Queue = queue.Queue()
        self.bundles = []
        self.suppressed: collections.Counter = collections.Counter()
        self.suppressed_at_last_bundle: collections.Counter = collections.Counter()
        self.trigger_times: collections.deque = collections.deque()
        self.last_trigger_ns = None
        # set once the recording runs (None before)
        self.pending: Any = None
        self.tracing_since: Any = None
        self.buffer_kb: Any = None     # BEFORE_INSTANCE's buffer, KiB per CPU, as the kernel says
        self.after_kb: Any = None      # AFTER_INSTANCE's buffer, KiB per CPU
        self.plan: Any = None          # ringsize.BufferPlan
        self.rate: Any = None
        self.vmstat_rows: collections.deque = collections.deque()
        self.psi_armed_ns = None       # PSI triggers count from then on (one full window measured)
        self.not_armed = 0             # PSI wake-ups before that
        self.unconfirmed = 0           # PSI wake-ups the readings did not confirm
        self.psi_woken = {}            # PsiWatch -> mono_ns of the kernel's last wake-up
        self.last_rate_check: Any = None    # (mono_ns, top cpu_stats) of the last rate reading
        self.last_memory_note: Any = None
        self.last_coverage_warning: Any = None
        self.last_rate_s: Any = None
        self.current_rate = {"bytes_per_s": 0.0, "events_per_s": 0.0}
        self.resizes = 0               # top-buffer resizes, for the manifest
        self.growth_refused = 0        # growth steps refused because memory was short
        self.longest_resize_s = 0.0
        self.want = {}                 # instance name -> instance.settings() as set up
        self.after_events = []         # the --after instance's events, enabled at a trigger
        self.last_good_ns = None       # when the instances were last seen as set up
        self.blind: collections.deque = collections.deque(maxlen=MAX_BLIND)   # stretches they were not
        self.instance_restored = 0     # times something else changed them and they were restored
        self.after_filled = {}         # cpu -> mono_ns the armed --after instance began dropping
        self.heart = Heartbeat(options.keep + options.after + 10)
        self.beat_ok = {}              # instance -> mono_ns of the last heartbeat that went in
        self.beat_gap = {}             # instance -> (since, what) while its heartbeats are refused
        self.last_events_check_ns = 0
        self.last_check_ns = 0
        self.growing = False           # the last _adjust_buffers() grew a buffer
        self.setup_changes = []        # what differed at each failed try of the last setup
        self.wake_fds = ()             # set with the signal handlers (_install_signals)
        self.old_wakeup_fd = None

    def _check_conflicts(self, tracefs):
        """Another tool's use of the top level takes nothing from the recorder's own instances
        (and the top level is not the recorder's to refuse): nothing to check."""

    def warn(self, text):
        super().warn(text)
        del self.warnings[:-MAX_WARNINGS]  # a recorder runs for days: keep the newest

    # ------------------------------------------------------------ signals

    def _on_usr1(self, signum, frame):
        self.manual.append(mono_ns())

    def _install_signals(self):
        old = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._on_usr1)
        # A signal also writes to this pipe, which the loop polls: a trigger or a stop is
        # handled at once, however long the loop waits between its idle checks.
        self.wake_fds = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.old_wakeup_fd = signal.set_wakeup_fd(self.wake_fds[1], warn_on_full_buffer=False)
        except ValueError:       # not the main thread (a test's): the loop's timeout serves
            self.old_wakeup_fd = None
        return old

    def _restore_signals(self, old_handlers):
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
        if self.old_wakeup_fd is not None:
            signal.set_wakeup_fd(self.old_wakeup_fd)
        for fd in self.wake_fds:
            os.close(fd)

    # ------------------------------------------------------------ the run

    def run(self):
        """Run until stopped; returns the list of bundles written. Raises CaptureError."""
        opt = self.opt
        old_umask = os.umask(0o077)
        old_handlers = self._install_signals()
        self.guard: Any = None
        try:
            tracefs, trace_cmd = check_host(opt.trace_cmd)
            self._check_options(tracefs)
            state_dir = lock.state_dir()
            self.guard = Guard.start(state_dir)
            record_lock = self.record_lock = lock.RecordLock(state_dir).acquire()
            try:
                cleanup.recover(state_dir, self.say)
                self._locked_run(tracefs, trace_cmd, state_dir, self.guard)
            finally:
                record_lock.release()
            return self.bundles
        finally:
            if self.guard is not None:    # (a new one, when the first died)
                self.guard.done()
            self._restore_signals(old_handlers)
            os.umask(old_umask)

    def _check_options(self, tracefs):
        opt = self.opt
        if opt.interval <= 0:
            raise CaptureError("--interval must be positive")
        if opt.keep <= 0:
            raise CaptureError("--keep must be positive", "write e.g. --keep 30s")
        if opt.after < 0:
            raise CaptureError("--after must not be negative", "write e.g. --after 5s")
        if opt.cooldown < 0:
            raise CaptureError("--cooldown must not be negative", "write e.g. --cooldown 60s")
        if opt.max_per_hour < 1 or opt.max_bundles < 1:
            raise CaptureError("--max-per-hour and --max-bundles must be at least 1")
        if opt.max_disk is not None and opt.max_disk <= 0:
            raise CaptureError("--max-disk must be positive",
                               "write e.g. --max-disk 2G, or leave it out for no limit")
        if opt.max_buffer is not None and opt.max_buffer <= 0:
            raise CaptureError("--max-buffer must be positive", "write e.g. --max-buffer 256M")
        if opt.max_buffer is not None:    # checked again with the sizes in _buffer_plan
            self._min_buffer_check(opt.max_buffer >> 10, len(tfs.cpu_dirs(tracefs)) or 1)
        if opt.command:
            raise CaptureError("a flight recorder runs no COMMAND",
                               "start the workload separately, or record once without --flight")

    def _prepare_directory(self):
        """Create DIR (0700) or reuse a flight directory; remove partial bundles of a killed run."""
        out = os.path.abspath(self.opt.output)
        if os.path.islink(out) or (os.path.lexists(out) and not os.path.isdir(out)):
            raise CaptureError("output %s exists and is not a directory" % out, "choose another -o")
        if os.path.isdir(out):
            names = os.listdir(out)
            if names and FLIGHT_FILE not in names:
                raise CaptureError("output %s is a directory that is not a flight directory" % out,
                                   "choose a new or empty -o; a flight recorder adds bundles "
                                   "only to a directory that holds %s" % FLIGHT_FILE)
            _check_writable(out)
        else:
            bundle_mod.check_output(out, force=False)
        parent = out if os.path.isdir(out) else os.path.dirname(out)
        refusal = free_space_refusal(bundle_mod.free_bytes(parent), parent, self.opt.min_free)
        if refusal:
            raise CaptureError(refusal, "free some space, choose another -o, or lower --min-free")
        return out

    def _locked_run(self, tracefs, trace_cmd, state_dir, guard):  # type: ignore[override]
        # (run() above passes the guard: the flight recorder's own entry into the base's run)
        opt = self.opt
        preset = opt.preset if (opt.preset or opt.events) else "default"
        out = self._prepare_directory()
        specs, missing, stacktrace, restrictions, host_flags = self._resolve_events(tracefs, preset)
        with open("/proc/vmstat") as f:
            trig.check_counters(opt.triggers, f.read())
        ncpu = len(tfs.cpu_dirs(tracefs)) or os.cpu_count() or 1
        self.ncpu = ncpu
        self.bundle_room = BUNDLE_ROOM + trace_dat_metadata(tracefs, trace_cmd_compresses(trace_cmd))
        samples_bytes = self._samples_bound()
        self._check_max_disk(ncpu, samples_bytes)
        self.plan = self._buffer_plan(ncpu, samples_bytes)
        start_kb = opt.buffer_kb or min(presets.PRESETS.get(preset, {}).get("buffer_kb", 8192),
                                        self.plan.top_ceiling_kb)
        # the --after buffer until the rate is measured (then sized from it: ringsize.AFTER_BURST)
        after_kb = min(self.plan.after_ceiling_kb, max(start_kb, MIN_BUFFER_KB))
        watches = [trig.PsiWatch(t).open() for t in opt.triggers if t.kind == "psi"]
        if self.stop_reason:
            raise Interrupted()

        self.tracefs, self.trace_cmd, self.specs = tracefs, trace_cmd, specs
        self.host_flags, self.stacktrace, self.out = host_flags, stacktrace, out
        self.disk = DiskBudget(out, opt, self.bundle_room, self.say, self.warn, self.suppressed)
        os.makedirs(out, mode=0o700, exist_ok=True)
        os.chmod(out, 0o700)
        for name in os.listdir(out):
            if name.startswith(PARTIAL):
                self.say("removing %s, a bundle that a killed flight recorder left unfinished" % name)
                shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        self.head = self._manifest_head(preset, specs, missing, stacktrace, restrictions, host_flags,
                                        self._start_args(start_kb, after_kb), trace_cmd)
        bundle_mod.write_json(os.path.join(out, FLIGHT_FILE), {
            "kind": "kmemscope flight directory", "format_version": BUNDLE_FORMAT_VERSION,
            "pid": os.getpid(), "started": bundle_mod.timestamp(), "host": self.head["host"],
            "preset": preset, "keep_s": opt.keep, "after_s": opt.after,
            "triggers": [t.as_dict() for t in opt.triggers]})

        self.state_file = cleanup.state_path(state_dir)
        self.state_dir = state_dir
        # The top level is not touched: the state to restore is the instances' absence.
        snap = state.instances_snapshot(tracefs)
        self.saved = {"snapshot": snap, "record_pid": os.getpid(), "bundle": None, "trace_cmd": None,
                      "flight": out, "guard_pid": guard.pid, "instances": list(INSTANCES)}
        state.save_file(self.state_file, self.saved)
        for name in INSTANCES:
            if os.path.isdir(tfs.instance_dir(tracefs, name)):
                # A flight recorder killed with its guard, before a --cleanup.
                self.say("removing the tracefs instance %s that a killed flight recorder left" % name)
                tfs.remove_instance(tracefs, name)
        self.sampler = RollingSampler(opt.interval, opt.keep + opt.after + 2 * opt.interval + 1,
                                      opt.zoneinfo, on_sample=self._on_sample,
                                      every_s={name: max(opt.interval, SLOW_SOURCE_S)
                                               for name in SLOW_SOURCES})
        self.psi = trig.PsiHistory(max([t.window_s for t in opt.triggers if t.kind == "psi"] or [0]) + 2)
        poller = trig.PsiPoller(watches, self.wake_fds[0] if self.old_wakeup_fd is not None
                                else None)
        self.psi_conditions = bool(watches)
        try:
            self._start_tracing(start_kb, after_kb)
            self.sampler.sample()
            self.sampler.start()
            self._measure_and_size()
            self._announce()
            self._loop(poller)
        finally:
            self.sampler.close()
            for w in watches:
                w.close()
            problems = [p for p in (tfs.remove_instance(tracefs, n) for n in INSTANCES) if p]
            for problem in problems:
                self.warn("could not remove %s" % problem)
            if not problems:
                os.unlink(self.state_file)
        self.say("stopped (%s): %d bundle(s) written to %s%s%s"
                 % (self.stop_reason, len(self.bundles), out,
                    "; suppressed: " + ", ".join("%d by %s" % (n, why) for why, n
                                                 in sorted(self.suppressed.items()))
                    if self.suppressed else "",
                    "; PSI wake-ups not counted: %d before a whole window was measured, %d not "
                    "confirmed by the readings" % (self.not_armed, self.unconfirmed)
                    if self.not_armed or self.unconfirmed else ""))

    def _samples_bound(self):
        """The most bytes the rolling samples can hold (every source read at every sample,
        each as large as now, with a quarter more room): what a bundle copies of them."""
        opt = self.opt
        try:
            probe = RollingSampler(opt.interval, 1, opt.zoneinfo)
            row = sum(len(probe._read(name) or "") + 64 for name in probe.sources)
        except (OSError, ValueError):
            return 0    # the sampler says what it cannot read once it starts
        rows = int((opt.keep + opt.after + 2 * opt.interval + 1) / opt.interval) + 4
        return row * rows * 5 // 4

    def _announce(self):
        opt = self.opt
        holds = self.rate["holds_s"]
        conditions = ["SIGUSR1 (kill -USR1 %d)" % os.getpid()] + [t.condition for t in opt.triggers]
        self.say("flight recording %s into %s: ring buffer %d KiB per CPU (at most %d; %d KiB more "
                 "for --after) at %.0f events/s (holds %s), keeping %g s before a trigger and %g s "
                 "after; triggers: %s; Ctrl-C stops"
                 % (self.head["preset"] or "events", self.out, self.buffer_kb,
                    self.plan.top_ceiling_kb, self.after_kb or 0, self.rate["events_per_s"],
                    "%.0f s" % holds if holds else "more than asked",
                    opt.keep, opt.after, ", ".join(conditions)))

    def _check_guard(self):
        """A guard that died (killed, OOM) is said and replaced: without one, a recorder
        killed next would leave its instances tracing until a --cleanup."""
        try:
            pid, status = os.waitpid(self.guard.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.guard.pid, None
        if pid == 0:
            return
        how = ("signal %d" % os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status)
               else "exit status %s" % (os.WEXITSTATUS(status) if status is not None else "unknown"))
        if self.guard.fd is not None:
            os.close(self.guard.fd)
        self.guard = Guard.start(self.state_dir, close_fds=[self.record_lock.fd])
        self.saved["guard_pid"] = self.guard.pid
        state.save_file(self.state_file, self.saved)
        self.warn("the guard process that restores tracefs if the recorder is killed ended "
                  "(%s); started a new one (pid %d)" % (how, self.guard.pid))

    def _loop(self, poller):
        opt = self.opt
        start = mono_ns()
        manual_info = {"reason": "manual", "condition": "SIGUSR1", "kind": "manual"}
        if poller.watches:
            self.psi.read(start)
            longest = max(w.trigger.window_s for w in poller.watches.values())
            self.psi_armed_ns = self.psi.rows[0][0] + int(longest * 1e9)
        while True:
            if self.stop_reason is not None:
                if self.pending is not None:
                    self.say("stopping: writing the pending bundle first")
                    self._write_bundle()
                return
            for watch in poller.wait(POLL_S if self.pending is not None else IDLE_POLL_S):
                self._on_psi(watch, mono_ns())
            self._heartbeat()
            now = mono_ns()
            if poller.watches:
                self.psi.read(now)
                self._confirm_psi(now)
            while self.manual:
                self._fire(manual_info, {"signal": "SIGUSR1"}, self.manual.popleft())
            while True:
                try:
                    info, detail, when = self.fired.get_nowait()
                except queue.Empty:
                    break
                self._fire(info, detail, when)
            if self.sampler.error is not None:
                raise CaptureError("cannot read procfs samples: %s" % self.sampler.error)
            if self.pending is not None:
                if now >= self.pending["until"]:
                    self._write_bundle()
                elif self.opt.after > 0:
                    self._watch_after(now)
            elif opt.duration and now - start >= opt.duration * 1e9:
                self.stop_reason = "duration %g s reached" % opt.duration
            else:
                self._idle_checks(now)

    def _idle_checks(self, now):
        """What the recorder reads while it waits for a trigger, each at its own pace (an
        idle recorder's cost is mostly this: docs/record.md)."""
        if now - self.last_check_ns >= CHECK_S * 1e9:
            self.last_check_ns = self.last_events_check_ns = now
            self._check_guard()
            self._check_instances()
        elif now - self.last_events_check_ns >= EVENTS_CHECK_S * 1e9:
            self.last_events_check_ns = now
            self._check_events()
        if time.monotonic() - self.last_rate_s >= RATE_CHECK_S:
            self.last_rate_s = time.monotonic()
            self._read_rate()
            self._update_rate()
            if not self._adjust_buffers() and self.plan.capped() and self.rate["holds_s"] \
                    and self.rate["holds_s"] < self.opt.keep:
                self._say_capped()
        elif self.growing:
            self._adjust_buffers()   # the next step, as soon as the last one is done
