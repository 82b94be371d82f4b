#!/bin/bash
# How examples/kmem-compaction.dat was recorded (Linux 6.18, 2 CPUs, 24 GiB, as root).
#
# Reserving 21 GB of hugetlb pages while the workloads run leaves little free
# memory, so within seconds the trace shows compaction, kswapd wake-ups and
# migratetype fallbacks (mm_page_alloc_extfrag) next to ordinary allocations.
# Every setting is put back at the end. `-d --no-filter` is needed on hosts
# that refuse writes to ftrace_enabled and set_ftrace_pid.
#
# usage: examples/record-example.sh OUT.dat
set -u
OUT=$1
HERE=$(dirname "$0")
trace-cmd record -d --no-filter -C mono -b 8192 \
  -e kmem:mm_page_alloc -e kmem:mm_page_free -e kmem:mm_page_alloc_extfrag \
  -e kmem:mm_page_alloc_zone_locked -e kmem:mm_page_pcpu_drain -e compaction \
  -e vmscan:mm_vmscan_wakeup_kswapd -e vmscan:mm_vmscan_kswapd_wake \
  -e vmscan:mm_vmscan_direct_reclaim_begin -e vmscan:mm_vmscan_direct_reclaim_end \
  -o "$OUT" > /tmp/record-example.log 2>&1 &
PID=$!
sleep 1.5
sync; echo 3 > /proc/sys/vm/drop_caches
python3 "$HERE/workload_thp_pagecache.py" 0.25
echo 10500 > /proc/sys/vm/nr_hugepages
python3 "$HERE/workload_unmovable.py"
python3 "$HERE/workload_thp_pagecache.py" 0.25
echo 1 > /proc/sys/vm/compact_memory
echo 0 > /proc/sys/vm/nr_hugepages
sleep 0.3
kill -INT $PID; wait $PID
