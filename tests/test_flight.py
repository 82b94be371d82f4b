"""`kmemscope record --flight` on this machine's kernel.

Each test holds the machine-wide tracing lock and compares the tracing settings
that a flight recorder changes, before and after, with capture_helpers' reader,
which shares no code with capture/. Event times come from `trace-cmd report` (the independent decoder),
trigger times from this process's CLOCK_MONOTONIC, counter rates from
/proc/vmstat read here and from the bundle's samples parsed here.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import requirements
from capture_helpers import (SQUEEZE, TRACEFS, Flight, busy_cpu, children, manifest,
                             run_record, sample_headers, stop_all_flights, trace_cmd_processes_under,
                             trace_cmd_report, tracing_state, vmstat_now, vmstat_samples, wait_for)

pytestmark = pytest.mark.usefixtures("live_tracefs", "tracing_lock")

STATE_FILE = Path("/run/kmemscope/record-state.json")
# The tracefs instances a flight recorder keeps its window in, before and after the trigger
# (written out here, not imported).
BEFORE = TRACEFS / "instances" / "kmemscope-flight"
AFTER = TRACEFS / "instances" / "kmemscope-flight-after"
# What a flight recorder changes in tracefs: the tests compare these, not the whole of tracefs.
RECORDER_SETTINGS = ("tracing_on", "trace_clock", "buffer_size_kb", "per_cpu_buffer_kb",
                     "events/enable", "enabled", "filters")
# Few events, quick to start and to extract: the exit-path tests need no volume.
QUICK = ("-e", "compaction", "--keep", "2s", "--after", "1s", "--measure", "1s")


def recorder_settings():
    """The settings a flight recorder changes, read straight from tracefs, and its instance."""
    state = tracing_state()
    out = {name: state[name] for name in RECORDER_SETTINGS}
    out["options/overwrite"] = state["options"].get("overwrite")
    out["instances exist"] = (BEFORE.exists(), AFTER.exists())
    return out


@pytest.fixture
def before():
    """The recorder's settings before the test; the test must leave them the same (a recorder
    that a failed assertion left running is stopped first)."""
    state = recorder_settings()
    yield state
    stop_all_flights()
    assert recorder_settings() == state


@pytest.fixture
def nr_hugepages():
    """vm.nr_hugepages as it was, put back whatever the test does."""
    path = Path("/proc/sys/vm/nr_hugepages")
    old = path.read_text().strip()
    yield old
    if path.read_text().strip() != old:
        path.write_text(old)


def bundles(directory):
    return sorted(p for p in Path(directory).iterdir() if p.is_dir() and not p.name.startswith("."))


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


# PINNED_WORKLOAD with the size of each round (argv: seconds, cpu, pause in s, MiB per round):
# every round faults in and frees that many MiB of pages, so many mm_page_free events.
SIZED_WORKLOAD = r"""
import ctypes, mmap, os, sys, time
ctypes.CDLL(None).prctl(15, b"kms-workload", 0, 0, 0)  # PR_SET_NAME
os.sched_setaffinity(0, {int(sys.argv[2])})
end, pause, size = time.monotonic() + float(sys.argv[1]), float(sys.argv[3]), int(sys.argv[4]) << 20
while time.monotonic() < end:
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    m[::4096] = b"x" * (size // 4096)
    m.close()
    time.sleep(pause)
"""


def before_stats(cpu):
    """The recorder's before-trigger buffer's per_cpu stats on `cpu`, from tracefs ({} if none)."""
    try:
        text = (BEFORE / "per_cpu" / ("cpu%d" % cpu) / "stats").read_text()
    except OSError:
        return {}
    return {k: float(v) for k, v in re.findall(r"^([a-z ]+):\s+([\d.]+)$", text, re.M)}


def cpu_overrun(cpu):
    """The before-trigger buffer's overrun count on `cpu`, from tracefs."""
    return int(before_stats(cpu).get("overrun", 0))


def holds(cpu, seconds, wrapped=True):
    """True once the before-trigger buffer on `cpu` holds `seconds` of events (the kernel's oldest
    event and now, from per_cpu stats) and, if `wrapped`, has overwritten some: a trigger then
    gets its whole window."""
    values = before_stats(cpu)
    if (wrapped and not values.get("overrun")) or "oldest event ts" not in values:
        return False
    return values["now ts"] - values["oldest event ts"] >= seconds


# The recorder sizes the buffer for --keep times ringsize.MARGIN (1.15) at the rate it
# measured: at a steady rate a 4 s keep holds about 4.6 s, so a test waits for a little more
# than --keep (waiting for a whole second more timed out whenever the rate held steady).
HELD_BEYOND_KEEP_S = 0.25


def wait_for_wrap(cpu, seconds, limit_s=900, stalled_s=60):
    """Wait until holds(cpu, seconds), for as long as the buffer keeps filling: a loaded machine
    slows the workload and so the wait, rather than failing it at a fixed timeout. False once
    the buffer's count of written events has not grown for stalled_s, or past limit_s."""
    start = last_move = time.monotonic()
    written = lambda v: v.get("entries", 0) + v.get("overrun", 0)
    last = written(before_stats(cpu))
    while time.monotonic() - start < limit_s:
        if holds(cpu, seconds):
            return True
        time.sleep(0.5)
        now = written(before_stats(cpu))
        if now > last:
            last, last_move = now, time.monotonic()
        elif time.monotonic() - last_move > stalled_s:
            return False
    return False


def memory_short_now():
    """True when /proc says memory is short: PSI some avg10 over 1% or MemAvailable under 10%."""
    avg10 = float(re.search(r"^some avg10=([\d.]+)", Path("/proc/pressure/memory").read_text(),
                            re.M).group(1))
    info = dict(re.findall(r"^(\w+):\s+(\d+)", Path("/proc/meminfo").read_text(), re.M))
    return avg10 > 1.0 or int(info["MemAvailable"]) < 0.1 * int(info["MemTotal"])


def buffer_sizes_kb():
    """([before-trigger KiB per CPU], [--after instance KiB per CPU]) as the kernel reports them."""
    def sizes(root):
        out = []
        for path in sorted(root.glob("per_cpu/cpu[0-9]*/buffer_size_kb")):
            try:
                out.append(int(path.read_text().split()[0]))
            except (OSError, ValueError):
                pass
        return out
    return sizes(BEFORE) if BEFORE.exists() else [], sizes(AFTER) if AFTER.exists() else []


def report_events(trace_dat, with_names=False):
    """[(buffer name or '', cpu, ts ns)] of every event `trace-cmd report` prints (and its
    event name, with_names)."""
    out = []
    # -t: nanoseconds, as the window's bounds (plain report rounds to microseconds)
    proc = subprocess.Popen(["trace-cmd", "report", "-t", "-i", str(trace_dat)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        m = re.search(r"\[(\d+)\]\s+(\d+)\.(\d+):\s+(\w+):", line)
        if m:
            # lines of an instance's events start with its name (the top level's do not)
            named = re.match(r"\s*(%s|%s):" % (BEFORE.name, AFTER.name), line)
            row = (named.group(1) if named else "", int(m.group(1)),
                   int(m.group(2)) * 10**9 + int(m.group(3).ljust(9, "0")))
            out.append(row + (m.group(4),) if with_names else row)
    assert proc.wait() == 0
    return out


def report_cpu_times(trace_dat, cpu):
    return [ts for _, c, ts in report_events(trace_dat) if c == cpu]


def report_times_by_buffer(trace_dat):
    """(before-trigger instance's event times, --after instance's event times)."""
    events = report_events(trace_dat)
    return ([ts for b, _, ts in events if b == BEFORE.name],
            [ts for b, _, ts in events if b == AFTER.name])


def empty_seconds(times, start_ns, end_ns):
    """Whole seconds of [start_ns, end_ns) in which `times` has no event."""
    seen = {int((t - start_ns) // 1e9) for t in times if start_ns <= t < end_ns}
    return [i for i in range(int((end_ns - start_ns) // 1e9)) if i not in seen]


def report_stat_by_buffer(trace_dat):
    """{buffer ('' for the top level): {cpu: {counter: value}}} of `trace-cmd report --stat`."""
    found, buffer, cpu = {}, "", None
    for line in trace_cmd_report(trace_dat, "--stat"):
        if line.startswith("Buffer: "):
            buffer, cpu = line[len("Buffer: "):].strip(), None
        elif line.startswith("CPU: ") and line[5:].strip().isdigit():
            cpu = int(line[5:])
            found.setdefault(buffer, {})[cpu] = {}
        elif cpu is not None and ":" in line and line.split(":")[1].strip().isdigit():
            key, value = line.split(":", 1)
            found[buffer][cpu][key.strip()] = int(value)
        elif not line.strip():
            cpu = None
    return found


def before_buffer_overruns(trace_dat):
    return {cpu: c["overrun"] for cpu, c in report_stat_by_buffer(trace_dat)[BEFORE.name].items()}


def bundle_now(flight):
    """SIGUSR1, wait for the bundle, SIGINT: (exit status, all the recorder printed)."""
    flight.signal(signal.SIGUSR1)
    assert flight.wait_for("wrote ", 60), flight.text()
    flight.signal(signal.SIGINT)
    return flight.finish()


def last_error_line(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert "Traceback" not in stderr, stderr
    return lines[-1]


# ---------------------------------------------------------------- the window around a trigger

def test_sigusr1_bundle_holds_keep_before_and_after_the_trigger(tmp_path, before):
    keep, after, cpu = 4.0, 2.0, 1 if os.cpu_count() > 1 else 0
    work = busy_cpu(tmp_path, cpu)
    try:
        flight = Flight("-o", tmp_path / "flight", "-e", "kmem:mm_page_free", "--keep", "4s",
                        "--after", "2s", "--measure", "2s", "--interval", "0.5s")
        # Until the busy CPU's buffer has wrapped and holds --keep (and some): then the bundle
        # must show all of it.
        assert wait_for_wrap(cpu, keep + HELD_BEYOND_KEEP_S), "the buffer never wrapped: " + str(before_stats(cpu))
        t0 = mono_ns()
        flight.signal(signal.SIGUSR1)
        assert flight.wait_for("trigger manual", 30), flight.text()
        t1 = mono_ns()
        assert flight.wait_for("wrote ", 60), flight.text()
        flight.signal(signal.SIGINT)
        rc, stderr = flight.finish()
    finally:
        work.kill()
        work.wait()
    assert rc == 0, stderr
    assert "stopped (signal SIGINT): 1 bundle(s)" in stderr
    (bundle,) = bundles(tmp_path / "flight")
    assert bundle.name.endswith("-manual") and (tmp_path / "flight" / "flight.json").exists()
    m = manifest(bundle)
    w = m["window"]
    trigger_ns = m["trigger"]["time"]["mono_ns"]
    assert t0 <= trigger_ns <= t1   # stamped between the signal and the recorder saying so
    assert m["trigger"]["reason"] == "manual" and m["labels"]["trigger"] == "manual"
    assert w["complete"] is True, w
    assert m["lost"]["overwritten_in_window_estimated"] == 0

    # The busy CPU's events, read by trace-cmd: the workload frees pages every few ms, so every
    # second of [trigger - keep, trigger + after] has some; none after the recorder stopped.
    times = report_cpu_times(bundle / "trace.dat", cpu)
    assert empty_seconds(times, trigger_ns - keep * 1e9, trigger_ns + after * 1e9) == []
    assert max(times) <= w["end_mono_ns"]
    # The first instance holds what came before the freeze, the --after one what followed it.
    top, inst = report_times_by_buffer(bundle / "trace.dat")
    assert max(top) <= w["frozen_mono_ns"] <= w["after_started_mono_ns"] <= min(inst)
    # The ring buffer really wrapped: trace-cmd's own counters say the busy CPU overran, and the
    # manifest counts those events as overwritten before the window.
    overruns = before_buffer_overruns(bundle / "trace.dat")
    assert overruns[cpu] > 0
    per_cpu = {r["cpu"]: r for r in m["lost"]["per_cpu"]}
    assert per_cpu[cpu]["overrun"] == overruns[cpu] == per_cpu[cpu]["overwritten_before_window"]
    assert m["lost_events"] == 0

    # procfs samples of the window only: the one before its start, then the window's.
    heads = sample_headers(bundle / "procfs" / "vmstat")
    assert heads == sorted(heads) and len(heads) == m["samples"]
    assert heads[0] <= w["start_mono_ns"] < heads[1] and heads[-1] <= w["end_mono_ns"]
    assert any(h > trigger_ns for h in heads)
    for name in ("pagetypeinfo", "buddyinfo"):
        assert sample_headers(bundle / "procfs" / name)
    assert oct(bundle.stat().st_mode & 0o777) == "0o700"


def test_a_burst_after_the_trigger_does_not_cost_the_window_before_it(tmp_path, before):
    """A steady load, then right after the trigger a burst far larger than the whole top buffer
    (the kernel's own counts say so): the seconds before the trigger are all still there."""
    keep, after, cpu = 4.0, 3.0, 1 if os.cpu_count() > 1 else 0
    load = tmp_path / "load.py"
    load.write_text(SIZED_WORKLOAD)
    # runs until killed below: how long the recorder takes to start and wrap depends on the load
    steady = subprocess.Popen([sys.executable, str(load), "600", str(cpu), "0.05", "1"])
    burst = None
    try:
        flight = Flight("-o", tmp_path / "flight", "-e", "kmem:mm_page_free", "--keep", "4s",
                        "--after", "3s", "--measure", "2s", "--interval", "0.5s",
                        "--max-buffer", "4300K")
        assert wait_for_wrap(cpu, keep + HELD_BEYOND_KEEP_S), "the buffer never wrapped: " + str(before_stats(cpu))
        flight.signal(signal.SIGUSR1)
        assert flight.wait_for("trigger manual", 30), flight.text()
        burst = subprocess.Popen([sys.executable, str(load), str(after + 2), str(cpu), "0", "32"])
        assert flight.wait_for("wrote ", 60), flight.text()
        flight.signal(signal.SIGINT)
        rc, stderr = flight.finish()
    finally:
        for proc in (steady, burst):
            if proc is not None:
                proc.kill()
                proc.wait()
    assert rc == 0, stderr
    (bundle,) = bundles(tmp_path / "flight")
    m = manifest(bundle)
    w, trigger_ns = m["window"], m["trigger"]["time"]["mono_ns"]
    stat = report_stat_by_buffer(bundle / "trace.dat")
    after_cpu = stat["kmemscope-flight-after"][cpu]
    burst_events = after_cpu["read events"] + after_cpu["dropped events"]
    # An event takes at least 12 bytes in the ring buffer: the burst alone would have overwritten
    # the whole first buffer (buffer_kb per CPU, about 1 MiB), had it gone there. (A machine so
    # loaded that the burst's pinned CPU did not make that many cannot test it.)
    if burst_events * 12 <= m["buffer_kb"] * 1024:
        requirements.skip("quiet", "not tested: the burst made only %d events on a loaded "
                          "machine, too few to overwrite the %d KiB buffer"
                          % (burst_events, m["buffer_kb"]))
    # The busy CPU's buffer (where the burst ran) still held all of --keep before the trigger
    # (the other CPU's coverage depends on other people's load on this machine, not on the burst).
    per_cpu = {r["cpu"]: r for r in m["lost"]["per_cpu"]}
    assert per_cpu[cpu]["covered_from_mono_ns"] <= w["start_mono_ns"], (per_cpu[cpu], w)
    assert per_cpu[cpu]["overwritten_in_window_estimated"] == 0
    times = report_cpu_times(bundle / "trace.dat", cpu)
    assert empty_seconds(times, trigger_ns - keep * 1e9, trigger_ns) == []
    # The instance filled and dropped the rest, and the manifest counts that as lost in the window.
    assert after_cpu["dropped events"] == m["lost"]["dropped_after_trigger"] - sum(
        c["dropped events"] for n, c in stat["kmemscope-flight-after"].items() if n != cpu)
    assert m["lost_events"] >= m["lost"]["dropped_after_trigger"] > 0
    assert w["after_complete"] is False and w["complete"] is False
    # The --after buffer was its whole share of --max-buffer, whatever the rate before (the
    # kernel's size, from trace-cmd's copy of the buffer, is what the manifest says).
    per_cpu_kb = 4300 // len(per_cpu)
    assert w["after_buffer_kb"] >= per_cpu_kb * after / (keep + after) - 16
    # It says how much of --after it kept: to about the last event the full buffer took on the
    # busy CPU (trace-cmd's decoding), noted at the recorder's next look (every 0.1 s).
    last_after = max(ts for b, c, ts in report_events(bundle / "trace.dat") if b == AFTER.name
                     and c == cpu)
    assert (last_after - trigger_ns) / 1e9 <= w["after_kept_s"] + 0.01
    assert w["after_kept_s"] <= (last_after - trigger_ns) / 1e9 + 1.0
    assert w["after_kept_s"] < after


def test_the_ring_buffers_never_exceed_max_buffer_under_a_burst(tmp_path, before):
    """The kernel's own buffer sizes, read here every 0.1 s through a burst: top and --after
    instance together stay under --max-buffer, though the rate asks for far more."""
    cpu = 1 if os.cpu_count() > 1 else 0
    ncpu = len(list(TRACEFS.glob("per_cpu/cpu[0-9]*")))
    max_kb = 64 << 10
    load = tmp_path / "load.py"
    load.write_text(SIZED_WORKLOAD)
    flight = Flight("-o", tmp_path / "flight", "-e", "kmem:mm_page_free", "--keep", "20s",
                    "--after", "2s", "--measure", "1s", "--max-buffer", "64M")
    sizes, short = [], []
    burst = subprocess.Popen([sys.executable, str(load), "12", str(cpu), "0", "32"])
    try:
        while burst.poll() is None:
            sizes.append(buffer_sizes_kb())
            short.append(memory_short_now())
            time.sleep(0.1)
        flight.signal(signal.SIGUSR1)
        assert flight.wait_for("wrote ", 60), flight.text()
        sizes.append(buffer_sizes_kb())
        flight.signal(signal.SIGINT)
        rc, stderr = flight.finish()
    finally:
        burst.kill()
        burst.wait()
    assert rc == 0, stderr
    totals = [sum(top) + sum(inst) for top, inst in sizes]
    assert max(totals) <= max_kb, max(totals)
    tops = [max(top) for top, _ in sizes]
    if "not growing the ring buffer" in stderr:
        # Memory was short meanwhile (other people's work on this machine): then it must not
        # have grown, and /proc, read here, must agree that memory was short.
        assert any(short), stderr
        assert max(tops) == tops[0], tops
        return
    assert max(tops) > tops[0]               # it grew with the burst ...
    assert max(tops) * ncpu > max_kb / 2     # ... up to the ceiling's share, not beyond
    # It says how long the capped buffer holds, and the manifest's figure is the grown buffer's.
    assert "holds about" in stderr and "less than the 20 s of --keep" in stderr
    (bundle,) = bundles(tmp_path / "flight")
    rate = manifest(bundle)["flight"]["rate"]
    assert rate["buffer_kb"] == sizes[-1][0][cpu]   # the kernel's size, read here, after growth
    assert rate["holds_s"] == pytest.approx(rate["buffer_kb"] * 1024 / rate["busiest_cpu_bytes_per_s"],
                                            abs=0.1)


# ---------------------------------------------------------------- an automatic trigger

def test_compaction_stall_trigger_fires_under_a_squeeze_and_not_without(tmp_path, before,
                                                                          nr_hugepages):
    condition = "vmstat.compact_stall>10/s@2s"
    args = ("--preset", "compaction", "--keep", "3s", "--after", "1s", "--measure", "1s",
            "--interval", "0.5s", "--trigger", condition)
    # Without the squeeze: a quiet machine does not stall in compaction.
    quiet_before = vmstat_now("compact_stall")
    quiet = Flight("-o", tmp_path / "quiet", "--duration", "10s", *args)
    rc, stderr = quiet.finish()
    stalls = vmstat_now("compact_stall")["compact_stall"] - quiet_before["compact_stall"]
    assert rc == 0, stderr
    if stalls >= 10 * 2:
        requirements.skip("quiet", "compaction stalled %d times in the 10 s without a squeeze "
                          "(someone else squeezes memory), so a bundle there would be right"
                          % stalls)
    assert bundles(tmp_path / "quiet") == [] and "0 bundle(s)" in stderr

    # With it: one bundle, whose trigger value the bundle's own samples reproduce.
    squeeze = tmp_path / "squeeze.py"
    squeeze.write_text(SQUEEZE)
    flight = Flight("-o", tmp_path / "loud", "--duration", "60s", *args)
    start = vmstat_now("compact_stall")
    done = subprocess.run([sys.executable, str(squeeze), "2500", "768"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert Path("/proc/sys/vm/nr_hugepages").read_text().strip() == nr_hugepages
    stalled = vmstat_now("compact_stall")["compact_stall"] - start["compact_stall"]
    fired = flight.wait_for("wrote ", 60)
    flight.signal(signal.SIGINT)
    rc, stderr = flight.finish()
    assert rc == 0, stderr
    if not fired:
        pytest.fail("no bundle although compaction stalled %d times (%s): %s"
                    % (stalled, done.stderr.strip(), stderr))
    (bundle,) = bundles(tmp_path / "loud")
    assert bundle.name.endswith("-vmstat.compact_stall")
    m = manifest(bundle)
    t = m["trigger"]
    assert t["condition"] == condition and t["reason"] == m["labels"]["trigger"] == "vmstat.compact_stall"
    assert t["value"] > 10
    detail = t["detail"]
    samples = dict(vmstat_samples(bundle / "procfs" / "vmstat"))
    v0 = samples[detail["from_mono_ns"]]["compact_stall"]
    v1 = samples[detail["to_mono_ns"]]["compact_stall"]
    rate = (v1 - v0) / ((detail["to_mono_ns"] - detail["from_mono_ns"]) / 1e9)
    assert abs(rate - t["value"]) < 0.01 and detail["increase"] == v1 - v0
    assert 0 < v1 - v0 <= stalled
    # The trace holds the compaction that made the stalls, inside the window.
    lines = trace_cmd_report(bundle / "trace.dat")
    assert sum("mm_compaction_try_to_compact_pages:" in l for l in lines) > 0


def test_triggers_at_every_timing_give_after_fields_that_hold_and_a_line_each(tmp_path, before):
    """SIGUSR1 every 0.4 s for 8 s, --cooldown 0: triggers land while a bundle is pending,
    while one is extracted and while the instances are set up again. Each is a bundle's
    trigger, or in the pending bundle's trigger.also_fired with a line of its own on stderr.
    Each bundle's after fields hold against trace-cmd's reading of its heartbeats (one every
    0.5 s in whichever instance records): a trigger that came before tracing restarted has
    nothing after it; otherwise the heartbeats run without a gap from the trigger to the
    window's end, after_kept_s is that stretch, and it splits into the first instance's part
    up to the freeze and the --after instance's."""
    out = tmp_path / "flight"
    flight = Flight("-o", out, *QUICK[:-6], "--keep", "2s", "--after", "1s", "--measure", "1s",
                    "--cooldown", "0", "--max-per-hour", "100", "--max-bundles", "100")
    sent = []
    for _ in range(20):
        sent.append(mono_ns())
        flight.signal(signal.SIGUSR1)
        time.sleep(0.4)
    assert flight.wait_for("trigger manual (SIGUSR1)", 120, count=20), flight.text()
    assert wait_for(lambda: flight.text().count("wrote /") ==
                    flight.text().count("writing a bundle in"), 120), flight.text()
    flight.signal(signal.SIGINT)
    rc, stderr = flight.finish()
    assert rc == 0, stderr
    assert "ignored" not in stderr and "not written" not in stderr, stderr
    found, late = [], 0
    for bundle in bundles(out):
        m = manifest(bundle)
        w, trigger = m["window"], m["trigger"]
        also = trigger.get("also_fired", [])
        found += [trigger["time"]["mono_ns"]] + [a["mono_ns"] for a in also]
        when, end = w["trigger_mono_ns"], w["end_mono_ns"]
        assert w["after_kept_s"] <= (end - when) / 1e9 + 0.01, w
        assert w["trigger_to_freeze_s"] == pytest.approx((w["frozen_mono_ns"] - when) / 1e9, abs=2e-3)
        assert w["after_ran_s"] == pytest.approx((end - w["after_started_mono_ns"]) / 1e9, abs=2e-3)
        if w["tracing_since_mono_ns"] > when:
            # came while the last bundle was extracted or the instances set up again
            late += 1
            assert w["after_kept_s"] == 0 and w["after_complete"] is False and w["complete"] is False
            continue
        beats = sorted(report_heartbeats(bundle / "trace.dat", BEFORE.name) +
                       report_heartbeats(bundle / "trace.dat", AFTER.name), key=lambda b: b[1])
        times = [when] + [t for _, t in beats if when <= t <= end] + [end]
        gap = max(b - a for a, b in zip(times, times[1:])) / 1e9
        assert w["after_complete"] is (gap <= 1.0 and w["after_kept_s"] >= 1.0 and
                                       not w["blind"]), (bundle.name, gap, w)
        if w["after_complete"]:
            assert w["after_kept_s"] == pytest.approx((end - when) / 1e9, abs=0.02)
    # every signal sent is a trigger or noted in one: by this process's clock, each within
    # 0.3 s after it was sent
    assert len(found) == len(sent) == 20, (found, sent)
    for t, f in zip(sent, sorted(found)):
        assert 0 <= f - t < 0.3e9, (t, f)
    also_lines = [l for l in stderr.splitlines() if "while the bundle of trigger manual is pending" in l]
    assert len(also_lines) == len(found) - len(bundles(out)) > 0, stderr


# ---------------------------------------------------------------- leaving the host as found

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stop_signal_restores_tracefs_and_finishes_a_pending_bundle(tmp_path, before, sig):
    flight = Flight("-o", tmp_path / "flight", *QUICK[:-4], "--after", "30s", "--measure", "1s")
    assert recorder_settings() != before  # tracing in the kernel, nobody reading
    assert trace_cmd_processes_under(tmp_path) == []  # and no trace-cmd running meanwhile
    flight.signal(signal.SIGUSR1)
    assert flight.wait_for("writing a bundle in 30 s", 10)
    flight.signal(sig)
    rc, stderr = flight.finish()
    assert rc == 0, stderr
    assert "writing the pending bundle first" in stderr
    (bundle,) = bundles(tmp_path / "flight")
    m = manifest(bundle)
    assert m["window"]["end_mono_ns"] - m["window"]["trigger_mono_ns"] < 20e9
    assert not STATE_FILE.exists()


def test_sigkilled_recorder_is_cleaned_up_by_its_guard(tmp_path, before):
    flight = Flight("-o", tmp_path / "flight", *QUICK)
    (guard,) = children(flight.pid)
    assert recorder_settings() != before
    flight.proc.kill()
    flight.finish()
    assert wait_for(lambda: recorder_settings() == before, 30)
    assert wait_for(lambda: not Path("/proc/%d" % guard).exists()
                    or "Z" in Path("/proc/%d/stat" % guard).read_text().split(")")[1][:3], 30)
    assert not STATE_FILE.exists()
    assert trace_cmd_processes_under(tmp_path) == []
    again = run_record("--cleanup")
    assert again.returncode == 0 and "nothing to clean up" in again.stderr


def test_a_guard_that_dies_is_said_and_replaced_and_the_new_one_restores(tmp_path, before):
    flight = Flight("-o", tmp_path / "flight", *QUICK)
    (guard,) = children(flight.pid)
    os.kill(guard, signal.SIGKILL)
    assert flight.wait_for("the guard process that restores tracefs", 30), flight.text()
    (new,) = children(flight.pid)
    assert new != guard and json.loads(STATE_FILE.read_text())["guard_pid"] == new
    assert "(signal 9); started a new one (pid %d)" % new in flight.text()
    flight.proc.kill()            # the new guard restores as the first would have
    flight.finish()
    assert wait_for(lambda: recorder_settings() == before, 30)
    assert wait_for(lambda: not STATE_FILE.exists(), 30)


def test_sigkill_of_recorder_and_guard_leaves_no_trace_cmd_and_cleanup_restores(tmp_path, before):
    flight = Flight("-o", tmp_path / "flight", *QUICK)
    (guard,) = children(flight.pid)
    os.kill(guard, signal.SIGKILL)
    flight.proc.kill()
    flight.finish()
    # The kernel still traces into its bounded buffer, but no trace-cmd runs unbounded.
    assert wait_for(lambda: trace_cmd_processes_under(tmp_path) == [], 30), \
        trace_cmd_processes_under(tmp_path)
    assert recorder_settings() != before and STATE_FILE.exists()
    result = run_record("--cleanup")
    assert result.returncode == 0, result.stderr
    assert "restored the tracing state" in result.stderr
    assert recorder_settings() == before


def test_a_failing_restart_ends_the_recorder_with_one_error_and_restores(tmp_path, before):
    """trace-cmd that starts once and then refuses: the bundle is kept, the host restored, and
    the error says the setup was tried again before it gave up (a refusal for good)."""
    wrapper = tmp_path / "trace-cmd"
    marker = tmp_path / "started-once"
    wrapper.write_text("#!/bin/sh\nif [ \"$1\" = start ]; then\n  [ -e %s ] && { echo 'trace-cmd: "
                       "refused by the test' >&2; exit 1; }\n  touch %s\nfi\nexec trace-cmd \"$@\"\n"
                       % (marker, marker))
    wrapper.chmod(0o755)
    flight = Flight("-o", tmp_path / "flight", "--trace-cmd", str(wrapper), *QUICK)
    flight.signal(signal.SIGUSR1)
    rc, stderr = flight.finish()
    assert rc == 1
    assert last_error_line(stderr).startswith(
        "kmemscope: error: the tracefs instances of the flight recorder could not be set up in "
        "7 tries: trace-cmd start failed")
    assert "refused by the test" in last_error_line(stderr)
    (bundle,) = bundles(tmp_path / "flight")
    assert manifest(bundle)["status"] == "complete"
    assert trace_cmd_report(bundle / "trace.dat")
    assert not STATE_FILE.exists()


# ---------------------------------------------------------------- limits

def test_limits_cooldown_per_hour_and_max_bundles(tmp_path, before):
    out = tmp_path / "flight"
    flight = Flight("-o", out, *QUICK[:-6], "--keep", "1s", "--after", "0.2s", "--measure", "0.5s",
                    "--cooldown", "0", "--max-bundles", "2", "--max-per-hour", "3")
    for n in range(1, 5):
        flight.signal(signal.SIGUSR1)
        if n <= 3:
            assert flight.wait_for("wrote ", 30, count=n), flight.text()
        time.sleep(1.1)  # bundle names carry the second
    assert flight.wait_for("ignored: --max-per-hour 3 reached", 10)
    flight.signal(signal.SIGINT)
    rc, stderr = flight.finish()
    assert rc == 0, stderr
    written = [l.split("wrote ")[1].split(":")[0] for l in stderr.splitlines() if "wrote " in l]
    assert len(written) == 3
    assert [str(b) for b in bundles(out)] == written[1:]  # the oldest went first
    assert "removed the oldest bundle %s (--max-bundles 2)" % Path(written[0]).name in stderr
    assert "suppressed: 1 by max-per-hour" in stderr


def disk_used(path):
    """Bytes of disk the files under `path` take now (st_blocks; each file's own look, so a
    file removed meanwhile counts nothing)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


class DiskWatch:
    """Reads a flight folder's disk use every 20 ms from a thread: the folder's peak, and each
    bundle's peak while it is written (its .partial- folder, temporary copies included), by
    the bundle's final name. A bundle's peak is each of its files' largest size seen, summed:
    trace-cmd removes its temporary copies only after trace.dat is complete, an instant that a
    reading of the whole folder every 20 ms rarely catches (a 1 ms reading here saw it once,
    for under 1 ms)."""

    def __init__(self, out):
        import threading
        self.out, self.peak, self.files = Path(out), 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, disk_used(self.out))
            try:
                names = [p.name for p in self.out.iterdir() if p.name.startswith(".partial-")]
            except OSError:
                names = []
            for name in names:
                most = self.files.setdefault(name[len(".partial-"):], {})
                for root, dirs, files in os.walk(self.out / name):
                    for f in files + dirs:
                        try:
                            size = os.lstat(os.path.join(root, f)).st_blocks * 512
                        except OSError:
                            continue
                        key = os.path.relpath(os.path.join(root, f), self.out / name)
                        most[key] = max(most.get(key, 0), size)
            time.sleep(0.02)

    @property
    def bundle_peak(self):
        return {name: sum(most.values()) for name, most in self.files.items()}

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)


def check_disk_estimates(out, watch):
    """Each bundle's estimate (manifest disk.estimate_bytes) is never below the most it took
    while written (read here every 20 ms, and by the recorder: the larger of the two) nor below
    the finished bundle, and at most twice that peak. Its part for trace.dat's metadata is no less than trace.dat holds beside the
    ring-buffer data (trace-cmd dump's reading), and at most twice that. Returns the
    (estimate, peak) pairs."""
    pairs = []
    for bundle in bundles(out):
        disk = manifest(bundle)["disk"]
        estimate = disk["estimate_bytes"]
        assert bundle.name in watch.bundle_peak, (bundle, sorted(watch.bundle_peak))
        peak = max(watch.bundle_peak[bundle.name], disk["peak_bytes"])
        assert max(peak, disk_used(bundle)) <= estimate <= 2 * peak, (bundle, estimate, peak, disk)
        meta = (bundle / "trace.dat").stat().st_size - trace_dat_data_bytes(bundle / "trace.dat")
        assert meta <= disk["estimate_metadata_bytes"] <= 2 * meta, (bundle, meta)
        pairs.append((estimate, peak))
    return pairs


def trace_dat_data_bytes(trace_dat):
    """Bytes of ring-buffer data (as stored) in a trace.dat, by `trace-cmd dump --summary`."""
    out = subprocess.run(["trace-cmd", "dump", "--summary", "-i", str(trace_dat)],
                         capture_output=True, text=True, timeout=120)
    return sum(int(n) for n in re.findall(r"(\d+) bytes flyrecord data\]", out.stdout + out.stderr))


def test_max_disk_holds_while_triggers_fill_it(tmp_path, before):
    """Triggers one after another under a busy CPU until --max-disk is full several times over:
    the folder, measured here every 20 ms while bundles are written (their temporary copies
    included), never takes more than --max-disk; the oldest bundles go first; each bundle's
    estimate holds its peak and is at most twice it."""
    max_disk, cpu = 24 << 20, 1 if os.cpu_count() > 1 else 0
    out = tmp_path / "flight"
    work = busy_cpu(tmp_path, cpu)
    try:
        with DiskWatch(out) as watch:
            flight = Flight("-o", out, "-e", "kmem:mm_page_free", "--keep", "2s", "--after", "0.5s",
                            "--measure", "1s", "--cooldown", "0", "--max-per-hour", "100",
                            "--max-bundles", "100", "--max-buffer", "5M", "--max-disk", "24M")
            # bundles of 1-3 MiB: a dozen or so fill --max-disk, and its last bundles are
            # written (with their temporary copies) while it is nearly full; triggers go on
            # until the oldest bundles were removed twice (bundle sizes follow the churn's rate)
            for n in range(1, 31):
                flight.signal(signal.SIGUSR1)
                assert flight.wait_for("wrote ", 60, count=n), flight.text()
                time.sleep(1.1)       # bundle names carry the second
                if n >= 12 and flight.text().count("removed the oldest bundle") >= 2:
                    break
            flight.signal(signal.SIGINT)
            rc, stderr = flight.finish()
    finally:
        work.kill()
        work.wait()
    assert rc == 0, stderr
    assert watch.peak <= max_disk, (watch.peak, stderr)
    assert disk_used(out) <= max_disk
    removed = re.findall(r"removed the oldest bundle (\S+) \(--max-disk 24\.0 MiB", stderr)
    written = [Path(l.split("wrote ")[1].split(":")[0]).name for l in stderr.splitlines()
               if "wrote " in l]
    assert removed and removed == written[:len(removed)]    # oldest first
    assert sorted(b.name for b in bundles(out)) == written[len(removed):]
    pairs = check_disk_estimates(out, watch)
    # busy bundles: the ring-buffer data is most of what they take
    assert pairs and min(peak for _, peak in pairs) > 1 << 20, pairs


def test_a_max_disk_below_any_bundle_is_refused_at_start_in_one_line(tmp_path, before):
    result = run_record("--flight", "-o", tmp_path / "flight", *QUICK, "--max-disk", "1M")
    assert result.returncode == 1, result.stderr
    (line,) = [l for l in result.stderr.splitlines() if l.strip()]
    m = re.fullmatch(r"kmemscope: error: --max-disk 1\.0 MiB is less than the smallest bundle this "
                     r"host writes, ([\d.]+) MiB \(.*\) \(use --max-disk (\d+)M or more\)", line)
    assert m and float(m.group(1)) > 1.0 and int(m.group(2)) > float(m.group(1)), line
    assert not (tmp_path / "flight").exists()


def test_a_max_disk_below_full_buffers_is_refused_naming_the_cap_that_works(tmp_path, before):
    """A --max-disk that cannot hold a bundle of the smallest ring buffers once full is refused
    at start in one line naming the smallest cap that does; a MiB under that cap is refused
    the same way, and the cap itself, under a busy CPU that fills the buffers, sizes them down
    and writes bundles that never take more than it (the folder read here every 20 ms,
    trace-cmd's temporary copies included)."""
    args = ("-e", "kmem:mm_page_free", "--keep", "2s", "--after", "0.5s", "--measure", "1s")

    def refused(max_disk):
        result = run_record("--flight", "-o", tmp_path / "refused", *args, "--max-disk", max_disk)
        assert result.returncode == 1, result.stderr
        (line,) = [l for l in result.stderr.splitlines() if l.strip()]
        m = re.fullmatch(r"kmemscope: error: --max-disk .* \(use --max-disk (\d+)M or more\)", line)
        assert m, line
        assert not (tmp_path / "refused").exists()
        return int(m.group(1)), line

    cap, _ = refused("1M")
    below, line = refused("%dK" % ((cap - 1) << 10))
    # (the samples' bound is measured at each start: it may move the cap by its rounding)
    assert abs(below - cap) <= 1 and ("cannot hold a bundle of the smallest ring buffers once "
                                      "full" in line or "less than the smallest bundle" in line), line
    cpu = 1 if os.cpu_count() > 1 else 0
    out = tmp_path / "flight"
    work = busy_cpu(tmp_path, cpu)
    try:
        with DiskWatch(out) as watch:
            flight = Flight("-o", out, *args, "--cooldown", "0", "--max-disk", "%dM" % cap)
            said = flight.text()
            assert re.search(r"held to .* KiB per CPU and instance, under the usual 1024\) so that a "
                             r"bundle fits --max-disk %d\.0 MiB" % cap, said), said
            kb = int(re.search(r"ring buffer (\d+) KiB per CPU", said).group(1))
            # the buffers fill: a bundle of full ones is what must fit
            assert wait_for(lambda: before_stats(cpu).get("bytes", 0) > kb * 1024 * 0.8, 300), \
                before_stats(cpu)
            for n in range(1, 3):
                flight.signal(signal.SIGUSR1)
                assert flight.wait_for("wrote /", 60, count=n), flight.text()
                time.sleep(1.1)       # bundle names carry the second
            flight.signal(signal.SIGINT)
            rc, stderr = flight.finish()
    finally:
        work.kill()
        work.wait()
    assert rc == 0, stderr
    assert "not written" not in stderr
    assert 0 < watch.peak <= cap << 20 and disk_used(out) <= cap << 20, (watch.peak, stderr)
    # (at the least cap the newer bundle takes the older one's room)
    assert stderr.count("wrote /") == 2 and bundles(out)
    for bundle in bundles(out):
        assert sum(before_buffer_overruns(bundle / "trace.dat").values()) > 0   # they were full
    check_disk_estimates(out, watch)


def test_the_default_preset_under_max_disk_64m_writes_bundles_under_it(tmp_path, before):
    """--max-disk 64M with the default preset under churn: the ring buffers are held so that
    a bundle fits (said at start); bundles are written, and the folder, measured here every
    20 ms with trace-cmd's temporary copies, never takes more than 64 MiB."""
    cpu = 1 if os.cpu_count() > 1 else 0
    out = tmp_path / "flight"
    work = busy_cpu(tmp_path, cpu)
    try:
        with DiskWatch(out) as watch:
            flight = Flight("-o", out, "--keep", "10s", "--after", "1s", "--measure", "1s",
                            "--cooldown", "0", "--max-disk", "64M")
            assert "held to" in flight.text() and "--max-disk 64.0 MiB" in flight.text()
            time.sleep(3)
            for n in range(1, 3):
                flight.signal(signal.SIGUSR1)
                assert flight.wait_for("wrote /", 120, count=n), flight.text()
                time.sleep(1.1)       # bundle names carry the second
            flight.signal(signal.SIGINT)
            rc, stderr = flight.finish()
    finally:
        work.kill()
        work.wait()
    assert rc == 0, stderr
    assert "not written" not in stderr
    assert 0 < watch.peak <= 64 << 20 and disk_used(out) <= 64 << 20, (watch.peak, stderr)
    assert len(check_disk_estimates(out, watch)) == 2


def test_a_light_recorder_writes_under_max_disk_8m(tmp_path, before):
    """--preset light --max-disk 8M: bundles are written, the folder (measured here every
    20 ms, temporary copies included) never takes more than 8 MiB, and each bundle's
    estimate is never below what it took while written and at most twice that."""
    out = tmp_path / "flight"
    with DiskWatch(out) as watch:
        flight = Flight("-o", out, "--preset", "light", "--keep", "5s", "--after", "1s",
                        "--measure", "1s", "--cooldown", "0", "--max-disk", "8M")
        for n in range(1, 5):
            flight.signal(signal.SIGUSR1)
            assert flight.wait_for("wrote /", 60, count=n), flight.text()
            time.sleep(1.1)       # bundle names carry the second
        flight.signal(signal.SIGINT)
        rc, stderr = flight.finish()
    assert rc == 0, stderr
    assert "not written" not in stderr
    assert 0 < watch.peak <= 8 << 20 and disk_used(out) <= 8 << 20, (watch.peak, stderr)
    assert len(check_disk_estimates(out, watch)) == 4


def test_a_failed_extract_on_a_full_disk_says_why(tmp_path, before):
    """An extract that dies when the disk fills (a wrapper fills the folder's own small tmpfs,
    then runs the real extract): the recorder's line carries trace-cmd's own error, though its
    log could not be written there."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=80m", "kmemscope-test-full", str(small)],
                   check=True)
    try:
        wrapper = tmp_path / "trace-cmd"
        wrapper.write_text("#!/bin/sh\nif [ \"$1\" = extract ]; then\n  head -c 100m /dev/zero > %s "
                           "2>/dev/null\nfi\nexec trace-cmd \"$@\"\n" % (small / "filler"))
        wrapper.chmod(0o755)
        flight = Flight("-o", small / "flight", "--trace-cmd", str(wrapper), *QUICK,
                        "--min-free", "0")
        flight.signal(signal.SIGUSR1)
        assert flight.wait_for("extract failed", 60), flight.text()
        flight.signal(signal.SIGINT)
        rc, stderr = flight.finish()
    finally:
        subprocess.run(["umount", str(small)], check=True)
    (line,) = [l for l in stderr.splitlines() if "extract failed" in l]
    reason = line.split("):", 1)[1].strip()
    assert "No space left on device" in reason or "ENOSPC" in reason, line
    assert rc == 0, stderr


def test_flight_refuses_bad_input_before_touching_tracefs(tmp_path, before):
    cases = [
        (("--trigger", "vmstat.no_such_counter>1/s"), "has no no_such_counter"),
        (("--trigger", "psi.memory.some>5%@3s"), "multiples of 2 s"),
        (("--trigger", "thp.fallback>150%"), "not a share"),
        (("--keep", "0"), "--keep must be positive"),
    ]
    for extra, words in cases:
        result = run_record("--flight", "-o", tmp_path / "f", *extra)
        assert result.returncode in (1, 2), result.stderr
        assert words in last_error_line(result.stderr), result.stderr
        assert not (tmp_path / "f").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("x")
    result = run_record("--flight", "-o", other)
    assert "not a flight directory" in last_error_line(result.stderr)


def psi_some_total_us():
    """/proc/pressure/memory's 'some' total, read here (the oracle of the PSI tests)."""
    return int(re.search(r"^some .*total=(\d+)", Path("/proc/pressure/memory").read_text(),
                         re.M).group(1))


PSI_CONDITION = "psi.memory.some>2%@2s"


def test_tracing_turned_off_in_its_instance_is_said_turned_on_again_and_blind(tmp_path, before):
    # a --keep that reaches back to the start: the window holds the whole blind stretch
    flight = Flight("-o", tmp_path / "flight", *QUICK[:-6], "--keep", "20s", "--after", "1s",
                    "--measure", "1s")
    off = mono_ns()
    (BEFORE / "tracing_on").write_text("0")           # another tool, behind the recorder's back
    assert flight.wait_for("changed by something else", 30), flight.text()
    assert wait_for(lambda: (BEFORE / "tracing_on").read_text().strip() == "1", 10)
    seen = mono_ns()
    rc, stderr = bundle_now(flight)
    assert rc == 0, stderr
    assert "tracing_on 0 (was 1)" in stderr and "wrote tracing_on back" in stderr
    (bundle,) = bundles(tmp_path / "flight")
    m = manifest(bundle)
    assert m["flight"]["instances_restored"] == 1
    # The blind stretch holds the moment tracing went off, and ends once it was on again.
    w = m["window"]
    (blind,) = w["blind"]
    assert blind["from_mono_ns"] <= off <= blind["to_mono_ns"] <= seen
    assert w["complete"] is False and w["before_complete"] is False


def report_heartbeats(trace_dat, instance):
    """[(seq, ts ns)] of the recorder's heartbeats in `instance`, as `trace-cmd report` prints
    them (ftrace print events, 'kmemscope-heartbeat INSTANCE N')."""
    out = []
    for line in trace_cmd_report(trace_dat, "-t"):
        m = re.search(r"\s(\d+)\.(\d+):\s+print:.*kmemscope-heartbeat (\S+) (\d+)\s*$", line)
        if m and m.group(3) == instance:
            out.append((int(m.group(4)), int(m.group(1)) * 10**9 + int(m.group(2).ljust(9, "0"))))
    return sorted(out)


def parsed_run(bundle, ds):
    """(info's runs row, the run's manifest) of `kmemscope parse BUNDLE`."""
    from kmrun import kmemscope
    kmemscope("parse", bundle, "-o", ds)
    (run,) = json.loads(kmemscope("info", ds, "--format", "json").stdout)["runs"]
    import duckdb
    con = duckdb.connect()
    (text,) = con.execute("SELECT manifest FROM read_parquet(?)",
                          [str(Path(ds) / "runs" / "*" / "*.parquet")]).fetchone()
    return run, json.loads(text)


def test_tracing_off_for_less_than_a_check_is_blind_every_time(tmp_path, before):
    """The instance's tracing_on switched off for 1 s four times, 1 s apart, between the
    recorder's 4 s checks (a heartbeat every 0.5 s: window.detection_granularity's
    tracing_on_s): each stretch is in the bundle's window.blind (its heartbeat was refused),
    and trace-cmd report's own reading of the heartbeats shows no other gap."""
    flight = Flight("-o", tmp_path / "flight", *QUICK[:-6], "--keep", "20s", "--after", "1s",
                    "--measure", "1s")
    offs = []
    for _ in range(4):
        time.sleep(1.0)
        off = mono_ns()
        (BEFORE / "tracing_on").write_text("0")       # another tool, behind the recorder's back
        time.sleep(1.0)
        (BEFORE / "tracing_on").write_text("1")
        offs.append((off, mono_ns()))
    time.sleep(0.5)
    rc, stderr = bundle_now(flight)
    assert rc == 0, stderr
    (bundle,) = bundles(tmp_path / "flight")
    w = manifest(bundle)["window"]
    assert w["complete"] is False and w["before_complete"] is False
    holding = [[i for i, b in enumerate(w["blind"]) if b["from_mono_ns"] <= off <= b["to_mono_ns"]]
               for off, _ in offs]
    assert all(len(h) == 1 for h in holding) and len({h[0] for h in holding}) == 4, (offs, w["blind"])
    # trace-cmd's reading: the heartbeats that went in are all there, and every jump in
    # their numbers (refused ones) lies inside a blind stretch
    beats = report_heartbeats(bundle / "trace.dat", BEFORE.name)
    written = w["heartbeat"]["written"][BEFORE.name]
    assert {seq for seq, _ in beats} >= {seq for seq, t in written}
    jumps = [(a, b) for a, b in zip(beats, beats[1:]) if b[0] != a[0] + 1 and b[1] < w["frozen_mono_ns"]]
    assert len(jumps) >= 4
    for (_, t0), (_, t1) in jumps:
        assert any(b["from_mono_ns"] <= t1 and t0 <= b["to_mono_ns"] for b in w["blind"]), (t0, t1)
    for off, on in offs:
        assert any(t0 < off < t1 for (_, t0), (_, t1) in jumps), (off, jumps)
    run, m = parsed_run(bundle, tmp_path / "ds")
    assert m["parse_window"]["heartbeat"] == {"checked": True, "found": len(beats) + len(
        report_heartbeats(bundle / "trace.dat", AFTER.name)), "gaps": 0}
    assert run["flight_window"].count("tracing_on 0 (was 1)") == 4
    # the heartbeats' times, on this process's CLOCK_MONOTONIC above, are the clock info names
    assert run["trace_clock"] == "mono"


def test_a_cleared_instance_is_found_blind_by_parse_from_its_heartbeats(tmp_path, before):
    """Something clears the instance's buffer (its events gone, no setting changed: the
    recorder's checks see nothing): parse finds the heartbeats written before that missing
    from the trace and says the window is blind there, in the run's manifest and info."""
    flight = Flight("-o", tmp_path / "flight", *QUICK[:-6], "--keep", "20s", "--after", "1s",
                    "--measure", "1s")
    time.sleep(2)
    cleared = mono_ns()
    (BEFORE / "trace").write_text("")
    time.sleep(1.5)
    rc, stderr = bundle_now(flight)
    assert rc == 0, stderr
    assert "changed by something else" not in stderr
    (bundle,) = bundles(tmp_path / "flight")
    w = manifest(bundle)["window"]
    beats = report_heartbeats(bundle / "trace.dat", BEFORE.name)
    assert beats and min(t for _, t in beats) > cleared
    start = max(w["start_mono_ns"], w["covered_from_mono_ns"], w["tracing_since_mono_ns"])
    found = {seq for seq, _ in beats}
    missing = [t for seq, t in w["heartbeat"]["written"][BEFORE.name]
               if seq not in found and t >= start]
    assert missing and max(missing) < cleared
    # What the recorder saw: at most the heartbeats refused while the kernel cleared the
    # buffer (it stops recording for that), not the loss of those written before
    assert all(b["from_mono_ns"] >= max(missing) for b in w["blind"]), w["blind"]
    run, m = parsed_run(bundle, tmp_path / "ds")
    (gap,) = [b for b in m["window"]["blind"] if "found by parse" in b["what"]]
    assert gap["from_mono_ns"] <= min(missing) and cleared <= gap["to_mono_ns"] <= min(t for _, t in beats)
    assert gap["what"].startswith("%s: %d heartbeat(s)" % (BEFORE.name, len(missing)))
    assert m["window"]["complete"] is False and m["parse_window"]["heartbeat"]["gaps"] == 1
    assert "heartbeat(s) written there are missing" in run["flight_window"]


@pytest.fixture
def top_level_put_back():
    """Another tool's `trace-cmd record` and `reset` change the top level: the test puts back
    what they changed (the settings tests change, the events, the options)."""
    from conftest import host_state, restore_host_state
    saved, options = host_state(), tracing_state()["options"]
    yield
    restore_host_state(saved)
    for name, value in options.items():
        path = TRACEFS / "options" / name
        if value in ("0", "1") and path.read_text().strip() != value:
            path.write_text(value)


def test_another_tracers_record_and_reset_do_not_blind_it(tmp_path, before, top_level_put_back):
    """A colleague's plain `trace-cmd record` of sched_switch, then `trace-cmd reset`, while the
    recorder runs: the next bundle still holds every second before its trigger (trace-cmd's own
    decoding of the bundle), and its manifest says nothing was blind."""
    keep, cpu = 6.0, 1 if os.cpu_count() > 1 else 0
    work = busy_cpu(tmp_path, cpu)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    try:
        flight = Flight("-o", tmp_path / "flight", "-e", "kmem:mm_page_free", "--keep", "6s",
                        "--after", "1s", "--measure", "1s", "--interval", "0.5s")
        started = mono_ns()
        time.sleep(2)
        record_start = mono_ns()
        record = subprocess.Popen(["trace-cmd", "record", "-d", "--no-filter", "-e",
                                   "sched:sched_switch", "-o", str(theirs / "trace.dat")],
                                  cwd=theirs, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        time.sleep(3)
        os.killpg(record.pid, signal.SIGINT)
        # (it exits 1 on this host, refused set_ftrace_filter as it ends: its trace is checked)
        record.wait(60)
        # (it too exits 1 here, at set_ftrace_filter, after stopping the top level)
        reset = subprocess.run(["trace-cmd", "reset"], capture_output=True, text=True, timeout=60)
        assert (TRACEFS / "tracing_on").read_text().strip() == "0", reset.stderr
        # until the recorder has traced for the whole --keep (its buffer is sized to hold it)
        time.sleep(max(0.0, (started - mono_ns()) / 1e9 + keep + 0.5))
        rc, stderr = bundle_now(flight)
    finally:
        work.kill()
        work.wait()
    assert rc == 0, stderr
    # Their record worked: it holds their sched_switch events.
    assert any(name == "sched_switch" for *_, name in report_events(theirs / "trace.dat", True)), \
        record.stderr.read()
    (bundle,) = bundles(tmp_path / "flight")
    m = manifest(bundle)
    w, trigger_ns = m["window"], m["trigger"]["time"]["mono_ns"]
    assert trigger_ns - keep * 1e9 <= record_start   # their record and reset lie in the window
    events = report_events(bundle / "trace.dat", with_names=True)
    before_times = [ts for b, c, ts, name in events if b != AFTER.name and c == cpu
                    and name == "mm_page_free"]
    assert empty_seconds(before_times, trigger_ns - keep * 1e9, trigger_ns) == []
    assert not any(name == "sched_switch" for *_, name in events)   # none of theirs
    assert "changed by something else" not in stderr
    assert w["blind"] == [] and w["complete"] is True and m["lost_events"] == 0


def test_an_instance_removed_by_another_tool_is_set_up_again_and_the_bundle_says_blind(
        tmp_path, before, top_level_put_back):
    """`trace-cmd reset -a -d` (every instance reset and deleted) beside the recorder: it says
    so, sets its instances up again within its check interval, and the next bundle's manifest
    and `kmemscope info` of its parse say the window is incomplete, blind from before the
    removal to after it."""
    from kmrun import kmemscope
    # a --keep that reaches back to the start: the window holds the whole blind stretch
    flight = Flight("-o", tmp_path / "flight", *QUICK[:-6], "--keep", "30s", "--after", "1s",
                    "--measure", "1s")
    removed = mono_ns()
    # (it exits 1 on this host, refused set_ftrace_filter, once it has done its work)
    reset = subprocess.run(["trace-cmd", "reset", "-a", "-d"], capture_output=True, text=True,
                           timeout=60)
    # (the recorder may have set it up again already: its next heartbeat, refused, checks)
    assert flight.wait_for("changed by something else", 30), (reset.stderr, flight.text())
    def set_up_again():
        try:
            return "compaction" in (BEFORE / "set_event").read_text()
        except OSError:
            return False
    assert wait_for(set_up_again, 10)
    rc, stderr = bundle_now(flight)
    assert rc == 0, stderr
    # what the check names is what it found: the removal itself, or, when a check fell
    # between the reset's disabling of the events and its removal of the instances (or the
    # removal was refused while the instance was in use), the events it found disabled
    said = re.search(r"changed by something else \((.+?)\); set both instances up again",
                     stderr, re.S)
    assert said, stderr
    (bundle,) = bundles(tmp_path / "flight")
    w = manifest(bundle)["window"]
    # the reset disables the events, then removes the instances: one stretch, or one per
    # change when a check fell between them and found the instances set up again
    blinds = w["blind"]
    # (its end is not bounded here: a refused heartbeat checks at once, and the checks can
    # find the instances changing while the reset runs and its effects settle)
    assert blinds and blinds[0]["from_mono_ns"] <= removed <= blinds[-1]["to_mono_ns"], (stderr, w)
    assert blinds[-1]["to_mono_ns"] - blinds[0]["from_mono_ns"] < 10e9   # within the checks
    assert w["complete"] is False
    kmemscope("parse", bundle, "-o", tmp_path / "ds")
    (run,) = json.loads(kmemscope("info", tmp_path / "ds", "--format", "json").stdout)["runs"]
    assert run["flight_window"].startswith("incomplete: blind ")
    # (info shows the first 200 characters of what the stretches name)
    assert any(said.group(1)[:40] in b["what"] for b in blinds), (said.group(1), blinds)


def _instance_reappears(timeout=15):
    """Wait (polling every 2 ms) for BEFORE to go and come back: the recorder setting it up
    again. True when seen."""
    deadline = time.monotonic() + timeout
    gone = False
    while time.monotonic() < deadline:
        there = BEFORE.is_dir()
        if gone and there:
            return True
        gone = gone or not there
        time.sleep(0.002)
    return False


def _change_behind_its_back(kind):
    """Another tool's write into the recorder's first instance; False when the kernel (or a
    setup under way) refused it."""
    try:
        if kind == "buffer":
            kb = int((BEFORE / "buffer_size_kb").read_text().split()[0])
            (BEFORE / "buffer_size_kb").write_text(str(max(kb // 2, 64)))
        elif kind == "events":
            (BEFORE / "events" / "enable").write_text("0")
        elif kind == "tracing_on":
            (BEFORE / "tracing_on").write_text("0")
        else:
            (BEFORE / "events" / "compaction" / "mm_compaction_begin" / "filter").write_text(
                "nr_scanned > 1000000")
    except (OSError, ValueError):
        return False
    return True


def _restored(least_kb):
    """The first instance as the recorder's options ask: tracing, its events on, unfiltered,
    a buffer of at least least_kb."""
    try:
        return ((BEFORE / "tracing_on").read_text().strip() == "1"
                and "compaction:mm_compaction_begin" in (BEFORE / "set_event").read_text()
                and (BEFORE / "events/compaction/mm_compaction_begin/filter").read_text().strip()
                == "none"
                and int((BEFORE / "buffer_size_kb").read_text().split()[0]) >= least_kb)
    except (OSError, ValueError):
        return False


def test_a_change_while_it_sets_up_again_is_retried_and_blind_every_time(tmp_path, before):
    """Ten times: the buffer halved (the recorder sets its instances up again), then, 0 to
    0.5 s after the instance reappears, a second change (buffer halved, events off,
    tracing_on off, a filter). The recorder never exits, never takes the changed state for
    the one it wants (it restores what its options ask, the whole buffer), and each change
    lies in a blind stretch of the bundle, which says it is incomplete. (A change that lands
    while trace-cmd start still runs may be undone by it: then the setup's own stretch
    holds it.)"""
    flight = Flight("-o", tmp_path / "flight", *QUICK[:-6], "--keep", "120s", "--after", "1s",
                    "--measure", "1s")
    kinds = ("buffer", "events", "tracing_on", "events", "buffer", "filter", "tracing_on",
             "buffer", "events", "tracing_on")
    changes = []
    asked_kb = int((BEFORE / "buffer_size_kb").read_text().split()[0])

    def said():
        return sum("changed by something else" in line for line in flight.lines)

    for i, kind in enumerate(kinds):
        warned = said()
        assert _change_behind_its_back("buffer")
        changes.append(("buffer", mono_ns()))
        assert _instance_reappears(), flight.text()
        time.sleep(0.05 * (i % 11))          # 0 to 0.5 s after it reappears
        if _change_behind_its_back(kind):
            changes.append((kind, mono_ns()))
        # set up again (said once it is done), as the options ask
        assert wait_for(lambda: said() > warned and _restored(asked_kb), 30), flight.text()
        assert flight.proc.poll() is None, flight.text()
    rc, stderr = bundle_now(flight)
    assert rc == 0, stderr
    (bundle,) = bundles(tmp_path / "flight")
    w = manifest(bundle)["window"]
    assert w["complete"] is False and w["detection_granularity_s"] > 0
    for kind, at in changes:
        assert any(b["from_mono_ns"] <= at <= b["to_mono_ns"] for b in w["blind"]), \
            (kind, at, w["blind"], stderr)


def test_an_existing_folder_on_a_read_only_filesystem_is_one_error(tmp_path, before):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "kmemscope-test-ro", str(ro)],
                   check=True)
    try:
        result = run_record("--flight", "-o", ro, *QUICK)
    finally:
        subprocess.run(["umount", str(ro)], check=True)
    assert result.returncode == 1, result.stderr
    line = last_error_line(result.stderr)
    assert line.startswith("kmemscope: error: cannot write bundles in %s" % ro), result.stderr
    assert "Read-only file system" in line and "internal error" not in result.stderr


def test_parse_of_a_real_bundle_counts_only_the_losses_inside_its_window(tmp_path, before):
    """A bundle whose busy CPU overwrote much before the window: trace-cmd report prints those
    overwritten events at each CPU's first page; parse --whole-bundle counts them all, parse
    of the window none of them, and keeps exactly the events trace-cmd prints inside it."""
    from kmrun import kmemscope
    keep, after, cpu = 2.0, 1.0, 1 if os.cpu_count() > 1 else 0
    work = busy_cpu(tmp_path, cpu)
    try:
        flight = Flight("-o", tmp_path / "flight", "-e", "kmem:mm_page_free", "--keep", "2s",
                        "--after", "1s", "--measure", "1s", "--max-buffer", "32M")
        assert wait_for(lambda: cpu_overrun(cpu) > 0, 300), "the buffer never wrapped"
        rc, stderr = bundle_now(flight)
    finally:
        work.kill()
        work.wait()
    assert rc == 0, stderr
    (bundle,) = bundles(tmp_path / "flight")
    w = manifest(bundle)["window"]
    report = trace_cmd_report(bundle / "trace.dat")
    dropped = sum(int(n) for n in re.findall(r"\[(\d+) EVENTS DROPPED\]", "\n".join(report)))
    assert dropped > 0
    start = max(w["start_mono_ns"], w["covered_from_mono_ns"], w["tracing_since_mono_ns"])
    end = w["trigger_mono_ns"] + int(after * 1e9)
    times = [ts for _, _, ts in report_events(bundle / "trace.dat")]
    kmemscope("parse", bundle, "-o", tmp_path / "whole", "--whole-bundle")
    kmemscope("parse", bundle, "-o", tmp_path / "window")
    info = lambda ds: json.loads(kmemscope("info", ds, "--format", "json").stdout)["runs"][0]
    whole, window = info(tmp_path / "whole"), info(tmp_path / "window")
    assert whole["events"] == len(times) and whole["lost_events"] == dropped
    assert window["events"] == sum(start <= ts <= end for ts in times) < len(times)
    # inside the window only what the --after buffer dropped once full (trace-cmd's counters)
    after_dropped = sum(c["dropped events"] for c in
                        report_stat_by_buffer(bundle / "trace.dat")[AFTER.name].values())
    # (the manifest's lost_events adds its estimate of what the top buffer overwrote inside the
    # window, which this test's window, taken as soon as the buffer wrapped, may have)
    m = manifest(bundle)
    assert m["lost_events"] == m["lost"]["overwritten_in_window_estimated"] + after_dropped
    assert window["lost_events"] == after_dropped


def test_psi_trigger_does_not_fire_at_start_on_a_quiet_host(tmp_path, before):
    """The kernel's trigger may wake a fresh poll() at once, and the host has stalled since boot:
    neither is a condition of the last window. Started four times, each runs past one window."""
    if not Path("/proc/pressure/memory").exists():
        requirements.skip("tracefs", "this kernel has no /proc/pressure/memory (CONFIG_PSI)")
    for n in range(4):
        stalled_before = psi_some_total_us()
        flight = Flight("-o", tmp_path / ("quiet%d" % n), *QUICK, "--trigger", PSI_CONDITION,
                        "--duration", "5s")
        rc, stderr = flight.finish()
        stalled_us = psi_some_total_us() - stalled_before
        assert rc == 0, stderr
        assert PSI_CONDITION in stderr
        if stalled_us >= 0.02 * 2e6:
            requirements.skip("quiet", "the host stalled on memory %d ms during a quiet run "
                              "(someone else squeezes memory), so a bundle would be right"
                              % (stalled_us // 1000))
        assert bundles(tmp_path / ("quiet%d" % n)) == [] and "0 bundle(s)" in stderr, stderr


def test_psi_trigger_fires_under_a_squeeze_with_the_value_it_measured(tmp_path, before,
                                                                        nr_hugepages):
    if not Path("/proc/pressure/memory").exists():
        requirements.skip("tracefs", "this kernel has no /proc/pressure/memory (CONFIG_PSI)")
    squeeze = tmp_path / "squeeze.py"
    squeeze.write_text(SQUEEZE)
    # Read before the recorder starts: its window opens at its first sample, which may
    # come before the squeeze but never before this.
    start = mono_ns()
    stalled_before = psi_some_total_us()
    flight = Flight("-o", tmp_path / "flight", *QUICK, "--trigger", PSI_CONDITION,
                    "--duration", "120s", "--cooldown", "600s")
    done = None
    for _ in range(3):   # direct compaction and reclaim stall: until the condition held once
        done = subprocess.run([sys.executable, str(squeeze), "2500", "1536"], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        if flight.wait_for("trigger psi.memory.some", 5):
            break
    stalled_us = psi_some_total_us() - stalled_before
    assert Path("/proc/sys/vm/nr_hugepages").read_text().strip() == nr_hugepages
    fired = flight.wait_for("wrote ", 60)
    flight.signal(signal.SIGINT)
    rc, stderr = flight.finish()
    assert rc == 0, stderr
    assert fired, "no bundle although tasks stalled %d ms on memory (%s): %s" % (
        stalled_us // 1000, done.stderr.strip(), stderr)
    (bundle,) = bundles(tmp_path / "flight")[:1]
    t = manifest(bundle)["trigger"]
    assert t["reason"] == "psi.memory.some" and t["condition"] == PSI_CONDITION
    d = t["detail"]
    # The value is the share the detail's own numbers give, over at least the window, above
    # the threshold; the stall it counts happened while the test squeezed (the oracle's total).
    assert t["value"] == pytest.approx(100 * d["stall_us"] / ((d["to_mono_ns"] - d["from_mono_ns"])
                                                             / 1e3), abs=1e-3)
    assert t["value"] >= 2.0 and d["to_mono_ns"] - d["from_mono_ns"] >= 2e9
    assert start <= d["from_mono_ns"] and 0 < d["stall_us"] <= stalled_us


@pytest.mark.parametrize("which", ["this python", "python3.8"])
def test_pyz_has_the_flight_mode(tmp_path, before, which):
    """The single-file build, alone (-S, no PYTHONPATH), on this Python and on 3.8, the oldest
    that capture supports."""
    if which == "python3.8":
        from test_capture_record import _python38
        python = _python38()
        if python is None:
            requirements.skip("python38", "no python3.8 on this machine, and Debian has "
                              "no package for it (apt-cache policy python3.8: no candidate)")
    else:
        python = sys.executable
    pyz = tmp_path / "kmemscope-record.pyz"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, str(root / "capture" / "build_pyz.py"), str(pyz)], check=True,
                   capture_output=True)
    env = dict(os.environ, PYTHONPATH="", PYTHONNOUSERSITE="1")
    flight = Flight(command=[python, "-S", str(pyz), "--flight", "-o", str(tmp_path / "f"),
                             *QUICK], env=env)
    flight.signal(signal.SIGUSR1)
    assert flight.wait_for("wrote ", 30), flight.text()
    flight.signal(signal.SIGTERM)
    rc, stderr = flight.finish()
    assert rc == 0, stderr
    version = subprocess.run([python, "-S", str(pyz), "--version"], capture_output=True, text=True,
                             env=env)
    expected = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", (root / "common" / "version.py")
                         .read_text(), re.M).group(1)
    assert version.returncode == 0 and version.stdout.strip() == "kmemscope record " + expected, \
        version
    (bundle,) = bundles(tmp_path / "f")
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["trigger"]["reason"] == "manual" and m["window"]["after_buffer"] == AFTER.name
