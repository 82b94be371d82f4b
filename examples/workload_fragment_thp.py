"""Fragment free memory with unmovable page tables, then make costly allocations into it.

1. Fill: 4 KiB anon pages (MADV_NOHUGEPAGE) up to all but `--leave-mb` of free
   memory.
2. Free one 64 KiB piece in four of the fill: a quarter of each pageblock is
   free again, no 2 MiB block is, and no block is free enough to be claimed.
3. Page tables: one PTE page per 2 MiB of a sparse mapping, `--pt-per-chunk`
   per 8 MiB filled: unmovable kernel allocations made while free memory is in
   64 KiB pieces, so they fall back into movable pageblocks unless the
   allocator refuses to fragment.
4. Costly unmovable kernel allocations: pipes resized to 4 MiB and 16 MiB,
   whose buffer rings the kernel allocates with kcalloc at order 4 (1,024
   slots of 40 bytes) and order 6 (4,096 slots) on x86-64. The free 64 KiB
   pieces are order-4 pages in movable pageblocks: the watermark check of
   direct compaction is met at order 4, yet an allocator that refuses to
   fragment (vm.defrag_mode=1) cannot take them.
5. THP faults: MADV_HUGEPAGE private mappings touched page by page, `--step-mb`
   at a time with a batch of step 4's pipe resizes after each step; each fault
   needs compaction, which fails in pageblocks a page table sits in. Where the
   64 KiB and 256 KiB mTHP sizes are enabled (examples/ab-defrag-mode.sh does
   so), a fault that gets no 2 MiB page tries order 6, then order 4, each with
   direct compaction of its own.

Benchmark results go to --metrics-out FILE (or $KMEMSCOPE_METRICS_OUT) as
{"metrics": [{"metric", "value", "unit", "better"}, ...]}:
  fill_mib_per_s          MiB/s  4 KiB fill throughput (phase 1)       higher
  pipe_resize_ok_pct      %      pipe resizes that got their ring      higher
  pipe_resize_us          us     mean time of one pipe resize          lower
  thp_fault_ms_per_mb     ms     time to fault 1 MiB of MADV_HUGEPAGE  lower
  thp_huge_pct            %      of that memory backed by huge pages   higher
                                 (AnonHugePages of /proc/self/smaps_rollup)
Prints what it did (and vmstat's view of it) on stderr.
"""
import argparse
import errno
import fcntl
import json
import mmap
import os
import sys
import time

MB = 1 << 20
PAGE = mmap.PAGESIZE
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def meminfo(key, path="/proc/meminfo"):
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no %s in %s" % (key, path))


def vmstat(*names):
    out = {}
    with open("/proc/vmstat") as f:
        for line in f:
            k, v = line.split()
            if k in names:
                out[k] = int(v)
    return out


def fill(fill_bytes, chunk):
    """4 KiB pages up to fill_bytes, in chunk-sized mappings; returns (mappings, seconds)."""
    priv = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    maps, done = [], 0
    t0 = time.monotonic()
    while done < fill_bytes:
        m = mmap.mmap(-1, chunk, flags=priv)
        m.madvise(mmap.MADV_NOHUGEPAGE)
        m[::PAGE] = b"f" * (chunk // PAGE)
        maps.append(m)
        done += chunk
    return maps, time.monotonic() - t0


def punch_holes(maps, chunk, free_every):
    """Free one 64 KiB piece in every `free_every`: a quarter of each pageblock free, in
    pieces, so an unmovable allocation can steal from a movable block but cannot claim it
    (that needs half of it free)."""
    step = 64 * 1024
    for m in maps:
        for off in range(0, chunk, free_every * step):
            m.madvise(mmap.MADV_DONTNEED, off, step)


def page_tables(count):
    """One new PTE page per touch, 2 MiB apart in 1 GiB sparse mappings; returns the mappings."""
    priv = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    tables, sparse, off = [], None, 1 << 30
    for _ in range(count):
        if off >= 1 << 30:
            sparse, off = mmap.mmap(-1, 1 << 30, flags=priv), 0
            sparse.madvise(mmap.MADV_NOHUGEPAGE)
            tables.append(sparse)
        sparse[off] = 1
        off += 2 * MB
    return tables


class PipeRings:
    """Pipes resized to alternate sizes and kept open, with the resizes' count and time.

    A failed resize (ENOMEM: the ring's allocation failed) leaves the pipe as it
    was; the pipe is kept all the same."""

    def __init__(self, sizes):
        self.sizes, self.pipes = sizes, []
        self.attempts, self.ok, self.seconds = 0, 0, 0.0

    def add(self, count):
        for _ in range(count):
            r, w = os.pipe()
            self.pipes.append((r, w))
            size = self.sizes[self.attempts % len(self.sizes)]
            t0 = time.monotonic()
            try:
                fcntl.fcntl(w, F_SETPIPE_SZ, size)
                self.ok += 1
            except OSError as exc:
                if exc.errno == errno.EPERM:
                    raise SystemExit("a %d MiB pipe needs fs.pipe-max-size >= %d (or CAP_SYS_RESOURCE)"
                                     % (size // MB, size))
                if exc.errno not in (errno.ENOMEM, errno.EBUSY):
                    raise
            self.seconds += time.monotonic() - t0
            self.attempts += 1

    def close(self):
        for r, w in self.pipes:
            os.close(r)
            os.close(w)
        self.pipes = []


def thp_faults(total_mb, step_mb, between):
    """Fault total_mb of MADV_HUGEPAGE memory, step_mb at a time, calling between() after
    each step; returns (mappings, seconds spent faulting, huge bytes)."""
    priv = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    huge_before = meminfo("AnonHugePages", "/proc/self/smaps_rollup")
    maps, left, spent = [], total_mb * MB, 0.0
    while left > 0:
        n = min(step_mb * MB, left)
        m = mmap.mmap(-1, n, flags=priv)
        m.madvise(mmap.MADV_HUGEPAGE)
        t0 = time.monotonic()
        m[::PAGE] = b"t" * (n // PAGE)
        spent += time.monotonic() - t0
        maps.append(m)
        left -= n
        between()
    huge = meminfo("AnonHugePages", "/proc/self/smaps_rollup") - huge_before
    return maps, spent, huge


def metric(name, value, unit, better):
    return {"metric": name, "value": round(value, 4), "unit": unit, "better": better}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--leave-mb", type=int, default=400, help="free memory left after the fill")
    p.add_argument("--pt-per-chunk", type=int, default=48, help="page-table pages per 8 MiB filled")
    p.add_argument("--free-every", type=int, default=4, help="free one 64 KiB piece in this many")
    p.add_argument("--pipes", type=int, default=256,
                   help="pipes resized to 4 MiB and 16 MiB (order-4 and order-6 rings), alternately, "
                        "in batches between the THP steps")
    p.add_argument("--thp-mb", type=int, default=600, help="MADV_HUGEPAGE memory to fault")
    p.add_argument("--step-mb", type=int, default=50,
                   help="THP memory faulted between two batches of pipe resizes")
    p.add_argument("--pause", type=float, default=0, help="seconds between fragmenting and faulting")
    p.add_argument("--settle", type=float, default=1.5, help="seconds of quiet before and after")
    p.add_argument("--metrics-out", default=os.environ.get("KMEMSCOPE_METRICS_OUT"),
                   help="write the benchmark results here as JSON (default: $KMEMSCOPE_METRICS_OUT)")
    a = p.parse_args()
    time.sleep(a.settle)
    chunk = 8 * MB
    fill_bytes = max(meminfo("MemFree") - a.leave_mb * MB, 64 * MB)
    filled, fill_s = fill(fill_bytes, chunk)
    punch_holes(filled, chunk, a.free_every)
    tables = page_tables(len(filled) * a.pt_per_chunk)
    time.sleep(a.pause)
    names = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "compact_success")
    before = vmstat(*names)
    rings = PipeRings((4 * MB, 16 * MB))
    steps = max(1, -(-a.thp_mb // a.step_mb))
    per_step = -(-a.pipes // steps)
    thp, thp_s, huge = thp_faults(a.thp_mb, a.step_mb,
                                  lambda: rings.add(min(per_step, a.pipes - rings.attempts)))
    after = vmstat(*names)
    print("workload_fragment_thp: filled %d MiB, %d page tables, %d/%d pipe rings, THP %d MiB "
          "(%d MiB huge): %s" % (
              len(filled) * chunk // MB, len(filled) * a.pt_per_chunk, rings.ok, rings.attempts,
              a.thp_mb, huge // MB,
              ", ".join("%s +%d" % (k, after[k] - before[k]) for k in sorted(before))),
          file=sys.stderr)
    time.sleep(a.settle)
    if a.metrics_out:
        results = [
            metric("fill_mib_per_s", len(filled) * chunk / MB / fill_s, "MiB/s", "higher"),
            metric("pipe_resize_ok_pct", 100.0 * rings.ok / max(rings.attempts, 1), "%", "higher"),
            metric("pipe_resize_us", 1e6 * rings.seconds / max(rings.attempts, 1), "us", "lower"),
            metric("thp_fault_ms_per_mb", 1e3 * thp_s / a.thp_mb, "ms", "lower"),
            metric("thp_huge_pct", 100.0 * huge / (a.thp_mb * MB), "%", "higher"),
        ]
        with open(a.metrics_out, "w") as f:
            json.dump({"metrics": results}, f, indent=1)
            f.write("\n")
    rings.close()


if __name__ == "__main__":
    main()
