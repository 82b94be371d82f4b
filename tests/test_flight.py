"""`kmemscope record --flight` on this machine's kernel.

Each test holds the machine-wide tracing lock and compares the tracing state
before and after with capture_helpers' reader, which shares no code with
capture/. Event times come from `trace-cmd report` (the independent decoder),
trigger times from this process's CLOCK_MONOTONIC, counter rates from
/proc/vmstat read here and from the bundle's samples parsed here.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capture_helpers import (PINNED_WORKLOAD, SQUEEZE, Flight, children, manifest, report_cpu_span,
                             run_record, sample_headers, stop_all_flights, trace_cmd_processes_under,
                             trace_cmd_report, tracing_state, vmstat_now, vmstat_samples, wait_for)

pytestmark = pytest.mark.usefixtures("live_tracefs", "tracing_lock")

STATE_FILE = Path("/run/kmemscope/record-state.json")
# Few events, quick to start and to extract: the exit-path tests need no volume.
QUICK = ("-e", "compaction", "--keep", "2s", "--after", "1s", "--measure", "1s")


@pytest.fixture
def before():
    """The tracing state before the test; the test must leave it the same (a recorder that a
    failed assertion left running is stopped first)."""
    state = tracing_state()
    yield state
    stop_all_flights()
    assert tracing_state() == state


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


def last_error_line(stderr):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert "Traceback" not in stderr, stderr
    return lines[-1]


# ---------------------------------------------------------------- the window around a trigger

def test_sigusr1_bundle_holds_keep_before_and_after_the_trigger(tmp_path, before):
    keep, after, cpu = 4.0, 2.0, 1 if os.cpu_count() > 1 else 0
    load = tmp_path / "load.py"
    load.write_text(PINNED_WORKLOAD)
    work = subprocess.Popen([sys.executable, str(load), "40", str(cpu), "0.002"])
    try:
        time.sleep(1)
        flight = Flight("-o", tmp_path / "flight", "-e", "kmem:mm_page_free", "--keep", "4s",
                        "--after", "2s", "--measure", "2s", "--interval", "0.5s")
        # Long enough for the buffer to wrap (and to have grown, if it had to).
        time.sleep(keep + after + 6)
        t0 = mono_ns()
        flight.signal(signal.SIGUSR1)
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
    trigger_ns = m["trigger"]["time"]["mono_ns"]
    assert t0 <= trigger_ns <= t1 + 200_000_000
    assert m["trigger"]["reason"] == "manual" and m["labels"]["trigger"] == "manual"
    assert m["window"]["complete"] is True, m["window"]
    assert m["lost"]["overwritten_in_window_estimated"] == 0

    # The busy CPU's events, read by trace-cmd: from about --keep before to about --after after.
    first, last = report_cpu_span(bundle / "trace.dat", cpu)
    before_s, after_s = (trigger_ns - first) / 1e9, (last - trigger_ns) / 1e9
    assert keep * 0.9 <= before_s <= keep + 0.6 * (keep + after), before_s
    assert after - 0.2 <= after_s <= after + 1.0, after_s
    # The ring buffer really wrapped: trace-cmd's own counters say the busy CPU overran, and the
    # manifest counts those events as overwritten before the window.
    stat = "\n".join(trace_cmd_report(bundle / "trace.dat", "--stat"))
    overruns = {int(c): int(n) for c, n in
                __import__("re").findall(r"CPU: (\d+)\nentries: \d+\noverrun: (\d+)", stat)}
    assert overruns[cpu] > 0
    per_cpu = {r["cpu"]: r for r in m["lost"]["per_cpu"]}
    assert per_cpu[cpu]["overrun"] == overruns[cpu] == per_cpu[cpu]["overwritten_before_window"]
    assert m["lost_events"] == 0

    # procfs samples of the window only, every 0.5 s.
    heads = sample_headers(bundle / "procfs" / "vmstat")
    assert heads == sorted(heads) and len(heads) == m["samples"]
    assert trigger_ns - (keep + 1.0) * 1e9 <= heads[0] <= trigger_ns - (keep - 0.5) * 1e9
    assert heads[-1] >= trigger_ns + (after - 0.6) * 1e9
    assert len(heads) >= (keep + after) / 0.5 - 2
    for name in ("pagetypeinfo", "buddyinfo"):
        assert sample_headers(bundle / "procfs" / name)
    assert oct(bundle.stat().st_mode & 0o777) == "0o700"


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
        pytest.skip("compaction stalled %d times on an idle machine: someone else squeezes it" % stalls)
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


# ---------------------------------------------------------------- leaving the host as found

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stop_signal_restores_tracefs_and_finishes_a_pending_bundle(tmp_path, before, sig):
    flight = Flight("-o", tmp_path / "flight", *QUICK[:-4], "--after", "30s", "--measure", "1s")
    assert tracing_state() != before  # tracing in the kernel, nobody reading
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
    assert tracing_state() != before
    flight.proc.kill()
    flight.finish()
    assert wait_for(lambda: tracing_state() == before, 30)
    assert wait_for(lambda: not Path("/proc/%d" % guard).exists()
                    or "Z" in Path("/proc/%d/stat" % guard).read_text().split(")")[1][:3], 30)
    assert not STATE_FILE.exists()
    assert trace_cmd_processes_under(tmp_path) == []
    again = run_record("--cleanup")
    assert again.returncode == 0 and "nothing to clean up" in again.stderr


def test_sigkill_of_recorder_and_guard_leaves_no_trace_cmd_and_cleanup_restores(tmp_path, before):
    flight = Flight("-o", tmp_path / "flight", *QUICK)
    (guard,) = children(flight.pid)
    os.kill(guard, signal.SIGKILL)
    flight.proc.kill()
    flight.finish()
    time.sleep(1)
    # The kernel still traces into its bounded buffer, but no trace-cmd runs unbounded.
    assert trace_cmd_processes_under(tmp_path) == []
    assert tracing_state() != before and STATE_FILE.exists()
    result = run_record("--cleanup")
    assert result.returncode == 0, result.stderr
    assert "restored the tracing state" in result.stderr
    assert tracing_state() == before


def test_a_failing_restart_ends_the_recorder_with_one_error_and_restores(tmp_path, before):
    """trace-cmd that starts once and then refuses: the bundle is kept, the host restored."""
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
    assert last_error_line(stderr).startswith("kmemscope: error: trace-cmd start failed")
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


def test_psi_trigger_is_accepted_by_the_kernel(tmp_path, before):
    if not Path("/proc/pressure/memory").exists():
        pytest.skip("this kernel has no /proc/pressure/memory")
    flight = Flight("-o", tmp_path / "flight", *QUICK, "--trigger", "psi.memory.some>50%@2s",
                    "--duration", "4s")
    rc, stderr = flight.finish()
    assert rc == 0, stderr
    assert "psi.memory.some>50%@2s" in stderr


def test_pyz_has_the_flight_mode(tmp_path, before):
    pyz = tmp_path / "kmemscope-record.pyz"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, str(root / "capture" / "build_pyz.py"), str(pyz)], check=True,
                   capture_output=True)
    from test_capture_record import _python38
    python = _python38() or sys.executable  # the oldest Python capture supports, where there is one
    env = dict(os.environ, PYTHONPATH="", PYTHONNOUSERSITE="1")
    flight = Flight(command=[python, "-S", str(pyz), "--flight", "-o", str(tmp_path / "f"),
                             *QUICK], env=env)
    flight.signal(signal.SIGUSR1)
    assert flight.wait_for("wrote ", 30), flight.text()
    flight.signal(signal.SIGTERM)
    rc, stderr = flight.finish()
    assert rc == 0, stderr
    (bundle,) = bundles(tmp_path / "f")
    assert json.loads((bundle / "manifest.json").read_text())["trigger"]["reason"] == "manual"
