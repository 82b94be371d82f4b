#!/usr/bin/env python3
"""What `kmemscope record` costs a workload: no capture vs the default and light presets.

A fixed amount of allocation-heavy work (map, touch and unmap anonymous memory:
page faults and frees, about a million page allocations and frees per round) is
timed by the workload itself, so record's own start and stop are not counted. The modes run
in interleaved rounds to spread the noise of a shared machine evenly; the
table shows the median time per mode, the slowdown against no capture, and the
events per second that the capture recorded and lost (from its manifest).

Needs root and tracefs; holds /var/tmp/kmemscope-trace.lock while recording.
Nothing is asserted: the script prints the table.

usage: benchmarks/capture_overhead.py [--rounds 3] [--mib 4096] [--keep DIR]
"""
import argparse
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOCK = "/var/tmp/kmemscope-trace.lock"
MODES = ("none", "default", "light")

# Touch MIB mebibytes of fresh anonymous memory in 64 MiB maps, then unmap:
# one page allocation and one free per 4 KiB page. Prints its own run time.
WORKLOAD = r"""
import mmap, sys, time
mib, out = int(sys.argv[1]), sys.argv[2]
start = time.monotonic()
for _ in range(mib // 64):
    m = mmap.mmap(-1, 64 << 20)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    m[::4096] = b"x" * (16384)
    m.close()
open(out, "w").write(str(time.monotonic() - start))
"""


def run_mode(mode, workdir, mib, round_no):
    """Seconds the workload took under `mode`, and the bundle's manifest (None without capture)."""
    timing = workdir / ("time-%s-%d" % (mode, round_no))
    workload = [sys.executable, str(workdir / "workload.py"), str(mib), str(timing)]
    if mode == "none":
        subprocess.run(workload, check=True)
        return float(timing.read_text()), None
    bundle = workdir / ("bundle-%s-%d" % (mode, round_no))
    cmd = [sys.executable, "-m", "kmemscope.capture", "-o", str(bundle), "--preset", mode,
           "--max-size", "8G", "--"] + workload
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("record failed under %s: %s" % (mode, result.stderr.strip()))
    manifest = json.loads((bundle / "manifest.json").read_text())
    shutil.rmtree(bundle)
    return float(timing.read_text()), manifest


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mib", type=int, default=4096, help="memory touched per run (MiB)")
    p.add_argument("--keep", type=Path, help="work directory to keep (default: a temporary one)")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("capture_overhead: recording needs root")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="kmemscope-bench-", dir="/var/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "workload.py").write_text(WORKLOAD)
    times = {m: [] for m in MODES}
    manifests = {m: [] for m in MODES}
    with open(LOCK, "a") as lock:
        print("waiting for %s ..." % LOCK, file=sys.stderr)
        fcntl.flock(lock, fcntl.LOCK_EX)
        for r in range(args.rounds):
            for mode in MODES:
                seconds, manifest = run_mode(mode, workdir, args.mib, r)
                times[mode].append(seconds)
                if manifest:
                    manifests[mode].append(manifest)
                print("round %d %-8s %.3f s" % (r + 1, mode, seconds), file=sys.stderr)
    if not args.keep:
        shutil.rmtree(workdir)

    base = statistics.median(times["none"])
    print("workload: touch and unmap %d MiB of anonymous memory; %d rounds; median of each mode"
          % (args.mib, args.rounds))
    print("%-8s %10s %9s %14s %12s %12s %10s" % ("mode", "seconds", "slowdown", "events/s rec",
                                                 "events/s lost", "lost total", "MiB/s"))
    for mode in MODES:
        med = statistics.median(times[mode])
        ms = manifests[mode]
        if ms:
            rec = statistics.median(m["events_recorded"] / m["duration_s"] for m in ms)
            lost = statistics.median(m["lost_events"] / m["duration_s"] for m in ms)
            lost_total = sum(m["lost_events"] for m in ms)
            mibs = statistics.median(m["trace_dat_bytes"] / m["duration_s"] / (1 << 20) for m in ms)
            print("%-8s %10.3f %8.2fx %14.0f %12.0f %12d %10.1f" % (mode, med, med / base, rec, lost,
                                                                   lost_total, mibs))
        else:
            print("%-8s %10.3f %8.2fx %14s %12s %12s %10s" % (mode, med, 1.0, "-", "-", "-", "-"))
    print("events/s are over each whole capture (system-wide, so other activity counts too);"
          " MiB/s is compressed trace.dat")


if __name__ == "__main__":
    main()
