"""Unmovable and reclaimable allocations under memory pressure: page tables, slab, page cache."""
import mmap, os, sys, tempfile, time
MB = 1 << 20
d = tempfile.mkdtemp(dir="/dev/shm")
for i in range(80000):            # dentries + inodes: reclaimable slab
    open(os.path.join(d, f"f{i}"), "w").close()
maps = []
for i in range(800):              # sparse touches: one page-table page per 2 MB
    m = mmap.mmap(-1, 64 * MB)
    for off in range(0, 64 * MB, 2 * MB):
        m[off] = 1
    maps.append(m)
for m in maps: m.close()
for name in os.listdir(d): os.unlink(os.path.join(d, name))
os.rmdir(d)
