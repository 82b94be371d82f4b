"""Write linux-6.18/*-fragmented: /proc files read while free memory is shredded.

Holds 4 GiB of anonymous memory and frees every other page. Each freed page's
buddy stays allocated, so once the per-CPU lists are full the buddy allocator
holds >100000 order-0 Movable pages and /proc/pagetypeinfo caps the count.
"""
import mmap
import os

PAGE = mmap.PAGESIZE
N = (4 << 30) // PAGE
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "linux-6.18")

m = mmap.mmap(-1, N * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.madvise(mmap.MADV_NOHUGEPAGE)
for i in range(0, N * PAGE, PAGE):
    m[i] = 1
for i in range(0, N, 2):
    m.madvise(mmap.MADV_DONTNEED, i * PAGE, PAGE)
for name in ("pagetypeinfo", "buddyinfo", "vmstat", "zoneinfo"):
    with open("/proc/" + name) as f:
        text = f.read()
    with open(os.path.join(HERE, name + "-fragmented"), "w") as f:
        f.write(text)
m.close()
