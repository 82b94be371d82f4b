"""Allocation workload for the example trace: anon THP faults, page cache, frees."""
import mmap, os, sys, time
dur = float(sys.argv[1]) if len(sys.argv) > 1 else 3
end = time.time() + dur
MB = 1 << 20
keep = []
i = 0
while time.time() < end:
    m = mmap.mmap(-1, 64 * MB)
    m.madvise(mmap.MADV_HUGEPAGE)
    m[::4096] = b'y' * (64 * MB // 4096)
    keep.append(m)
    if len(keep) > 6:
        keep.pop(0).close()
    with open('/tmp/kmemscope-example-cachefile', 'wb') as f:
        f.write(os.urandom(8 * MB))
    i += 1
print("iterations", i)
for m in keep:
    m.close()
os.unlink('/tmp/kmemscope-example-cachefile')
