"""Fragment free memory with unmovable page tables, then fault THPs into it.

1. Fill: 4 KiB anon pages (MADV_NOHUGEPAGE) up to all but `--leave-mb` of free
   memory, and after every 8 MiB a burst of page-table pages (one PTE page per
   2 MiB of a sparse mapping: unmovable kernel allocations made while free
   memory is low, so they fall back into movable pageblocks unless the
   allocator refuses to fragment).
2. Free one 64 KiB piece in four of the fill: a quarter of each pageblock is
   free again, no 2 MiB block is, and no block is free enough to be claimed.
3. THP faults: MADV_HUGEPAGE private mappings touched page by page; each fault
   needs compaction, which fails in pageblocks a page table sits in.
Prints what it did (faults per vmstat) on stderr.
"""
import argparse
import mmap
import sys
import time

MB = 1 << 20
PAGE = mmap.PAGESIZE


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no %s in /proc/meminfo" % key)


def vmstat(*names):
    out = {}
    with open("/proc/vmstat") as f:
        for line in f:
            k, v = line.split()
            if k in names:
                out[k] = int(v)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--leave-mb", type=int, default=300, help="free memory left after the fill")
    p.add_argument("--pt-per-chunk", type=int, default=48, help="page-table pages per 8 MiB filled")
    p.add_argument("--free-every", type=int, default=4, help="free one 64 KiB piece in this many")
    p.add_argument("--thp-mb", type=int, default=400, help="MADV_HUGEPAGE memory to fault")
    p.add_argument("--pause", type=float, default=0, help="seconds between fragmenting and faulting")
    p.add_argument("--settle", type=float, default=1.5, help="seconds of quiet before and after")
    a = p.parse_args()
    time.sleep(a.settle)
    priv = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    fill_bytes = max(meminfo("MemFree") - a.leave_mb * MB, 64 * MB)
    chunk = 8 * MB
    fill, tables = [], []
    # Address space for page tables: 1 GiB mappings (512 PTE pages each), one page touched per 2 MiB.
    sparse, pt_off, pt_pages = None, 1 << 30, 0
    done = 0
    while done < fill_bytes:
        m = mmap.mmap(-1, chunk, flags=priv)
        m.madvise(mmap.MADV_NOHUGEPAGE)
        m[::PAGE] = b"f" * (chunk // PAGE)
        fill.append(m)
        done += chunk
    # Free one 64 KiB piece in every `free_every`: a quarter of each pageblock
    # free, in pieces, so an unmovable allocation can steal a page from a
    # movable block but cannot claim the whole block (that needs half of it free).
    step = 64 * 1024
    for m in fill:
        for off in range(0, chunk, a.free_every * step):
            m.madvise(mmap.MADV_DONTNEED, off, step)
    # Page tables now, with free memory in 64 KiB pieces only: unmovable pages
    # land inside movable pageblocks unless the allocator refuses to fragment.
    for _ in fill:
        for _ in range(a.pt_per_chunk):       # one new PTE page per touch (2 MiB apart)
            if pt_off >= 1 << 30:
                sparse, pt_off = mmap.mmap(-1, 1 << 30, flags=priv), 0
                sparse.madvise(mmap.MADV_NOHUGEPAGE)
                tables.append(sparse)
            sparse[pt_off] = 1
            pt_off += 2 * MB
            pt_pages += 1
    time.sleep(a.pause)
    before = vmstat("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "compact_success")
    thp = []
    left = a.thp_mb * MB
    while left > 0:
        n = min(64 * MB, left)
        m = mmap.mmap(-1, n, flags=priv)
        m.madvise(mmap.MADV_HUGEPAGE)
        m[::PAGE] = b"t" * (n // PAGE)
        thp.append(m)
        left -= n
    after = vmstat(*before)
    print("workload_fragment_thp: filled %d MiB, %d page tables, THP %d MiB: %s" % (
        done // MB, pt_pages, a.thp_mb,
        ", ".join("%s +%d" % (k, after[k] - before[k]) for k in sorted(before))), file=sys.stderr)
    time.sleep(a.settle)


if __name__ == "__main__":
    main()
