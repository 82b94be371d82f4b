"""`kmemscope record` recording for real on this machine's kernel.

Each test holds the machine-wide tracing lock (other recorders share this
tracefs), compares the tracing state before and after with a reader that
shares no code with capture/, and checks trace.dat with `trace-cmd report`,
the independent decoder. Without root or tracefs they skip, which
KMEMSCOPE_REQUIRE_TRACEFS=1 (`make test`) turns into failures.
"""
import glob
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import requirements
from capture_helpers import (WORKLOAD, finish, interrupt, kmemscope_parse_available, manifest,
                             recorded_event_names, report_records, run_record, start_record,
                             trace_cmd_processes, trace_cmd_report, tracing_state, wait_for)
from kmrun import rows_of

pytestmark = pytest.mark.usefixtures("live_tracefs", "tracing_lock")

DESIGN_VM_SYSCTLS = ("defrag_mode", "min_free_kbytes", "watermark_scale_factor",
                     "watermark_boost_factor", "percpu_pagelist_high_fraction",
                     "compaction_proactiveness", "extfrag_threshold")


@pytest.fixture
def before():
    """The tracing state before the test; the test must leave it the same."""
    state = tracing_state()
    yield state
    assert tracing_state() == state


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "workload.py"
    path.write_text(WORKLOAD)
    return path


def assert_owner_only(bundle):
    for root, dirs, files in os.walk(bundle):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700, root
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o600, name


def assert_recorded_allocations(bundle, comm=None):
    """trace-cmd's own decoder reads the bundle's trace.dat: only the events the manifest lists,
    and page allocations among them (by `comm` when given) with a pfn and an order each."""
    records = report_records(bundle / "trace.dat")
    assert {r["event"] for r in records} <= recorded_event_names(bundle)
    allocs = [r for r in records if r["event"] == "mm_page_alloc"
              and (comm is None or r["comm"] == comm)]
    assert allocs, f"no mm_page_alloc{' by ' + comm if comm else ''} in {len(records)} records"
    for r in allocs:
        int(r["fields"]["pfn"], 0), int(r["fields"]["order"])
    return records


def assert_one_error_line(stderr, *words):
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert lines and lines[-1].startswith("kmemscope: error: "), stderr
    assert "Traceback" not in stderr
    for word in words:
        assert word in lines[-1], stderr


def test_five_seconds_with_a_workload_give_a_complete_bundle(tmp_path, before, workload):
    bundle = tmp_path / "bundle"
    result = run_record("-o", bundle, "--interval", "1s", "--label", "kernel=test-machine",
                        "--", sys.executable, workload, "5")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr

    m = manifest(bundle)
    assert m["status"] == "complete" and m["format_version"] == 1
    assert m["stop_reason"] == "command exited with status 0"
    assert m["command"]["exit_status"] == 0 and m["command"]["argv"][-1] == "5"
    assert m["uname"]["release"] == os.uname().release and m["host"] == os.uname().nodename
    assert m["cpus"] == os.cpu_count() and m["memory_kb"] > 0 and m["page_size"] == os.sysconf("SC_PAGE_SIZE")
    assert m["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    pagetypeinfo = Path("/proc/pagetypeinfo").read_text()
    assert m["pageblock_order"] == int(re.search(r"Page block order:\s*(\d+)", pagetypeinfo).group(1))
    assert m["migratetypes"] == re.search(r"Number of blocks type\s+(.*)", pagetypeinfo).group(1).split()
    assert set(DESIGN_VM_SYSCTLS) <= set(m["vm"]) and m["thp"]["enabled"]
    assert m["clock"] == "mono" and m["preset"] == "default"
    assert "kmem:mm_page_alloc" in [e["event"] for e in m["events"]]
    assert m["trace_cmd"]["version"] and m["buffer_kb"] == 8192
    assert m["labels"] == {"kernel": "test-machine"}
    assert [row["cpu"] for row in m["cpu_stats"]] == list(range(os.cpu_count()))
    assert all("overrun" in row and "dropped_events" in row for row in m["cpu_stats"])
    assert m["duration_s"] >= 5.0       # the recording spans the 5 s workload
    assert "cpu0:" in result.stderr and "overrun" in result.stderr  # the terminal report
    assert_owner_only(bundle)

    # The independent decoder sees the workload's allocations in trace.dat.
    assert_recorded_allocations(bundle, comm="kms-workload")
    assert len(re.findall(r"^#kmemscope-sample", (bundle / "procfs" / "vmstat").read_text(), re.M)) >= 5

    # Afterwards: nothing enabled (if nothing was before), buffer size as it was.
    after = tracing_state()
    assert after["buffer_size_kb"] == before["buffer_size_kb"]
    if before["events/enable"] == "0":
        assert after["enabled"] == [] and after["events/enable"] == "0"


def test_bundle_parses_with_samples_on_the_trace_timeline(tmp_path, before, workload):
    requirements.skip_unless("setup", kmemscope_parse_available())
    bundle, dataset = tmp_path / "bundle", tmp_path / "dataset"
    result = run_record("-o", bundle, "--duration", "5s", "--", sys.executable, workload, "30")
    assert result.returncode == 0, result.stderr
    kmemscope = [sys.executable, "-m", "kmemscope"]
    parsed = subprocess.run(kmemscope + ["parse", str(bundle), "-o", str(dataset), "-q"],
                            capture_output=True, text=True, timeout=300)
    assert parsed.returncode == 0, parsed.stderr

    def sql(query):
        out = subprocess.run(kmemscope + ["sql", str(dataset), query, "--format", "json"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return rows_of(out)

    assert sql("SELECT count(*) AS n FROM mm_page_alloc")[0]["n"] > 0
    window = sql("SELECT count(DISTINCT v.ts) AS n FROM vmstat v, runs r "
                 "WHERE v.ts BETWEEN r.first_ts - 1000000000 AND r.last_ts + 1000000000")
    assert window[0]["n"] >= 4
    runs = sql("SELECT kernel_release, manifest FROM runs")
    assert runs[0]["kernel_release"] == os.uname().release
    assert json.loads(runs[0]["manifest"])["preset"] == "default"


def test_the_command_s_own_rusage_is_kept_and_compared_as_workload_rows(tmp_path, before):
    """`record -- CMD` keeps what CMD used (wait4's rusage) in the manifest, and compare shows
    it as workload.* rows: equal to the command's own resource.getrusage read just before it
    exited (plus its exit). The other side, a committed example recorded without, has none."""
    from capture_helpers import RUSAGE_WORKLOAD, assert_rusage_is_the_commands_own
    from conftest import EXAMPLES
    from kmrun import kmemscope

    requirements.skip_unless("setup", kmemscope_parse_available())
    script, own = tmp_path / "busy.py", tmp_path / "own.json"
    script.write_text(RUSAGE_WORKLOAD)
    bundle, dataset = tmp_path / "bundle", tmp_path / "dataset"
    result = run_record("-o", bundle, "--", sys.executable, script, own, "1")
    assert result.returncode == 0, result.stderr
    oracle = json.loads(own.read_text())
    kept = manifest(bundle)["command"]["rusage"]
    assert_rusage_is_the_commands_own(kept, oracle)
    kmemscope("parse", "-q", bundle, "-o", dataset, "--label", "kernel=cmd")
    kmemscope("parse", "-q", EXAMPLES / "kmem-compaction", "-o", dataset, "--label", "kernel=ex")
    doc = json.loads(kmemscope("compare", dataset, "--by", "kernel", "--baseline", "ex",
                               "--format", "json", "--metrics", "workload").stdout)
    recs = {(r["metric"], r["side"]): r for r in doc["rows"]}
    got = {key: recs[(f"workload.{name}", "cmd")]["value"] for name, key in
           (("user_cpu_s", "user_s"), ("system_cpu_s", "system_s"),
            ("max_rss_kb", "max_rss_kb"), ("major_faults", "major_faults"))}
    assert got["system_s"] == kept["system_s"]            # the manifest's number, unchanged
    assert_rusage_is_the_commands_own(got, oracle)
    assert recs[("workload.system_cpu_s", "cmd")]["source"] == "rusage"
    assert recs[("workload.system_cpu_s", "ex")]["value"] is None


def test_sigterm_midway_gives_a_valid_bundle_and_restores_state(tmp_path, before):
    bundle = tmp_path / "bundle"
    proc = start_record("-o", bundle, "--duration", "60s", "--zoneinfo")
    zoneinfo = bundle / "procfs" / "zoneinfo"

    def samples():
        try:
            return len(re.findall(r"^#kmemscope-sample mono_ns=\d+", zoneinfo.read_text(), re.M))
        except FileNotFoundError:
            return 0
    assert wait_for(lambda: samples() >= 3, 60), f"{samples()} zoneinfo samples after 60 s"
    interrupt(proc, signal.SIGTERM)
    rc, stderr = finish(proc)
    assert rc == 0, stderr
    m = manifest(bundle)
    assert m["status"] == "complete" and m["stop_reason"] == "signal SIGTERM"
    assert_recorded_allocations(bundle)
    assert trace_cmd_processes(bundle) == []
    assert_owner_only(bundle)
    zoneinfo = (bundle / "procfs" / "zoneinfo").read_text()
    assert len(re.findall(r"^#kmemscope-sample mono_ns=\d+", zoneinfo, re.M)) >= 3
    assert "pages free" in zoneinfo


@pytest.mark.parametrize("recover_with", ["--cleanup", "next record"])
def test_after_sigkill_cleanup_restores_state(tmp_path, before, recover_with):
    bundle = tmp_path / "killed"
    proc = start_record("-o", bundle, "--duration", "60s")
    assert wait_for(lambda: trace_cmd_processes(bundle), 60), "record started no trace-cmd"
    proc.kill()
    finish(proc)
    # Killed: trace-cmd still records and our events are still enabled.
    assert trace_cmd_processes(bundle)
    assert tracing_state() != before
    if recover_with == "--cleanup":
        result = run_record("--cleanup")
    else:
        result = run_record("-o", tmp_path / "next", "--duration", "1s")
    assert result.returncode == 0, result.stderr
    assert "restored the tracing state" in result.stderr
    assert wait_for(lambda: trace_cmd_processes(bundle) == [], 30)
    assert tracing_state() == before
    assert manifest(bundle)["status"] == "killed"
    # The leftover trace-cmd was stopped with SIGINT, so what it had is readable.
    assert_recorded_allocations(bundle)
    # Nothing is left to clean up afterwards.
    again = run_record("--cleanup")
    assert again.returncode == 0 and "nothing to clean up" in again.stderr


def test_cleanup_finds_a_trace_cmd_whose_pid_was_never_saved(tmp_path, before):
    """A record killed between starting trace-cmd and saving its pid: found by command line."""
    from kmemscope.capture import state as capture_state
    from kmemscope.capture import tracefs as tfs

    bundle, state_dir = tmp_path / "bundle", tmp_path / "state"
    bundle.mkdir()
    state_dir.mkdir()
    snapshot = capture_state.snapshot(str(tfs.find_tracefs()), ["kmem"])
    (state_dir / "record-state.json").write_text(json.dumps(
        {"snapshot": snapshot, "record_pid": 1, "bundle": str(bundle), "trace_cmd": None}))
    flags = tfs.trace_cmd_flags(tfs.probe_restrictions(str(tfs.find_tracefs())))
    orphan = subprocess.Popen(["trace-cmd", "record", *flags, "-C", "mono", "-e", "kmem:mm_page_free",
                               "-o", str(bundle / "trace.dat")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: tracing_state()["enabled"] != before["enabled"], 20)
        env = dict(os.environ, KMEMSCOPE_STATE_DIR=str(state_dir))
        result = subprocess.run([sys.executable, "-m", "kmemscope.capture", "--cleanup"],
                                capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 0, result.stderr
        assert "stopping the trace-cmd (process group %d)" % orphan.pid in result.stderr
        orphan.wait(60)
        assert tracing_state() == before
        assert not (state_dir / "record-state.json").exists()
    finally:
        if orphan.poll() is None:
            os.killpg(orphan.pid, signal.SIGKILL)
            orphan.wait()
            _restore_plain(before)


def test_small_max_size_stops_by_itself(tmp_path, before, workload):
    bundle = tmp_path / "bundle"
    result = run_record("-o", bundle, "--max-size", "512K", "--duration", "40s",
                        "--", sys.executable, workload, "40")
    assert result.returncode == 0, result.stderr
    assert "stopping: trace data reached --max-size" in result.stderr
    m = manifest(bundle)
    assert m["stop_reason"].startswith("--max-size")
    assert m["command"]["signal"] == "SIGTERM"  # the workload was stopped with the recording
    assert_recorded_allocations(bundle, comm="kms-workload")


def test_stops_before_free_space_falls_below_the_margin(tmp_path, before, workload):
    """On a 256 MiB tmpfs with a 160 MiB margin, record stops by itself and still merges."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "kmemscope-test", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        requirements.skip("tracefs", "cannot mount a tmpfs as root: " + mounted.stderr.strip())
    try:
        result = run_record("-o", small / "bundle", "--min-free", "160M", "--duration", "40s",
                            "--", sys.executable, workload, "40")
        assert result.returncode == 0, result.stderr
        assert "stopping early: free space under" in result.stderr
        # The start line names the free-space bound, which is lower than --max-size here.
        room = re.search(r"at most ([\d.]+) MiB of trace data: ([\d.]+) MiB free under (\S+) minus "
                         r"the --min-free margin 160.0 MiB, halved", result.stderr)
        assert room, result.stderr
        assert abs(float(room.group(1)) - (float(room.group(2)) - 160) / 2) <= 0.1
        m = manifest(small / "bundle")
        assert m["status"] == "complete" and "--min-free margin" in m["stop_reason"]
        assert_recorded_allocations(small / "bundle", comm="kms-workload")
        # Refused up front when the margin is not there at all.
        refused = run_record("-o", small / "again", "--min-free", "1G", "--duration", "1s")
        assert refused.returncode == 1
        assert_one_error_line(refused.stderr, "that record needs there: the --min-free margin 1.0 GiB "
                              "+ 64.0 MiB to start")
        free = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
        shown = re.search(r"only ([\d.]+) MiB free under \S+, ([\d.]+) MiB short of the 1.1 GiB",
                          refused.stderr)
        assert shown, refused.stderr
        assert abs(float(shown.group(1)) - free / 2**20) <= 0.1
        assert abs(float(shown.group(2)) - (1024 + 64 - free / 2**20)) <= 0.1
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_a_filter_the_kernel_rejects_is_an_error_not_an_unfiltered_trace(tmp_path, before):
    result = run_record("-o", tmp_path / "bundle", "--duration", "2s",
                        "-e", "kmem:mm_page_alloc:order >>> 2")
    assert result.returncode == 1
    assert_one_error_line(result.stderr, "the kernel rejected the filter", "kmem:mm_page_alloc")
    assert manifest(tmp_path / "bundle")["status"] == "failed"
    assert trace_cmd_processes(tmp_path / "bundle") == []


def test_lost_events_are_reported_when_the_buffer_is_too_small(tmp_path, before, workload):
    # Two churning workloads per CPU into 16 KiB per CPU: far more events than trace-cmd's
    # reader drains between its wake-ups, however idle the machine.
    bundle = tmp_path / "bundle"
    many = " & ".join([f"{sys.executable} {workload} 30"] * (2 * os.cpu_count())) + " & wait"
    result = run_record("-o", bundle, "--buffer-kb", "16", "--duration", "3s",
                        "--", "sh", "-c", many)
    assert result.returncode == 0, result.stderr
    m = manifest(bundle)
    lost = sum(r["overrun"] + r["dropped_events"] + r.get("commit_overrun", 0) for r in m["cpu_stats"])
    assert lost > 0, "nothing lost with a 16 KiB buffer: the kernel's per-CPU stats say so"
    assert m["lost_events"] == lost and m["buffer_too_small"] is True
    assert "was too small" in result.stderr and "--buffer-kb" in result.stderr
    # trace-cmd's own record of the same counters, read with trace-cmd itself.
    stat = "\n".join(trace_cmd_report(bundle / "trace.dat", "--stat"))
    overruns = sum(int(n) for n in re.findall(r"^overrun: (\d+)$", stat, re.M))
    assert overruns == sum(r["overrun"] for r in m["cpu_stats"])


def test_existing_output_is_refused_and_nothing_is_enabled(tmp_path, before):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "keep.txt").write_text("mine")
    result = run_record("-o", bundle, "--duration", "1s")
    assert result.returncode == 1
    assert_one_error_line(result.stderr, "already exists", "--force")
    assert (bundle / "keep.txt").read_text() == "mine"
    # --force replaces only kmemscope bundles, never another directory.
    forced = run_record("-o", bundle, "--duration", "1s", "--force")
    assert forced.returncode == 1
    assert_one_error_line(forced.stderr, "not a kmemscope bundle")
    assert (bundle / "keep.txt").exists()


def test_unwritable_output_gives_a_clear_error(tmp_path, before):
    readonly = tmp_path / "ro"
    readonly.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "kmemscope-test", str(readonly)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        requirements.skip("tracefs", "cannot mount a read-only tmpfs as root: " + mounted.stderr.strip())
    try:
        result = run_record("-o", readonly / "bundle", "--duration", "1s")
    finally:
        subprocess.run(["umount", str(readonly)], check=True)
    assert result.returncode == 1
    assert_one_error_line(result.stderr, "cannot write the output", "Read-only file system")


def test_second_concurrent_record_is_refused(tmp_path, before):
    first = start_record("-o", tmp_path / "first", "--duration", "60s")
    try:
        second = run_record("-o", tmp_path / "second", "--duration", "1s")
        assert second.returncode == 1
        assert_one_error_line(second.stderr, "another kmemscope record is running",
                              "pid %d" % first.pid)
        assert not (tmp_path / "second").exists()
    finally:
        interrupt(first)
        rc, stderr = finish(first)
    assert rc == 0, stderr
    assert manifest(tmp_path / "first")["stop_reason"] == "signal SIGINT"


def test_refuses_when_someone_else_reads_the_ring_buffer(tmp_path, before):
    """A bare trace-cmd (enabled event + recorder processes) is named, and nothing is changed."""
    from kmemscope.capture import tracefs as tfs  # only to learn the flags this host needs

    flags = tfs.trace_cmd_flags(tfs.probe_restrictions(str(tfs.find_tracefs())))
    other = subprocess.Popen(["trace-cmd", "record", *flags, "-e", "kmem:mm_page_free",
                              "-o", str(tmp_path / "other.dat")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: tracing_state()["enabled"] != before["enabled"], 20)
        busy = tracing_state()
        result = run_record("-o", tmp_path / "bundle", "--duration", "1s")
        assert result.returncode == 1
        assert_one_error_line(result.stderr, "someone else is tracing", "kmem:mm_page_free",
                              "trace-cmd (pid", "--force")
        assert tracing_state() == busy  # record changed nothing
        assert not (tmp_path / "bundle").exists()
    finally:
        os.killpg(other.pid, signal.SIGINT)
        other.wait(60)
        _restore_plain(before)  # trace-cmd does not put everything back itself on every host


def _restore_plain(state):
    """Put the fields of tracing_state() back (for the test's own trace-cmd)."""
    from capture_helpers import TRACEFS

    def write(rel, value):
        try:
            (TRACEFS / rel).write_text(value)
        except OSError:
            pass

    for path in tracing_state()["enabled"]:
        if path not in state["enabled"]:
            Path(path).write_text("0")
    clock = re.search(r"\[(\S+)\]", state["trace_clock"]).group(1)
    write("trace_clock", clock)
    for name, value in state["options"].items():
        write("options/" + name, value)
    for path, value in state["filters"].items():
        if value == "none":
            Path(path).write_text("0")
    if state["buffer_size_kb"].isdigit():
        write("buffer_size_kb", state["buffer_size_kb"])
    write("tracing_on", state["tracing_on"])


def test_high_order_preset_keeps_only_high_order_or_nonblocking_allocations(tmp_path, before,
                                                                           workload):
    if int(os.uname().release.split(".")[0]) < 5:
        requirements.skip("tracefs", "__GFP_DIRECT_RECLAIM is bit 10 only from 5.x on")
    bundle = tmp_path / "bundle"
    result = run_record("-o", bundle, "--preset", "high-order", "--duration", "3s",
                        "--", sys.executable, workload, "30")
    assert result.returncode == 0, result.stderr
    m = manifest(bundle)
    # __GFP_DIRECT_RECLAIM is bit 10 on 6.x kernels (queries/KERNEL-ERAS.md, section 2).
    if os.uname().release.split(".")[0] == "6":
        assert m["events"][0] == {"event": "kmem:mm_page_alloc",
                                  "filter": "order > 0 || !(gfp_flags & 0x400)"}
    allocs = [l for l in trace_cmd_report(bundle / "trace.dat", "-R") if " mm_page_alloc:" in l]
    assert allocs
    for line in allocs:
        order = int(re.search(r"\border=(\d+)", line).group(1))
        gfp = int(re.search(r"\bgfp_flags=(0x[0-9a-f]+|\d+)", line).group(1), 0)
        assert order > 0 or not gfp & (1 << 10), line


TCP_LOAD = r"""
import socket, sys, threading, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
def sink():
    conn, _ = server.accept()
    while conn.recv(1 << 20):
        pass
reader = threading.Thread(target=sink)
reader.start()
client = socket.create_connection(server.getsockname())
end, chunk = time.monotonic() + float(sys.argv[1]), b"x" * (1 << 20)
while time.monotonic() < end:
    client.sendall(chunk)
client.close()
reader.join()
"""


def test_atomic_origins_records_nonblocking_high_order_allocations_with_stacks(tmp_path, before):
    """TCP over loopback refills its page frags with order-3 allocations that may not block."""
    if int(os.uname().release.split(".")[0]) < 5:
        requirements.skip("tracefs", "__GFP_DIRECT_RECLAIM is bit 10 only from 5.x on")
    load = tmp_path / "tcp_load.py"
    load.write_text(TCP_LOAD)
    bundle = tmp_path / "bundle"
    result = run_record("-o", bundle, "--preset", "atomic-origins", "--", sys.executable, load, "2")
    assert result.returncode == 0, result.stderr
    assert manifest(bundle)["stacktrace"] is True
    raw = trace_cmd_report(bundle / "trace.dat", "-R")
    allocs = [l for l in raw if " mm_page_alloc:" in l]
    assert allocs
    for line in allocs:
        order = int(re.search(r"\border=(\d+)", line).group(1))
        gfp = int(re.search(r"\bgfp_flags=(0x[0-9a-f]+|\d+)", line).group(1), 0)
        assert order > 0 and not gfp & (1 << 10), line
    stacks = [l for l in trace_cmd_report(bundle / "trace.dat") if l.startswith("=> ")]
    assert any("alloc_pages" in l or "__alloc_" in l for l in stacks)


def _python38():
    """A working python3.8: on PATH, or installed by pyenv (whose shim may refuse)."""
    candidates = [shutil.which("python3.8")] + sorted(glob.glob(
        os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    for path in filter(None, candidates):
        if subprocess.run([path, "-V"], capture_output=True).returncode == 0:
            return path
    return None


def test_pyz_records_on_python_3_8(tmp_path, before):
    """The single-file build runs on the oldest Python that capture supports."""
    python38 = _python38()
    if python38 is None:
        requirements.skip("python38", "no Python 3.8 interpreter on this machine")
    pyz = tmp_path / "kmemscope-record.pyz"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, str(root / "capture" / "build_pyz.py"), str(pyz)], check=True,
                   capture_output=True)
    bundle = tmp_path / "bundle"
    env = dict(os.environ, PYTHONPATH="", PYTHONNOUSERSITE="1")
    # A full compaction, asked for by the command: the compaction preset's events are certain.
    result = subprocess.run([python38, "-S", str(pyz), "-o", str(bundle), "--preset", "compaction",
                             "--", "sh", "-c", "echo 1 > /proc/sys/vm/compact_memory"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    m = manifest(bundle)
    assert m["status"] == "complete" and m["command"]["exit_status"] == 0
    records = report_records(bundle / "trace.dat")
    assert {r["event"] for r in records} <= recorded_event_names(bundle)
    # compact_memory compacts every zone in the writer's context: begin and end pairs by `sh`.
    by_shell = Counter(r["event"] for r in records if r["comm"] == "sh")
    assert by_shell["mm_compaction_begin"] >= 1
    assert by_shell["mm_compaction_begin"] == by_shell["mm_compaction_end"], by_shell
