"""The flight recorder's pure parts: trigger conditions, their evaluation, the window's
accounting of lost events, buffer sizing, the rolling sample store. No root needed.

Counter values are written out by hand in each test (the arithmetic is the oracle);
the PSI and vmstat texts are real 6.18 readings (tests/data/procfs).
"""
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

import requirements
from kmemscope.capture import flight, triggers
from kmemscope.capture.sampler import RollingSampler
from kmemscope.common.errors import CaptureError

ROOT = Path(__file__).resolve().parent.parent
VMSTAT_618 = ROOT / "tests" / "data" / "procfs" / "linux-6.18" / "vmstat"


@pytest.mark.parametrize("text, kind, name, threshold, unit, window", [
    ("psi.memory.some>10%", "psi", "some", 10.0, "%", 2.0),
    ("psi.memory.full>2.5@4s", "psi", "full", 2.5, "%", 4.0),
    ("vmstat.compact_stall>20/s@5s", "vmstat", "compact_stall", 20.0, "/s", 5.0),
    ("vmstat.allocstall_normal > 1", "vmstat", "allocstall_normal", 1.0, "/s", 5.0),
    ("thp.fallback>50%@30s", "thp", "fallback", 50.0, "%", 30.0),
])
def test_trigger_conditions_parse(text, kind, name, threshold, unit, window):
    t = triggers.parse_trigger(text)
    assert (t.kind, t.name, t.threshold, t.unit, t.window_s) == (kind, name, threshold, unit, window)
    assert triggers.parse_trigger(t.condition).condition == t.condition


@pytest.mark.parametrize("text, words", [
    ("compact_stall>1", "unknown trigger"),
    ("vmstat.compact_stall<1", "bad trigger"),
    ("vmstat.compact_stall>1%", "takes a threshold in /s"),
    ("psi.memory.some>5/s", "takes a threshold in %"),
    ("psi.memory.some>0", "not a share"),
    ("psi.memory.some>10%@20s", "0.5-10 s"),
    ("psi.io.some>10%", "unknown trigger"),
    ("vmstat.Compact>1", "bad trigger"),
])
def test_bad_conditions_are_one_clear_error(text, words):
    with pytest.raises(CaptureError) as err:
        triggers.parse_trigger(text)
    assert words in str(err.value)


def test_psi_windows_without_cap_sys_resource_are_whole_2s():
    triggers.check_psi_window(2.0, privileged=False)
    triggers.check_psi_window(10.0, privileged=False)
    triggers.check_psi_window(0.5, privileged=True)
    for window in (1.0, 3.0, 0.5):
        with pytest.raises(CaptureError, match="multiples of 2 s"):
            triggers.check_psi_window(window, privileged=False)


def test_capability_bit_is_read_from_capeff(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t000001fffeffffff\n")       # the test VM: no bit 24
    assert not triggers.has_capability(24, str(status))
    assert triggers.has_capability(21, str(status))
    status.write_text("CapEff:\t000001ffffffffff\n")
    assert triggers.has_capability(24, str(status))


def test_stall_share_over_the_window():
    text = ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=500000\n")
    assert triggers.parse_pressure(text) == {"some": 1000000, "full": 500000}
    rows = [(0, {"some": 0, "full": 0}), (1_000_000_000, {"some": 100_000, "full": 0}),
            (2_000_000_000, {"some": 300_000, "full": 50_000})]
    assert triggers.stall_share(rows, "some", 2.0) == pytest.approx(15.0)   # 300 ms of 2 s
    assert triggers.stall_share(rows, "some", 1.0) == pytest.approx(20.0)   # 200 ms of 1 s
    assert triggers.stall_share(rows, "full", 2.0) == pytest.approx(2.5)
    assert triggers.stall_share(rows[:1], "some", 2.0) is None


def test_vmstat_rate_fires_above_the_threshold_only():
    t = triggers.parse_trigger("vmstat.compact_stall>20/s@2s")
    s = 1_000_000_000
    rows = [(0, {"compact_stall": 100}), (1 * s, {"compact_stall": 110}),
            (2 * s, {"compact_stall": 130}), (3 * s, {"compact_stall": 190})]
    # newest (3 s, 190) against the newest at least 2 s older (1 s, 110): 40/s
    got = triggers.evaluate(t, rows)
    assert got["value"] == 40.0 and got["increase"] == 80 and got["over_s"] == 2.0
    assert (got["from_mono_ns"], got["to_mono_ns"]) == (1 * s, 3 * s)
    assert triggers.evaluate(t, rows[:3]) is None     # (2 s, 130) vs (0, 100): 15/s
    assert triggers.evaluate(t, rows[:2]) is None     # not 2 s of history yet


def test_thp_fallback_share_needs_enough_faults():
    t = triggers.parse_trigger("thp.fallback>50%@1s")
    s = 1_000_000_000
    few = [(0, {"thp_fault_alloc": 0, "thp_fault_fallback": 0}),
           (s, {"thp_fault_alloc": 1, "thp_fault_fallback": 5})]
    assert triggers.evaluate(t, few) is None          # 6 faults < THP_MIN_FAULTS
    many = [(0, {"thp_fault_alloc": 10, "thp_fault_fallback": 0}),
            (s, {"thp_fault_alloc": 14, "thp_fault_fallback": 12})]
    got = triggers.evaluate(t, many)
    assert got["value"] == 75.0 and got["thp_fault_fallback"] == 12 and got["thp_fault_alloc"] == 4


def test_counters_are_checked_against_a_real_vmstat():
    text = VMSTAT_618.read_text()
    assert triggers.parse_vmstat(text)["compact_stall"] >= 0
    ok = [triggers.parse_trigger("vmstat.compact_stall>1"), triggers.parse_trigger("thp.fallback>5")]
    triggers.check_counters(ok, text)
    with pytest.raises(CaptureError, match="has no compact_stalls"):
        triggers.check_counters([triggers.parse_trigger("vmstat.compact_stalls>1")], text)


def test_window_accounting_tells_overwritten_before_from_inside():
    s = 1_000_000_000
    stats = {
        # overran; its oldest kept event (5 s) is before the window's start (6 s): all before
        0: {"overrun": 1000, "entries": 500, "oldest_event_ts": 5.0, "dropped_events": 0},
        # overran; keeps events from 8 s on: the 2 s of the window before were overwritten,
        # at the rate of the events kept (400 in 4 s: 100/s), so about 200 of its 900
        1: {"overrun": 900, "entries": 400, "oldest_event_ts": 8.0, "commit_overrun": 3},
        # never overran: complete since tracing started (1 s)
        2: {"overrun": 0, "entries": 10, "oldest_event_ts": 1.5},
    }
    rows, covered = flight.window_accounting(stats, window_start=6 * s, stop=12 * s,
                                             tracing_since=1 * s)
    by = {r["cpu"]: r for r in rows}
    assert by[0]["overwritten_before_window"] == 1000 and by[0]["overwritten_in_window_estimated"] == 0
    assert by[1]["overwritten_in_window_estimated"] == 200 and by[1]["overwritten_before_window"] == 700
    assert by[1]["commit_overrun"] == 3
    assert by[2]["covered_from_mono_ns"] == 1 * s and by[2]["overrun"] == 0
    assert covered == 8 * s
    # tracing (re)started at 9 s, after the oldest kept event of an overrun buffer (8 s):
    # nothing of the window was overwritten after tracing started, never a negative count
    rows, _ = flight.window_accounting(stats, window_start=6 * s, stop=12 * s, tracing_since=9 * s)
    assert all(r["overwritten_in_window_estimated"] == 0 for r in rows)
    assert {r["cpu"]: r["overwritten_before_window"] for r in rows} == {0: 1000, 1: 900, 2: 0}


def test_buffer_is_sized_for_the_busiest_cpu():
    before = {0: {"entries": 0, "overrun": 0}, 1: {"entries": 100, "overrun": 0}}
    after = {0: {"entries": 1000, "overrun": 0, "bytes": 32000},
             1: {"entries": 2000, "overrun": 4100, "bytes": 80000}}
    rates = flight.measured_rates(before, after, 2.0)
    assert rates[0] == (500.0, 16000.0)
    assert rates[1] == (3000.0, 3000.0 * 40)                  # 6000 written, 40 bytes each
    kb = flight.buffer_size_for({c: r[1] for c, r in rates.items()}, 10.0, margin=1.0)
    assert kb == int(120000 * 10 / 1024) + 1


def test_bundle_names_sort_by_time_and_are_safe():
    t = 1795495713 * 10**9
    assert flight.bundle_name(t, "vmstat.compact_stall") == "20261124T044833Z-vmstat.compact_stall"
    assert flight.bundle_name(t, "../x y") == "20261124T044833Z-.._x_y"


def test_rolling_store_keeps_only_its_seconds_and_writes_a_window(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    for name in ("vmstat", "pagetypeinfo", "buddyinfo"):
        (proc / name).write_text("%s 1\n" % name)
    seen = []
    store = RollingSampler(0.01, 0.05, proc=str(proc), on_sample=seen.append)
    for _ in range(30):
        store.sample()
        time.sleep(0.005)
    assert len(store.rows) <= store.max_rows and store.samples == 30 and len(seen) == 30
    assert seen[-1]["vmstat"][1] == "vmstat 1\n"
    newest = store.rows[-1][0]
    n = store.write_window(str(tmp_path / "out"), newest - 20_000_000, newest)
    text = (tmp_path / "out" / "vmstat").read_text()
    assert text.count("#kmemscope-sample mono_ns=") == n >= 2
    # the same format ProcfsSampler writes: header line, then the file's text
    assert text.splitlines()[1] == "vmstat 1"


def test_a_slow_source_is_read_at_its_own_cadence_and_when_wanted(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    for name in ("vmstat", "pagetypeinfo", "buddyinfo"):
        (proc / name).write_text("%s 1\n" % name)
    store = RollingSampler(0.01, 60, proc=str(proc), every_s={"pagetypeinfo": 3600})
    for n in range(20):
        if n == 12:
            store.want("pagetypeinfo")    # a trigger: the next sample reads it
        store.sample()
    have = [i for i, (_, texts) in enumerate(store.rows) if "pagetypeinfo" in texts]
    assert have == [0, 12]
    assert all("vmstat" in texts and "buddyinfo" in texts for _, texts in store.rows)
    start = store.rows[5][0]
    store.write_window(str(tmp_path / "out"), start, store.rows[-1][0])
    heads = lambda name: re.findall(r"^#kmemscope-sample mono_ns=(\d+)",
                                    (tmp_path / "out" / name).read_text(), re.M)
    # pagetypeinfo: its own sample before the window (the first) and the wanted one in it
    first, wanted = [int(h) for h in heads("pagetypeinfo")]
    assert store.rows[0][0] <= first < store.rows[1][0]
    assert store.rows[12][0] <= wanted < store.rows[13][0]
    assert len(heads("vmstat")) == 1 + 15     # the one before the window, then rows 5..19


def test_restore_after_a_flight_resize_on_a_fresh_boot(tmp_path):
    """A flight recorder resizes the buffer while tracing; a fresh boot's size comes back."""
    from kmemscope.capture import state
    from test_capture_units import TRACED, _fake_tracefs, _reading
    fake = _fake_tracefs(tmp_path, ROOT / "tests" / "data" / "tracefs" / "fresh-boot-6.18")
    snap = state.snapshot(str(fake), ["kmem"])
    for name in ("buffer_size_kb", "per_cpu/cpu0/buffer_size_kb", "per_cpu/cpu1/buffer_size_kb"):
        (fake / name).write_text("139620\n")
    (fake / "options" / "overwrite").write_text("1\n")
    assert state.restore(snap) == []
    for cpu in (0, 1):
        assert (fake / "per_cpu" / ("cpu%d" % cpu) / "buffer_size_kb").read_text() == \
            _reading(TRACED, "per_cpu_cpu%d_buffer_size_kb" % cpu)


# ---------------------------------------------------------------- buffer sizing (ringsize.py)

def test_the_buffers_never_exceed_the_ceiling_whatever_the_rate():
    from kmemscope.capture import ringsize
    # 64 MiB for 2 CPUs, 8 s before and 2 s after: 32 MiB per CPU, 1/5 of it for --after.
    plan = ringsize.BufferPlan(keep=8, after=2, ncpu=2, max_total_kb=64 << 10)
    per_cpu = 32 << 10
    assert plan.after_ceiling_kb == per_cpu // 5
    assert plan.top_ceiling_kb + plan.after_ceiling_kb + 2 * ringsize.ROUNDING_KB == per_cpu
    plan.observe(0, 3e9)                     # a burst: 3 GB/s on the busiest CPU
    assert plan.capped()
    top, after = plan.targets()
    assert (top, after) == (plan.top_ceiling_kb, plan.after_ceiling_kb)
    # Growth goes in steps of at most GROW_STEP_KB, and stops at the ceiling.
    size, steps = 1024, 0
    while True:
        nxt = plan.step(size, top)
        if nxt is None:
            break
        assert 0 < nxt - size <= ringsize.GROW_STEP_KB
        size, steps = nxt, steps + 1
    assert size == plan.top_ceiling_kb and steps == -(-(plan.top_ceiling_kb - 1024)
                                                        // ringsize.GROW_STEP_KB)
    # 1 MB/s holds 8 s in 8 * 1e6 * 1.15 / 1024 KiB: the plan wants that, within the ceiling.
    small = ringsize.BufferPlan(keep=8, after=2, ncpu=2, max_total_kb=64 << 10)
    small.observe(0, 1e6)
    assert small.targets()[0] == int(8 * 1e6 * ringsize.MARGIN / 1024) + 1
    assert small.holds_s(8192, 1e6) == pytest.approx(8192 * 1024 / 1e6)


def test_the_buffer_shrinks_only_after_the_rate_stayed_low_for_the_whole_history():
    from kmemscope.capture import ringsize
    plan = ringsize.BufferPlan(keep=4, after=1, ncpu=1, max_total_kb=1 << 20)
    plan.observe(0, 50e6)                     # a burst wants a large buffer
    big = plan.targets()[0]
    t = 0
    while t <= ringsize.RATE_HISTORY_S * 1e9:  # a minute of quiet, read every 2 s
        t += 2_000_000_000
        plan.observe(t, 10e3)
        if t <= ringsize.RATE_HISTORY_S * 1e9:
            # the burst is still in the history: no shrink yet
            assert plan.step(big, plan.targets()[0]) is None
    target = plan.targets()[0]
    assert target == ringsize.MIN_BUFFER_KB   # 10 kB/s * 4 s is far below the minimum
    assert plan.step(big, target) == target   # one write down
    assert plan.step(target, target) is None
    # A fixed --buffer-kb never moves.
    fixed = ringsize.BufferPlan(keep=4, after=1, ncpu=1, max_total_kb=1 << 20, fixed_top_kb=4096)
    fixed.observe(0, 10.0)
    fixed.observe(61_000_000_000, 10.0)
    assert fixed.step(4096, fixed.targets()[0]) is None


@pytest.mark.parametrize("avail_kb, avg10, grow_kb, short", [
    (20 << 20, 0.0, 64 << 10, None),          # 20 GiB of 24 available, no stall
    (2 << 20, 0.0, 64 << 10, "MemAvailable"),  # under 10% of 24 GiB once grown
    (20 << 20, 4.5, 64 << 10, "stalled"),     # memory pressure right now
    (20 << 20, None, 64 << 10, None),         # no PSI on this kernel: MemAvailable decides
])
def test_growth_waits_while_memory_is_short(avail_kb, avg10, grow_kb, short):
    from kmemscope.capture import ringsize
    why = ringsize.memory_short({"MemTotal": 24 << 20, "MemAvailable": avail_kb}, avg10, grow_kb)
    assert (why is None) if short is None else (short in why)


def test_psi_avg10_is_read_from_the_some_line():
    from kmemscope.capture import ringsize
    text = ("some avg10=3.25 avg60=0.03 avg300=0.29 total=2558957\n"
            "full avg10=1.50 avg60=0.02 avg300=0.20 total=1892503\n")
    assert ringsize.parse_psi_avg10(text) == 3.25
    assert ringsize.parse_psi_avg10(text, "full") == 1.5
    assert ringsize.parse_psi_avg10("") is None


# ---------------------------------------------------------------- PSI confirmation

def test_psi_condition_needs_a_whole_window_of_readings_and_reports_its_share(tmp_path):
    psi = tmp_path / "memory"
    history = triggers.PsiHistory(10, path=str(psi))
    lines = "some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0 avg60=0 avg300=0 total=0\n"
    # Stalls since boot (5 s of them) say nothing about now: two readings 1 s apart.
    for t, total in ((0, 5_000_000), (1_000_000_000, 5_000_000)):
        psi.write_text(lines % total)
        history.read(t)
    assert history.check("some", 2.0, 5.0) is None           # less than a window read yet
    psi.write_text(lines % 5_000_000)
    history.read(2_100_000_000)
    assert history.check("some", 2.0, 5.0) is None           # a quiet window: 0%
    psi.write_text(lines % 5_300_000)                        # then 300 ms stalled
    history.read(3_100_000_000)
    detail = history.check("some", 2.0, 5.0)
    # newest reading at least 2 s older than 3.1 s is the one at 1.0 s: 300 ms over 2.1 s
    assert detail["value"] == pytest.approx(100 * 0.3 / 2.1, abs=1e-3)
    assert (detail["from_mono_ns"], detail["to_mono_ns"]) == (1_000_000_000, 3_100_000_000)
    assert detail["stall_us"] == 300_000
    assert history.check("some", 2.0, 15.0) is None          # 14.3% is under 15%


def test_report_stat_of_a_bundle_with_the_after_instance():
    from kmemscope.capture.tracecmd import parse_report_stat, parse_report_stat_buffers
    text = ("cpus=2\n\nKernel buffer statistics:\n\nCPU: 0\nentries: 0\noverrun: 120\n"
            "read events: 172\n\nCPU: 1\nentries: 0\noverrun: 0\nread events: 27\n\n\n"
            "Buffer: kmemscope-flight-after\n\n\nCPU: 0\nentries: 0\noverrun: 0\n"
            "dropped events: 9\nread events: 202\n\nCPU: 1\nentries: 2\noverrun: 0\n"
            "read events: 119\n\n\nCPU0 data recorded at offset=0x1000\n")
    found = parse_report_stat_buffers(text)
    assert set(found) == {"", "kmemscope-flight-after"}
    assert found[""][0] == {"entries": 0, "overrun": 120, "read_events": 172}
    assert found["kmemscope-flight-after"][0]["dropped_events"] == 9
    assert found["kmemscope-flight-after"][1]["read_events"] == 119
    assert parse_report_stat(text) == found[""]


def test_a_psi_wake_up_fires_only_when_a_whole_window_of_readings_confirms_it(tmp_path):
    """The recorder's handling of the kernel's wake-ups, with readings written here: one at
    start (stalls since boot, an unarmed trigger) and one with too little stall do not fire;
    the one whose window holds the stall does, with that share as its value."""
    psi = tmp_path / "memory"
    lines = "some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0 avg60=0 avg300=0 total=0\n"
    rec = flight.FlightRecorder(flight.FlightOptions(str(tmp_path / "f")), say=lambda text: None)
    rec.psi = triggers.PsiHistory(6, path=str(psi))
    fired = []
    rec._fire = lambda info, detail, when: fired.append((info["reason"], detail))

    class Watch:
        trigger = triggers.parse_trigger("psi.memory.some>5%@2s")

    def reading(t_s, total_us):
        psi.write_text(lines % total_us)
        rec.psi.read(int(t_s * 1e9))

    reading(0.0, 7_000_000)                  # 7 s of stalls since boot
    rec.psi_armed_ns = int(2e9)              # armed one window after the first reading
    psi.write_text(lines % 7_000_000)
    rec._on_psi(Watch, int(0.05e9))          # the kernel wakes poll() at once: not armed
    assert fired == [] and rec.not_armed == 1 and not rec.psi_woken
    for t in (1.0, 2.0, 2.1):
        reading(t, 7_000_000 + 10_000)       # 10 ms of stall: 0.5% of the window
    psi.write_text(lines % 7_010_000)
    rec._on_psi(Watch, int(2.2e9))
    rec._confirm_psi(int(4.5e9))             # a whole window later, still not confirmed
    assert fired == [] and rec.unconfirmed == 1
    reading(4.6, 7_010_000)
    reading(5.0, 7_010_000 + 400_000)        # 400 ms stalled since 2.2 s: 14.3% over 2.8 s
    psi.write_text(lines % 7_410_000)
    rec._on_psi(Watch, int(5.0e9))
    (reason, detail), = fired
    assert reason == "psi.memory.some"
    # the newest reading at least 2 s before the wake-up's own (at 5.0 s) is the recorder's
    # own at the earlier wake-up, 2.2 s
    assert detail["value"] == pytest.approx(100 * 0.4 / 2.8, abs=1e-3)
    assert detail["value"] is not None and detail["stall_us"] == 400_000


# ---------------------------------------------------------------- small things a user sees

@pytest.mark.parametrize("args, words", [
    (["--after", "-1s"], "a duration cannot be negative: '-1s'"),
    (["--cooldown", "-5s"], "a duration cannot be negative: '-5s'"),
    (["--max-disk", "-1G"], "a size cannot be negative: '-1G'"),
    (["--max-disk", "0"], "--max-disk must be positive"),
    (["--max-buffer", "0"], "--max-buffer must be positive"),
    (["--max-buffer", "1k"], "--max-buffer 1.0 KiB is less than"),
])
def test_bad_flight_numbers_are_one_clear_line(tmp_path, args, words):
    import subprocess
    import sys
    if os.geteuid() != 0:
        requirements.skip("tracefs", "record checks these after the root check, and this is not root")
    result = subprocess.run([sys.executable, "-m", "kmemscope.capture", "--flight", "-o",
                             str(tmp_path / "f"), *args], capture_output=True, text=True, timeout=60)
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert result.returncode in (1, 2) and len(lines) == 1, result.stderr
    assert lines[0].startswith("kmemscope: error: ") and words in lines[0], result.stderr
    assert not (tmp_path / "f").exists()


def test_the_wrote_line_says_after_when_the_first_event_followed_the_trigger():
    assert flight._start_text(4_000_000_000) == "4.0 s before the trigger"
    assert flight._start_text(-500_000_000) == "0.5 s after the trigger"


def test_suppressed_before_counts_since_the_previous_bundle(tmp_path):
    rec = flight.FlightRecorder(flight.FlightOptions(str(tmp_path / "f"), cooldown=60.0),
                                say=lambda text: None)
    rec._freeze = lambda: (0, None)

    class Sampler:
        def want(self, name):
            pass
    rec.sampler = Sampler()
    manual = {"reason": "manual", "condition": "SIGUSR1", "kind": "manual"}
    second = 1_000_000_000
    rec._fire(manual, {"signal": "SIGUSR1"}, 100 * second)
    first = rec.pending["trigger"]
    rec.pending = None                                   # as _write_bundle does
    for t in (110, 120, 130):                            # inside the 60 s cooldown
        rec._fire(manual, {"signal": "SIGUSR1"}, t * second)
    rec._fire(manual, {"signal": "SIGUSR1"}, 200 * second)
    assert first["suppressed_before"] == {}
    assert rec.pending["trigger"]["suppressed_before"] == {"cooldown": 3}
    rec.pending = None
    rec._fire(manual, {"signal": "SIGUSR1"}, 300 * second)
    assert rec.pending["trigger"]["suppressed_before"] == {}   # not the 3 of before
    assert "value" not in rec.pending["trigger"]               # a manual trigger has none


def test_window_trims_events_and_passes_the_stacks_table_whole():
    """Parse keeps a flight bundle's window: event rows outside it are left out and counted;
    the stacks table (no ts: one row per distinct kernel stack) goes through untouched."""
    import pyarrow as pa

    from kmemscope.parsers.flight_window import TrimmingSinks

    class Window:
        start_ns, end_ns = 100, 200
    got = []
    sinks = TrimmingSinks(lambda index: (lambda table, batch: got.append((table, batch))), Window)
    sink = sinks(0)
    sink("kernel_stack", pa.record_batch({"ts": [50, 150, 250], "stack_id": [1, 2, 1]}))
    stacks = pa.record_batch({"stack_id": [1, 2], "frames": [["a+0x1"], ["b+0x2"]]})
    sink("stacks", stacks)
    assert got[0][0] == "kernel_stack" and got[0][1].to_pydict() == {"ts": [150], "stack_id": [2]}
    assert got[1] == ("stacks", stacks)
    assert (sinks.trimmed_before, sinks.trimmed_after) == (1, 1)


# ---------------------------------------------------------------- its own instances (instance.py)

def _wanted():
    return {"tracing_on": "1", "trace_clock": "mono", "buffer_size_kb": 4096, "overwrite": "1",
            "events": ["kmem:mm_page_alloc", "kmem:mm_page_free"],
            "filters": {"kmem:mm_page_alloc": ("order > 0", "(order > 0)"),
                        "kmem:mm_page_free": ("none",)}}


def _settings(**changes):
    base = {"tracing_on": "1", "trace_clock": "mono", "buffer_size_kb": "4100", "overwrite": "1",
            "events": ["kmem:mm_page_alloc", "kmem:mm_page_free"],
            "filters": {"kmem:mm_page_alloc": "order > 0", "kmem:mm_page_free": "none"}}
    base.update(changes)
    return base


@pytest.mark.parametrize("now, said, only_on", [
    (_settings(), [], False),
    (None, ["the instance was removed"], False),
    (_settings(tracing_on="0"), ["tracing_on 0 (was 1)"], True),
    (_settings(events=["kmem:mm_page_alloc"]), ["events disabled: kmem:mm_page_free"], False),
    (_settings(filters={"kmem:mm_page_alloc": "order > 3", "kmem:mm_page_free": "none"}),
     ["filters changed: kmem:mm_page_alloc (order > 3)"], False),
    (_settings(tracing_on="0", buffer_size_kb="2050"),
     ["tracing_on 0 (was 1)", "buffer_size_kb 2050 (was 4096)"], False),
    # the kernel rounds a size up to whole sub-buffers: not a change; more than that is
    (_settings(buffer_size_kb="4096"), [], False),
    (_settings(buffer_size_kb="8192"), ["buffer_size_kb 8192 (was 4096)"], False),
    (_settings(buffer_size_kb="X"), ["buffer_size_kb X (was 4096)"], False),
    # a freshly booted host's unexpanded buffer reads as its token size, not as the size
    # tracing would expand it to: an instance that reads so was not set up as asked
    (_settings(buffer_size_kb="7 (expanded: 4096)"),
     ["buffer_size_kb 7 (expanded: 4096) (was 4096)"], False),
])
def test_what_something_else_changed_in_an_instance(now, said, only_on):
    """drift() compares a reading with what the options ask for (wanted()), never with an
    earlier reading: a halved buffer read back at setup is still a change."""
    from kmemscope.capture import instance
    assert instance.drift(_wanted(), now) == said
    assert instance.only_tracing_on(_wanted(), now) is only_on


def test_what_the_recorder_wants_comes_from_its_specs(tmp_path):
    """A whole system's events from the catalog's directories; a filtered system's events may
    read 'none' (the kernel skips the events whose fields the filter lacks)."""
    from kmemscope.capture import instance
    from kmemscope.capture.presets import EventSpec
    for rel in ("kmem/mm_page_alloc", "kmem/mm_page_free", "compaction/mm_compaction_begin",
                "compaction/mm_compaction_end"):
        (tmp_path / "events" / rel).mkdir(parents=True)
    (tmp_path / "events" / "compaction" / "enable").write_text("0\n")   # a file, not an event
    events = instance.spec_events(str(tmp_path), [
        EventSpec("kmem", "mm_page_alloc", "order > 0"), EventSpec("kmem", "mm_absent"),
        EventSpec("compaction", "*", "nr_scanned > 0")])
    assert events == {"kmem:mm_page_alloc": ("order > 0", "(order > 0)"),
                      "compaction:mm_compaction_begin": ("nr_scanned > 0", "(nr_scanned > 0)",
                                                         "none"),
                      "compaction:mm_compaction_end": ("nr_scanned > 0", "(nr_scanned > 0)",
                                                       "none")}
    idle = instance.wanted(events, 1000, False, False, False)
    assert (idle["tracing_on"], idle["overwrite"], idle["events"]) == ("0", "0", [])
    assert sorted(instance.wanted(events, 1000, True, True, True)["events"]) == sorted(events)


def test_settings_of_an_instance_directory(tmp_path):
    """A directory laid out as tracefs lays out an instance: what the recorder checks, the
    enabled events from set_event (one read) whatever the enable files say."""
    from kmemscope.capture import instance
    inst = tmp_path / "inst"
    for rel, text in {"tracing_on": "1\n", "trace_clock": "local [mono] boot\n",
                      "buffer_size_kb": "4100\n", "options/overwrite": "0\n",
                      "set_event": "kmem:mm_page_alloc\ncompaction:mm_compaction_end*\n",
                      "events/kmem/mm_page_alloc/enable": "0\n",
                      "events/kmem/mm_page_alloc/filter": "order > 0\n",
                      "events/kmem/mm_page_free/filter": "none\n"}.items():
        (inst / rel).parent.mkdir(parents=True, exist_ok=True)
        (inst / rel).write_text(text)
    got = instance.settings(str(inst), ["kmem:mm_page_alloc"])
    assert got == {"tracing_on": "1", "trace_clock": "mono", "buffer_size_kb": "4100",
                   "overwrite": "0", "events": ["compaction:mm_compaction_end",
                                                "kmem:mm_page_alloc"],
                   "filters": {"kmem:mm_page_alloc": "order > 0"}}
    idle = instance.settings(str(inst), ["kmem:mm_page_free"])
    assert idle["filters"] == {"kmem:mm_page_free": "none"}
    assert instance.settings(str(tmp_path / "gone"), []) is None


def test_blind_stretches_are_clipped_to_the_window():
    from kmemscope.capture import instance
    blind = [{"from_mono_ns": 10, "to_mono_ns": 20, "what": "a"},
             {"from_mono_ns": 30, "to_mono_ns": 50, "what": "b"},
             {"from_mono_ns": 60, "to_mono_ns": 70, "what": "c"}]
    assert instance.blind_in(blind, 15, 40) == [
        {"from_mono_ns": 15, "to_mono_ns": 20, "what": "a"},
        {"from_mono_ns": 30, "to_mono_ns": 40, "what": "b"}]
    assert instance.blind_in(blind, 20, 30) == []


def test_the_disk_bound_of_a_bundle():
    """Twice each CPU's pages (data, a header per page, a partial page at each end), twice
    the samples, and the room for the rest: counted here page by page."""
    stats = [{0: {"bytes": 4000 * 10}, 1: {"bytes": 0}}, {0: {"bytes": 3999}}]
    pages = (10 + 2) + (0 + 2) + (0 + 2)
    assert flight.bundle_bound(stats, 1000) == 2 * pages * 4096 + 2 * 1000 + flight.BUNDLE_ROOM
    assert flight.bundle_bound(stats, 1000, room=7) == 2 * pages * 4096 + 2 * 1000 + 7


def test_kallsyms_is_counted_by_reading_it(tmp_path):
    """/proc/kallsyms says 0 bytes to stat: its size is what a read returns."""
    path = tmp_path / "kallsyms"
    path.write_bytes(b"ffffffff81000000 T _stext\n" * 100000)
    assert flight.kallsyms_bytes(str(path)) == len(path.read_bytes())
    assert flight.kallsyms_bytes(str(tmp_path / "none")) == 0


@pytest.mark.parametrize("status, output, reason", [
    (28, "", "no output; status 28 is errno ENOSPC (No space left on device) if trace-cmd "
             "passed one on"),
    (1, "CPU0 data recorded\ntrace-cmd: No space left on device\n  writing to 'x'\n",
     "trace-cmd: No space left on device writing to 'x'"),
    (-9, "", "no output"),
])
def test_a_failed_trace_cmd_says_why(status, output, reason):
    from kmemscope.capture.tracecmd import failure_reason
    assert failure_reason(status, output) == reason


def test_the_runs_table_note_of_an_incomplete_window():
    from kmemscope.parsers import flight_window
    t = 100 * 10**9
    window = {"complete": False, "trigger_mono_ns": t, "after_s": 5.0, "after_kept_s": 1.5,
              "missing_s": 0, "blind": [{"from_mono_ns": t - 3_200_000_000,
                                         "to_mono_ns": t - 1_100_000_000, "what": "removed"}]}
    assert flight_window.window_note({"window": window}) == (
        "incomplete: blind -3.2 s to -1.1 s (removed); --after buffer full after 1.5 of 5 s")
    assert flight_window.window_note({"window": dict(window, complete=True)}) is None
    assert flight_window.window_note({"window": "junk"}) is None


def test_dropped_events_of_the_top_level_are_not_the_bundles():
    """A bundle of the recorder's own instances: trace.dat's first CPU counters (the top
    level, another tool's) are left out of what the window lost."""
    from kmemscope.capture.tracefs import parse_cpu_stats
    from kmemscope.parsers import flight_window
    texts = ["dropped events: 5\n", "dropped events: 6\n", "dropped events: 7\n",
             "dropped events: 11\n"]
    own = flight_window.Window(0, 1, 0, before_buffer="kmemscope-flight")
    old = flight_window.Window(0, 1, 0)
    assert flight_window.dropped_in_window(texts, 2, own, parse_cpu_stats) == 7 + 11
    assert flight_window.dropped_in_window(texts, 2, old, parse_cpu_stats) == 5 + 6 + 7 + 11


def test_cleanup_removes_only_a_recorders_own_instances(tmp_path, monkeypatch):
    from kmemscope.capture import cleanup, state
    removed = []
    monkeypatch.setattr(cleanup.tfs, "remove_instance", lambda root, name: removed.append(name))
    record = {"snapshot": {"tracefs": str(tmp_path), "boot_id": state.boot_id(),
                           "scope": "instances"},
              "instances": ["kmemscope-flight", "../../etc", "kmemscope-flight-after"]}
    state.save_file(cleanup.state_path(str(tmp_path)), record)
    assert cleanup.recover(str(tmp_path), lambda text: None)
    assert removed == ["kmemscope-flight", "kmemscope-flight-after"]


def test_heartbeat_gaps_are_the_runs_of_missing_heartbeats_inside_the_window():
    """Heartbeats written every 100 ns into the first instance, frozen at 1000; those found
    in the data are listed here. Each run of missing ones inside the window is one stretch
    from the last found before to the first found after (or the window's bounds)."""
    from kmemscope.parsers import flight_window
    written = [[seq, seq * 100] for seq in range(1, 13)]          # t = 100 .. 1200
    m = {"window": {"frozen_mono_ns": 1000, "trigger_mono_ns": 900,
                    "heartbeat": {"written": {"kmemscope-flight": written}}}}
    window = flight_window.Window(start_ns=250, end_ns=1100, trigger_ns=900,
                                  before_buffer="kmemscope-flight")
    found = {("kmemscope-flight", s) for s in (1, 2, 4, 5, 8)}    # 3; 6, 7; 9, 10 missing
    gaps = flight_window.heartbeat_gaps(m, window, found)
    # in the window: t 300..1000 (seq 3..10; 11 and 12 come after the freeze)
    assert [(g["from_mono_ns"], g["to_mono_ns"]) for g in gaps] == [(250, 400), (500, 800), (800, 1000)]
    assert [g["what"].split(":")[1].split()[0] for g in gaps] == ["1", "2", "2"]
    out = flight_window.with_heartbeat_gaps(m, gaps)
    assert out["window"]["complete"] is False and out["window"]["after_complete"] is False
    assert flight_window.with_heartbeat_gaps(m, []) is m
    assert flight_window.heartbeat_gaps({"window": {}}, window, set()) == []


@pytest.mark.parametrize("heartbeat", [
    {"written": []}, {"written": {"x": [[1]]}}, {"written": {"x": [[1, -5]]}},
    {"written": {"x": [[True, 5]]}}, "no", {"written": {"x": "y"}},
])
def test_a_bad_heartbeat_list_is_one_error(heartbeat):
    from kmemscope.common.errors import TraceFileError
    from kmemscope.parsers import flight_window
    with pytest.raises(TraceFileError, match="no valid window.heartbeat"):
        flight_window.heartbeats_written({"window": {"heartbeat": heartbeat}}, "b")


def test_a_counter_of_any_length_is_one_clipped_line_naming_the_file_and_line():
    huge = "9" * 100_000
    with pytest.raises(CaptureError) as caught:
        triggers.parse_vmstat(f"pgfault 1\npgscan_kswapd {huge}\n")
    assert str(caught.value).startswith("/proc/vmstat: line 2: 999"), str(caught.value)
    assert "100000 characters" in str(caught.value) and len(str(caught.value)) < 200
    with pytest.raises(CaptureError) as caught:
        triggers.parse_pressure(f"some avg10=0 total=1\nfull avg10=0 total={huge}\n")
    assert str(caught.value).startswith(f"{triggers.PSI_PATH}: line 2: ")
    # digits int() refuses however short, and what no counter is, are skipped: no error
    assert triggers.parse_vmstat("a ²\nb ٣\nc 7\nd -2\n") == {"c": 7, "d": -2}
    assert triggers.parse_pressure("some total=² avg10=0\nfull total=3\n") == {"full": 3}


def test_a_trace_cmd_that_says_nothing_or_is_killed_leaves_no_log_file(tmp_path):
    """run_once runs the flight recorder's `trace-cmd start` and `extract`: an extract killed
    by SIGKILL (or a quiet start) said nothing, and leaves no 0-byte .trace-cmd.log behind;
    what one says is kept. A shell stands in for trace-cmd (no tracefs needed)."""
    import signal

    from kmemscope.capture.tracecmd import run_once

    log = tmp_path / ".trace-cmd.log"
    status, out = run_once(["sh", "-c", "kill -9 $$", "extract"], str(log), cwd=str(tmp_path))
    assert status == -signal.SIGKILL and out == ""
    status, out = run_once(["sh", "-c", "exit 0", "start"], str(log), cwd=str(tmp_path))
    assert status == 0 and out == ""
    assert list(tmp_path.iterdir()) == []
    status, out = run_once(["sh", "-c", "echo 'trace-cmd: No space left'; exit 28", "extract"],
                           str(log), cwd=str(tmp_path))
    assert status == 28 and log.read_text() == "trace-cmd: No space left\n"


def test_run_once_polls_while_trace_cmd_runs_and_keeps_its_whole_output(tmp_path):
    """on_poll runs while the command runs (the recorder reads a bundle's disk then): the
    command's output, written before and after the polls, comes back whole, and a command
    past its timeout is still killed. A shell stands in for trace-cmd."""
    from kmemscope.capture.tracecmd import run_once
    from kmemscope.common.errors import CaptureError

    polls = []
    script = "echo one; sleep 0.3; printf 'x%.0s' $(seq 70000); echo; echo two"
    status, out = run_once(["sh", "-c", script, "extract"], str(tmp_path / "log"),
                           on_poll=lambda: polls.append(1), poll_s=0.02)
    assert status == 0 and out.splitlines() == ["one", "x" * 70000, "two"]
    assert len(polls) >= 3       # 0.3 s at 20 ms; a loaded machine polls less often
    with pytest.raises(CaptureError, match="did not finish within 1 s"):
        run_once(["sh", "-c", "exec sleep 30", "extract"], str(tmp_path / "log"), timeout=1,
                 on_poll=lambda: None)


def test_disk_use_counts_allocated_blocks_as_du_does(tmp_path):
    """disk_use() against `du -s --block-size=1` (which counts the same blocks): a sparse
    file counts what it holds, not its length; a link is not followed."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(os.urandom(100000))
    with open(tmp_path / "d" / "sparse", "wb") as f:
        f.truncate(50 << 20)
    (tmp_path / "elsewhere").write_bytes(os.urandom(300000))
    (tmp_path / "d" / "link").symlink_to(tmp_path / "elsewhere")
    du = int(subprocess.run(["du", "-s", "--block-size=1", str(tmp_path / "d")],
                            capture_output=True, text=True, check=True).stdout.split()[0])
    assert flight.disk_use(str(tmp_path / "d")) == du
    assert 100000 <= du < 50 << 20


def test_peak_disk_sums_each_files_largest_size(tmp_path):
    """A bundle folder whose temporary copies are removed after trace.dat is complete: the
    peak is every file's largest size seen, summed, read here with du's own count of each."""
    def du(path):
        return int(subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True,
                                  text=True, check=True).stdout.split()[0])

    d = tmp_path / "b"
    d.mkdir()
    peak = flight.PeakDisk(str(d))
    (d / "trace.dat.cpu0").write_bytes(os.urandom(300000))
    peak.read()
    with_copy = du(d)
    (d / "trace.dat").write_bytes(os.urandom(100000))
    peak.read()
    at_peak = du(d)
    (d / "trace.dat.cpu0").unlink()
    peak.read()
    assert du(d) < with_copy < at_peak == peak.peak


@pytest.mark.parametrize("max_disk, ncpu, instances", [
    (64 << 20, 2, 2), (8 << 20, 2, 1), (1 << 30, 64, 2), (200 << 20, 7, 2)])
def test_buffers_sized_for_max_disk_give_bundles_that_fit_it(max_disk, ncpu, instances):
    """Full buffers of the size --max-disk allows give a bundle_bound() (what the recorder
    checks before it writes a bundle) under --max-disk with the directory's own files; 1%
    more buffer would not fit; smallest_disk_for() is a cap that holds them."""
    from kmemscope.capture import flight_disk
    samples, room = 300000, 2 << 20
    kb = flight_disk.buffer_kb_for_disk(max_disk, ncpu, instances, samples, room)

    def bound(total_kb):
        per_cpu = (total_kb << 10) // (ncpu * instances)     # data bytes of each full buffer
        stats = [{cpu: {"bytes": per_cpu} for cpu in range(ncpu)}] * instances
        return flight_disk.bundle_bound(stats, samples, room)

    assert bound(kb) + flight_disk.DIRECTORY_ROOM <= max_disk
    assert bound(kb * 101 // 100) + flight_disk.DIRECTORY_ROOM > max_disk
    need = flight_disk.smallest_disk_for(kb, ncpu, instances, samples, room)
    assert max_disk <= need <= max_disk + (64 << 10)
    assert flight_disk.buffer_kb_for_disk(need, ncpu, instances, samples, room) >= kb


def test_the_after_buffer_is_sized_from_the_measured_rate_within_its_share():
    """Until a rate is read the --after buffer wants its whole share; then --after seconds at
    AFTER_BURST times the peak rate (a recount here), at least the least size, at most the share."""
    from kmemscope.capture import ringsize
    plan = ringsize.BufferPlan(keep=30, after=5, ncpu=2, max_total_kb=1 << 20)
    assert plan.targets()[1] == plan.after_ceiling_kb
    plan.observe(0, 100.0)                    # a quiet host: 100 bytes/s
    assert plan.targets()[1] == ringsize.MIN_BUFFER_KB
    plan.observe(1_000_000_000, 200e3)        # 200 kB/s: 8 x 200e3 x 5 x 1.15 bytes
    assert plan.targets()[1] == int(200e3 * ringsize.AFTER_BURST * 5 * 1.15 / 1024) + 1
    plan.observe(2_000_000_000, 1e9)          # far beyond the share
    assert plan.targets()[1] == plan.after_ceiling_kb
    small = ringsize.BufferPlan(keep=2, after=1, ncpu=2, max_total_kb=600, min_kb=64)
    small.observe(0, 10.0)
    assert small.targets() == (64, 64)
