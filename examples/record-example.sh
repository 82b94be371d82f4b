#!/bin/bash
# How examples/kmem-compaction/ was recorded (Linux 6.18, 2 CPUs, 24 GiB, as root):
# `kmemscope record` with the default preset while squeeze-workload.sh runs.
# The page cache is dropped first, so that its release is not in the trace.
#
# usage: examples/record-example.sh OUT_BUNDLE
set -eu
HERE=$(dirname "$0")
sync; echo 3 > /proc/sys/vm/drop_caches
kmemscope record -o "$1" --buffer-kb 32768 --label kernel=example -- "$HERE/squeeze-workload.sh"

# examples/memory-pressure/ (1 MB: kswapd and kcompactd wake-ups, direct reclaim,
# direct compaction with deferrals) was recorded the same way with the
# compaction preset:
#   sync; echo 3 > /proc/sys/vm/drop_caches
#   kmemscope record -o OUT --preset compaction -- examples/pressure-workload.sh

# examples/thp-faults/ (1.4 MB: THP faults with local-node first tries, retries
# and fallbacks, direct compaction stalls, hugetlb pages at the same order) was
# recorded with the light preset (order > 0 and non-blocking allocations,
# compaction), THP enabled=madvise and defrag=madvise, vm.defrag_mode=0:
#   sync; echo 3 > /proc/sys/vm/drop_caches
#   kmemscope record -o OUT --preset light --label kernel=example -- examples/thp-squeeze-workload.sh
