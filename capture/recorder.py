"""One recording, start to finish: checks, trace-cmd, samplers, limits, restore.

The order matters: nothing in tracefs is touched until the output exists and
the state file holds a snapshot of what will be changed; whatever happens
after that (limits, signals, errors), `finally` stops trace-cmd and restores
the snapshot before the lock is released.
"""
import glob
import os
import shutil
import signal
import subprocess
import time

from kmemscope.capture import BUNDLE_FORMAT_VERSION
from kmemscope.capture import bundle as bundle_mod
from kmemscope.capture import cleanup, hostinfo, lock, presets, state
from kmemscope.capture.workload_command import Command
from kmemscope.capture import tracefs as tfs
from kmemscope.common.errors import CaptureError
from kmemscope.capture.sampler import ProcfsSampler
from kmemscope.capture.tracecmd import (TraceCmd, build_args, buffer_stats_from_file,
                                        restore_triggers, save_triggers, trace_dat_complete)
from kmemscope.capture.units import format_size

POLL_S = 0.1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Share of MemAvailable that the ring buffers may take before record refuses.
MAX_BUFFER_SHARE = 0.25
# Free space record wants above --min-free before it starts: room for
# trace-cmd's first flushes, the procfs samples and the manifest.
START_ROOM = 64 << 20


def free_space_refusal(free, where, min_free):
    """The error text when `free` bytes under `where` cannot take a recording, else None."""
    needed = min_free + START_ROOM
    if free >= needed:
        return None
    return ("only %s free under %s, %s short of the %s that record needs there: "
            "the --min-free margin %s + %s to start"
            % (format_size(free), where, format_size(needed - free), format_size(needed),
               format_size(min_free), format_size(START_ROOM)))


def trace_room(free, min_free):
    """Trace data that fits before free space falls to min_free.

    trace-cmd writes per-CPU files and then copies them into trace.dat, so
    each byte of trace data needs two bytes of disk until the copy ends.
    """
    return max(0, (free - min_free) // 2)


def size_limit_text(max_size, free, where, min_free):
    """The 'at most ...' part of the start line, naming whichever limit is lower."""
    room = trace_room(free, min_free)
    if room >= max_size:
        return "at most %s" % format_size(max_size)
    return ("at most %s of trace data: %s free under %s minus the --min-free margin %s, "
            "halved because trace.dat is merged from per-CPU copies"
            % (format_size(room), format_size(free), where, format_size(min_free)))


class Options:
    """What the command line asked for (cli.py fills it; tests may too)."""

    def __init__(self, output, preset=None, events=(), duration=None, max_size=2 << 30,
                 min_free=1 << 30, interval=1.0, buffer_kb=None, labels=None, force=False,
                 zoneinfo=False, command=(), trace_cmd="trace-cmd"):
        self.output, self.preset, self.events = output, preset, list(events)
        self.duration, self.max_size, self.min_free = duration, max_size, min_free
        self.interval, self.buffer_kb, self.labels = interval, buffer_kb, dict(labels or {})
        self.force, self.zoneinfo, self.command = force, zoneinfo, list(command)
        self.trace_cmd = trace_cmd


class Interrupted(Exception):
    """A stop signal arrived before recording began."""


def _kmemscope_version():
    try:
        from kmemscope.common.version import __version__
        return __version__
    except ImportError:
        return None


def check_host(trace_cmd):
    """Root, tracefs and trace-cmd: (tracefs path, trace-cmd path)."""
    if os.geteuid() != 0:
        raise CaptureError("recording needs root", "run it as root or with sudo")
    path = shutil.which(trace_cmd)
    if path is None:
        raise CaptureError("trace-cmd is not installed", "install it: apt-get install trace-cmd")
    return tfs.find_tracefs(), path


def conflicts(tracefs):
    """What would take events from this capture: enabled events, buffer readers, a tracer."""
    found = []
    events = tfs.enabled_events(tracefs)
    if events:
        shown = ", ".join(events[:8]) + (" and %d more" % (len(events) - 8) if len(events) > 8 else "")
        found.append("events already enabled: " + shown)
    readers = tfs.ring_buffer_readers(tracefs, exclude_pids={os.getpid()})
    if readers:
        found.append("processes reading the ring buffer: " +
                     ", ".join("%s (pid %d)" % (comm, pid) for pid, comm, _ in readers))
    try:
        tracer = tfs.read(tracefs, "current_tracer")
    except OSError:
        tracer = "nop"
    if tracer != "nop":
        found.append("tracer %r is active" % tracer)
    return found


class Recorder:
    """Run one recording with `options`; `say` prints a progress line (stderr), `status`
    (when given) shows how far the recording is, rewritten about once a second."""

    def __init__(self, options, say, status=None):
        self.opt, self.say, self.status = options, say, status
        self.stop_reason = None
        self.warnings = []

    # ------------------------------------------------------------ signals

    def _on_signal(self, signum, frame):
        if self.stop_reason is None:
            self.stop_reason = "signal " + signal.Signals(signum).name
        else:
            self.say("still stopping: trace-cmd is writing trace.dat")

    def _install_signals(self):
        return {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}

    # ------------------------------------------------------------ checks before anything changes

    def _preflight(self, tracefs):
        opt = self.opt
        if opt.interval <= 0:
            raise CaptureError("--interval must be positive")
        parent = os.path.dirname(bundle_mod.check_output(opt.output, opt.force))
        refusal = free_space_refusal(bundle_mod.free_bytes(parent), parent, opt.min_free)
        if refusal:
            raise CaptureError(refusal, "free some space, choose another -o, or lower --min-free")
        ncpu = len(tfs.cpu_dirs(tracefs)) or os.cpu_count() or 1
        avail_kb = hostinfo.meminfo_kb("MemAvailable")
        if avail_kb and opt.buffer_kb * ncpu > avail_kb * MAX_BUFFER_SHARE and not opt.force:
            raise CaptureError("ring buffers of %d KiB on %d CPUs would take %s, over a quarter of "
                               "MemAvailable" % (opt.buffer_kb, ncpu, format_size(opt.buffer_kb * ncpu << 10)),
                               "lower --buffer-kb, or pass --force")

    def _check_conflicts(self, tracefs):
        found = conflicts(tracefs)
        if not found:
            return
        if not self.opt.force:
            raise CaptureError("someone else is tracing: " + "; ".join(found),
                               "stop them first (kill -INT the reader; echo 0 > %s/events/enable), "
                               "or pass --force to record anyway" % tracefs)
        for item in found:
            self.warn("--force: recording although " + item + "; they take events from this capture")

    def warn(self, text):
        self.warnings.append(text)
        self.say("warning: " + text)

    # ------------------------------------------------------------ the recording

    def run(self):
        """Record the bundle; returns the manifest. Raises CaptureError."""
        old_umask = os.umask(0o077)  # trace-cmd inherits it: every file owner-only
        old_handlers = self._install_signals()
        try:
            tracefs, trace_cmd = check_host(self.opt.trace_cmd)
            state_dir = lock.state_dir()
            record_lock = lock.RecordLock(state_dir).acquire()
            try:
                cleanup.recover(state_dir, self.say)
                return self._locked_run(tracefs, trace_cmd, state_dir)
            finally:
                record_lock.release()
        finally:
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
            os.umask(old_umask)

    def _resolve_events(self, tracefs, preset):
        """The preset's events on this kernel, and the trace-cmd flags this host needs:
        (specs, missing, stacktrace, restrictions, host_flags); a missing event is a warning."""
        specs, missing, stacktrace = presets.resolve(tracefs, preset, self.opt.events)
        self._check_conflicts(tracefs)
        restrictions = tfs.probe_restrictions(tracefs)
        host_flags = tfs.trace_cmd_flags(restrictions)
        for name in missing:
            self.warn("this kernel has no %s; the %s preset records without it" % (name, preset))
        return specs, missing, stacktrace, restrictions, host_flags

    def _locked_run(self, tracefs, trace_cmd, state_dir):
        opt = self.opt
        preset = opt.preset if (opt.preset or opt.events) else "default"
        if opt.buffer_kb is None:
            opt.buffer_kb = presets.PRESETS[preset]["buffer_kb"] if preset else 8192
        self._preflight(tracefs)
        specs, missing, stacktrace, restrictions, host_flags = self._resolve_events(tracefs, preset)
        for spec in specs:
            if spec.stack_fallback:
                self.warn("this kernel has no stacktrace trigger on %s; the %s preset records a "
                          "kernel stack on every event instead (trace-cmd -T)" % (spec.name, preset))
        if self.stop_reason:
            raise Interrupted()

        out = bundle_mod.create(opt.output, opt.force)
        trace_dat = os.path.join(out, "trace.dat")
        args = build_args(trace_cmd, trace_dat, specs, opt.buffer_kb, host_flags, stacktrace)
        manifest = self._manifest_head(preset, specs, missing, stacktrace, restrictions,
                                       host_flags, args, trace_cmd)
        bundle_mod.write_manifest(out, manifest)

        state_file = cleanup.state_path(state_dir)
        snap = state.snapshot(tracefs, [s.name for s in specs])
        triggers = save_triggers(tracefs, specs)
        saved = {"snapshot": snap, "record_pid": os.getpid(), "bundle": out, "trace_cmd": None,
                 "triggers": triggers}
        state.save_file(state_file, saved)
        tc = TraceCmd(args, trace_dat, os.path.join(out, "trace-cmd.log"))
        sampler = ProcfsSampler(os.path.join(out, "procfs"), opt.interval, opt.zoneinfo)
        command = None
        try:
            tc.start()
            saved["trace_cmd"] = {"pid": tc.pid, "start_time": tc.start_time}
            state.save_file(state_file, saved)
            if not tc.wait_ready(tracefs, specs, should_stop=lambda: bool(self.stop_reason)):
                raise Interrupted()
            manifest["start"] = bundle_mod.timestamp()
            sampler.open()
            sampler.sample()
            sampler.start()
            # Free space as if no trace data were written yet: the stop rule counts it twice.
            free = bundle_mod.free_bytes(out) + tc.data_bytes()
            self.say("recording %s to %s (%s)" % (preset or "events", out, self._limits_text(out, free)))
            command = self._start_command()
            self._monitor(tc, sampler, command, manifest["start"]["mono_ns"])
            manifest["command"] = self._finish_command(command)
            sampler.stop()
            sampler.sample()  # the last sample closes the window the trace covers
            manifest["end"] = bundle_mod.timestamp()
            last_stats = tfs.cpu_stats(tracefs)
            self.say("stopping (%s); trace-cmd is writing trace.dat" % self.stop_reason)
            status = tc.stop()
            manifest["trace_cmd"]["exit_status"] = status
        except BaseException:
            if command is not None and command.poll() is None:
                self._finish_command(command)
            raise
        finally:
            sampler.close()
            tc.kill()
            problems = state.restore(snap) + restore_triggers(tracefs, triggers)
            for problem in problems:
                self.warn("could not restore %s" % problem)
            if not problems:
                os.unlink(state_file)
            manifest["samples"] = sampler.samples
            if not trace_dat_complete(trace_dat):
                for path in glob.glob(trace_dat + ".cpu*"):  # a killed trace-cmd's temp files
                    os.unlink(path)
            if "start" not in manifest or "end" not in manifest:
                manifest["status"] = "failed"
                manifest["warnings"] = self.warnings
                bundle_mod.write_manifest(out, manifest)
                bundle_mod.restrict_permissions(out)
        return self._finish(out, trace_dat, trace_cmd, tc, manifest, last_stats, sampler)

    def _limits_text(self, out, free):
        opt = self.opt
        parts = []
        if opt.duration:
            parts.append("for %g s" % opt.duration)
        if opt.command:
            parts.append("while %s runs" % os.path.basename(opt.command[0]))
        parts.append(size_limit_text(opt.max_size, free, out, opt.min_free))
        parts.append("Ctrl-C stops")
        return ", ".join(parts)

    def _start_command(self):
        if not self.opt.command:
            return None
        try:
            return Command(self.opt.command)
        except OSError as exc:
            self.stop_reason = "command failed to start"
            raise CaptureError("cannot run %s: %s" % (self.opt.command[0], exc.strerror),
                               "check the COMMAND after --")

    def _finish_command(self, command):
        """Stop the command if it still runs; its argv, exit status and rusage (what it and
        the children it waited for used) for the manifest."""
        if command is None:
            return None
        if command.poll() is None:
            command.terminate()
            try:
                command.wait(5)
            except subprocess.TimeoutExpired:
                command.kill()
                command.wait()
        code = command.returncode
        return {"argv": self.opt.command, "exit_status": code,
                "signal": signal.Signals(-code).name if code < 0 else None,
                "rusage": command.rusage()}

    def _monitor(self, tc, sampler, command, start_ns):
        """Poll until a limit, the command, a signal or a failure ends the recording."""
        opt = self.opt
        out_dir = os.path.dirname(tc.output)
        while self.stop_reason is None:
            time.sleep(POLL_S)
            elapsed = (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - start_ns) / 1e9
            data = tc.data_bytes()
            if self.status is not None:
                self.status("%.0f s%s, trace data %s%s (Ctrl-C stops)" % (
                    elapsed, " of %g s" % opt.duration if opt.duration else "",
                    format_size(data),
                    " of --max-size %s" % format_size(opt.max_size) if opt.max_size else ""))
            if not tc.running():
                self.stop_reason = "trace-cmd exited"
                raise CaptureError("trace-cmd exited during the recording with status %s: %s"
                                   % (tc.proc.returncode, tc.last_log_lines()),
                                   "see trace-cmd.log in the bundle")
            if sampler.error is not None:
                self.stop_reason = "procfs sampling failed"
                raise CaptureError("cannot write procfs samples: %s" % sampler.error,
                                   "free some disk space or choose another -o")
            if command is not None and command.poll() is not None:
                self.stop_reason = "command exited with status %d" % command.returncode
            elif opt.duration and elapsed >= opt.duration:
                self.stop_reason = "duration %g s reached" % opt.duration
            elif data >= opt.max_size:
                self.stop_reason = "--max-size %s of trace data reached" % format_size(opt.max_size)
                self.say("stopping: trace data reached --max-size %s" % format_size(opt.max_size))
            elif bundle_mod.free_bytes(out_dir) - data < opt.min_free:
                # Merging the per-CPU files into trace.dat needs up to `data` more.
                self.stop_reason = "free space under %s fell near the --min-free margin %s" % (
                    out_dir, format_size(opt.min_free))
                self.warn("stopping early: " + self.stop_reason)

    # ------------------------------------------------------------ after trace-cmd stopped

    def _finish(self, out, trace_dat, trace_cmd, tc, manifest, last_stats, sampler):
        if not trace_dat_complete(trace_dat):
            manifest["status"] = "failed"
            bundle_mod.write_manifest(out, manifest)
            bundle_mod.restrict_permissions(out)
            raise CaptureError("trace-cmd did not finish writing %s: %s" % (trace_dat, tc.last_log_lines()),
                               "see trace-cmd.log in the bundle")
        status = manifest["trace_cmd"]["exit_status"]
        if status:
            note = "trace-cmd exited with status %s after writing trace.dat: %s" % (
                status, tc.last_log_lines())
            if manifest["trace_cmd"]["host_flags"] and "set_ftrace" in note:
                manifest["trace_cmd"]["exit_note"] = note  # expected on hosts refusing ftrace files
            else:
                self.warn(note)
        stats = buffer_stats_from_file(trace_cmd, trace_dat)
        source = "trace.dat"
        if not stats:
            stats, source = last_stats, "tracefs before stop"
        cpu_rows = [dict(cpu=cpu, **values) for cpu, values in sorted(stats.items())]
        lost = sum(r.get("overrun", 0) + r.get("dropped_events", 0) + r.get("commit_overrun", 0)
                   for r in cpu_rows)
        # trace-cmd saves the counters before its last flush: the events still
        # in the buffer then ("entries") are in trace.dat too.
        read = sum(r.get("read_events", 0) + r.get("entries", 0) for r in cpu_rows)
        manifest.update({
            "status": "complete",
            "stop_reason": self.stop_reason,
            "duration_s": round((manifest["end"]["mono_ns"] - manifest["start"]["mono_ns"]) / 1e9, 3),
            "cpu_stats": cpu_rows,
            "cpu_stats_source": source,
            "events_recorded": read,
            "lost_events": lost,
            "buffer_too_small": lost > 0,
            "trace_dat_bytes": os.stat(trace_dat).st_size,
            "samples": sampler.samples,
            "warnings": self.warnings,
        })
        self._note_extfrag(sampler, manifest)
        self._note_cost(sampler, manifest)
        self._report(out, manifest)
        manifest["warnings"] = self.warnings
        bundle_mod.write_manifest(out, manifest)
        bundle_mod.restrict_permissions(out)
        return manifest

    def _note_extfrag(self, sampler, manifest):
        """What the debugfs extfrag samples hold (sampler.py), when debugfs was mounted."""
        if not (sampler.extfrag_samples or sampler.extfrag_unmatched or sampler.extfrag_error):
            return
        manifest["extfrag"] = {"samples_with_buddyinfo": sampler.extfrag_samples,
                               "samples_on_their_own": sampler.extfrag_unmatched}
        if sampler.extfrag_error is not None:
            self.warn("debugfs extfrag sampling stopped: %s" % sampler.extfrag_error)

    def _note_cost(self, sampler, manifest):
        """The cost sources as sampled (sampler.py); one that stopped mid-capture is said once."""
        manifest["cost_samples"] = sampler.cost_manifest()
        for name, why in sorted(sampler.cost_errors.items()):
            self.warn("%s sampling stopped: %s" % (name, why))

    def _report(self, out, m):
        self.say("wrote %s: trace.dat %s, %d events, %d procfs samples, %.1f s (%s)"
                 % (out, format_size(m["trace_dat_bytes"]), m["events_recorded"], m["samples"],
                    m["duration_s"], m["stop_reason"]))
        for row in m["cpu_stats"]:
            self.say("  cpu%d: %d events recorded, %d overrun, %d dropped"
                     % (row["cpu"], row.get("read_events", 0) + row.get("entries", 0), row.get("overrun", 0),
                        row.get("dropped_events", 0)))
        if m["buffer_too_small"]:
            cpus = [str(r["cpu"]) for r in m["cpu_stats"]
                    if r.get("overrun", 0) + r.get("dropped_events", 0) + r.get("commit_overrun", 0)]
            self.warn("%d events were lost on cpu %s: the ring buffer (%d KiB per CPU) was too small; "
                      "rerun with --buffer-kb %d or a lighter preset"
                      % (m["lost_events"], ",".join(cpus), self.opt.buffer_kb, self.opt.buffer_kb * 4))

    def _manifest_head(self, preset, specs, missing, stacktrace, restrictions, host_flags, args,
                       trace_cmd):
        opt = self.opt
        probe = ProcfsSampler(None, 1, opt.zoneinfo)
        for why in probe.cost_absent.values():
            self.say(why)
        manifest = {"format_version": BUNDLE_FORMAT_VERSION, "kmemscope_version": _kmemscope_version(),
                    "status": "recording"}
        manifest.update(hostinfo.collect())
        manifest.update({
            "trace_cmd": {"version": hostinfo.trace_cmd_version(trace_cmd), "path": trace_cmd,
                          "args": args, "host_flags": host_flags, "exit_status": None},
            "host_restrictions": restrictions,
            "clock": "mono",
            "preset": preset,
            "events": [s.as_dict() for s in specs],
            "missing_events": missing,
            "stacktrace": stacktrace,
            "buffer_kb": opt.buffer_kb,
            "interval_s": opt.interval,
            "limits": {"duration_s": opt.duration, "max_size_bytes": opt.max_size,
                       "min_free_bytes": opt.min_free},
            "labels": opt.labels,
            "procfs_files": ["procfs/" + n for n in probe.sources],
            # what the counts cost (sampler.py): sampled where the kernel has it, else why not
            "cost_samples": probe.cost_manifest(),
            "command": {"argv": opt.command, "exit_status": None} if opt.command else None,
            "warnings": self.warnings,
        })
        return manifest
