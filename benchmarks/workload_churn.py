"""A steady page-allocator churn for benchmarks: map, touch and unmap anonymous memory.

About half a million mm_page_alloc + mm_page_free events per second per process
on the development machine; run it for N seconds: `workload_churn.py 10`.
"""
import mmap
import sys
import time

MB = 1 << 20
deadline = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 5)
while time.monotonic() < deadline:
    maps = []
    for _ in range(32):
        m = mmap.mmap(-1, 4 * MB)
        m[::4096] = b"x" * (4 * MB // 4096)
        maps.append(m)
    for m in maps:
        m.close()
