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


_RAW_LINE = re.compile(r"^\s*(?P<comm>.*)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+\.\d+):\s+"
                       r"(?P<event>\w+):\s*(?P<fields>.*)$")


def report_records(trace_dat):
    """[{comm, pid, cpu, ts, event, fields: {name: text}}] of `trace-cmd report -R` (raw field
    values, read by trace-cmd's own decoder); every line but the cpus= header must be a record."""
    lines = trace_cmd_report(trace_dat, "-R")
    assert lines and lines[0].startswith("cpus="), lines[:3]
    out = []
    for line in lines[1:]:
        if not line.strip() or re.match(r"\s*CPU:\d+ \[LOST \d+ EVENTS\]$", line):
            continue
        m = _RAW_LINE.match(line)
        assert m, f"not a trace-cmd report -R record: {line!r}"
        rec = m.groupdict()
        rec["fields"] = dict(re.findall(r"(\w+)=(\S*)", rec["fields"]))
        out.append(rec)
    return out


def recorded_event_names(bundle):
    """The tracepoint names a bundle's manifest says were recorded (systems expanded by tracefs)."""
    names = set()
    for entry in manifest(bundle)["events"]:
        system, _, event = entry["event"].partition(":")
        if event and event != "*":
            names.add(event)
        else:
            names.update(p.name for p in (TRACEFS / "events" / system).iterdir() if p.is_dir())
    return names


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


# ---------------------------------------------------------------- flight recorder

# The same churn pinned to one CPU (argv: seconds, cpu, pause between rounds in s), so that
# the event rate a flight recorder measures stays on that CPU.
PINNED_WORKLOAD = r"""
import ctypes, mmap, os, sys, time
ctypes.CDLL(None).prctl(15, b"kms-workload", 0, 0, 0)  # PR_SET_NAME
os.sched_setaffinity(0, {int(sys.argv[2])})
end, pause = time.monotonic() + float(sys.argv[1]), float(sys.argv[3])
while time.monotonic() < end:
    m = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m[::4096] = b"x" * 2048
    m.close()
    time.sleep(pause)
"""


def busy_cpu(folder, cpu, seconds=600, pause=0.002):
    """PINNED_WORKLOAD on `cpu` for at most `seconds` (the caller kills it), its script
    written into `folder`: churn that fills that CPU's ring buffer at a steady rate."""
    load = folder / "load.py"
    load.write_text(PINNED_WORKLOAD)
    return subprocess.Popen([sys.executable, str(load), str(seconds), str(cpu), str(pause)])

# Direct compaction stalls on demand (argv: MiB left free, MiB of THP to fault): hugetlb
# pages reserved through vm.nr_hugepages leave little free memory, 4 KiB pages fill it
# and a quarter of it is freed again in 64 KiB pieces (no free 2 MiB block), then
# MADV_HUGEPAGE faults compact. vm.nr_hugepages is put back on the way out (the test's
# fixture puts it back too). Prints the vmstat deltas of the THP phase on stderr.
SQUEEZE = r"""
import mmap, sys, time
MB, PAGE, HP = 1 << 20, mmap.PAGESIZE, "/proc/sys/vm/nr_hugepages"
PRIV = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS

def memfree():
    for line in open("/proc/meminfo"):
        if line.startswith("MemFree:"):
            return int(line.split()[1]) * 1024

def vm(*names):
    return {l.split()[0]: int(l.split()[1]) for l in open("/proc/vmstat") if l.split()[0] in names}

leave_mb, thp_mb = int(sys.argv[1]), int(sys.argv[2])
old = open(HP).read().strip()
try:
    with open(HP, "w") as f:
        f.write(str(int(old) + max(0, (memfree() - leave_mb * MB) // (2 * MB))))
    maps, fill = [], memfree() - 300 * MB
    while fill > 0:
        m = mmap.mmap(-1, 8 * MB, flags=PRIV)
        m.madvise(mmap.MADV_NOHUGEPAGE)
        m[::PAGE] = b"f" * (8 * MB // PAGE)
        maps.append(m)
        fill -= 8 * MB
    for m in maps:
        for off in range(0, 8 * MB, 256 * 1024):
            m.madvise(mmap.MADV_DONTNEED, off, 64 * 1024)
    names = ("compact_stall", "thp_fault_alloc", "thp_fault_fallback")
    before, thp = vm(*names), []
    for _ in range(thp_mb // 32):
        m = mmap.mmap(-1, 32 * MB, flags=PRIV)
        m.madvise(mmap.MADV_HUGEPAGE)
        m[::PAGE] = b"t" * (32 * MB // PAGE)
        thp.append(m)
    after = vm(*names)
    print("squeeze: " + " ".join("%s +%d" % (k, after[k] - before[k]) for k in names), file=sys.stderr)
finally:
    with open(HP, "w") as f:
        f.write(old)
"""


class Flight:
    """A background `record --flight`: its stderr lines collected by a thread.

    Every one started is in Flight.started, for a test's teardown to stop (stop_all()).
    """
    started = []

    def __init__(self, *args, command=None, env=None):
        import threading
        self.proc = subprocess.Popen(command or record_cmd("--flight", *args), stderr=subprocess.PIPE,
                                     text=True, env=env)
        Flight.started.append(self)
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self.wait_for("flight recording ", 90):
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the flight recorder did not start: " + self.text())

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def pid(self):
        return self.proc.pid

    def text(self):
        return "".join(self.lines)

    def wait_for(self, needle, timeout=60, count=1):
        """True once `count` stderr lines contain `needle` (False when it ends or times out first)."""
        def seen():
            return sum(needle in line for line in self.lines) >= count

        wait_for(lambda: seen() or (self.proc.poll() is not None and not self._reader.is_alive()),
                 timeout)
        return seen()

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def finish(self, timeout=120):
        """Exit status once it ends, and all it printed."""
        rc = self.proc.wait(timeout)
        self._reader.join(10)
        return rc, self.text()


def stop_all_flights():
    """SIGINT every flight recorder a test left running (a failed assertion), and wait for it."""
    while Flight.started:
        flight = Flight.started.pop()
        if flight.proc.poll() is None:
            flight.proc.send_signal(signal.SIGINT)
            try:
                flight.proc.wait(120)
            except subprocess.TimeoutExpired:
                flight.proc.kill()
                flight.proc.wait()


def trace_cmd_processes_under(directory):
    """pids of trace-cmd processes (start, extract) working in `directory` (their cwd)."""
    found = []
    root = os.path.realpath(str(directory))
    for pid in all_trace_cmd_processes():
        try:
            cwd = os.readlink("/proc/%d/cwd" % pid)
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + "/"):
            found.append(pid)
    return found


def children(pid):
    """pids of the direct children of `pid`."""
    try:
        text = Path("/proc/%d/task/%d/children" % (pid, pid)).read_text()
    except OSError:
        return []
    return [int(w) for w in text.split()]


def all_trace_cmd_processes():
    """pids of every trace-cmd process on the machine (zombies excluded)."""
    found = []
    for comm in glob.glob("/proc/[0-9]*/comm"):
        try:
            if Path(comm).read_text().strip() != "trace-cmd":
                continue
            stat = Path(comm).with_name("stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(int(comm.split("/")[2]))
    return found


def report_cpu_span(trace_dat, cpu):
    """(first, last) timestamps in ns of the events on `cpu`, from `trace-cmd report --cpu`."""
    proc = subprocess.Popen(["trace-cmd", "report", "--cpu", str(cpu), "-i", str(trace_dat)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = last = None
    pattern = re.compile(r"\[(\d+)\]\s+(\d+)\.(\d+):")
    for line in proc.stdout:
        m = pattern.search(line)
        if m and int(m.group(1)) == cpu:
            ts = int(m.group(2)) * 10**9 + int(m.group(3).ljust(9, "0"))
            first = ts if first is None else first
            last = ts
    assert proc.wait() == 0
    return first, last


def sample_headers(path):
    """mono_ns of each #kmemscope-sample header of a procfs sample file."""
    return [int(m) for m in re.findall(r"^#kmemscope-sample mono_ns=(\d+)", Path(path).read_text(), re.M)]


def vmstat_samples(path):
    """[(mono_ns, {counter: value})] of a bundle's procfs/vmstat, parsed here."""
    out = []
    for block in Path(path).read_text().split("#kmemscope-sample ")[1:]:
        head, _, body = block.partition("\n")
        mono = int(re.search(r"mono_ns=(\d+)", head).group(1))
        out.append((mono, {k: int(v) for k, v in re.findall(r"^(\w+) (-?\d+)$", body, re.M)}))
    return out


def vmstat_now(*names):
    values = dict(line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    return {n: int(values[n]) for n in names}


# A command that knows its own rusage: it makes the kernel work (maps, faults and unmaps 1 MiB
# at a time) for argv[2] seconds of its CPU time after touching 64 MiB, then writes its own
# resource.getrusage(RUSAGE_SELF) as JSON to argv[1]: the oracle of what wait4 reports of it
# (which adds only its exit's teardown).
RUSAGE_WORKLOAD = """
import json, mmap, resource, sys, time
end = time.process_time() + float(sys.argv[2])
blob = bytearray(64 << 20)
for i in range(0, len(blob), 4096):
    blob[i] = 1
while time.process_time() < end:
    m = mmap.mmap(-1, 1 << 20)
    for i in range(0, 1 << 20, 4096):
        m[i] = 1
    m.close()
u = resource.getrusage(resource.RUSAGE_SELF)
with open(sys.argv[1], "w") as f:
    json.dump({"user_s": u.ru_utime, "system_s": u.ru_stime, "max_rss_kb": u.ru_maxrss,
               "major_faults": u.ru_majflt}, f)
"""
# What the exit after the oracle's reading may add (freeing 64 MiB: about 10 ms here).
RUSAGE_EXIT_S = 0.05


def assert_rusage_is_the_commands_own(got, own):
    """A rusage record (the manifest's, or compare's workload.* values) against the command's
    own reading just before it exited."""
    assert got["max_rss_kb"] == own["max_rss_kb"] and got["major_faults"] == own["major_faults"]
    for key in ("user_s", "system_s"):
        assert own[key] <= got[key] <= own[key] + RUSAGE_EXIT_S, (key, got, own)
