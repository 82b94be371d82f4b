"""Helpers for the live capture tests: run record, read tracefs, a workload.

The tracing-state reader here is deliberately independent of
kmemscope.capture.state (it is the oracle for "record put everything back").
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")

# A workload of the tests' own: maps, touches and unmaps anonymous memory and
# churns small Python objects, under a recognisable comm.
WORKLOAD = r"""
import ctypes, mmap, sys, time
ctypes.CDLL(None).prctl(15, b"kms-workload", 0, 0, 0)  # PR_SET_NAME
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    m = mmap.mmap(-1, 32 << 20)
    for i in range(0, len(m), 4096):
        m[i] = 1
    m.close()
    junk = [bytearray(64 << 10) for _ in range(64)]
    del junk
"""


def buffer_kb_for_a_tracer(top, per_cpu):
    """(top-level KiB, sorted per-CPU KiB) that the next tracer would get, as strings.

    A freshly booted kernel reads '7 (expanded: 1408)' at the top level and '7'
    per CPU: tracing grows the buffer by asking for 1408 KiB per CPU, which
    no write can undo. What that request gives is read from the kernel itself,
    off a new instance (instances start at the same requested size).
    """
    if not re.fullmatch(r"\d+ \(expanded: \d+\)", top.strip()):
        return top.strip(), sorted(t.strip() for t in per_cpu)
    size = new_instance_buffer_kb()
    return size, [size] * len(per_cpu)


def new_instance_buffer_kb():
    """buffer_size_kb of a just-created tracefs instance (created and removed here)."""
    probe = TRACEFS / "instances" / ("kmemscope-test-probe-%d" % os.getpid())
    try:
        probe.mkdir()
    except OSError as exc:
        return "<no instance: %s>" % exc.strerror
    try:
        return (probe / "buffer_size_kb").read_text().strip()
    finally:
        probe.rmdir()


def tracing_state():
    """What record may change, read straight from tracefs."""
    def read(rel):
        try:
            return (TRACEFS / rel).read_text().strip()
        except OSError as exc:
            return "<%s>" % exc.strerror

    state = {name: read(name) for name in ("tracing_on", "trace_clock", "current_tracer",
                                           "buffer_percent", "events/enable")}
    state["buffer_size_kb"], state["per_cpu_buffer_kb"] = buffer_kb_for_a_tracer(
        read("buffer_size_kb"), [read(os.path.relpath(p, TRACEFS)) for p in
                                 glob.glob(str(TRACEFS / "per_cpu/cpu*/buffer_size_kb"))])
    state["options"] = {os.path.basename(p): read(os.path.relpath(p, TRACEFS))
                        for p in glob.glob(str(TRACEFS / "options/*"))}
    state["enabled"] = sorted(p for p in glob.glob(str(TRACEFS / "events/*/*/enable"))
                              if read(os.path.relpath(p, TRACEFS)).startswith("1"))
    state["filters"] = {p: read(os.path.relpath(p, TRACEFS)) for system in ("kmem", "compaction", "vmscan")
                        for p in glob.glob(str(TRACEFS / "events" / system / "*" / "filter"))}
    return state


def record_cmd(*args):
    return [sys.executable, "-m", "kmemscope.capture", *map(str, args)]


def run_record(*args, timeout=120):
    return subprocess.run(record_cmd(*args), capture_output=True, text=True, timeout=timeout)


def start_record(*args):
    """Start record in the background; returns the Popen once it says it is recording."""
    proc = subprocess.Popen(record_cmd(*args), stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if "recording " in line:
            proc.early_stderr = "".join(lines)
            return proc
    proc.kill()
    raise AssertionError("record did not start: " + "".join(lines))


def finish(proc, timeout=120):
    """Wait for a background record; returns (rc, stderr)."""
    rest = proc.stderr.read()
    rc = proc.wait(timeout)
    return rc, getattr(proc, "early_stderr", "") + rest


def manifest(bundle):
    return json.loads((Path(bundle) / "manifest.json").read_text())


def trace_cmd_processes(bundle):
    """pids of trace-cmd processes writing into `bundle`."""
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            argv = Path(cmdline).read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"trace-cmd") and any(str(bundle).encode() in a for a in argv):
            stat = Path(cmdline).with_name("stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(cmdline.split("/")[2]))
    return found


def trace_cmd_report(trace_dat, *extra):
    """Lines of `trace-cmd report` (the independent decoder) for a trace.dat."""
    out = subprocess.run(["trace-cmd", "report", *extra, "-i", str(trace_dat)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def kmemscope_parse_available():
    """None when `kmemscope parse` can run here, else why not."""
    try:
        from kmemscope.parsers import ingest  # noqa: F401
        from kmemscope.parsers import tracedat  # noqa: F401
        import duckdb  # noqa: F401
    except ImportError as exc:
        return "kmemscope's trace.dat parser is not available: %s" % exc
    return None


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def interrupt(proc, sig=signal.SIGINT):
    if proc.poll() is None:
        proc.send_signal(sig)
