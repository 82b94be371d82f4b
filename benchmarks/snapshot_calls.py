#!/usr/bin/env python3
"""What snapshot reads cost per API call (dataset/snapshot.py): the figures docs/benchmarks.md
gives for them, rerunnable here.

The dataset: the eight runs of examples/ab-defrag-mode parsed into a scratch folder. Then:

1. open: `kmemscope.open(DS)` and N `Dataset.sql` calls on it, in a child process (each call
   reads the last call's snapshot while the dataset's folders are unchanged,
   docs/architecture.md "Snapshot reads").
2. kernel: the same N calls in a child process started inside `shared_with_children` (what
   a notebook kernel of `kmemscope report` does: its calls read the report's listing), with
   TMPDIR set as the report sets it for its kernels.

The calls are timed in the child as wall seconds and as its user + system CPU seconds, the
median of --repeat rounds, with the 1-minute load average beside it. Nothing is asserted.

usage: benchmarks/snapshot_calls.py [--calls 20] [--repeat 5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AB = ROOT / "examples" / "ab-defrag-mode"
SQL = "SELECT count(*) FROM mm_page_alloc"

CALLS = """
import sys, time, kmemscope
ds = kmemscope.open(sys.argv[1])
start, cpu = time.perf_counter(), time.process_time()
for _ in range(int(sys.argv[2])):
    ds.sql(sys.argv[3]).rows()
print(time.perf_counter() - start, time.process_time() - cpu)
"""


def child_seconds(args, env=None):
    """(wall seconds, user + system CPU seconds) of the calls, in a child of their own."""
    out = subprocess.run([sys.executable, "-c", CALLS, *map(str, args)], env=env, check=True,
                         capture_output=True, text=True).stdout
    wall, cpu = out.split()[-2:]
    return float(wall), float(cpu)


def report(name, rounds):
    walls, cpus = zip(*rounds)
    print(f"{name:8} {statistics.median(walls):6.2f} s of calls, {statistics.median(cpus):6.2f} s "
          f"CPU (median of {len(rounds)})   load {os.getloadavg()[0]:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import kmemscope
    from kmemscope.api import dataset_handle, shared_with_children
    from kmemscope.common.scratch import ScratchFolder
    from kmemscope.dataset import reader

    with ScratchFolder("kmemscope-bench-") as tmp:
        ds = Path(tmp) / "ds"
        kmemscope.parse(sorted(AB.glob("run*")), ds)
        # an open Dataset keeps its snapshot once the folders are older than this (reader.py)
        time.sleep(getattr(reader, "SETTLED_NS", 0) / 1e9 + 0.5)
        print(f"{args.calls} Dataset.sql calls over {ds.name} (8 runs):")
        report("open", [child_seconds([ds, args.calls, SQL]) for _ in range(args.repeat)])
        ref = dataset_handle(str(ds))
        kernel_tmp = Path(tmp) / "tmp"
        kernel_tmp.mkdir()
        with shared_with_children(ref):
            env = dict(os.environ, TMPDIR=str(kernel_tmp))    # as the report's kernels have
            report("kernel", [child_seconds([ds, args.calls, SQL], env)
                              for _ in range(args.repeat)])


if __name__ == "__main__":
    main()
