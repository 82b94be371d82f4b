"""The flight recorder's disk budget: what a bundle may take, and room made for it.

--max-disk is never exceeded, the bundle being written and its temporary files
included: before `trace-cmd extract` runs, the most the bundle can take while
written (bundle_bound()) must fit under --max-disk once the oldest bundles are
removed, and above --min-free, or it is refused with one line.
"""
import glob
import os
import shutil
import subprocess
import zlib

from kmemscope.capture import bundle as bundle_mod
from kmemscope.capture.units import format_size

# A bundle's disk beyond the ring-buffer pages, the procfs samples and trace.dat's metadata
# (trace_dat_metadata()): the manifest, the log, trace.dat's options and CPU tables, and each
# file's last block.
BUNDLE_ROOM = 256 << 10
# The flight directory's own files (flight.json, the trace-cmd log), counted under --max-disk.
DIRECTORY_ROOM = 64 << 10
# The metadata trace-cmd stores in every trace.dat, read from tracefs and /proc at start.
METADATA_SOURCES = ("/proc/kallsyms", "printk_formats", "saved_cmdlines", "events/header_page",
                    "events/header_event")


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


def disk_by_file(path):
    """{path: bytes of disk} of `path` and every file and folder under it, as du counts them
    (allocated blocks; a file removed meanwhile is left out). Links are not followed."""
    out = {}
    for name in [path] + [os.path.join(root, n) for root, dirs, files in os.walk(path)
                          for n in files + dirs]:
        try:
            out[name] = os.lstat(name).st_blocks * 512
        except OSError:
            pass
    return out


def disk_use(path):
    """Bytes of disk `path` and everything under it take now (disk_by_file() summed)."""
    return sum(disk_by_file(path).values())


class PeakDisk:
    """The most disk a bundle folder takes while `trace-cmd extract` writes it, from readings
    of each file: every file's largest size seen, summed. trace-cmd removes its temporary
    per-CPU copies only once trace.dat is complete, so they all peak together, at an instant
    too short for a reading of the whole folder to catch."""

    def __init__(self, path):
        self.path, self.most = path, {}

    def read(self):
        for name, size in disk_by_file(self.path).items():
            self.most[name] = max(self.most.get(name, 0), size)

    @property
    def peak(self):
        return sum(self.most.values())


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


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def trace_cmd_compresses(trace_cmd):
    """True when `trace_cmd list -c` names a compression algorithm: trace.dat (version 7)
    then stores its metadata and pages compressed."""
    try:
        out = subprocess.run([trace_cmd, "list", "-c"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=30).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return False
    lines = [line.strip() for line in out.splitlines()]
    return any(line.startswith("Supported compression") for line in lines) and \
        any(line and not line.startswith("Supported") for line in lines)


def trace_dat_metadata(tracefs, compressed):
    """Bytes of what every trace.dat holds beside the ring-buffer pages: the host's kallsyms,
    every event's format, printk formats, saved command lines and the page headers, as
    stored: compressed (here with zlib at level 1, which compresses them less than the zstd
    that trace-cmd uses) or, when trace-cmd compresses nothing, whole. /proc/kallsyms says 0
    to stat: it is read (5 MiB here, 1 MiB compressed)."""
    total = 0
    formats = sorted(glob.glob(os.path.join(tracefs, "events", "*", "*", "format")))
    parts = [b"".join(_read(path) for path in formats)]
    parts += [_read(name if name.startswith("/") else os.path.join(tracefs, name))
              for name in METADATA_SOURCES]
    for data in parts:
        total += len(zlib.compress(data, 1)) if compressed else len(data)
    return total


def buffer_kb_for_disk(max_disk, ncpu, instances, samples_bytes, room):
    """KiB of ring buffer (all CPUs, both instances) whose bundle fits `max_disk` while
    written: bundle_bound() solved for the pages (0 or less: no buffer fits)."""
    partial = 2 * 4096 * ncpu * instances          # a partial page at each end, per CPU
    pages_bytes = (max_disk - DIRECTORY_ROOM - room - 2 * samples_bytes) // 2 - partial
    # bundle_bound counts a page header per 4000 data bytes: 4096 bytes of disk each
    return pages_bytes * 4000 // 4096 >> 10


def smallest_disk_for(buffer_kb, ncpu, instances, samples_bytes, room):
    """The least --max-disk whose buffer_kb_for_disk() is at least buffer_kb, in bytes."""
    partial = 2 * 4096 * ncpu * instances
    pages_bytes = -(-(buffer_kb << 10) * 4096 // 4000)
    return 2 * (pages_bytes + partial) + 2 * samples_bytes + room + DIRECTORY_ROOM + 2048


def smallest_bundle(ncpu, instances, room):
    """The disk a bundle of empty buffers takes while written (bundle_bound() of them)."""
    return bundle_bound([{cpu: {"bytes": 0} for cpu in range(ncpu)}] * instances, 0, room)


def bundle_bound(stats, samples_bytes, room=BUNDLE_ROOM):
    """The most disk a bundle can take while `trace-cmd extract` writes it, in bytes.

    stats: a cpu_stats() reading of each instance, frozen. trace-cmd copies each
    CPU's pages (the data in 'bytes', plus a page header each, plus a partial
    page at each end) into a temporary file beside trace.dat, writes trace.dat
    from them (compressed: at most as large) and removes them: twice the raw
    pages. Then the procfs samples (twice what the sampler holds: their headers,
    and the samples taken meanwhile), and `room` for the rest (BUNDLE_ROOM and
    trace_dat_metadata()).
    """
    raw = sum((s.get("bytes", 0) // 4000 + 2) * 4096 for per_cpu in stats
              for s in per_cpu.values())
    return 2 * raw + 2 * samples_bytes + room



class DiskBudget:
    """--max-disk and --min-free for the bundles of one flight directory.

    say / warn: the recorder's; suppressed: its Counter of ignored triggers.
    """

    def __init__(self, out, opt, room, say, warn, suppressed):
        self.out, self.opt, self.bundle_room = out, opt, room
        self.say, self.warn, self.suppressed = say, warn, suppressed

    def room_for(self, bound, trigger):
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

    def prune(self, newest):
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
