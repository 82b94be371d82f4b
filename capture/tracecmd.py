"""Run `trace-cmd record` system-wide and stop it the way a terminal would.

trace-cmd is never given the COMMAND to run (`trace-cmd record CMD` crashes on
hosts that refuse pid filtering); it records every CPU until SIGINT. It runs in
its own session so that a Ctrl-C in the terminal reaches record first, which
then stops trace-cmd and its per-CPU recorder processes together.
"""
import errno
import glob
import os
import signal
import subprocess
import time
from typing import Any

from kmemscope.capture import tracefs as tfs
from kmemscope.common.errors import CaptureError

TRACE_DAT_MAGIC = b"\x17\x08\x44tracing"


def _stat_fields(pid):
    """Fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_start_time(pid):
    """Start time (field 22) of pid: tells a live process from a reused pid."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def process_alive(pid, start_time=None):
    """True while pid runs (not a zombie) and, if given, started at start_time."""
    fields = _stat_fields(pid)
    if not fields or fields[0] == "Z":
        return False
    return start_time is None or int(fields[19]) == start_time


def build_args(binary, output, specs, buffer_kb, host_flags, stacktrace, verb="record"):
    """trace-cmd's argv; verb "start" (flight recorder) takes no output."""
    args = [binary, verb] + list(host_flags) + ["-C", "mono", "-b", str(buffer_kb)]
    if stacktrace:
        args.append("-T")
    for spec in specs:
        args += spec.trace_cmd_args()
    return args + (["-o", output] if output else [])


def run_once(args, log_path, cwd=None, timeout=600, on_start=None, on_poll=None, poll_s=0.02):
    """Run a trace-cmd that ends by itself (start, extract); returns (exit status, its output).

    The output is read through a pipe and only then appended to log_path (a
    log that cannot be written, on a full disk, loses nothing of it). Its own
    session keeps a terminal's Ctrl-C away from it; on_start(pid, start_time)
    lets the caller save the pid before waiting, and on_poll() runs every
    poll_s seconds while it runs. Killed after `timeout` seconds.
    """
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    except OSError as exc:
        raise CaptureError("cannot run %s: %s" % (args[0], exc.strerror),
                           "install trace-cmd (apt-get install trace-cmd)")
    if on_start is not None:
        on_start(proc.pid, process_start_time(proc.pid))
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                out, _ = proc.communicate(timeout=max(0.0, min(left, poll_s) if on_poll else left))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    raise CaptureError("%s %s did not finish within %d s"
                                       % (args[0], args[1], timeout))
                on_poll()
    finally:
        if proc.poll() is None:  # interrupted by an exception: leave nothing behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = out.decode("utf-8", "replace")
    if not text:
        # nothing said (a quiet `trace-cmd start`, an extract killed by SIGKILL): no log
        # file, so that no 0-byte .trace-cmd.log is left in the flight directory
        return proc.returncode, text
    try:
        with open(log_path, "a") as log:
            log.write(text)
    except OSError:
        pass  # the caller reports the output itself
    return proc.returncode, text


def failure_reason(status, output):
    """Why a trace-cmd run failed: its error lines, else what its exit status says.

    trace-cmd's die() exits with errno as its status: 28 with no output is ENOSPC.
    """
    said = error_lines(output)
    if said:
        return said
    if isinstance(status, int) and 0 < status < 134:
        return "no output; status %d is errno %s (%s) if trace-cmd passed one on" % (
            status, errno.errorcode.get(status, "?"), os.strerror(status))
    return "no output"


def error_lines(text, n=2):
    """trace-cmd's error message (its 'trace-cmd: ...' line and the next), else its last lines."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    errors = [i for i, l in enumerate(lines) if l.startswith("trace-cmd:")]
    if errors:
        return " ".join(lines[errors[-1]:errors[-1] + 2])
    return " ".join(lines[-n:])


class TraceCmd:
    """One trace-cmd record process writing `output` (BUNDLE/trace.dat)."""

    def __init__(self, args, output, log_path):
        self.args, self.output, self.log_path = args, output, log_path
        self.proc: Any = None      # the trace-cmd process once started
        self.start_time = None

    def start(self):
        log = open(self.log_path, "w")
        try:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=os.path.dirname(self.output))
        except OSError as exc:
            raise CaptureError("cannot run %s: %s" % (self.args[0], exc.strerror),
                               "install trace-cmd (apt-get install trace-cmd)")
        finally:
            log.close()
        self.start_time = process_start_time(self.proc.pid)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def last_log_lines(self, n=2):
        """trace-cmd's error message (its 'trace-cmd: ...' line and the next), else its last lines."""
        try:
            with open(self.log_path, errors="replace") as f:
                return error_lines(f.read(), n)
        except OSError:
            return ""

    def wait_ready(self, tracefs, specs, timeout=20.0, should_stop=lambda: False):
        """Block until the kernel shows our events enabled and tracing on."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise CaptureError("trace-cmd exited at start with status %s: %s"
                                   % (self.proc.returncode, self.last_log_lines()),
                                   "see trace-cmd.log in the bundle")
            if should_stop():
                return False
            if _tracing_on(tracefs) and all(_spec_enabled(tracefs, s) for s in specs):
                self._check_filters(tracefs, specs)
                return True
            time.sleep(0.05)
        raise CaptureError("trace-cmd did not start recording within %d s" % timeout,
                           "see trace-cmd.log in the bundle")

    def _check_filters(self, tracefs, specs):
        check_filters(tracefs, specs)

    def data_bytes(self):
        """Bytes in trace-cmd's per-CPU temporary files so far (uncompressed trace data)."""
        total = 0
        for path in glob.glob(self.output + ".cpu*"):
            try:
                total += os.stat(path).st_size
            except OSError:
                pass
        return total

    def stop(self, grace_s=60.0):
        """SIGINT the whole group, then wait while trace-cmd merges into trace.dat."""
        if not self.running():
            return self.proc.returncode if self.proc else None
        os.killpg(self.proc.pid, signal.SIGINT)
        # Merging and compressing takes time in proportion to the data; wait
        # as long as the output keeps growing, and at least grace_s.
        deadline, last_size = time.monotonic() + grace_s, -1
        while self.proc.poll() is None:
            size = _size(self.output)
            if size != last_size:
                last_size = size
                deadline = max(deadline, time.monotonic() + 10.0)
            if time.monotonic() > deadline:
                self.kill()
                break
            time.sleep(0.1)
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def check_filters(tracefs, specs):
    """trace-cmd records unfiltered when the kernel rejects a filter: refuse that."""
    for spec in specs:
        if not spec.filter:
            continue
        pattern = os.path.join(tracefs, "events", spec.system,
                               "*" if spec.event == "*" else spec.event, "filter")
        for path in glob.glob(pattern):
            with open(path) as f:
                text = f.read().strip()
            # A rejected filter reads back as "none" or as the kernel's parse_error.
            if text == "none" or "parse_error" in text:
                why = text.rsplit("parse_error:", 1)[-1].strip() if "parse_error" in text else "rejected"
                raise CaptureError("the kernel rejected the filter %r of %s: %s"
                                   % (spec.filter, spec.name, why),
                                   "fix the filter (see Documentation/trace/events.rst)")


def _size(path):
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _tracing_on(tracefs):
    try:
        return tfs.read(tracefs, "tracing_on") == "1"
    except OSError:
        return False


def _spec_enabled(tracefs, spec):
    rel = "events/%s/enable" % (spec.system if spec.event == "*" else spec.system + "/" + spec.event)
    try:
        # '1*': enabled, and in soft mode because a trigger is attached
        return tfs.read(tracefs, rel) in ("1", "1*", "X")
    except OSError:
        return False


# ---------------------------------------------------------------- event triggers
#
# trace-cmd -R writes a trigger into events/SYSTEM/EVENT/trigger. It clears the
# triggers of the events it records when it starts (a trigger someone had set
# there is gone) and its own when it exits normally; a trace-cmd killed with
# SIGKILL leaves its trigger active. record saves each trigger file it will
# touch and puts it back with restore_triggers() on every way out.

def read_triggers(tracefs, rel):
    """The triggers active in tracefs/rel (a trigger file): its lines but the # comments."""
    text = tfs.read(tracefs, rel)
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _trigger_command(line):
    """'stacktrace:unlimited if order > 3' -> 'stacktrace': what `!` removes."""
    return line.split(" if ", 1)[0].split(":", 1)[0].strip()


def _trigger_as_written(line):
    """A trigger as read back -> as written: 'traceoff:count=1 if x' -> 'traceoff:1 if x'."""
    head, sep, cond = line.partition(" if ")
    head = head.replace(":unlimited", "").replace(":count=", ":")
    return head + sep + cond


def _append(tracefs, rel, text):
    # Append, never truncate: opening a trigger file with O_TRUNC drops the event's hist
    # triggers on kernels that have them.
    with open(os.path.join(tracefs, rel), "a") as f:
        f.write(text)


def save_triggers(tracefs, specs):
    """{trigger file: active triggers} of every spec that sets a trigger (unreadable: None)."""
    saved = {}
    for spec in specs:
        if spec.trigger:
            try:
                saved[spec.trigger_path] = read_triggers(tracefs, spec.trigger_path)
            except OSError:
                saved[spec.trigger_path] = None
    return saved


def restore_triggers(tracefs, saved):
    """Make each trigger file of `saved` hold what it held; returns what could not be done."""
    problems = []
    for rel, before in saved.items():
        if before is None:
            continue
        try:
            now = read_triggers(tracefs, rel)
            for line in now:
                if line not in before:
                    _append(tracefs, rel, "!" + _trigger_command(line))
            for line in before:
                if line not in now:
                    _append(tracefs, rel, _trigger_as_written(line))
            after = read_triggers(tracefs, rel)
            if sorted(after) != sorted(before):
                problems.append("%s (holds %s, had %s)" % (rel, after, before))
        except OSError as exc:
            problems.append("%s: %s" % (rel, exc.strerror))
    return problems


def trace_dat_complete(path):
    """True when trace-cmd finished writing `path`: magic present, temp files gone."""
    try:
        with open(path, "rb") as f:
            magic = f.read(len(TRACE_DAT_MAGIC))
    except OSError:
        return False
    return magic == TRACE_DAT_MAGIC and not glob.glob(path + ".cpu*")


def buffer_stats_from_file(binary, path, buffer=""):
    """{cpu: stats} that trace-cmd stored in trace.dat when it stopped (None if unreadable).

    These are the kernel's final per-CPU counters (overrun, dropped events,
    read events); after trace-cmd exits it resets the buffers, so tracefs no
    longer has them. buffer: "" for the top-level buffer, else an instance's name.
    """
    found = buffer_stats_by_buffer(binary, path)
    return (found or {}).get(buffer)


def buffer_stats_by_buffer(binary, path):
    """{buffer name ("" for the top level): {cpu: stats}} stored in trace.dat (None if unreadable)."""
    try:
        out = subprocess.run([binary, "report", "--stat", "-i", path], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_report_stat_buffers(out)


def parse_report_stat(text):
    """The top-level buffer's 'CPU: N' blocks of `trace-cmd report --stat` -> {cpu: stats}."""
    return (parse_report_stat_buffers(text) or {}).get("")


def parse_report_stat_buffers(text):
    """`trace-cmd report --stat` -> {buffer: {cpu: stats}}; an instance's blocks follow its
    'Buffer: NAME' line, the top level's come first."""
    found, buffer, cpu = {}, "", None
    stats: dict = {}
    block: list = []
    for line in text.splitlines() + ["Buffer: "]:
        if line.startswith("CPU: ") or line.startswith("Buffer: ") or (cpu is not None
                                                                       and not line.strip()):
            if cpu is not None:
                stats[cpu] = tfs.parse_cpu_stats("\n".join(block))
            cpu, block = None, []
            if line.startswith("Buffer: "):
                if stats:
                    found[buffer] = stats
                buffer, stats = line[len("Buffer: "):].strip(), {}
                continue
            rest = line[len("CPU: "):].strip()
            if rest.isdigit():
                cpu = int(rest)
        elif cpu is not None:
            block.append(line)
    return found or None
