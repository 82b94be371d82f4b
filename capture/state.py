"""Save the tracing state before a recording and put it back afterwards.

The snapshot is written to a state file before trace-cmd starts. If record is
killed (SIGKILL, OOM, power to the shell lost), the next record or
`record --cleanup` finds the file, stops the trace-cmd it left, and restores
the snapshot. The boot id guards against restoring a previous boot's state.
"""
import glob
import json
import os

from kmemscope.capture import tracefs as tfs
from kmemscope.capture.bundle import write_json

# Single-value files that trace-cmd (or the kernel on its behalf) may change.
SCALAR_FILES = ("tracing_on", "current_tracer", "buffer_percent", "saved_cmdlines_size",
                "tracing_cpumask")
# Pid filters: trace-cmd writes its own pids here on hosts that allow it (no
# --no-filter). Unreadable ones (refused, as on the development VMs) stay None.
PID_FILES = ("set_event_pid", "set_event_notrace_pid", "set_ftrace_pid", "set_ftrace_notrace_pid")


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def _try_read(tracefs, name):
    try:
        return tfs.read(tracefs, name)
    except OSError:
        return None


def snapshot(tracefs, touched_events=()):
    """Everything record may change, as plain JSON-able data.

    touched_events: 'system:event' or 'system' names whose filters we will set;
    their filters are saved so that they can be put back.
    """
    snap = {"tracefs": tracefs, "boot_id": boot_id()}
    for name in SCALAR_FILES:
        snap[name] = _try_read(tracefs, name)
    clock = _try_read(tracefs, "trace_clock")
    snap["trace_clock"] = tfs.selected(clock) if clock is not None else None
    # Saved as the size a tracer would get: on a fresh boot the buffer is not
    # yet expanded ('7 (expanded: 1408)'), and writing back the token 7 would
    # leave every later tracer a 7 KiB buffer. No write can un-expand it.
    readings = tfs.buffer_readings(tracefs)
    snap["buffer_size_kb_text"] = readings[0]
    snap["buffer_size_kb"] = {str(cpu): (str(kb) if kb is not None else None) for cpu, kb
                              in tfs.effective_buffer_kb(*readings).items()}
    snap["options"] = {}
    for path in sorted(glob.glob(os.path.join(tracefs, "options", "*"))):
        value = _try_read(tracefs, os.path.join("options", os.path.basename(path)))
        if value in ("0", "1"):
            snap["options"][os.path.basename(path)] = value
    snap["pid_filters"] = {name: _pids(_try_read(tracefs, name)) for name in PID_FILES}
    snap["enabled_events"] = tfs.enabled_events(tracefs)
    snap["filters"] = {}
    for name in touched_events:
        for rel in _event_dirs(tracefs, name):
            snap["filters"][rel] = _try_read(tracefs, rel + "/filter")
    return snap


def instances_snapshot(tracefs):
    """The snapshot of a recorder that changes only tracefs instances of its own (the flight
    recorder): nothing at the top level to put back, restore() leaves it alone."""
    return {"tracefs": tracefs, "boot_id": boot_id(), "scope": "instances"}


def _pids(text):
    """Pid-filter file text -> sorted pid strings ('no pid' means none); None stays None."""
    if text is None:
        return None
    return sorted(w for w in text.split() if w.isdigit())


def _event_dirs(tracefs, name):
    """events/SYSTEM/EVENT paths (relative) that an event or system name covers."""
    system, _, event = name.partition(":")
    pattern = os.path.join(tracefs, "events", system, event or "*")
    return sorted(os.path.relpath(p, tracefs) for p in glob.glob(pattern) if os.path.isdir(p))


def restore(snap):
    """Put back what `snapshot` saw; returns a list of what could not be restored."""
    if snap.get("scope") == "instances":
        return []
    tracefs = snap["tracefs"]
    problems = []

    def put(name, value):
        if value is None:
            return
        try:
            if _try_read(tracefs, name) != value:
                tfs.write(tracefs, name, value)
        except OSError as exc:
            problems.append("%s: %s" % (name, exc.strerror))

    put("tracing_on", "0")  # stop the buffer first, so nothing records while we restore
    before = set(snap["enabled_events"])
    for event in tfs.enabled_events(tracefs):
        if event not in before:
            put("events/%s/enable" % event.replace(":", "/"), "0")
    for event in before:
        put("events/%s/enable" % event.replace(":", "/"), "1")
    for rel, value in snap["filters"].items():
        if value is not None and _try_read(tracefs, rel + "/filter") != value:
            # "0" clears a filter; otherwise write the saved expression back.
            put(rel + "/filter", "0" if value == "none" else value)
    for name, value in snap["options"].items():
        put("options/" + name, value)
    for name, pids in snap.get("pid_filters", {}).items():
        current = _pids(_try_read(tracefs, name))
        if pids is not None and current is not None and current != pids:
            try:  # opening with O_TRUNC clears the list; then add the saved pids back
                tfs.write(tracefs, name, " ".join(pids))
            except OSError as exc:
                problems.append("%s: %s" % (name, exc.strerror))
    if snap.get("trace_clock"):
        current = _try_read(tracefs, "trace_clock")
        if current is not None and tfs.selected(current) != snap["trace_clock"]:
            put("trace_clock", snap["trace_clock"])
    current = tfs.effective_buffer_kb(*tfs.buffer_readings(tracefs))
    for cpu, want in buffer_writes(snap["buffer_size_kb"], current).items():
        try:
            tfs.write(tracefs, "per_cpu/cpu%s/buffer_size_kb" % cpu, str(want))
        except OSError as exc:
            problems.append("per_cpu/cpu%s/buffer_size_kb: %s" % (cpu, exc.strerror))
    for name in SCALAR_FILES:
        if name != "tracing_on":
            put(name, snap[name])
    put("tracing_on", snap["tracing_on"])
    return problems


def buffer_writes(saved, current):
    """{cpu: KiB to write} to give each CPU the size a tracer got before.

    saved: a snapshot's {cpu string: KiB string or None} (state files of older
    versions hold the raw per-CPU text, which parses the same); current:
    effective_buffer_kb() now. A CPU already at its size is left alone, so an
    unexpanded buffer that is still unexpanded stays untouched.
    """
    out = {}
    for cpu, value in saved.items():
        if value is None:
            continue
        try:
            now, expanded = tfs.parse_buffer_size(value)
        except ValueError:
            continue
        want = expanded if expanded is not None else now
        if current.get(int(cpu)) != want:
            out[cpu] = want
    return out


# ---------------------------------------------------------------- the state file

def save_file(path, record):
    """Write `record` (snapshot + what record started) atomically and durably."""
    write_json(path, record, durable=True)


def load_file(path):
    """The saved record, or None when there is none (or it is from another boot)."""
    try:
        with open(path) as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"corrupt": True}
    if record.get("snapshot", {}).get("boot_id") not in (None, boot_id()):
        return {"stale_boot": True}
    return record
