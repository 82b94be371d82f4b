#!/bin/bash
# The workload behind examples/memory-pressure. Memory pressure without swap: hugetlb leaves ~1.5 GB, page cache fills it, anon memory then
# needs reclaim (kswapd wakes, direct reclaim) and compaction.
set -u
restore() { echo 0 > /proc/sys/vm/nr_hugepages; rm -f /var/tmp/kms-pressure.bin; }
trap restore EXIT
total_mb=$(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo)
pages=$(( (total_mb - 1500) / 2 ))
echo $pages > /proc/sys/vm/nr_hugepages
dd if=/dev/zero of=/var/tmp/kms-pressure.bin bs=1M count=1200 status=none
python3 -c "
import mmap
m = mmap.mmap(-1, 900 << 20); m[::4096] = b'z' * ((900 << 20) // 4096)
"
