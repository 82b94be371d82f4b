"""Small reads and writes of tracefs, and who else is using it.

Everything here touches only the top-level ring buffer (not instances/), the
one that trace-cmd records from by default.
"""
import errno
import glob
import os

from kmemscope.capture.errors import CaptureError

CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


def find_tracefs():
    """Path of a mounted tracefs, or a CaptureError saying how to get one."""
    for path in CANDIDATES:
        if os.path.isdir(os.path.join(path, "events")):
            return path
    raise CaptureError("tracefs is not mounted",
                       "mount it with `mount -t tracefs nodev /sys/kernel/tracing`")


def read(tracefs, name):
    """Contents of tracefs/name with trailing whitespace removed."""
    with open(os.path.join(tracefs, name)) as f:
        return f.read().rstrip()


def write(tracefs, name, value):
    """Write value to tracefs/name in one write(2), as the kernel expects."""
    with open(os.path.join(tracefs, name), "w") as f:
        f.write(value)


def selected(text):
    """The [bracketed] choice of a file like trace_clock; the text itself otherwise."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text.strip()


def cpu_dirs(tracefs):
    """{cpu number: per_cpu/cpuN path} for every CPU tracefs knows."""
    out = {}
    for path in glob.glob(os.path.join(tracefs, "per_cpu", "cpu*")):
        suffix = os.path.basename(path)[3:]
        if suffix.isdigit():
            out[int(suffix)] = path
    return dict(sorted(out.items()))


def parse_cpu_stats(text):
    """Key/value lines of per_cpu/cpuN/stats (or trace-cmd's copy) -> {key: number}."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower().replace(" ", "_")
        try:
            out[key] = float(value) if "ts" in key.split("_") else int(value)
        except ValueError:
            continue
    return out


def cpu_stats(tracefs):
    """{cpu: stats} for the top-level buffer right now."""
    stats = {}
    for cpu, path in cpu_dirs(tracefs).items():
        try:
            with open(os.path.join(path, "stats")) as f:
                stats[cpu] = parse_cpu_stats(f.read())
        except OSError:
            continue
    return stats


def enabled_events(tracefs):
    """'system:event' names whose enable file says 1 (soft-enabled '1*' included)."""
    top = os.path.join(tracefs, "events", "enable")
    try:
        with open(top) as f:
            if f.read().strip() == "0":
                return []  # fast path: the kernel says no event is enabled
    except OSError:
        pass
    out = []
    for path in sorted(glob.glob(os.path.join(tracefs, "events", "*", "*", "enable"))):
        try:
            with open(path) as f:
                value = f.read().strip()
        except OSError:
            continue
        if value.startswith("1"):
            parts = path.split(os.sep)
            out.append("%s:%s" % (parts[-3], parts[-2]))
    return out


def ring_buffer_readers(tracefs, exclude_pids=()):
    """[(pid, comm, path)] of processes holding the top-level trace_pipe(_raw) open.

    A forgotten recorder consumes the per-CPU buffers and silently takes events
    from the capture, so record names them before it starts.
    """
    roots = {os.path.realpath(p) for p in CANDIDATES + (tracefs,)}
    found = []
    for fd_dir in glob.glob("/proc/[0-9]*/fd"):
        pid = int(fd_dir.split("/")[2])
        if pid in exclude_pids:
            continue
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # the process exited, or we may not look
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if _is_top_level_pipe(target, roots):
                found.append((pid, _comm(pid), target))
                break
    return found


def _is_top_level_pipe(target, roots):
    name = os.path.basename(target)
    if name not in ("trace_pipe", "trace_pipe_raw"):
        return False
    return any(target.startswith(root + "/") and "/instances/" not in target[len(root):]
               for root in roots)


def _comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return "?"


def _refused(exc):
    return exc.errno in (errno.EPERM, errno.EACCES, errno.EROFS)


def probe_restrictions(tracefs):
    """Which writes trace-cmd attempts that this host refuses.

    Some hosts (the development VMs, locked-down kernels) refuse writes to
    /proc/sys/kernel/ftrace_enabled and any access to set_ftrace_pid and
    set_ftrace_filter. trace-cmd then dies, or its main process segfaults and
    leaves recorders behind, unless told -d (do not touch ftrace_enabled) and
    --no-filter (do not filter by pid). Probing writes back the value already
    there, or only reads, so it changes nothing.
    """
    found = {}
    try:
        with open("/proc/sys/kernel/ftrace_enabled") as f:
            current = f.read().strip()
        with open("/proc/sys/kernel/ftrace_enabled", "w") as f:
            f.write(current)
        found["ftrace_enabled_writable"] = True
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            found["ftrace_enabled_writable"] = None  # kernel without function tracing
        elif _refused(exc):
            found["ftrace_enabled_writable"] = False
        else:
            raise CaptureError("probing ftrace_enabled: %s" % exc.strerror)
    found["ftrace_pid_filter_usable"] = True
    for name in ("set_ftrace_pid", "set_ftrace_filter"):
        try:
            with open(os.path.join(tracefs, name)) as f:
                f.read(1)
        except OSError as exc:
            if _refused(exc):
                found["ftrace_pid_filter_usable"] = False
            elif exc.errno != errno.ENOENT:
                raise CaptureError("probing %s: %s" % (name, exc.strerror))
    return found


def trace_cmd_flags(restrictions):
    """trace-cmd record flags that avoid the writes this host refuses."""
    flags = []
    if restrictions.get("ftrace_enabled_writable") is False:
        flags.append("-d")
    if restrictions.get("ftrace_pid_filter_usable") is False:
        flags.append("--no-filter")
    return flags
