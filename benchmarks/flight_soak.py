#!/usr/bin/env python3
"""A flight recorder left on: triggers, churn and another tracer, and what it holds over time.

Starts `kmemscope record --flight --preset P -o DIR` and, for --minutes, sends it
SIGUSR1 every --trigger-every seconds (a bundle each: --cooldown and --max-per-hour
are set so that none is suppressed), runs a memory-churning child beside it (maps,
touches and unmaps --churn-mib MiB, then pauses --churn-pause s; pinned to the last
CPU), and every --tracer-every seconds another tracer comes and goes: `trace-cmd
start` of an instance of its own with sched:sched_switch, then `trace-cmd reset -B
... -d` half that time later. Every --sample-every seconds it reads the recorder's
RSS (VmRSS) and open files (/proc/PID/fd), the recorder's tracefs instances, the
bundles and the disk of DIR (allocated blocks), and the CPU of the recorder's
process tree (utime + stime of the recorder, its reaped children and its live
children, from /proc/PID/stat), with the 1-minute load average. At the end it
prints each one's least-squares slope per hour and its value extrapolated to a
day and a week, and the recorder's warnings.

Needs root, tracefs and trace-cmd; takes the record lock like any `record`.
Leaves nothing behind: the recorder is stopped (it restores tracefs), the other
tracer's instance removed, DIR deleted unless --keep-output.

usage: benchmarks/flight_soak.py [--minutes 60] [--preset standard] [--max-disk 256M]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from flight_idle import TICKS, loadavg, tree_ticks, wait_recording  # noqa: E402

TRACEFS = "/sys/kernel/tracing"
RECORDER_INSTANCES = ("kmemscope-flight", "kmemscope-flight-after")
OTHER = "kmemscope-soak-other"      # the other tracer's instance

CHURN = r"""
import mmap, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
size, pause = int(sys.argv[2]) << 20, float(sys.argv[3])
while True:
    m = mmap.mmap(-1, size)
    m[::4096] = b"x" * (size // 4096)
    m.close()
    time.sleep(pause)
"""


def parse_size(text):
    """Bytes of a size such as 256M (what record's --max-disk takes)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().rstrip("B").rstrip("I")
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_files(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def recorder_instances():
    return sum(os.path.isdir(os.path.join(TRACEFS, "instances", n)) for n in RECORDER_INSTANCES)


def disk_bytes(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def bundle_count(path):
    try:
        return sum(1 for n in os.listdir(path) if not n.startswith(".") and
                   os.path.isfile(os.path.join(path, n, "manifest.json")))
    except OSError:
        return 0


def slope_per_hour(points):
    """Least-squares slope of [(seconds, value)] per hour (0 with fewer than two points)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in points) / var * 3600


def other_tracer(action):
    """trace-cmd start/reset of OTHER: what a colleague's tool does beside the recorder."""
    if action == "start":
        # (-d --no-filter: this kind of host refuses the writes trace-cmd makes without them)
        args = ["trace-cmd", "start", "-d", "--no-filter", "-B", OTHER, "-e", "sched:sched_switch"]
    else:
        args = ["trace-cmd", "reset", "-B", OTHER, "-d"]
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def remove_other():
    path = os.path.join(TRACEFS, "instances", OTHER)
    if os.path.isdir(path):
        other_tracer("reset")
    if os.path.isdir(path):
        for rel in ("tracing_on", "events/enable"):
            try:
                with open(os.path.join(path, rel), "w") as f:
                    f.write("0")
            except OSError:
                pass
        os.rmdir(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--preset", default="standard")
    ap.add_argument("--keep", default="30s")
    ap.add_argument("--after", default="5s")
    ap.add_argument("--max-disk", default="256M")
    ap.add_argument("--max-bundles", default="10")
    ap.add_argument("--trigger-every", type=float, default=60.0)
    ap.add_argument("--tracer-every", type=float, default=120.0)
    ap.add_argument("--sample-every", type=float, default=30.0)
    ap.add_argument("--churn-mib", type=int, default=64)
    ap.add_argument("--churn-pause", type=float, default=0.5)
    ap.add_argument("--keep-output", action="store_true")
    ap.add_argument("--kmemscope", default=shutil.which("kmemscope") or
                    os.path.join(os.path.dirname(sys.executable), "kmemscope"))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="kmemscope-flight-soak-", dir="/var/tmp")
    out, log_path = os.path.join(work, "flight"), os.path.join(work, "recorder.log")
    churn_py = os.path.join(work, "churn.py")
    with open(churn_py, "w") as f:
        f.write(CHURN)
    cmd = [args.kmemscope, "record", "--flight", "-o", out, "--preset", args.preset,
           "--keep", args.keep, "--after", args.after, "--max-disk", args.max_disk,
           "--max-bundles", args.max_bundles, "--cooldown", "%gs" % (args.trigger_every / 2),
           "--max-per-hour", str(int(3600 / args.trigger_every) + 2)]
    print("# " + " ".join(cmd[1:]), flush=True)
    print("# SIGUSR1 every %g s; churn %d MiB every %g s on CPU %d; another tracer's "
          "trace-cmd start/reset every %g s; %g minutes"
          % (args.trigger_every, args.churn_mib, args.churn_pause, (os.cpu_count() or 1) - 1,
             args.tracer_every, args.minutes), flush=True)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    churn = None
    rows = []
    try:
        wait_recording(proc, log_path)
        churn = subprocess.Popen([sys.executable, churn_py, str((os.cpu_count() or 1) - 1),
                                  str(args.churn_mib), str(args.churn_pause)])
        start = time.monotonic()
        end = start + args.minutes * 60
        next_trigger = start + args.trigger_every
        next_tracer, tracer_on = start + args.tracer_every / 2, False
        next_sample = start
        c0 = tree_ticks(proc.pid)
        print("%7s %8s %6s %9s %7s %9s %10s %6s" % ("min", "RSS MB", "files", "instances",
                                                     "bundles", "disk MB", "CPU s", "load"),
              flush=True)
        tracer_runs = 0
        while True:
            if proc.poll() is not None:
                sys.exit("the recorder ended (rc %s):\n%s" % (proc.returncode, open(log_path).read()))
            now = time.monotonic()
            if now >= next_sample or now >= end:
                cpu_s = (tree_ticks(proc.pid) - c0) / TICKS
                row = (now - start, rss_kb(proc.pid) / 1024, open_files(proc.pid),
                       recorder_instances(), bundle_count(out), disk_bytes(out) / 1e6, cpu_s,
                       loadavg())
                rows.append(row)
                print("%7.1f %8.1f %6d %9d %7d %9.1f %10.2f %6.2f" % ((row[0] / 60,) + row[1:]),
                      flush=True)
                next_sample += args.sample_every
                if now >= end:
                    break
            if now >= next_trigger:
                proc.send_signal(signal.SIGUSR1)
                next_trigger += args.trigger_every
            if now >= next_tracer:
                other_tracer("reset" if tracer_on else "start")
                tracer_runs += not tracer_on
                tracer_on = not tracer_on
                next_tracer += args.tracer_every / 2
            time.sleep(max(0.05, min(next_sample, next_trigger, next_tracer, end)
                           - time.monotonic()))
    finally:
        if churn is not None:
            churn.kill()
            churn.wait()
        remove_other()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        text = open(log_path).read()
        left = recorder_instances()
        if not args.keep_output:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("# kept %s" % work)

    names = ("RSS MB", "open files", "instances", "bundles", "disk MB", "CPU s")
    # bundles and disk stop growing at the recorder's caps: their extrapolations are held there
    last = rows[-1]
    caps = {"bundles": float(args.max_bundles), "disk MB": parse_size(args.max_disk) / 1e6}
    if last[4]:    # --max-bundles holds the disk to that many bundles of the size seen
        caps["disk MB"] = min(caps["disk MB"], last[5] / last[4] * float(args.max_bundles))
    hours = last[0] / 3600
    half = [r for r in rows if r[0] >= last[0] / 2]
    print("\nover %.1f minutes, %d readings (load average %.2f-%.2f); the other tracer started "
          "and reset %d times; slopes by least squares over all readings and over the second "
          "half (after the first bundles and buffer sizing)"
          % (last[0] / 60, len(rows), min(r[7] for r in rows), max(r[7] for r in rows),
             tracer_runs))
    print("%-11s %9s %9s %11s %11s %11s %11s" % ("", "first", "last", "slope/h", "2nd half/h",
                                                 "in a day", "in a week"))
    for i, name in enumerate(names, start=1):
        slope = slope_per_hour([(r[0], r[i]) for r in rows])
        late = slope_per_hour([(r[0], r[i]) for r in half])
        cap = caps.get(name, float("inf"))
        print("%-11s %9.2f %9.2f %11.3f %11.3f %11.2f %11.2f%s"
              % (name, rows[0][i], last[i], slope, late, min(cap, last[i] + late * (24 - hours)),
                 min(cap, last[i] + late * (168 - hours)),
                 " (held at its cap %.4g)" % cap if name in caps else ""))
    cpu_share = 100 * last[6] / last[0] if last[0] else 0.0
    print("recorder CPU: %.2f s in %.1f minutes = %.3f%% of a CPU (%.1f s an hour)"
          % (last[6], last[0] / 60, cpu_share, cpu_share * 36))
    wrote = text.count(": wrote /")
    print("bundles written %d, triggers ignored %d, warnings %d, instances left after the "
          "stop %d" % (wrote, text.count(" ignored: "), text.count("warning:"), left))
    for line in text.splitlines():
        if "warning:" in line:
            print("  " + line[:200])


if __name__ == "__main__":
    main()
