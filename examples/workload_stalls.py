"""Make tasks stall in direct compaction and direct reclaim, and keep kswapd and kcompactd busy.

The workload behind tests/data/stalls (the costly-stalls preset, the stalls
analysis). Needs root (vm.nr_hugepages) and THP enabled=madvise or always.
Every setting it changes is put back, on errors and on SIGTERM/SIGINT too.

1. Fill: 4 KiB anonymous pages (MADV_NOHUGEPAGE, populated by the kernel)
   over all of MemAvailable but `--slack-mb`, then free 64 KiB of every
   256 KiB again: a quarter of the filled memory is free, in order-4 pieces;
   no 2 MiB block is. Zeroing the pages takes most of the time (about 7 s per
   10 GiB on the 2-CPU VM the bundle comes from).
2. Page cache: write `--file-mb` to a file under `--dir` and fsync it, for
   reclaim to find.
3. hugetlb: raise vm.nr_hugepages by all of MemFree and `--reclaim-mb` more.
   Each 2 MiB page is an order-9 allocation with __GFP_RETRY_MAYFAIL: direct
   compaction while free memory lasts, then direct reclaim (of the page cache
   just written), and kswapd woken at order 9; kswapd wakes kcompactd before
   it sleeps.
4. Page cache under the squeeze: write `--file-mb` more. The file system asks
   for large folios (orders above 3 on ext4 and xfs) with __GFP_NORETRY: a
   direct compaction attempt from __filemap_get_folio when none is free.
5. THP faults: `--thp-mb` of MADV_HUGEPAGE memory touched page by page: order-9
   direct compaction from the fault path.
6. Put vm.nr_hugepages back, free everything, delete the files, and wait
   `--settle-s` so that kswapd and kcompactd finish their runs in the capture.

Run it under a shell that puts vm.nr_hugepages back too (`trap ... EXIT`): a
process the OOM killer ends runs no clean-up of its own.

Memory: the fill takes MemAvailable minus the slack; for the moment of the
hugetlb phase free memory is at the watermarks, and what other processes on
the host allocate then comes from the page cache left (2 * --file-mb minus
--reclaim-mb). The squeeze lasts seconds.
Prints what each phase did on stderr.
"""
import argparse
import mmap
import os
import signal
import sys
import tempfile
import time

MB = 1 << 20
PAGE = mmap.PAGESIZE
HUGE = 2 * MB
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


def meminfo_mb(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024
    raise SystemExit("no %s in /proc/meminfo" % key)


def vmstat(*names):
    out = {}
    with open("/proc/vmstat") as f:
        for line in f:
            k, v = line.split()
            if k in names:
                out[k] = int(v)
    return out


def say(text):
    print("workload_stalls: " + text, file=sys.stderr, flush=True)


MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)   # Linux 5.14


def fill_and_punch(fill_mb, chunk_mb=64):
    """Anonymous 4 KiB pages over fill_mb, then 64 KiB of every 256 KiB freed again."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    maps = []
    for _ in range(fill_mb // chunk_mb):
        m = mmap.mmap(-1, chunk_mb * MB, flags=flags)
        m.madvise(mmap.MADV_NOHUGEPAGE)
        try:
            m.madvise(MADV_POPULATE_WRITE)
        except OSError:         # before 5.14: fault each page in
            m[::PAGE] = b"f" * (chunk_mb * MB // PAGE)
        maps.append(m)
    for m in maps:
        for off in range(0, len(m), 256 * 1024):
            m.madvise(mmap.MADV_DONTNEED, off, 64 * 1024)
    return maps


def write_file(directory, size_mb):
    fd, path = tempfile.mkstemp(prefix="workload-stalls-", dir=directory)
    block = os.urandom(MB)
    try:
        for _ in range(size_mb):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def set_hugepages(n):
    with open(NR_HUGEPAGES, "w") as f:
        f.write(str(n))
    with open(NR_HUGEPAGES) as f:
        return int(f.read())


def thp_faults(size_mb):
    m = mmap.mmap(-1, size_mb * MB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    m[::PAGE] = b"t" * (size_mb * MB // PAGE)
    return m


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--slack-mb", type=int, default=4096, help="MemAvailable the fill leaves")
    p.add_argument("--file-mb", type=int, default=512, help="page cache to write, twice")
    p.add_argument("--reclaim-mb", type=int, default=256,
                   help="hugetlb asks for MemFree and this much page cache more")
    p.add_argument("--thp-mb", type=int, default=256, help="MADV_HUGEPAGE memory to fault")
    p.add_argument("--dir", default="/var/tmp", help="where the page-cache file goes")
    p.add_argument("--settle-s", type=float, default=2.0,
                   help="wait at the end for kswapd and kcompactd to go back to sleep")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("workload_stalls: needs root (vm.nr_hugepages)")

    # SIGTERM (record stops its COMMAND so) must still run the finally below.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with open(NR_HUGEPAGES) as f:
        old_hugepages = int(f.read())
    paths = []
    counters = ("compact_stall", "allocstall_normal", "allocstall_movable", "pageoutrun",
                "compact_daemon_wake", "thp_fault_alloc", "thp_fault_fallback")
    before = vmstat(*counters)
    try:
        fill_mb = meminfo_mb("MemAvailable") - args.slack_mb - 2 * args.file_mb
        t0 = time.monotonic()
        maps = fill_and_punch(max(fill_mb, 0))
        say("filled %d MiB of 4 KiB pages and freed a quarter in 64 KiB pieces (%.1f s); "
            "MemFree %d MiB" % (fill_mb, time.monotonic() - t0, meminfo_mb("MemFree")))
        t0 = time.monotonic()
        paths.append(write_file(args.dir, args.file_mb))
        say("wrote %d MiB of page cache to %s (%.1f s)" % (args.file_mb, paths[-1],
                                                             time.monotonic() - t0))
        want = old_hugepages + max(0, (meminfo_mb("MemFree") + args.reclaim_mb) * MB // HUGE)
        t0 = time.monotonic()
        got = set_hugepages(want)
        say("vm.nr_hugepages %d -> asked %d, got %d (%.1f s)" % (old_hugepages, want, got,
                                                                 time.monotonic() - t0))
        t0 = time.monotonic()
        paths.append(write_file(args.dir, args.file_mb))
        say("wrote %d MiB more to %s under the squeeze (%.1f s); MemFree %d MiB"
            % (args.file_mb, paths[-1], time.monotonic() - t0, meminfo_mb("MemFree")))
        t0 = time.monotonic()
        thp = thp_faults(args.thp_mb)
        say("faulted %d MiB of MADV_HUGEPAGE memory (%.1f s)" % (args.thp_mb,
                                                                time.monotonic() - t0))
        thp.close()
    finally:
        set_hugepages(old_hugepages)
        for path in paths:
            os.unlink(path)
    for m in maps:
        m.close()
    time.sleep(args.settle_s)
    after = vmstat(*counters)
    say("vmstat deltas: " + ", ".join("%s %d" % (k, after[k] - before[k])
                                      for k in counters if k in after and k in before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
