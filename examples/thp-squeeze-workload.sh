#!/bin/bash
# The workload behind examples/thp-faults: a hugetlb reservation leaves about
# 3 GiB free, workload_fragment_thp.py fragments it and faults 500 MiB of
# MADV_HUGEPAGE memory into it (THP first tries, retries, fallbacks, direct
# compaction). Needs THP enabled=madvise (or always) and defrag=madvise. Every
# setting is put back.
set -u
HERE=$(dirname "$0")
old=$(cat /proc/sys/vm/nr_hugepages)
restore() { echo "$old" > /proc/sys/vm/nr_hugepages; }
trap restore EXIT
free_mb=$(awk '/MemFree/ {print int($2/1024)}' /proc/meminfo)
echo $(( (free_mb - 3072) / 2 )) > /proc/sys/vm/nr_hugepages
python3 "$HERE/workload_fragment_thp.py" --thp-mb 500 --leave-mb 100
