#!/bin/bash
# The worked A/B example: vm.defrag_mode=0 against vm.defrag_mode=1 under memory pressure.
# Each capture: a hugetlb reservation leaves LEAVE_MB of free memory, then
# workload_fragment_thp.py fills it with 4 KiB pages and unmovable page tables,
# frees every other 64 KiB and faults MADV_HUGEPAGE memory into what is left.
# The two settings alternate so that drift in the machine hits both sides.
# Every setting changed here (defrag_mode, nr_hugepages, THP enabled/defrag) is
# put back on exit, also on failure or Ctrl-C.
#
# usage (root): examples/ab-defrag-mode.sh OUTDIR [RUNS_PER_SIDE] [LEAVE_MB] [FIRST_RUN]
#   then: kmemscope parse OUTDIR/run* -o DATASET; kmemscope compare DATASET --by kernel
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: ab-defrag-mode.sh OUTDIR [RUNS_PER_SIDE] [LEAVE_MB] [FIRST_RUN]}
RUNS=${2:-3}
LEAVE_MB=${3:-3072}
FIRST=${4:-1}
KMEMSCOPE=${KMEMSCOPE:-kmemscope}
LOCK=${KMEMSCOPE_LOCK:-/var/tmp/kmemscope-trace.lock}
THP=/sys/kernel/mm/transparent_hugepage

old_defrag_mode=$(cat /proc/sys/vm/defrag_mode)
old_hugepages=$(cat /proc/sys/vm/nr_hugepages)
old_enabled=$(sed 's/.*\[\(.*\)\].*/\1/' $THP/enabled)
old_defrag=$(sed 's/.*\[\(.*\)\].*/\1/' $THP/defrag)
restore() {
    echo "$old_defrag_mode" > /proc/sys/vm/defrag_mode
    echo "$old_hugepages" > /proc/sys/vm/nr_hugepages
    echo "$old_enabled" > $THP/enabled
    echo "$old_defrag" > $THP/defrag
}
trap restore EXIT
trap 'exit 130' INT TERM

# THP only where madvised, with direct compaction there (the distribution default).
echo madvise > $THP/enabled
echo madvise > $THP/defrag
mkdir -p "$OUT"
for i in $(seq "$FIRST" $((FIRST + RUNS - 1))); do
    for v in 0 1; do
        echo 0 > /proc/sys/vm/nr_hugepages
        sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory
        echo "$v" > /proc/sys/vm/defrag_mode
        free_mb=$(awk '/MemFree/ {print int($2/1024)}' /proc/meminfo)
        echo $(( (free_mb - LEAVE_MB) / 2 )) > /proc/sys/vm/nr_hugepages
        rm -rf "$OUT/run$i-defrag$v"
        flock "$LOCK" "$KMEMSCOPE" record -o "$OUT/run$i-defrag$v" --buffer-kb 65536 \
            --label kernel=defrag$v -- python3 "$HERE/workload_fragment_thp.py"
    done
done
