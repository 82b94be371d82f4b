#!/bin/bash
# The workload behind the built-in example: ordinary allocations, then a 20 GB
# hugetlb reservation that leaves little free memory (compaction, kswapd,
# migratetype fallbacks), unmovable and reclaimable allocations under that
# pressure, and a manual compaction. Every setting is put back.
# Meant to run under `kmemscope record ... -- examples/squeeze-workload.sh`.
set -u
HERE=$(dirname "$0")
restore() { echo 0 > /proc/sys/vm/nr_hugepages; }
trap restore EXIT
sleep 1
python3 "$HERE/workload_thp_pagecache.py" 0.1
echo 10200 > /proc/sys/vm/nr_hugepages
sleep 1
python3 "$HERE/workload_unmovable.py"
python3 "$HERE/workload_thp_pagecache.py" 0.1
echo 1 > /proc/sys/vm/compact_memory
sleep 1
