#!/usr/bin/env python3
"""What `kmemscope record` costs a workload: no capture vs the default and light presets.

A fixed amount of allocation-heavy work (map, touch and unmap anonymous memory:
page faults and frees, about a million page allocations and frees per round) is
timed by the workload itself, so record's own start and stop are not counted. The modes run
in interleaved rounds to spread the noise of a shared machine evenly; the
table shows the median time per mode, the slowdown against no capture, and the
events per second that the capture recorded and lost (from its manifest).

With --flight it measures what a flight recorder costs a host over time
instead: the same churn, paced to leave the CPU idle part of the time, runs for
--minutes under no capture, under `record --flight` (default preset, --keep
30s --after 5s, one SIGUSR1 bundle half way) and under a full `record` of the
same length. Each mode prints the work done (MiB/s, the workload's CPU per
GiB), the capture's own CPU (record, trace-cmd and the guard, from the
children's rusage), the machine's busy CPU (/proc/stat), memory (the ring
buffers from buffer_total_size_kb, the capture's peak RSS), disk at the end,
and the 1-minute load average before and after. The machine is shared: a mode
that starts with the load average above --max-load waits for it to fall, and
is measured again (up to --retries times) when the load before it was above.

With --soak it leaves one flight recorder running for --minutes (30) under a
periodic workload, the way a host would: paced churn all along and, every
--period (5 min), a 20 s unpaced burst (the buffers grow, up to --max-buffer,
and shrink a minute later) and the hugetlb squeeze of the tests (direct
compaction: real vmstat.compact_stall and PSI triggers). Every 10 s it notes the
recorder's CPU (its own and its reaped children's: trace-cmd start and extract),
its RSS, both ring buffers' total size from tracefs, the bundles and their disk,
and the 1-minute load average; it prints that timeline and a summary.

With --presets it measures what an idle flight recorder costs a page-fault-bound
workload, preset by preset, in one run: the same churn (--mib touched and
unmapped) under no tracing, under `record --flight --preset light`, `--preset
standard` and `--preset default` (no trigger: what a host pays all day), and under a plain
`trace-cmd record` of the same events (the preset's, resolved on this kernel,
filters included). The figure is the workload's own CPU per GiB touched (the
tracepoints run in its context), the median of --reps runs under one capture.
Each round measures no tracing, then a preset's flight recorder and its
trace-cmd record, then no tracing again (for light, standard, then default); each traced
mode is divided by the untraced runs around it, so the machine's slow drift
cancels, and the table gives the median of the rounds' ratios with a 95%
bootstrap interval, against no tracing and against trace-cmd record, with the
1-minute load average of the run; then, per preset, each event's count and share
of the events the first round's trace-cmd record recorded (`trace-cmd report -R`),
which shows the events that cost.

Needs root and tracefs; holds /var/tmp/kmemscope-trace.lock while recording.
Nothing is asserted: the script prints the table.

usage: benchmarks/capture_overhead.py [--rounds 3] [--mib 4096] [--keep DIR]
       benchmarks/capture_overhead.py --presets [--rounds 10] [--mib 1024] [--reps 5]
       benchmarks/capture_overhead.py --flight [--minutes 10] [--max-load 1.0]
       benchmarks/capture_overhead.py --soak [--minutes 30] [--period 300] [--json FILE]
"""
import argparse
import collections
import fcntl
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
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


# ---------------------------------------------------------------- --flight: cost over time

# Churn for SECONDS: 64 MiB maps touched and unmapped, PAUSE seconds between them;
# writes {mib, seconds, cpu_s} (its own CPU: the tracepoints run in its context).
PACED = r"""
import json, mmap, resource, sys, time
seconds, pause, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
start, mib = time.monotonic(), 0
while time.monotonic() - start < seconds:
    m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    m[::4096] = b"x" * 16384
    m.close()
    mib += 64
    time.sleep(pause)
ru = resource.getrusage(resource.RUSAGE_SELF)
json.dump({"mib": mib, "seconds": time.monotonic() - start, "cpu_s": ru.ru_utime + ru.ru_stime},
          open(out, "w"))
"""
FLIGHT_MODES = ("none", "flight", "record")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_busy_ticks():
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def ring_buffer_kb(root="/sys/kernel/tracing"):
    try:
        with open(root + "/buffer_total_size_kb") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError):
        return None


BEFORE_INSTANCE = "/sys/kernel/tracing/instances/kmemscope-flight"
AFTER_INSTANCE = "/sys/kernel/tracing/instances/kmemscope-flight-after"


def flight_buffers_kb():
    """(before-trigger, --after) instances' buffer_total_size_kb: what a flight recorder holds."""
    return ring_buffer_kb(BEFORE_INSTANCE) or 0, ring_buffer_kb(AFTER_INSTANCE) or 0


def rss_kb(pid):
    """VmRSS of pid and all its descendants, in KiB."""
    total = 0
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = [int(w) for w in f.read().split()]
    except (OSError, ValueError):
        return total
    return total + sum(rss_kb(kid) for kid in kids)


def tree_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_size
    return total


def wait_for_quiet(max_load, limit_s=600):
    """Wait (up to limit_s) for the 1-minute load average to fall to max_load."""
    deadline = time.monotonic() + limit_s
    while loadavg() > max_load and time.monotonic() < deadline:
        time.sleep(10)
    return loadavg()


def wait_until_said(capture, mode, needle):
    """Read a capture's stderr until a line holds `needle` (it records); exit if it ends first."""
    while True:
        line = capture.stderr.readline()
        if not line:
            sys.exit("%s failed to start: %s" % (mode, capture.stderr.read()))
        if needle in line:
            return


def run_timed_mode(mode, workdir, seconds, pause):
    """One mode for `seconds`: a dict of the figures."""
    out = workdir / ("paced-%s.json" % mode)
    target = workdir / ("out-%s" % mode)
    shutil.rmtree(target, ignore_errors=True)
    workload = [sys.executable, str(workdir / "paced.py"), str(seconds), str(pause), str(out)]
    capture, ring_kb, rss = None, [], [0]
    if mode == "flight":
        capture = subprocess.Popen([sys.executable, "-m", "kmemscope.capture", "--flight", "-o",
                                    str(target), "--keep", "30s", "--after", "5s", "--cooldown", "0"],
                                   stderr=subprocess.PIPE, text=True)
    elif mode == "record":
        capture = subprocess.Popen([sys.executable, "-m", "kmemscope.capture", "-o", str(target),
                                    "--duration", "%ds" % (seconds + 3600), "--max-size", "32G"],
                                   stderr=subprocess.PIPE, text=True)
    if capture is not None:
        wait_until_said(capture, mode, "recording ")
    before_ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = loadavg()
    busy0 = cpu_busy_ticks()
    work = subprocess.Popen(workload)
    t0 = time.monotonic()
    signalled = False
    while work.poll() is None:
        time.sleep(1)
        ring_kb.append(0 if capture is None else sum(flight_buffers_kb()) if mode == "flight"
                       else ring_buffer_kb())
        if capture is not None:
            rss.append(rss_kb(capture.pid))
        if mode == "flight" and not signalled and time.monotonic() - t0 > seconds / 2:
            capture.send_signal(signal.SIGUSR1)
            signalled = True
    busy1 = cpu_busy_ticks()
    load_after = loadavg()
    stderr = ""
    if capture is not None:
        capture.send_signal(signal.SIGINT)
        stderr = capture.stderr.read()
        if capture.wait() != 0:
            sys.exit("%s failed: %s" % (mode, stderr.strip()))
    after_ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    w = json.loads(out.read_text())
    # RUSAGE_CHILDREN covers the workload too: take its own CPU away.
    children_cpu = (after_ru.ru_utime + after_ru.ru_stime) - (before_ru.ru_utime + before_ru.ru_stime)
    disk = tree_bytes(target) if target.exists() else 0
    shutil.rmtree(target, ignore_errors=True)
    return {
        "mode": mode, "mib_per_s": w["mib"] / w["seconds"],
        "workload_cpu_s_per_gib": w["cpu_s"] / (w["mib"] / 1024.0),
        "capture_cpu_s": max(0.0, children_cpu - w["cpu_s"]) if capture is not None else 0.0,
        "machine_busy_pct": 100.0 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
        "ring_buffer_mib": max(ring_kb) / 1024.0 if ring_kb and capture is not None else 0.0,
        "capture_peak_rss_mib": max(rss) / 1024.0,
        "disk_mib": disk / float(1 << 20), "seconds": w["seconds"],
        "load_before": load_before, "load_after": load_after,
        "bundles": stderr.count("wrote ") if mode == "flight" else None,
    }


def flight_main(args):
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="kmemscope-bench-", dir="/var/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "paced.py").write_text(PACED)
    seconds = int(args.minutes * 60)
    rows, notes = [], []
    with open(LOCK, "a") as lock:
        print("waiting for %s ..." % LOCK, file=sys.stderr)
        fcntl.flock(lock, fcntl.LOCK_EX)
        for mode in args.modes.split(","):
            for attempt in range(args.retries + 1):
                wait_for_quiet(args.max_load)
                row = run_timed_mode(mode, workdir, seconds, args.pause)
                print("%-7s %.1f MiB/s, load %.2f before, %.2f after" % (
                    mode, row["mib_per_s"], row["load_before"], row["load_after"]), file=sys.stderr)
                if row["load_before"] <= args.max_load:
                    break
                again = attempt < args.retries
                notes.append("%s: load average %.2f before the run (above %.1f); %s"
                             % (mode, row["load_before"], args.max_load,
                                "measured again" if again else "kept (no retries left)"))
            rows.append(row)
    if not args.keep:
        shutil.rmtree(workdir)
    base = rows[0] if rows[0]["mode"] == "none" else None
    print("a host over %g min: paced page-fault churn (64 MiB maps, %g s apart) under each mode; "
          "load = 1-minute load average before -> after" % (args.minutes, args.pause))
    head = ("mode", "MiB/s", "vs none", "wl CPU s/GiB", "capture CPU s", "CPU % of run",
            "busy %", "ring MiB", "RSS MiB", "disk MiB", "bundles", "load")
    print("%-7s %8s %8s %13s %14s %12s %7s %9s %8s %9s %8s %13s" % head)
    for r in rows:
        print("%-7s %8.1f %7.1f%% %13.2f %14.1f %12.2f %7.1f %9.1f %8.1f %9.1f %8s %6.2f->%.2f" % (
            r["mode"], r["mib_per_s"],
            100.0 * (r["mib_per_s"] / base["mib_per_s"] - 1) if base else float("nan"),
            r["workload_cpu_s_per_gib"], r["capture_cpu_s"],
            100.0 * r["capture_cpu_s"] / r["seconds"], r["machine_busy_pct"], r["ring_buffer_mib"],
            r["capture_peak_rss_mib"], r["disk_mib"],
            "-" if r["bundles"] is None else r["bundles"], r["load_before"],
            r["load_after"]))
    print("capture CPU: record, trace-cmd and the guard (children's rusage); wl CPU: the "
          "workload's own, tracepoints included; ring: buffer_total_size_kb (all CPUs); RSS: "
          "the capture's processes, peak of the per-second sums")
    for note in notes:
        print("note: " + note)


# ---------------------------------------------------------------- --presets: an idle recorder's cost

# Touch MIB mebibytes in 64 MiB maps, then unmap; writes {mib, seconds, cpu_s} (its own CPU).
CHURN = r"""
import json, mmap, resource, sys, time
mib, out = int(sys.argv[1]), sys.argv[2]
start = time.monotonic()
for _ in range(mib // 64):
    m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    m[::4096] = b"x" * 16384
    m.close()
ru = resource.getrusage(resource.RUSAGE_SELF)
json.dump({"mib": mib, "seconds": time.monotonic() - start, "cpu_s": ru.ru_utime + ru.ru_stime},
          open(out, "w"))
"""
# The presets --presets measures, cheapest first.
BENCH_PRESETS = ("light", "standard", "default")
PRESET_MODES = ("none",) + tuple(mode for p in BENCH_PRESETS
                                  for mode in ("flight-" + p, "trace-cmd-" + p))


def trace_cmd_record_args(preset, output):
    """A plain `trace-cmd record` of a preset's events on this kernel (filters, host flags)."""
    from kmemscope.capture import presets, tracecmd, tracefs
    root = tracefs.find_tracefs()
    specs, _, stacktrace = presets.resolve(root, preset, [])
    flags = tracefs.trace_cmd_flags(tracefs.probe_restrictions(root))
    return tracecmd.build_args("trace-cmd", str(output), specs,
                               presets.PRESETS[preset]["buffer_kb"], flags, stacktrace)


def top_level_events_on():
    with open("/sys/kernel/tracing/events/enable") as f:
        return f.read().strip() != "0"


def _churn(workdir, mib, out):
    """One churn run: the workload's own CPU s per GiB touched, and its wall seconds."""
    subprocess.run([sys.executable, str(workdir / "churn.py"), str(mib), str(out)], check=True)
    w = json.loads(out.read_text())
    return w["cpu_s"] / (w["mib"] / 1024.0), w["seconds"]


def run_preset_mode(mode, workdir, mib, reps, round_no, count_events=False):
    """`reps` churn runs under `mode` (one capture started for all of them): the median CPU
    per GiB and wall time of the runs, the load average as they began and, for a trace-cmd
    record when count_events, the events it recorded by name."""
    target = workdir / ("out-%s-%s" % (mode, round_no))
    capture = None
    if mode.startswith("flight-"):
        capture = subprocess.Popen([sys.executable, "-m", "kmemscope.capture", "--flight", "-o",
                                    str(target), "--preset", mode.split("-", 1)[1], "--keep", "30s",
                                    "--after", "5s", "--measure", "1s"],
                                   stderr=subprocess.PIPE, text=True)
        wait_until_said(capture, mode, "flight recording ")
    elif mode.startswith("trace-cmd-"):
        from kmemscope.capture import state
        # trace-cmd leaves the top level changed (tracing_on 0 as it ends, here): put it back
        snap = state.snapshot("/sys/kernel/tracing")
        target.mkdir()
        capture = subprocess.Popen(trace_cmd_record_args(mode.split("-", 2)[2], target / "trace.dat"),
                                   cwd=target, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        deadline = time.monotonic() + 60
        while not top_level_events_on() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)    # its per-CPU readers started
    load = loadavg()
    runs = [_churn(workdir, mib, workdir / ("churn-%s-%s-%d.json" % (mode, round_no, i)))
            for i in range(reps)]
    if capture is not None:
        if mode.startswith("trace-cmd-"):
            os.killpg(capture.pid, signal.SIGINT)
            capture.communicate()
            for problem in state.restore(snap):
                print("could not put back %s" % problem, file=sys.stderr)
        else:
            capture.send_signal(signal.SIGINT)
            capture.communicate()
    events = None
    if count_events and mode.startswith("trace-cmd-") and (target / "trace.dat").exists():
        events = events_by_name(target / "trace.dat")
    shutil.rmtree(target, ignore_errors=True)
    return {"mode": mode, "cpu_s_per_gib": statistics.median(c for c, _ in runs),
            "seconds": statistics.median(w for _, w in runs), "load": load, "events": events}


def bootstrap_median_ci(values, level=0.95, resamples=10000, seed=1):
    """The median of `values` and a percentile-bootstrap interval of it."""
    import random
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[int((1 + level) / 2 * resamples) - 1]
    return statistics.median(values), lo, hi


# A round: for each preset, no tracing, the flight recorder, trace-cmd record, no tracing again.
# Each traced mode is compared with the mean of the two untraced measurements around it, taken
# within a minute of it: the machine's slow drift (a shared host's neighbours) cancels in the
# ratio, which the medians of separate modes did not manage (+-10% from round to round).
ROUND = (("none", None),) + tuple(step for p in BENCH_PRESETS for step in (
    ("flight-" + p, p), ("trace-cmd-" + p, p), ("none", None)))

# One event of `trace-cmd report -R`: "COMM-PID [CPU] (latency flags) TS: SYSTEM_EVENT: ..."
REPORT_EVENT = re.compile(r"\[\d+\]\s+(?:[^\s:]{4,6}\s+)?\d+\.\d+:\s+([\w-]+):")


def events_by_name(trace_dat):
    """{event name: events} of a trace.dat, counted from `trace-cmd report -R` (the independent
    decoder; raw fields, so no print format is evaluated)."""
    counts = collections.Counter()
    with subprocess.Popen(["trace-cmd", "report", "-R", "-i", str(trace_dat)],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            m = REPORT_EVENT.search(line)
            if m:
                counts[m.group(1)] += 1
    return counts


def event_shares(counts):
    """Lines '  EVENT  N  SHARE%' for `counts`, largest first."""
    total = sum(counts.values())
    if not total:
        return ["  (no event recorded)"]
    return ["  %-36s %12d %7.2f%%" % (name, n, 100.0 * n / total)
            for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def presets_main(args):
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="kmemscope-bench-", dir="/var/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "churn.py").write_text(CHURN)
    ratios = {m: [] for m in PRESET_MODES[1:]}          # mode -> per-round ratio to no tracing
    vs_plain = {p: [] for p in BENCH_PRESETS}           # preset -> flight / trace-cmd per round
    rows, events = [], {}                               # preset -> events by name (round 1)
    with open(LOCK, "a") as lock:
        print("waiting for %s ..." % LOCK, file=sys.stderr)
        fcntl.flock(lock, fcntl.LOCK_EX)
        for r in range(args.rounds):
            got = []
            for i, (mode, _) in enumerate(ROUND):
                row = run_preset_mode(mode, workdir, args.mib, args.reps, "%d-%d" % (r, i),
                                      count_events=r == 0)
                if row["events"] is not None:
                    events[mode.split("-", 2)[2]] = row["events"]
                rows.append(row)
                got.append(row)
                print("round %d %-18s %6.3f CPU s/GiB %6.2f s  load %.2f" % (
                    r + 1, mode, row["cpu_s_per_gib"], row["seconds"], row["load"]),
                    file=sys.stderr)
            for k in range(len(BENCH_PRESETS)):         # none, flight-P, trace-cmd-P, none
                block = got[3 * k:3 * k + 4]
                base = (block[0]["cpu_s_per_gib"] + block[3]["cpu_s_per_gib"]) / 2
                flight, plain = block[1], block[2]
                ratios[flight["mode"]].append(flight["cpu_s_per_gib"] / base)
                ratios[plain["mode"]].append(plain["cpu_s_per_gib"] / base)
                vs_plain[flight["mode"].split("-", 1)[1]].append(
                    flight["cpu_s_per_gib"] / plain["cpu_s_per_gib"])
    if not args.keep:
        shutil.rmtree(workdir)
    loads = [r["load"] for r in rows]
    print("the workload's own CPU per GiB touched (page faults and frees of 64 MiB maps, %d MiB "
          "a run, median of %d runs per capture), %d rounds; 1-minute load average %.2f-%.2f"
          % (args.mib, args.reps, args.rounds, min(loads), max(loads)))
    print("each traced mode against the untraced runs just before and after it, and the flight "
          "recorder against trace-cmd record of the same events in the same round: median of the "
          "rounds' ratios [95% bootstrap interval]")
    print("%-18s %12s %26s %26s" % ("mode", "CPU s/GiB", "vs none", "vs trace-cmd record"))

    def pct(values):
        if len(values) < 6:      # a bootstrap interval of fewer rounds says nothing
            med = statistics.median(values)
            return "%+.1f%% (n=%d: no interval)" % (100 * (med - 1), len(values))
        med, lo, hi = bootstrap_median_ci(values)
        return "%+.1f%% [%+.1f, %+.1f]" % (100 * (med - 1), 100 * (lo - 1), 100 * (hi - 1))

    for mode in PRESET_MODES:
        level = statistics.median(r["cpu_s_per_gib"] for r in rows if r["mode"] == mode)
        if mode == "none":
            print("%-18s %12.3f %26s %26s" % (mode, level, "-", "-"))
            continue
        plain = pct(vs_plain[mode.split("-", 1)[1]]) if mode.startswith("flight-") else "-"
        print("%-18s %12.3f %26s %26s" % (mode, level, pct(ratios[mode]), plain))
    print("flight: an idle `record --flight --preset P --keep 30s --after 5s`; trace-cmd: a plain "
          "`trace-cmd record` of P's events and filters")
    for preset in BENCH_PRESETS:
        counts = events.get(preset, {})
        print("events of trace-cmd record of %s in round 1 (%d reps of the churn), by name: "
              "recorded, share of the %d recorded" % (preset, args.reps, sum(counts.values())))
        for line in event_shares(counts):
            print(line)
    print("(an event that a preset's filter drops in the kernel is not counted above, though its "
          "tracepoint ran)")


# ---------------------------------------------------------------- --soak: one recorder, half an hour

def process_cpu_s(pid):
    """utime + stime of pid and of its reaped children, in seconds (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _soak(args, squeeze_source):
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="kmemscope-soak-", dir="/var/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "paced.py").write_text(PACED)
    (workdir / "squeeze.py").write_text(squeeze_source)
    seconds = int(args.minutes * 60)
    out = workdir / "flight"
    shutil.rmtree(out, ignore_errors=True)
    triggers = ["vmstat.compact_stall>10/s@2s", "psi.memory.some>2%@2s"]
    cmd = [sys.executable, "-m", "kmemscope.capture", "--flight", "-o", str(out), "--keep", "30s",
           "--after", "5s"] + [w for t in triggers for w in ("--trigger", t)]
    timeline, events = [], []
    with open(LOCK, "a") as lock:
        print("waiting for %s ..." % LOCK, file=sys.stderr)
        fcntl.flock(lock, fcntl.LOCK_EX)
        log = open(workdir / "flight.log", "w")
        capture = subprocess.Popen(cmd, stderr=subprocess.STDOUT, stdout=log)
        while "flight recording" not in (workdir / "flight.log").read_text():
            if capture.poll() is not None:
                sys.exit("the flight recorder failed: " + (workdir / "flight.log").read_text())
            time.sleep(0.5)
        paced = subprocess.Popen([sys.executable, str(workdir / "paced.py"), str(seconds),
                                  str(args.pause), str(workdir / "paced.json")])
        t0 = time.monotonic()
        busy0 = cpu_busy_ticks()
        cpu0 = process_cpu_s(capture.pid)
        helpers, next_note = [], 0.0
        done_phase = set()
        while time.monotonic() - t0 < seconds:
            now = time.monotonic() - t0
            phase, offset = int(now // args.period), now % args.period
            if offset >= args.period * 0.2 and (phase, "burst") not in done_phase:
                done_phase.add((phase, "burst"))
                events.append((round(now), "burst 20 s"))
                helpers.append(subprocess.Popen([sys.executable, str(workdir / "paced.py"), "20",
                                                 "0", str(workdir / "burst.json")]))
            if offset >= args.period * 0.5 and (phase, "squeeze") not in done_phase:
                done_phase.add((phase, "squeeze"))
                events.append((round(now), "squeeze"))
                helpers.append(subprocess.Popen([sys.executable, str(workdir / "squeeze.py"),
                                                 "2500", "1536"], stderr=subprocess.DEVNULL))
            if now >= next_note:
                next_note += 10
                top, after = flight_buffers_kb()
                text = (workdir / "flight.log").read_text()
                timeline.append({
                    "t_s": round(now), "load1": os.getloadavg()[0],
                    "cpu_s": round(process_cpu_s(capture.pid) - cpu0, 2),
                    "rss_mib": round(rss_kb(capture.pid) / 1024, 1),
                    "ring_top_mib": round(top / 1024, 1), "ring_after_mib": round(after / 1024, 1),
                    "bundles": text.count(" wrote "),
                    "disk_mib": round(tree_bytes(out) / float(1 << 20), 1)})
                print("soak %(t_s)5d s  load %(load1).2f  cpu %(cpu_s)6.1f s  rss %(rss_mib)5.1f MiB"
                      "  ring %(ring_top_mib)6.1f + %(ring_after_mib)5.1f MiB  bundles %(bundles)d"
                      "  disk %(disk_mib)6.1f MiB" % timeline[-1], file=sys.stderr)
            time.sleep(1)
        busy1 = cpu_busy_ticks()
        cpu_s = process_cpu_s(capture.pid) - cpu0
        for proc in [paced] + helpers:
            proc.wait()
        capture.send_signal(signal.SIGINT)
        capture.wait()
        log.close()
    text = (workdir / "flight.log").read_text()
    disk = tree_bytes(out)
    loads = [r["load1"] for r in timeline]
    rows = {"minutes": args.minutes, "period_s": args.period, "cpu_s": round(cpu_s, 1),
            "cpu_pct_of_one_cpu": round(100 * cpu_s / seconds, 2),
            "machine_busy_pct": round(100.0 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 1),
            "peak_rss_mib": max(r["rss_mib"] for r in timeline),
            "ring_top_mib": [min(r["ring_top_mib"] for r in timeline),
                             max(r["ring_top_mib"] for r in timeline)],
            "ring_after_mib_max": max(r["ring_after_mib"] for r in timeline),
            "ring_total_mib_max": max(r["ring_top_mib"] + r["ring_after_mib"] for r in timeline),
            "bundles": text.count(" wrote "), "disk_mib": round(disk / float(1 << 20), 1),
            "load1": [min(loads), round(sum(loads) / len(loads), 2), max(loads)],
            "workload_events": events, "timeline": timeline,
            "recorder_lines": [l for l in text.splitlines() if "wrote " in l or "trigger " in l
                               or "grow" in l or "holds" in l or "stopped" in l]}
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if not args.keep:
        shutil.rmtree(workdir)
    print("soak: record --flight (default preset, --keep 30s --after 5s, triggers %s) for %g min; "
          "paced churn, and every %d s a 20 s burst (at a fifth of the period) and a hugetlb squeeze (at half)"
          % (", ".join(triggers), args.minutes, args.period))
    print("recorder CPU %.1f s = %.2f%% of one CPU; machine busy %.1f%%; peak RSS %.1f MiB; ring "
          "buffer top %.1f-%.1f MiB, after instance up to %.1f MiB, both at most %.1f MiB; %d "
          "bundles, %.1f MiB on disk; load average min/mean/max %.2f/%.2f/%.2f"
          % (rows["cpu_s"], rows["cpu_pct_of_one_cpu"], rows["machine_busy_pct"],
             rows["peak_rss_mib"], rows["ring_top_mib"][0], rows["ring_top_mib"][1],
             rows["ring_after_mib_max"], rows["ring_total_mib_max"], rows["bundles"],
             rows["disk_mib"], *rows["load1"]))
    for line in rows["recorder_lines"]:
        print("  " + line)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mib", type=int, default=4096, help="memory touched per run (MiB)")
    p.add_argument("--reps", type=int, default=5,
                   help="--presets: churn runs per capture (their median is the capture's figure)")
    p.add_argument("--keep", type=Path, help="work directory to keep (default: a temporary one)")
    p.add_argument("--presets", action="store_true",
                   help="an idle flight recorder's light, standard and default presets against no "
                        "tracing and against trace-cmd record of the same events, and each "
                        "event's share of what trace-cmd recorded")
    p.add_argument("--flight", action="store_true",
                   help="measure a flight recorder over time against no capture and a full record")
    p.add_argument("--minutes", type=float, default=10.0, help="--flight: minutes per mode")
    p.add_argument("--pause", type=float, default=0.2,
                   help="--flight: seconds between the workload's 64 MiB maps")
    p.add_argument("--max-load", type=float, default=1.0,
                   help="--flight: wait for the load average to fall to this before each mode")
    p.add_argument("--modes", default=",".join(FLIGHT_MODES),
                   help="--flight: which of none,flight,record to run (none first: the baseline)")
    p.add_argument("--soak", action="store_true",
                   help="one flight recorder for --minutes under a periodic workload with triggers")
    p.add_argument("--period", type=float, default=300.0,
                   help="--soak: seconds between the bursts and squeezes")
    p.add_argument("--json", help="--soak: also write the figures and timeline to this file")
    p.add_argument("--retries", type=int, default=2,
                   help="--flight: measure a mode again this often when the load was above")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("capture_overhead: recording needs root")
    if args.soak:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from capture_helpers import SQUEEZE
        _soak(args, SQUEEZE)
        return
    if args.flight:
        flight_main(args)
        return
    if args.presets:
        presets_main(args)
        return
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
