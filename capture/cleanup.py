"""Undo what a killed record left behind: its trace-cmd, its tracing state.

record writes a state file (lock.state_dir()/record-state.json) before it
changes anything and removes it once it has restored everything. Finding the
file while holding the record lock means a record died without cleaning up.
"""
import glob
import os
import re
import signal
import time

from kmemscope.capture import bundle as bundle_mod
from kmemscope.capture import state
from kmemscope.capture import tracefs as tfs
from kmemscope.capture.tracecmd import process_alive, restore_triggers

STATE_FILE = "record-state.json"


def state_path(directory):
    return os.path.join(directory, STATE_FILE)


def _trace_cmd_groups(trace_dat):
    """Process groups of trace-cmd processes writing `trace_dat` (found by command line).

    Covers a record killed between starting trace-cmd and saving its pid.
    """
    groups = set()
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                argv = f.read().split(b"\0")
            pid = int(path.split("/")[2])
            if argv[0].endswith(b"trace-cmd") and trace_dat.encode() in argv and process_alive(pid):
                groups.add(os.getpgid(pid))
        except (OSError, ValueError, IndexError):
            continue
    return groups


def _stop_leftover(record, say):
    """SIGINT the trace-cmd a killed record left, so that it still writes trace.dat."""
    tc = record.get("trace_cmd") or {}
    groups = set()
    if tc.get("pid") and process_alive(tc["pid"], tc.get("start_time")):
        groups.add(tc["pid"])  # trace-cmd leads its own session and process group
    if record.get("bundle"):
        groups |= _trace_cmd_groups(os.path.join(record["bundle"], "trace.dat"))
    for pgid in sorted(groups):
        say("stopping the trace-cmd (process group %d) that a killed record left running" % pgid)
        try:
            os.killpg(pgid, signal.SIGINT)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 60
        while process_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if process_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
            time.sleep(0.2)


def recover(directory, say):
    """Restore a killed record's saved state; returns True when there was one."""
    path = state_path(directory)
    record = state.load_file(path)
    if record is None:
        return False
    if record.get("corrupt") or record.get("stale_boot"):
        say("removing a record state file from %s" % ("an earlier boot" if record.get("stale_boot")
                                                      else "a failed write"))
        os.unlink(path)
        return False
    _stop_leftover(record, say)
    problems = []
    # a flight recorder's instances ("instance": its --after one, in older state files)
    for name in record.get("instances") or ([record["instance"]] if record.get("instance") else []):
        if not re.fullmatch(r"kmemscope-[a-z-]+", str(name)):
            continue  # only a recorder's own instances, never a path of the file's choosing
        problem = tfs.remove_instance(record["snapshot"]["tracefs"], name)
        problems += [problem] if problem else []
    problems += state.restore(record["snapshot"])
    # trace-cmd clears an event's triggers and, killed, leaves its own: put the saved ones back
    problems += restore_triggers(record["snapshot"]["tracefs"], record.get("triggers") or {})
    for problem in problems:
        say("warning: could not restore %s" % problem)
    _mark_bundle(record.get("bundle"), problems)
    os.unlink(path)
    say("restored the tracing state saved by record pid %s (bundle %s)"
        % (record.get("record_pid"), record.get("bundle")))
    return True


def _mark_bundle(bundle, problems):
    """Say in the killed record's manifest that it ended by being killed."""
    if not bundle or not os.path.isfile(os.path.join(bundle, "manifest.json")):
        return
    try:
        manifest = bundle_mod.read_manifest(bundle)
        manifest["status"] = "killed"
        manifest["stop_reason"] = "record was killed; state restored by a later record or --cleanup"
        manifest["end"] = manifest.get("end") or bundle_mod.timestamp()
        manifest.setdefault("warnings", []).extend("not restored: " + p for p in problems)
        bundle_mod.write_manifest(bundle, manifest)
        bundle_mod.restrict_permissions(bundle)
    except (OSError, ValueError):
        pass  # the bundle is the user's; a damaged one is reported by parse
