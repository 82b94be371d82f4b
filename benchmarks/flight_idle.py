#!/usr/bin/env python3
"""What a flight recorder costs a host by itself: its own CPU, idle and under churn.

Starts `kmemscope record --flight --preset P` (no trigger fires), waits until it
records, then measures for --seconds the CPU of the recorder and its children
(the recorder's utime + stime, its reaped children's cutime + cstime: trace-cmd
start at a re-setup; and the guard process it leaves running), from
/proc/PID/stat, first with the machine otherwise idle, then with
benchmarks/workload_churn.py running beside it (the tracepoints' own cost runs in
the churn's context and is not counted here: this is what the recorder's process
tree pays for its checks, heartbeats, /proc sampling and buffer sizing). Prints
one line per preset and phase with the 1-minute load average before and after.

Needs root and tracefs; takes the recorder's lock like any `record` (it waits
for another recording to end).

usage: benchmarks/flight_idle.py [--presets light,standard] [--seconds 600] [--churn-seconds 120]
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
TICKS = os.sysconf("SC_CLK_TCK")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def stat_ticks(pid, children=True):
    """utime + stime (+ cutime + cstime) of pid, in clock ticks; None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # after the comm: state is fields[0]; utime is stat field 14, i.e. fields[11]
    own = int(fields[11]) + int(fields[12])
    return own + (int(fields[13]) + int(fields[14]) if children else 0)


def live_children(pid):
    """Pids of pid's children now (the guard, a running trace-cmd)."""
    out = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                out += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return out


def tree_ticks(pid):
    """The recorder's CPU with its reaped children's, plus its live children's own."""
    total = stat_ticks(pid)
    for child in live_children(pid):
        total += stat_ticks(child) or 0
    return total


def wait_recording(proc, log_path, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit("the recorder ended (rc %s):\n%s" % (proc.returncode, open(log_path).read()))
        with open(log_path) as f:
            if "flight recording" in f.read():
                return
        time.sleep(0.2)
    sys.exit("the recorder did not start within %d s" % timeout)


def measure(pid, seconds):
    load0, t0, c0 = loadavg(), time.monotonic(), tree_ticks(pid)
    time.sleep(seconds)
    c1, t1, load1 = tree_ticks(pid), time.monotonic(), loadavg()
    cpu_s = (c1 - c0) / TICKS
    return cpu_s, t1 - t0, load0, load1


def run_preset(kmemscope, preset, seconds, churn_seconds):
    out = tempfile.mkdtemp(prefix="kmemscope-flight-idle-", dir="/var/tmp")
    log_path = os.path.join(out, "recorder.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([kmemscope, "record", "--flight", "-o", os.path.join(out, "f"),
                                 "--preset", preset, "--keep", "30s", "--after", "5s"],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_recording(proc, log_path)
        time.sleep(3)   # past the rate measurement and the first buffer steps
        for phase, length in (("idle", seconds), ("churn", churn_seconds)):
            if length <= 0:
                continue
            churn = None
            if phase == "churn":
                churn = subprocess.Popen([sys.executable, os.path.join(HERE, "workload_churn.py"),
                                          str(length + 5)])
                time.sleep(2)
            cpu_s, wall, load0, load1 = measure(proc.pid, length)
            if churn is not None:
                churn.wait()
            print("preset %-9s %-5s %6.0f s: recorder CPU %6.2f s = %.3f%% of a CPU "
                  "(load %.2f -> %.2f)" % (preset, phase, wall, cpu_s, 100 * cpu_s / wall,
                                           load0, load1), flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="light,standard")
    ap.add_argument("--seconds", type=float, default=600.0, help="idle phase per preset")
    ap.add_argument("--churn-seconds", type=float, default=120.0,
                    help="phase with workload_churn.py beside it (0: none)")
    ap.add_argument("--kmemscope", default=shutil.which("kmemscope") or
                    os.path.join(os.path.dirname(sys.executable), "kmemscope"))
    args = ap.parse_args()
    for preset in args.presets.split(","):
        run_preset(args.kmemscope, preset, args.seconds, args.churn_seconds)


if __name__ == "__main__":
    main()
