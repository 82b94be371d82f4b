"""Small reads and writes of tracefs, and who else is using it.

Everything here touches the top-level ring buffer, the one that trace-cmd
records from by default, unless given an instance's directory (instance_dir())
in place of the tracefs path: an instance has the same files.
"""
import errno
import glob
import os
import re

from kmemscope.common.errors import CaptureError

CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


def find_tracefs():
    """Path of a mounted tracefs, or a CaptureError saying how to get one."""
    for path in CANDIDATES:
        if os.path.isdir(os.path.join(path, "events")):
            return path
    raise CaptureError("tracefs is not mounted",
                       "mount it with `mount -t tracefs nodev /sys/kernel/tracing`")


def read_text(path):
    """The whole text of a small kernel file by os.open and os.read: no buffered reader,
    and four system calls where open() makes seven (its fstat, ioctl and lseek). An idle
    flight recorder reads a few such files a second, each from cold caches, and this is
    most of what it costs."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def read(tracefs, name):
    """Contents of tracefs/name with trailing whitespace removed."""
    return read_text(os.path.join(tracefs, name)).rstrip()


def write(tracefs, name, value):
    """Write value to tracefs/name in one write(2), as the kernel expects."""
    with open(os.path.join(tracefs, name), "w") as f:
        f.write(value)


def instance_dir(tracefs, name):
    """The directory of tracefs instance `name` (which may not exist)."""
    return os.path.join(tracefs, "instances", name)


def remove_instance(tracefs, name):
    """Stop and remove instance `name` if it exists; returns the problem text, or None."""
    path = instance_dir(tracefs, name)
    if not os.path.isdir(path):
        return None
    for rel, value in (("tracing_on", "0"), ("events/enable", "0")):
        try:
            write(path, rel, value)
        except OSError:
            pass
    try:
        os.rmdir(path)
    except OSError as exc:
        return "instances/%s: %s" % (name, exc.strerror)
    return None


def selected(text):
    """The [bracketed] choice of a file like trace_clock; the text itself otherwise."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text.strip()


_BUFFER_SIZE = re.compile(r"^\s*(\d+)(?:\s*\(expanded:\s*(\d+)\))?\s*$")
_DATA_FIELD = re.compile(r"field:\s*char\s+data;.*?size:\s*(\d+);")


def parse_buffer_size(text):
    """A buffer_size_kb (or buffer_total_size_kb) reading -> (KiB now, KiB once expanded).

    Until something first traces, the kernel keeps the top-level ring buffer
    at a token size and the file reads '7 (expanded: 1408)': tracing would
    grow it by asking for 1408 KiB per CPU. Once expanded (or written) it
    reads '1410', and the second value is None. 'X' (per-CPU sizes differ)
    and anything else raise ValueError.
    """
    m = _BUFFER_SIZE.match(text)
    if not m:
        raise ValueError("not a buffer size: %r" % text)
    return int(m.group(1)), (int(m.group(2)) if m.group(2) is not None else None)


def parse_data_size(header_page):
    """Bytes of event data per sub-buffer, from events/header_page; None if absent."""
    m = _DATA_FIELD.search(header_page or "")
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


def resized_kb(kb, data_bytes):
    """What buffer_size_kb reads after asking for `kb` KiB.

    The kernel allocates whole sub-buffers of data_bytes each, at least two,
    and reports what it allocated: asking for 1408 gives 1410 with 4 KiB
    sub-buffers (4080 data bytes). Writing back a size read this way gives
    the same size again.
    """
    pages = max(2, -(-kb * 1024 // data_bytes))
    return pages * data_bytes >> 10


def effective_buffer_kb(top_text, per_cpu_texts, data_bytes=None):
    """{cpu: KiB per CPU a tracer would get (None if unknown)}.

    top_text: the top-level buffer_size_kb reading (None if unreadable);
    per_cpu_texts: {cpu: per_cpu/cpuN/buffer_size_kb reading or None};
    data_bytes: parse_data_size() of events/header_page. The per-CPU files
    never show the expansion (they read '7' on a fresh boot), so an
    unexpanded top level decides for every CPU: the kernel keeps all CPUs
    the same size until the first write or trace expands them all.
    """
    expanded = None
    if top_text is not None:
        try:
            expanded = parse_buffer_size(top_text)[1]
        except ValueError:
            pass  # 'X': sizes differ, so the buffer is expanded; the per-CPU files say it
    if expanded is not None and data_bytes:
        expanded = resized_kb(expanded, data_bytes)
    out = {}
    for cpu, text in per_cpu_texts.items():
        if expanded is not None:
            out[cpu] = expanded
            continue
        try:
            out[cpu] = parse_buffer_size(text)[0] if text is not None else None
        except ValueError:
            out[cpu] = None
    return out


def buffer_readings(tracefs):
    """The arguments of effective_buffer_kb, read from tracefs (None where unreadable)."""
    def attempt(name):
        try:
            return read(tracefs, name)
        except OSError:
            return None

    per_cpu = {cpu: attempt("per_cpu/cpu%d/buffer_size_kb" % cpu) for cpu in cpu_dirs(tracefs)}
    return attempt("buffer_size_kb"), per_cpu, parse_data_size(attempt("events/header_page"))


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
            stats[cpu] = parse_cpu_stats(read_text(os.path.join(path, "stats")))
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


def set_events(tracefs):
    """Sorted 'system:event' names the kernel lists in set_event: the enabled events of the
    top level or of an instance, in one read (enabled_events() opens every event's enable
    file: thousands of opens on a current kernel). A soft-enabled event may carry a '*'."""
    text = read_text(os.path.join(tracefs, "set_event"))
    return sorted(line.strip().rstrip("*") for line in text.splitlines() if line.strip())


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
    found: dict = {}
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
