#!/bin/bash
# The worked A/B example: vm.defrag_mode=0 against vm.defrag_mode=1 under memory pressure.
# Each capture: a hugetlb reservation leaves LEAVE_MB of free memory, then
# workload_fragment_thp.py fills it with 4 KiB pages, frees every fourth 64 KiB,
# adds unmovable page tables, makes costly unmovable kernel allocations (pipe
# rings of order 4 and 6) and faults MADV_HUGEPAGE memory into what is left,
# with the 256 KiB and 64 KiB mTHP sizes enabled there (a fault that cannot get
# 2 MiB tries order 6, then order 4): direct compaction both fails and succeeds,
# at orders 4, 6 and 9.
# The two settings alternate so that drift in the machine hits both sides.
# The workload's benchmark results land in each bundle as metrics.json.
# Every setting changed here (defrag_mode, nr_hugepages, THP enabled/defrag and
# the two mTHP sizes, fs.pipe-max-size) is put back after each capture and on
# exit, also on failure or Ctrl-C.
#
# usage (root): examples/ab-defrag-mode.sh OUTDIR [RUNS_PER_SIDE] [LEAVE_MB] [FIRST_RUN]
#   then: kmemscope parse OUTDIR/run* -o DATASET; kmemscope compare DATASET --by kernel
# environment:
#   KMEMSCOPE_RECORD_ARGS  record options that choose the events (default: none, i.e.
#                          the default preset); the events the direct compaction and THP
#                          fault models read, and little else (about 1 MiB a capture):
#     "--preset compaction -e 'kmem:mm_page_alloc:order > 0' -e kmem:mm_page_alloc_extfrag
#      -e 'kmem:mm_page_free:order > 0'"
#   PACK=zst|gz            also pack each bundle (metrics.json included) as OUTDIR/runN-defragV.tar.zst
#   WORKLOAD_ARGS          options for workload_fragment_thp.py
#   SIDES                  the defrag_mode values to record, in order (default: "0 1")
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: ab-defrag-mode.sh OUTDIR [RUNS_PER_SIDE] [LEAVE_MB] [FIRST_RUN]}
RUNS=${2:-4}
LEAVE_MB=${3:-3072}
FIRST=${4:-1}
KMEMSCOPE=${KMEMSCOPE:-kmemscope}
LOCK=${KMEMSCOPE_LOCK:-/var/tmp/kmemscope-trace.lock}
PACK=${PACK:-}
THP=/sys/kernel/mm/transparent_hugepage
eval "record_args=(${KMEMSCOPE_RECORD_ARGS:-})"
eval "workload_args=(${WORKLOAD_ARGS:-})"

old_defrag_mode=$(cat /proc/sys/vm/defrag_mode)
old_hugepages=$(cat /proc/sys/vm/nr_hugepages)
old_pipe_max=$(cat /proc/sys/fs/pipe-max-size)
old_enabled=$(sed 's/.*\[\(.*\)\].*/\1/' $THP/enabled)
old_defrag=$(sed 's/.*\[\(.*\)\].*/\1/' $THP/defrag)
old_mthp_64=$(sed 's/.*\[\(.*\)\].*/\1/' $THP/hugepages-64kB/enabled)
old_mthp_256=$(sed 's/.*\[\(.*\)\].*/\1/' $THP/hugepages-256kB/enabled)
restore() {
    echo "$old_defrag_mode" > /proc/sys/vm/defrag_mode
    echo "$old_hugepages" > /proc/sys/vm/nr_hugepages
    echo "$old_pipe_max" > /proc/sys/fs/pipe-max-size
    echo "$old_enabled" > $THP/enabled
    echo "$old_defrag" > $THP/defrag
    echo "$old_mthp_64" > $THP/hugepages-64kB/enabled
    echo "$old_mthp_256" > $THP/hugepages-256kB/enabled
}
metrics_tmp=$(mktemp /tmp/kmemscope-ab-metrics.XXXXXX)
trap 'restore; rm -f "$metrics_tmp"' EXIT
trap 'exit 130' INT TERM

# kmemscope record --metrics copies the workload's results into the bundle itself;
# without it, this script does.
metrics_opt=()
if "$KMEMSCOPE" record --help 2>/dev/null | grep -q -- '--metrics'; then
    metrics_opt=(--metrics "$metrics_tmp")
fi

# One capture: its settings, the recording, the settings put back. The machine-wide
# lock is held throughout, so that no one else records under these settings.
capture() {  # capture RUN_DIR DEFRAG_MODE
    local run=$1 v=$2 attempt
    # THP only where madvised, with direct compaction there (the distribution default).
    echo madvise > $THP/enabled
    echo madvise > $THP/defrag
    echo madvise > $THP/hugepages-64kB/enabled
    echo madvise > $THP/hugepages-256kB/enabled
    # The workload's 16 MiB pipes (order-6 rings) need this without CAP_SYS_RESOURCE.
    echo $((16 << 20)) > /proc/sys/fs/pipe-max-size
    echo 0 > /proc/sys/vm/nr_hugepages
    sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory
    echo "$v" > /proc/sys/vm/defrag_mode
    free_mb=$(awk '/MemFree/ {print int($2/1024)}' /proc/meminfo)
    echo $(( (free_mb - LEAVE_MB) / 2 )) > /proc/sys/vm/nr_hugepages
    : > "$metrics_tmp"
    # A capture fails when a tracer that does not take the lock has events enabled
    # (record refuses to start) or when the OOM killer takes the workload (other
    # processes grew during the fill): try again, a few times.
    for attempt in 1 2 3 4 5; do
        rm -rf "$run"
        if KMEMSCOPE_METRICS_OUT="$metrics_tmp" \
            "$KMEMSCOPE" record -o "$run" --buffer-kb 65536 --label kernel=defrag$v \
            "${record_args[@]}" "${metrics_opt[@]}" \
            -- python3 "$HERE/workload_fragment_thp.py" "${workload_args[@]}"; then
            break
        fi
        [ "$attempt" = 5 ] && return 1
        sleep 30
    done
    restore
    if [ ${#metrics_opt[@]} = 0 ]; then
        cp "$metrics_tmp" "$run/metrics.json"
    fi
}

mkdir -p "$OUT"
exec 9>>"$LOCK"
for i in $(seq "$FIRST" $((FIRST + RUNS - 1))); do
    for v in ${SIDES:-0 1}; do
        run="$OUT/run$i-defrag$v"
        flock 9
        capture "$run" "$v"
        flock -u 9
        if [ -n "$PACK" ]; then
            flag=--zstd; [ "$PACK" = gz ] && flag=--gzip
            rm -f "$run.tar.$PACK"
            tar "$flag" -cf "$run.tar.$PACK" -C "$OUT" "$(basename "$run")"
        fi
    done
done
