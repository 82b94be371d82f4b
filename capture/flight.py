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
import json
import os
import queue
import re
import shutil
import signal
import tempfile
import time
from typing import Any

from kmemscope.capture import BUNDLE_FORMAT_VERSION
from kmemscope.capture import bundle as bundle_mod
from kmemscope.capture import cleanup, hostinfo, instance, lock, presets, state, triggers as trig
from kmemscope.capture import ringsize
from kmemscope.capture import tracefs as tfs
from kmemscope.capture.guard import Guard
from kmemscope.capture.recorder import (Interrupted, Options, Recorder, check_host,
                                        free_space_refusal)
from kmemscope.capture.sampler import RollingSampler
from kmemscope.capture.tracecmd import (_spec_enabled, _tracing_on, buffer_stats_by_buffer,
                                        check_filters, failure_reason, run_once,
                                        trace_dat_complete)
from kmemscope.capture.units import format_size
from kmemscope.common.errors import CaptureError

POLL_S = 0.1
FLIGHT_FILE = "flight.json"        # marks DIR as a flight directory (parse looks for it)
PARTIAL = ".partial-"
# The tracefs instances the recorder owns: the --keep seconds before a trigger roll in the
# first; the second records the --after seconds while the first is frozen.
BEFORE_INSTANCE = "kmemscope-flight"
AFTER_INSTANCE = "kmemscope-flight-after"
INSTANCES = (BEFORE_INSTANCE, AFTER_INSTANCE)
# A bundle's disk beyond the ring-buffer data that trace-cmd copies, the procfs samples and
# the host's kallsyms (stored whole in trace.dat): trace.dat's other headers (event formats,
# printk formats), the manifest and the log.
BUNDLE_ROOM = 4 << 20
# Blind stretches kept for the manifests (a window reaches back --keep seconds at most).
MAX_BLIND = 100
MARGIN = ringsize.MARGIN
MIN_BUFFER_KB = ringsize.MIN_BUFFER_KB
DEFAULT_EVENT_BYTES = ringsize.DEFAULT_EVENT_BYTES
# procfs files that cost much to read (pagetypeinfo walks every pageblock: 10-15 ms of
# CPU here), sampled every SLOW_SOURCE_S and at each trigger instead of every --interval.
SLOW_SOURCES = ("pagetypeinfo",)
SLOW_SOURCE_S = 10.0
# How often the rate is read and the buffers' sizes reconsidered.
RATE_CHECK_S = 2.0
COVERAGE_WARN_EVERY_S = 600.0
EXTRACT_TIMEOUT_S = 600
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MAX_WARNINGS = 50


class FlightOptions(Options):
    """Options of a flight recorder (cli.py fills it; tests may too)."""

    def __init__(self, output, keep=30.0, after=5.0, trigger_specs=(), cooldown=60.0,
                 max_bundles=10, max_disk=None, max_per_hour=6, measure=3.0, max_buffer=None,
                 **kwargs):
        super().__init__(output, **kwargs)
        self.keep, self.after, self.triggers = keep, after, list(trigger_specs)
        self.cooldown, self.max_bundles, self.max_disk = cooldown, max_bundles, max_disk
        self.max_per_hour, self.measure = max_per_hour, measure
        self.max_buffer = max_buffer    # bytes for all ring buffers of all CPUs; None: default


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def stamp_at(mono):
    """bundle.timestamp() for an earlier CLOCK_MONOTONIC instant."""
    now = bundle_mod.timestamp()
    real = now["realtime_ns"] - (now["mono_ns"] - mono)
    wall = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(real // 10**9)) + ".%06dZ" % (
        real % 10**9 // 1000)
    return {"mono_ns": mono, "realtime_ns": real, "wall": wall}


def bundle_name(realtime_ns, reason):
    """'20251124T044501Z-vmstat.compact_stall': sorts by time, safe as a path."""
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(realtime_ns // 10**9))
    return when + "-" + re.sub(r"[^A-Za-z0-9._-]", "_", reason)[:64]


def list_bundles(directory):
    """Bundle directories of a flight directory, oldest first."""
    out = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith(".") or os.path.islink(path) or not os.path.isdir(path):
            continue
        if os.path.isfile(os.path.join(path, "manifest.json")):
            out.append(path)
    return out


def tree_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


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


def _check_writable(directory):
    """Refuse a directory this process cannot create files in (read-only filesystem, ...)."""
    try:  # root passes access(2) on read-only filesystems: really try
        os.rmdir(tempfile.mkdtemp(prefix=".kmemscope-probe-", dir=directory))
    except OSError as exc:
        raise CaptureError("cannot write bundles in %s: %s" % (directory, exc.strerror),
                           "choose a writable -o")


def kallsyms_bytes(path="/proc/kallsyms"):
    """Bytes of /proc/kallsyms, which trace-cmd copies into every trace.dat (its stat says 0;
    a distribution kernel with many modules has megabytes of it)."""
    total = 0
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                total += len(chunk)
    except OSError:
        pass
    return total


def bundle_bound(stats, samples_bytes, room=BUNDLE_ROOM):
    """The most disk a bundle can take while `trace-cmd extract` writes it, in bytes.

    stats: a cpu_stats() reading of each instance, frozen. trace-cmd copies each
    CPU's pages (the data in 'bytes', plus a page header each, plus a partial
    page at each end) into a temporary file beside trace.dat, writes trace.dat
    from them (compressed: at most as large) and removes them: twice the raw
    pages. Then the procfs samples (twice what the sampler holds: their headers,
    and the samples taken meanwhile), and `room` for the rest (BUNDLE_ROOM and
    the host's kallsyms).
    """
    raw = sum((s.get("bytes", 0) // 4000 + 2) * 4096 for per_cpu in stats
              for s in per_cpu.values())
    return 2 * raw + 2 * samples_bytes + room


def changed_since(tracefs, name, before):
    """True when tracefs/name no longer reads `before` (unreadable counts as unchanged)."""
    try:
        return tfs.read(tracefs, name) != before
    except OSError:
        return False


def window_accounting(stats, window_start, stop, tracing_since):
    """Per-CPU coverage of [window_start, stop] and what was overwritten before or in it.

    stats: cpu_stats() read after tracing_on went to 0; times in ns on the
    trace clock (mono). A CPU whose buffer overran holds events from its
    'oldest event ts' on: the overrun events all came before that. When that
    is after the window's start, the events of the gap were overwritten inside
    the window; their number is estimated from the rate of the events kept.
    """
    rows, covered_from = [], tracing_since
    for cpu, s in sorted(stats.items()):
        overrun, entries = s.get("overrun", 0), s.get("entries", 0)
        oldest = s.get("oldest_event_ts")
        first = int(oldest * 1e9) if overrun and oldest else tracing_since
        in_window = 0
        if overrun and first > window_start:
            kept_s = max(1e-9, (stop - first) / 1e9)
            gap_s = (first - max(window_start, tracing_since)) / 1e9
            in_window = min(overrun, int(round(entries / kept_s * gap_s)))
        rows.append({"cpu": cpu, "covered_from_mono_ns": first, "overrun": overrun,
                     "overwritten_before_window": overrun - in_window,
                     "overwritten_in_window_estimated": in_window,
                     "dropped_events": s.get("dropped_events", 0),
                     "commit_overrun": s.get("commit_overrun", 0), "entries": entries})
        covered_from = max(covered_from, first)
    return rows, covered_from


class FlightRecorder(Recorder):
    """Run a flight recorder with FlightOptions until a stop signal or --duration."""

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
        self.last_memory_note = None
        self.last_coverage_warning = None
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
        return old

    # ------------------------------------------------------------ the run

    def run(self):
        """Run until stopped; returns the list of bundles written. Raises CaptureError."""
        opt = self.opt
        old_umask = os.umask(0o077)
        old_handlers = self._install_signals()
        guard = None
        try:
            tracefs, trace_cmd = check_host(opt.trace_cmd)
            self._check_options(tracefs)
            state_dir = lock.state_dir()
            guard = Guard.start(state_dir)
            record_lock = lock.RecordLock(state_dir).acquire()
            try:
                cleanup.recover(state_dir, self.say)
                self._locked_run(tracefs, trace_cmd, state_dir, guard)
            finally:
                record_lock.release()
            return self.bundles
        finally:
            if guard is not None:
                guard.done()
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
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
        self.bundle_room = BUNDLE_ROOM + kallsyms_bytes()
        self.plan = self._buffer_plan(ncpu)
        start_kb = opt.buffer_kb or min(presets.PRESETS.get(preset, {}).get("buffer_kb", 8192),
                                        self.plan.top_ceiling_kb)
        after_kb = self.plan.after_ceiling_kb   # the burst after a trigger: its whole share
        watches = [trig.PsiWatch(t).open() for t in opt.triggers if t.kind == "psi"]
        if self.stop_reason:
            raise Interrupted()

        self.tracefs, self.trace_cmd, self.specs = tracefs, trace_cmd, specs
        self.host_flags, self.stacktrace, self.out = host_flags, stacktrace, out
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
        poller = trig.PsiPoller(watches)
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

    # ------------------------------------------------------------ tracing on and off

    def _buffer_plan(self, ncpu):
        """The buffers' ceilings from --max-buffer (default: a small share of RAM)."""
        opt = self.opt
        total_kb = hostinfo.meminfo_kb("MemTotal") or 0
        if opt.max_buffer is not None:
            max_kb = opt.max_buffer >> 10
        else:
            max_kb = ringsize.default_max_buffer_kb(total_kb, ncpu)
        self._min_buffer_check(max_kb, ncpu)
        plan = ringsize.BufferPlan(opt.keep, opt.after, ncpu, max_kb, fixed_top_kb=opt.buffer_kb)
        if opt.buffer_kb and opt.buffer_kb > plan.top_ceiling_kb:
            raise CaptureError("--buffer-kb %d does not fit under --max-buffer %s on %d CPUs (at most "
                               "%d KiB per CPU before the trigger)"
                               % (opt.buffer_kb, format_size(max_kb << 10), ncpu,
                                  plan.top_ceiling_kb),
                               "lower --buffer-kb or raise --max-buffer")
        self.max_buffer_kb = max_kb
        return plan

    def _min_buffer_check(self, max_kb, ncpu):
        least = (2 if self.opt.after > 0 else 1) * (MIN_BUFFER_KB + ringsize.ROUNDING_KB) * ncpu
        if max_kb < least:
            raise CaptureError("--max-buffer %s is less than the %s that %d CPUs need at least"
                               % (format_size(max_kb << 10), format_size(least << 10), ncpu),
                               "raise --max-buffer")

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
        """`trace-cmd start` into the instances; blocks until the kernel traces into the first.

        The --after instance is left idle: tracing_on 0, no overwrite, its events off
        (enabled again at a trigger, _arm()) so that no tracepoint runs for it meanwhile.
        """
        for name in INSTANCES:   # a restart after something else changed them: from scratch
            tfs.remove_instance(self.tracefs, name)
        log = os.path.join(self.out, ".trace-cmd.log")
        status, output = run_once(self._start_args(kb, after_kb), log, cwd=self.out, timeout=60)
        if status != 0:
            raise CaptureError("trace-cmd start failed with status %s: %s"
                               % (status, failure_reason(status, output)), "see %s" % log)
        before = self._before_dir()
        tfs.write(before, "options/overwrite", "1")
        if self.opt.after > 0:
            inst = self._after_dir()
            tfs.write(inst, "tracing_on", "0")
            # Keep the first events after a trigger: a full instance drops, never overwrites.
            tfs.write(inst, "options/overwrite", "0")
            self.after_events = tfs.enabled_events(inst)
            tfs.write(inst, "events/enable", "0")
            tfs.write(inst, "trace", "")   # what it took before tracing_on went to 0
        deadline = time.monotonic() + 10
        while not (_tracing_on(before) and all(_spec_enabled(before, s) for s in self.specs)):
            if time.monotonic() > deadline:
                raise CaptureError("tracing did not start after trace-cmd start", "see %s" % log)
            time.sleep(0.05)
        check_filters(before, self.specs)
        self.tracing_since = mono_ns()
        self.buffer_kb = int(tfs.parse_buffer_size(tfs.read(before, "buffer_size_kb"))[0])
        if self.opt.after > 0:
            self.after_kb = int(tfs.parse_buffer_size(tfs.read(self._after_dir(),
                                                               "buffer_size_kb"))[0])
        self._note_settings()
        self.last_good_ns = self.tracing_since
        self.last_rate_check = (self.tracing_since, tfs.cpu_stats(before))

    def _note_settings(self):
        """Remember the instances as they are now set, for _check_instances to compare."""
        self.want = {BEFORE_INSTANCE: instance.settings(self._before_dir())}
        if self.opt.after > 0:
            self.want[AFTER_INSTANCE] = instance.settings(self._after_dir(),
                                                          filtered=self.after_events)

    def _arm(self):
        """Enable the --after instance's events (its tracing_on still 0): a few writes."""
        for event in self.after_events:
            try:
                tfs.write(self._after_dir(), "events/%s/enable" % event.replace(":", "/"), "1")
            except OSError as exc:
                self.warn("could not enable %s in the --after instance: %s" % (event, exc.strerror))

    def _check_instances(self):
        """Read back the instances; undo what something else changed, and count it as blind.

        tracing_on alone is written back; anything else (events, filters, buffer size,
        clock, the instance removed) sets both instances up again: what the first held
        since it changed cannot be trusted, and the stretch from the last good reading
        to now is blind either way.
        """
        checked = mono_ns()   # before reading: the instances were as set up at least until then
        changed = {}
        for name, want in self.want.items():
            inst = tfs.instance_dir(self.tracefs, name)
            now = instance.settings(inst, filtered=list(want["filters"]) if name == AFTER_INSTANCE
                                    else None)
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
        else:
            self._start_tracing(self.buffer_kb, self.after_kb)
            how = "set both instances up again (the first starts empty)"
        blind = {"from_mono_ns": since, "to_mono_ns": mono_ns(), "what": what}
        self.blind.append(blind)
        self.last_good_ns = blind["to_mono_ns"]
        self.instance_restored += 1
        self.warn("the tracefs instances of the flight recorder were changed by something else "
                  "(%s); %s. Bundles whose window includes the %.1f s since the last check say "
                  "they are incomplete" % (what, how, (blind["to_mono_ns"] - blind["from_mono_ns"])
                                           / 1e9))

    def _measure_and_size(self):
        """Measure the event rate for --measure seconds; start sizing the buffers for it."""
        opt = self.opt
        seconds = max(0.5, opt.measure)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds and self.stop_reason is None:
            time.sleep(POLL_S)
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
        self.rate = {"events_per_s": round(self.current_rate["events_per_s"], 1),
                     "busiest_cpu_bytes_per_s": round(busiest, 1),
                     "peak_busiest_cpu_bytes_per_s": round(self.plan.peak_rate(), 1),
                     "buffer_kb": self.buffer_kb, "after_buffer_kb": self.after_kb,
                     "max_buffer_kb": self.max_buffer_kb,
                     "ceiling_kb": self.plan.top_ceiling_kb,
                     "after_ceiling_kb": self.plan.after_ceiling_kb,
                     "holds_s": round(holds, 1) if holds else None}

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
            text = tfs.read(where, "buffer_size_kb")
            got = int(tfs.parse_buffer_size(text)[0])
            self.want[name]["buffer_size_kb"] = text   # our own change: not a drift
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
        self.warn("the ring buffer (%d KiB per CPU, the most --max-buffer %s allows) holds about "
                  "%.1f s at the busiest CPU's %s/s, less than the %g s of --keep (raise "
                  "--max-buffer, lower --keep, or use a lighter preset)"
                  % (self.buffer_kb, format_size(self.max_buffer_kb << 10), self.rate["holds_s"],
                     format_size(self.rate["busiest_cpu_bytes_per_s"]), self.opt.keep))

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

    # ------------------------------------------------------------ triggers

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
        self.suppressed_at_last_bundle = collections.Counter(self.suppressed)
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
            for watch in poller.wait(POLL_S):
                self._on_psi(watch, mono_ns())
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
            elif time.monotonic() - self.last_rate_s >= RATE_CHECK_S:
                self.last_rate_s = time.monotonic()
                self._check_instances()
                self._read_rate()
                self._update_rate()
                if not self._adjust_buffers() and self.plan.capped() and self.rate["holds_s"] \
                        and self.rate["holds_s"] < opt.keep:
                    self._say_capped()
            else:
                self._adjust_buffers()   # the next step, if the buffers are growing

    # ------------------------------------------------------------ bundles

    def _write_bundle(self):
        opt, pending = self.opt, self.pending
        self.pending = None
        trigger, when = pending["trigger"], pending["mono_ns"]
        missing = [n for n in self.want if not os.path.isdir(tfs.instance_dir(self.tracefs, n))]
        if missing:
            self.warn("bundle for trigger %s not written: something else removed the tracefs "
                      "instance %s before it was copied; set the instances up again"
                      % (trigger["reason"], ", ".join(missing)))
            self.suppressed["instance removed"] += 1
            self.blind.append({"from_mono_ns": pending["frozen_ns"], "to_mono_ns": mono_ns(),
                               "what": "instance removed: " + ", ".join(missing)})
            self._start_tracing(self.buffer_kb, self.after_kb)
            return
        if opt.after > 0:
            tfs.write(self._after_dir(), "tracing_on", "0")
            self._watch_after(mono_ns())
        stop = mono_ns()
        stats = tfs.cpu_stats(self._before_dir())
        after_stats = tfs.cpu_stats(self._after_dir()) if opt.after > 0 else {}
        name = bundle_name(trigger["time"]["realtime_ns"], trigger["reason"])
        final = os.path.join(self.out, name)
        n = 2
        while os.path.lexists(final):
            final = os.path.join(self.out, "%s-%d" % (name, n))
            n += 1
        tmp = os.path.join(self.out, PARTIAL + os.path.basename(final))
        bound = bundle_bound([stats, after_stats], self.sampler.bytes_held(), self.bundle_room)
        if not self._room_for(bound, trigger):
            self._resume_after_skip(pending["frozen_ns"])
            return
        os.mkdir(tmp, 0o700)
        # the samples first: the rolling store holds the window only for so long, and an
        # extract on a loaded host can take seconds
        samples = self.sampler.write_window(os.path.join(tmp, "procfs"),
                                            when - int(opt.keep * 1e9), stop)
        self.saved["bundle"] = tmp
        state.save_file(self.state_file, self.saved)
        trace_dat = os.path.join(tmp, "trace.dat")

        def saved_pid(pid, start_time):
            self.saved["trace_cmd"] = {"pid": pid, "start_time": start_time}
            state.save_file(self.state_file, self.saved)

        log = os.path.join(tmp, "trace-cmd.log")
        t0 = time.monotonic()
        tracing_since_before = self.tracing_since
        extract = [self.trace_cmd, "extract"]
        for instance_name in self.want:
            extract += ["-B", instance_name]
        # a trace-cmd that dies (a full disk) turns the top level's tracing off on its way out
        top_on = tfs.read(self.tracefs, "tracing_on")
        try:
            status, output = run_once(extract + ["-o", trace_dat], log, cwd=tmp,
                                      timeout=EXTRACT_TIMEOUT_S, on_start=saved_pid)
        finally:
            self.saved["trace_cmd"] = None
            extract_s = time.monotonic() - t0
            if changed_since(self.tracefs, "tracing_on", top_on):
                tfs.write(self.tracefs, "tracing_on", top_on)
        # extract disabled the events, cleared the buffers and removed the instances: start
        # afresh. A failed restart ends the recorder, after this bundle is complete.
        restart_error = None
        try:
            self._start_tracing(self.buffer_kb, self.after_kb)
        except CaptureError as exc:
            restart_error = exc
        self._finish_bundle(status, output, trace_dat, tmp, final, trigger, pending, stop, samples,
                            stats, after_stats, tracing_since_before, extract_s, bound)
        if restart_error is not None:
            self.stop_reason = "tracing could not restart"
            raise restart_error

    def _room_for(self, bound, trigger):
        """True when a bundle that may take `bound` bytes while written fits: above --min-free,
        and under --max-disk once the oldest bundles are removed. Else one line says why."""
        opt = self.opt
        free = bundle_mod.free_bytes(self.out)
        if free - bound < opt.min_free:
            self.warn("bundle for trigger %s not written: %s free under %s, and writing it may "
                      "take %s above the --min-free margin %s"
                      % (trigger["reason"], format_size(free), self.out, format_size(bound),
                         format_size(opt.min_free)))
            self.suppressed["min-free"] += 1
            return False
        if not opt.max_disk:
            return True
        if bound > opt.max_disk:
            self.warn("bundle for trigger %s not written: writing it may take %s (the ring "
                      "buffers' data twice, copied then compressed, the samples and %s for the "
                      "rest), more than --max-disk %s (raise --max-disk, or lower --max-buffer)"
                      % (trigger["reason"], format_size(bound), format_size(self.bundle_room),
                         format_size(opt.max_disk)))
            self.suppressed["max-disk"] += 1
            return False
        bundles = list_bundles(self.out)
        while bundles and tree_bytes(self.out) + bound > opt.max_disk:
            oldest = bundles.pop(0)
            shutil.rmtree(oldest, ignore_errors=True)
            self.say("removed the oldest bundle %s (--max-disk %s: the next may take %s)"
                     % (os.path.basename(oldest), format_size(opt.max_disk), format_size(bound)))
        if tree_bytes(self.out) + bound > opt.max_disk:
            self.warn("bundle for trigger %s not written: %s holds %s that are not bundles, and "
                      "writing one may take %s, over --max-disk %s"
                      % (trigger["reason"], self.out, format_size(tree_bytes(self.out)),
                         format_size(bound), format_size(opt.max_disk)))
            self.suppressed["max-disk"] += 1
            return False
        return True

    def _resume_after_skip(self, frozen):
        """A skipped bundle: the first instance rolls on, the second goes back to idle and empty.
        The first did not trace since the trigger: a later window that reaches back there says so."""
        if self.opt.after > 0:
            inst = self._after_dir()
            tfs.write(inst, "tracing_on", "0")
            tfs.write(inst, "events/enable", "0")
            tfs.write(inst, "trace", "")
        tfs.write(self._before_dir(), "tracing_on", "1")
        self.blind.append({"from_mono_ns": frozen, "to_mono_ns": mono_ns(),
                           "what": "not traced: frozen for a bundle that was not written"})

    def _finish_bundle(self, status, output, trace_dat, tmp, final, trigger, pending, stop, samples,
                       stats, after_stats, tracing_since_before, extract_s, bound):
        opt = self.opt
        when, frozen = pending["mono_ns"], pending["frozen_ns"]
        if status != 0 or not trace_dat_complete(trace_dat):
            self.warn("trace-cmd extract failed for trigger %s (status %s): %s"
                      % (trigger["reason"], status, failure_reason(status, output)
                         if status != 0 else "trace.dat is incomplete"))
            shutil.rmtree(tmp, ignore_errors=True)
            self.saved["bundle"] = None
            state.save_file(self.state_file, self.saved)
            return
        window_start = when - int(opt.keep * 1e9)
        # The first instance stopped at `frozen`: its coverage is judged there, not at `stop`.
        rows, covered_from = window_accounting(stats, window_start, frozen, tracing_since_before)
        after_dropped = sum(s.get("dropped_events", 0) + s.get("commit_overrun", 0)
                            for s in after_stats.values())
        # trace.dat also holds the top level's counters (another tool's): left out
        by_buffer = {name: per_cpu for name, per_cpu in
                     (buffer_stats_by_buffer(self.trace_cmd, trace_dat) or {}).items()
                     if name in INSTANCES}
        file_stats = by_buffer.get(BEFORE_INSTANCE, {})
        file_after = by_buffer.get(AFTER_INSTANCE, {})
        blind = instance.blind_in(self.blind, window_start, stop)
        blind_s = sum(b["to_mono_ns"] - b["from_mono_ns"] for b in blind) / 1e9
        after_kept_s = self._after_kept_s(when, stop) if opt.after > 0 else None
        manifest = json.loads(json.dumps(self.head))
        labels = dict(manifest.get("labels") or {})
        labels["trigger"] = trigger["reason"]
        lost_before_trigger = sum(r["overwritten_in_window_estimated"] + r["dropped_events"] +
                                  r["commit_overrun"] for r in rows)
        self._update_rate()
        manifest.update({
            "status": "complete",
            "stop_reason": "flight recorder trigger %s" % trigger["reason"],
            "labels": labels,
            "trigger": trigger,
            "start": stamp_at(max(window_start, tracing_since_before)),
            "end": stamp_at(stop),
            "duration_s": round((stop - max(window_start, tracing_since_before)) / 1e9, 3),
            "buffer_kb": self.buffer_kb,
            "window": {
                "keep_s": opt.keep, "after_s": opt.after,
                "start_mono_ns": window_start, "trigger_mono_ns": when, "end_mono_ns": stop,
                # the first instance stopped here; the --after one ran from after_started on
                "frozen_mono_ns": frozen, "after_started_mono_ns": pending["after_on_ns"],
                "before_buffer": BEFORE_INSTANCE,
                "after_buffer": AFTER_INSTANCE if opt.after > 0 else None,
                "after_buffer_kb": self.after_kb,
                "tracing_since_mono_ns": tracing_since_before,
                "covered_from_mono_ns": covered_from,
                "complete": covered_from <= window_start and not after_dropped and not blind,
                "before_complete": covered_from <= window_start and not any(
                    b["from_mono_ns"] < when for b in blind),
                "after_complete": not after_dropped and not any(b["to_mono_ns"] > when
                                                                for b in blind),
                # stretches in which something else had changed the instances (or a skipped
                # bundle had frozen them): what the trace holds there is not the whole
                "blind": blind, "blind_s": round(blind_s, 3),
                # seconds after the trigger that the --after buffer held before it filled
                # (to POLL_S; the whole --after when it did not fill), per CPU that filled
                "after_kept_s": after_kept_s,
                "after_filled_mono_ns": {str(cpu): t for cpu, t in sorted(self.after_filled.items())},
                "missing_s": round(max(0, covered_from - window_start) / 1e9, 3),
                # what the ring buffer held before the trigger at that moment
                "held_before_trigger_s": round(max(0, when - covered_from) / 1e9, 3),
                # not traced: the recorder started, or restarted after the previous bundle
                "untraced_s": round(max(0, tracing_since_before - window_start) / 1e9, 3),
                "overwritten_s": round(max(0, covered_from - max(window_start, tracing_since_before))
                                       / 1e9, 3),
            },
            "lost": {
                "overwritten_before_window": sum(r["overwritten_before_window"] for r in rows),
                "overwritten_in_window_estimated": sum(r["overwritten_in_window_estimated"]
                                                       for r in rows),
                "dropped_in_window": sum(r["dropped_events"] + r["commit_overrun"] for r in rows)
                + after_dropped,
                "dropped_after_trigger": after_dropped,
                "per_cpu": rows,
            },
            "cpu_stats": [dict(cpu=cpu, **values) for cpu, values in sorted(file_stats.items())],
            "after_cpu_stats": [dict(cpu=cpu, **values) for cpu, values in sorted(file_after.items())],
            "cpu_stats_source": "trace.dat",
            "events_recorded": sum(v.get("read_events", 0) for stats_ in by_buffer.values()
                                   for v in stats_.values()),
            # lost inside the window only: what the ring buffer overwrote before it is expected
            "lost_events": lost_before_trigger + after_dropped,
            "buffer_too_small": covered_from > window_start,
            "trace_dat_bytes": os.stat(trace_dat).st_size,
            # the most it could take while written (the temporary copies included), reserved
            # under --max-disk and above --min-free before extract ran
            "disk_bound_bytes": bound,
            "samples": samples,
            "cost_samples": self.sampler.cost_manifest(),
            "flight": {"directory": self.out, "rate": dict(self.rate), "extract_s": round(extract_s, 3),
                       "bundle_number": len(self.bundles) + 1, "resizes": self.resizes,
                       "growth_refused_memory_short": self.growth_refused,
                       "longest_resize_s": round(self.longest_resize_s, 3),
                       "instances_restored": self.instance_restored,
                       "cooldown_s": opt.cooldown, "max_per_hour": opt.max_per_hour,
                       "max_bundles": opt.max_bundles, "max_disk_bytes": opt.max_disk},
            "warnings": list(self.warnings),
        })
        bundle_mod.write_manifest(tmp, manifest)
        bundle_mod.restrict_permissions(tmp)
        os.rename(tmp, final)
        self.saved["bundle"] = None
        state.save_file(self.state_file, self.saved)
        self.bundles.append(final)
        self.say("wrote %s: trace.dat %s, %d events from %s to %.1f s after, "
                 "%d procfs samples, extract took %.1f s%s"
                 % (final, format_size(manifest["trace_dat_bytes"]), manifest["events_recorded"],
                    _start_text(when - covered_from), (stop - when) / 1e9, samples, extract_s,
                    _gaps_text(manifest)))
        self._prune(final)

    def _after_kept_s(self, when, stop):
        """Seconds after the trigger that the --after instance held: to when its first CPU
        filled (seen to POLL_S), else to the end."""
        end = min(self.after_filled.values()) if self.after_filled else stop
        return round(max(0, end - when) / 1e9, 2)

    def _prune(self, newest):
        """Remove the oldest bundles beyond --max-bundles or --max-disk (never the newest)."""
        opt = self.opt
        bundles = list_bundles(self.out)
        sizes = {b: tree_bytes(b) for b in bundles}
        while len(bundles) > 1:
            total = sum(sizes[b] for b in bundles)
            if len(bundles) > opt.max_bundles:
                why = "--max-bundles %d" % opt.max_bundles
            elif opt.max_disk and total > opt.max_disk:
                why = "--max-disk %s" % format_size(opt.max_disk)
            else:
                break
            oldest = bundles.pop(0)
            if oldest == newest:
                break
            shutil.rmtree(oldest, ignore_errors=True)
            self.say("removed the oldest bundle %s (%s)" % (os.path.basename(oldest), why))
        if opt.max_disk and sizes.get(newest, 0) > opt.max_disk:
            self.warn("the bundle %s alone is %s, over --max-disk %s"
                      % (os.path.basename(newest), format_size(sizes[newest]), format_size(opt.max_disk)))


def _gaps_text(manifest):
    """What the start of a bundle's window lacks, for its 'wrote' line."""
    w, parts = manifest["window"], []
    if w["untraced_s"]:
        parts.append("tracing had (re)started only %.1f s before the trigger"
                     % ((w["trigger_mono_ns"] - w["tracing_since_mono_ns"]) / 1e9))
    if w["overwritten_s"]:
        parts.append("the ring buffer had overwritten the first %.1f s of the window (about %d "
                     "events)" % (w["overwritten_s"], manifest["lost"]["overwritten_in_window_estimated"]))
    if manifest["lost"].get("dropped_after_trigger"):
        parts.append("the --after buffer filled after about %.1f s and dropped %d events"
                     % (w.get("after_kept_s") or 0, manifest["lost"]["dropped_after_trigger"]))
    if w.get("blind"):
        parts.append("blind for %.1f s of the window: %s" % (
            w["blind_s"], "; ".join(b["what"] for b in w["blind"])))
    return "".join("; " + p for p in parts)


def _start_text(before_ns):
    """'4.0 s before the trigger' / '0.5 s after the trigger' (the first event held)."""
    if before_ns >= 0:
        return "%.1f s before the trigger" % (before_ns / 1e9)
    return "%.1f s after the trigger" % (-before_ns / 1e9)


def _value_text(detail):
    value = detail.get("value")
    if value is None:
        return detail.get("signal", "no value")
    return "value %g" % value
