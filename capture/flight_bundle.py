# (a part of FlightRecorder, capture/flight.py: the attributes it uses are the recorder's)
"""The flight recorder's bundles: the frozen instances extracted, the window accounted for.

After --after seconds `trace-cmd extract -B -B` copies both instances into one
DIR/.partial-NAME/trace.dat, a fresh `trace-cmd start` sets them up again, and
the window's samples and a manifest with the trigger, the window's coverage and
what was lost complete the bundle, renamed to DIR/<UTC time>-<reason>/.
"""
from typing import Optional  # noqa: F401  (a type comment names it)
import json
import os
import re
import shutil
import time

from kmemscope.capture import bundle as bundle_mod
from kmemscope.capture import instance, state
from kmemscope.capture import tracefs as tfs
from kmemscope.capture.flight_disk import BUNDLE_ROOM, PeakDisk, bundle_bound
from kmemscope.capture.flight_heartbeat import HEARTBEAT_S
from kmemscope.capture.flight_instances import (AFTER_INSTANCE, BEFORE_INSTANCE, CHECK_S,
                                                EVENTS_CHECK_S, INSTANCES, changed_since,
                                                mono_ns)
from kmemscope.capture.flight_state import FlightState
from kmemscope.capture.tracecmd import (buffer_stats_by_buffer, failure_reason, run_once,
                                        trace_dat_complete)
from kmemscope.capture.units import format_size
from kmemscope.common.errors import CaptureError

PARTIAL = ".partial-"
EXTRACT_TIMEOUT_S = 600


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
            gap_s = max(0.0, (first - max(window_start, tracing_since)) / 1e9)
            in_window = max(0, min(overrun, int(round(entries / kept_s * gap_s))))
        rows.append({"cpu": cpu, "covered_from_mono_ns": first, "overrun": overrun,
                     "overwritten_before_window": overrun - in_window,
                     "overwritten_in_window_estimated": in_window,
                     "dropped_events": s.get("dropped_events", 0),
                     "commit_overrun": s.get("commit_overrun", 0), "entries": entries})
        covered_from = max(covered_from, first)
    return rows, covered_from



class BundleWriter(FlightState):
    """The FlightRecorder's part that writes a pending bundle."""

    # the Recorder's: why the recording ends
    stop_reason = None  # type: Optional[str]

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
        if not self.disk.room_for(bound, trigger):
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
        # the bundle's disk while extract writes it (its temporary copies included), read
        # every 20 ms: what the estimate `bound` is checked against
        peak = PeakDisk(tmp)
        peak.read()
        t0 = time.monotonic()
        tracing_since_before = self.tracing_since
        extract = [self.trace_cmd, "extract"]
        for instance_name in self.want:
            extract += ["-B", instance_name]
        # a trace-cmd that dies (a full disk) turns the top level's tracing off on its way out
        top_on = tfs.read(self.tracefs, "tracing_on")
        try:
            status, output = run_once(extract + ["-o", trace_dat], log, cwd=tmp,
                                      timeout=EXTRACT_TIMEOUT_S, on_start=saved_pid,
                                      on_poll=peak.read)
        finally:
            peak.read()
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
                            stats, after_stats, tracing_since_before, extract_s,
                            {"estimate_bytes": bound, "peak_bytes": peak.peak})
        if restart_error is not None:
            self.stop_reason = "tracing could not restart"
            raise restart_error

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
                       stats, after_stats, tracing_since_before, extract_s, disk):
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
        after_kept_s = self._after_kept_s(when, stop, tracing_since_before) \
            if opt.after > 0 else None
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
                "complete": covered_from <= window_start and not after_dropped and not blind
                and (after_kept_s is None or after_kept_s >= opt.after),
                "before_complete": covered_from <= window_start and not any(
                    b["from_mono_ns"] < when for b in blind),
                # the seconds after the trigger held from it on: none lost, nothing blind,
                # the instances tracing at the trigger (a trigger that came while they were
                # set up again has none), and the whole --after held
                "after_complete": not after_dropped and not any(b["to_mono_ns"] > when
                                                                for b in blind)
                and tracing_since_before <= when
                and (after_kept_s is None or after_kept_s >= opt.after),
                # stretches in which something else had changed the instances (or a skipped
                # bundle had frozen them): what the trace holds there is not the whole
                "blind": blind, "blind_s": round(blind_s, 3),
                # what "complete" promises: a change to the instances that something else
                # undid within this many seconds can be missing from `blind` (tracing_on off
                # and the instance removed show within HEARTBEAT_S by a refused or missing
                # heartbeat; the first instance's events within EVENTS_CHECK_S; its buffer
                # size, clock, filters and the --after instance within CHECK_S)
                "detection_granularity_s": CHECK_S,
                "detection_granularity": {"tracing_on_s": HEARTBEAT_S,
                                          "events_s": EVENTS_CHECK_S, "settings_s": CHECK_S},
                # the heartbeats that went into the instances inside the window: one missing
                # from trace.dat is a stretch the instance lost (parse finds them)
                "heartbeat": self._heartbeats_of(max(window_start, tracing_since_before), frozen,
                                                 pending["after_on_ns"], stop),
                # seconds after the trigger that the --after buffer held before it filled
                # (to POLL_S; the whole --after when it did not fill), per CPU that filled
                "after_kept_s": after_kept_s,
                # from the trigger to the first instance's freeze (it recorded that part: a
                # trigger that came while the recorder was busy is handled late), and how
                # long the --after instance recorded: after_kept_s is their sum, or less
                "trigger_to_freeze_s": round(max(0, frozen - when) / 1e9, 3),
                "after_ran_s": round(max(0, stop - pending["after_on_ns"]) / 1e9, 3)
                if pending["after_on_ns"] is not None else None,
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
            "disk": {
                # the most it could take while written (the temporary copies included), reserved
                # under --max-disk and above --min-free before extract ran
                "estimate_bytes": disk["estimate_bytes"],
                # the estimate's part for trace.dat's kallsyms, event formats and headers
                "estimate_metadata_bytes": self.bundle_room - BUNDLE_ROOM,
                # the most it took while extract wrote it: each file's largest size seen
                # (allocated blocks, read every 20 ms), summed (flight_disk.PeakDisk)
                "peak_bytes": disk["peak_bytes"],
            },
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
        self.disk.prune(final)

    def _after_kept_s(self, when, stop, tracing_since):
        """Seconds after the trigger that the bundle holds from the trigger on: the first
        instance up to its freeze, then the --after one, to when its first CPU filled (seen
        to POLL_S), else to the end. 0 when the instances were not tracing at the trigger
        (it came while they were set up again after the previous bundle)."""
        if tracing_since > when:
            return 0.0
        end = min(self.after_filled.values()) if self.after_filled else stop
        return round(max(0, end - when) / 1e9, 2)


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
    if w.get("trigger_to_freeze_s", 0) >= 1.0:
        parts.append("the trigger was handled %.1f s after it came (the first instance recorded "
                     "until then)" % w["trigger_to_freeze_s"])
    if w.get("blind"):
        parts.append("blind for %.1f s of the window: %s" % (
            w["blind_s"], "; ".join(b["what"] for b in w["blind"])))
    return "".join("; " + p for p in parts)


def _start_text(before_ns):
    """'4.0 s before the trigger' / '0.5 s after the trigger' (the first event held)."""
    if before_ns >= 0:
        return "%.1f s before the trigger" % (before_ns / 1e9)
    return "%.1f s after the trigger" % (-before_ns / 1e9)
