"""What the counts cost: the cost samples (capture/sampler.py) and their tables (parsers/procfs.py).

Real files of the 6.18 test VM (tests/data/procfs/README.md) are laid out as stand-in
/proc and /sys folders, sampled by the capture's sampler and parsed back; the oracle is
the same real text read with the test's own splits. Stand-ins, not the live files,
because the cases are about threads that appear, exit or pretend (a user task named
kswapd0), which a live kernel does not give on demand; tests/test_cost_samples_live.py
covers the live files. Hostile contents: every malformed line is skipped, a number out
of its column's range is one error naming the file and line, a line past the bound is
one note, and nothing is an internal error.
"""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kmemscope.capture.sampler import COST_SOURCES, ProcfsSampler, RollingSampler
from kmemscope.parsers import procfs
from kmrun import KMEMSCOPE

LIVE = Path(__file__).parent / "data" / "procfs" / "linux-6.18"
HEADER = re.compile(r"^#kmemscope-sample mono_ns=(\d+) realtime_ns=(\d+)$", re.M)
OURS = {"kswapd0": "kswapd", "kcompactd0": "kcompactd", "khugepaged": "khugepaged"}
PF_KTHREAD = 0x00200000


def kthread_lines():
    """{pid: /proc/PID/stat line} of the VM's kernel threads."""
    return {int(line.split()[0]): line for line in (LIVE / "kthreads-stat").read_text().splitlines()}


def expected_threads():
    """(pid, comm, utime, stime) of kswapd0, kcompactd0 and khugepaged, split here."""
    out = []
    for pid, line in sorted(kthread_lines().items()):
        comm = line[line.index("(") + 1:line.rindex(")")]
        rest = line[line.rindex(")") + 2:].split(" ")
        if comm in OURS:
            out.append((pid, comm, int(rest[11]), int(rest[12])))
    return out


def stand_ins(tmp_path, pressure=True, mthp=True):
    """(proc, sys) stand-ins holding the VM's files."""
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    for name in ("vmstat", "pagetypeinfo", "buddyinfo", "stat"):
        shutil.copy(LIVE / name, proc / name)
    if pressure:
        (proc / "pressure").mkdir()
        shutil.copy(LIVE / "pressure_memory", proc / "pressure" / "memory")
    for pid, line in kthread_lines().items():
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_text(line + "\n")
    (proc / "2" / "task" / "2").mkdir(parents=True)
    (proc / "2" / "task" / "2" / "children").write_text(" ".join(map(str, kthread_lines())) + " ")
    # a user task that named itself kswapd0 (prctl PR_SET_NAME): no PF_KTHREAD, not sampled
    (proc / "4242").mkdir()
    (proc / "4242" / "stat").write_text("4242 (kswapd0) R 1 4242 4242 0 -1 4194560 10 0 0 0 "
                                        "500 600 0 0 20 0 1 0 99 0 0\n")
    if mthp:
        top = sys / "kernel" / "mm" / "transparent_hugepage"
        for line in (LIVE / "mthp-sysfs").read_text().splitlines():
            path, value = line.split()
            (top / path).parent.mkdir(parents=True, exist_ok=True)
            (top / path).write_text(value + "\n")
    return proc, sys


def samples(path):
    """[(mono_ns, body)] of a sample file, split with the test's own regex."""
    text = path.read_text()
    heads = list(HEADER.finditer(text))
    return [(int(m.group(1)), text[m.end() + 1:(heads[i + 1].start() if i + 1 < len(heads) else None)])
            for i, m in enumerate(heads)]


def test_the_sampler_writes_each_cost_source_on_the_trace_clock(tmp_path):
    proc, sys = stand_ins(tmp_path)
    s = ProcfsSampler(str(tmp_path / "out"), 1, proc=str(proc), sys=str(sys))
    assert s.cost_absent == {} and s.sources[-4:] == COST_SOURCES
    s.open()
    s.sample()
    s.sample()
    s.close()
    out = tmp_path / "out"
    for name in COST_SOURCES:
        assert len(samples(out / name)) == 2, name
    assert samples(out / "pressure_memory")[0][1] == (LIVE / "pressure_memory").read_text()
    stat = (LIVE / "stat").read_text().splitlines()
    assert samples(out / "stat")[0][1].splitlines() == [ln for ln in stat if re.match(r"cpu\d* ", ln)]
    threads = [line.split() for line in samples(out / "kthreads")[1][1].splitlines()]
    assert [(int(p), c, int(u), int(st)) for p, c, u, st in threads] == expected_threads()
    mthp = [ln.split() for ln in (LIVE / "mthp-sysfs").read_text().splitlines()]
    want = sorted((int(re.match(r"hugepages-(\d+)kB/", p).group(1)), p.rsplit("/", 1)[1], v)
                  for p, v in mthp)
    got = [ln.split() for ln in samples(out / "mthp")[0][1].splitlines()]
    assert [(int(a), b, c) for a, b, c in got] == want and len(want) == 147
    assert len({size for size, _, _ in want}) == 9


def test_threads_are_found_again_when_one_appears_and_dropped_when_one_exits(tmp_path):
    proc, sys = stand_ins(tmp_path)
    s = ProcfsSampler(str(tmp_path / "out"), 1, proc=str(proc), sys=str(sys))
    s.open()
    s.sample()
    # a second node comes online: kswapd1 and kcompactd1 appear among kthreadd's children
    for pid, comm in ((9001, "kswapd1"), (9002, "kcompactd1")):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) S 2 0 0 0 -1 {PF_KTHREAD | 0x40} "
                                              "0 0 0 0 7 8 0 0 20 0 1 0 99 0 0\n")
    children = proc / "2" / "task" / "2" / "children"
    children.write_text(children.read_text() + "9001 9002 ")
    s.sample()
    shutil.rmtree(proc / "9001")            # and kswapd1 exits
    s.sample()
    s.close()
    seen = [[ln.split()[1] for ln in body.splitlines()] for _, body in samples(tmp_path / "out" / "kthreads")]
    base = [c for _, c, _, _ in expected_threads()]
    assert seen[0] == base
    assert seen[1] == sorted(base + ["kswapd1", "kcompactd1"], key=lambda c: {
        "kswapd1": 9001, "kcompactd1": 9002}.get(c, 0))
    assert seen[2] == base + ["kcompactd1"]
    assert s.cost_errors == {}


def test_an_absent_source_is_named_once_and_the_others_are_sampled(tmp_path):
    proc, sys = stand_ins(tmp_path, pressure=False, mthp=False)
    s = ProcfsSampler(str(tmp_path / "out"), 1, proc=str(proc), sys=str(sys))
    manifest = s.cost_manifest()
    assert manifest["sampled"] == ["stat", "kthreads"]
    assert sorted(manifest["absent"]) == ["mthp", "pressure_memory"]
    assert "CONFIG_PSI" in manifest["absent"]["pressure_memory"]
    assert "6.10" in manifest["absent"]["mthp"]
    s.open()
    s.sample()
    s.close()
    assert not (tmp_path / "out" / "pressure_memory").exists()
    assert not (tmp_path / "out" / "mthp").exists()


def test_a_cost_source_that_fails_mid_capture_stops_alone(tmp_path):
    proc, sys = stand_ins(tmp_path)
    s = ProcfsSampler(str(tmp_path / "out"), 1, proc=str(proc), sys=str(sys))
    s.open()
    s.sample()
    shutil.rmtree(proc / "pressure")
    s.sample()                 # no exception: the capture goes on
    s.sample()
    s.close()
    assert len(samples(tmp_path / "out" / "pressure_memory")) == 1
    assert len(samples(tmp_path / "out" / "vmstat")) == 3 == len(samples(tmp_path / "out" / "stat"))
    assert list(s.cost_manifest()["stopped"]) == ["pressure_memory"]


def test_the_flight_recorder_s_window_carries_the_cost_sources(tmp_path):
    proc, sys = stand_ins(tmp_path)
    store = RollingSampler(0.01, 60, proc=str(proc), sys=str(sys))
    for _ in range(3):
        store.sample()
    store.write_window(str(tmp_path / "out"), store.rows[0][0], store.rows[-1][0])
    for name in COST_SOURCES:
        assert len(samples(tmp_path / "out" / name)) == 3, name
    tables = procfs.read_bundle_procfs({n: (tmp_path / "out" / n).read_bytes() for n in COST_SOURCES},
                                       ticks_per_s=100)
    assert tables["kthread_cpu"].num_rows == 3 * len(expected_threads())


def _schedstat(proc, pid, run_ns):
    (proc / str(pid) / "schedstat").write_text(f"{run_ns} 12345 67\n")


def test_kernel_threads_carry_schedstat_nanoseconds_where_the_kernel_has_them(tmp_path):
    """With /proc/PID/schedstat (its first field: ns on a CPU) each thread's line carries it;
    parsed back into run_ns, and the cost rows take the threads' CPU time from it: the
    nanoseconds' change, not the ticks' (recounted here from the stand-in values)."""
    proc, sys = stand_ins(tmp_path)
    threads = expected_threads()
    start = {pid: 1_000_000_000 + 7 * pid for pid, _c, _u, _s in threads}
    for pid, run_ns in start.items():
        _schedstat(proc, pid, run_ns)
    s = ProcfsSampler(str(tmp_path / "out"), 1, proc=str(proc), sys=str(sys))
    s.open()
    s.sample()
    grown = {pid: run_ns + 3_456_789 * (i + 1) for i, (pid, run_ns) in enumerate(start.items())}
    for pid, run_ns in grown.items():
        _schedstat(proc, pid, run_ns)
    s.sample()
    s.close()
    body = samples(tmp_path / "out" / "kthreads")[1][1]
    assert [ln.split()[-1] for ln in body.splitlines()] == [f"ns={grown[p]}" for p, *_ in threads]
    tables = procfs.read_bundle_procfs({"kthreads": (tmp_path / "out" / "kthreads").read_bytes()},
                                       ticks_per_s=100)
    rows = tables["kthread_cpu"].to_pylist()
    assert [(r["pid"], r["utime"], r["stime"], r["run_ns"]) for r in rows] == \
        [(p, u, st, start[p]) for p, _c, u, st in threads] + \
        [(p, u, st, grown[p]) for p, _c, u, st in threads]


def test_the_live_kernel_s_threads_read_between_two_schedstat_reads():
    """On this machine's own /proc: a thread's sampled run_ns lies between its
    /proc/PID/schedstat read just before and just after (the kernel's own counter)."""
    from kmemscope.capture.sampler import KernelThreads

    import requirements

    threads = KernelThreads("/proc")
    before = {}
    for name in Path("/proc").iterdir():
        if name.name.isdigit():
            try:
                comm = (name / "comm").read_text().strip()
                ns = int((name / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if comm in OURS:
                before[int(name.name)] = ns
    if not before:
        requirements.skip("tracefs", "no kswapd, kcompactd or khugepaged with a schedstat here")
    lines = threads.read().splitlines()
    after = {pid: int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) for pid in before}
    seen = {int(ln.split()[0]): int(ln.split()[-1][3:]) for ln in lines
            if int(ln.split()[0]) in before}
    assert seen.keys() == before.keys()
    for pid, ns in seen.items():
        assert before[pid] <= ns <= after[pid], pid


# ---------------------------------------------------------------- the tables

def test_psi_rows_match_a_plain_split():
    raw = (LIVE / "pressure_memory").read_text()
    want = []
    for line in raw.splitlines():
        kind, *pairs = line.split()
        kv = dict(p.split("=") for p in pairs)
        want.append((kind, int(kv["total"]), float(kv["avg10"]), float(kv["avg60"]),
                     float(kv["avg300"])))
    assert procfs.parse_pressure(raw) == want and [w[0] for w in want] == ["some", "full"]


def test_cpu_stat_rows_match_a_plain_split_and_the_aggregate_is_cpu_minus_one():
    raw = (LIVE / "stat").read_text()
    want = []
    for line in raw.splitlines():
        label, *values = line.split()
        if re.fullmatch(r"cpu\d*", label):
            want.append((int(label[3:]) if label != "cpu" else -1, *map(int, values[:8])))
    assert procfs.parse_cpu_stat(raw) == want and len(want) == 3
    # the kernel's aggregate is the sum of the CPUs' nanoseconds (fs/proc/stat.c), each line
    # rounded down to ticks on its own: the sum of the CPU lines is short by under a tick each
    for total, *per_cpu in zip(*(row[1:] for row in want)):
        assert 0 <= total - sum(per_cpu) < len(per_cpu)


def test_the_tables_carry_the_tick_rate_and_the_contract_columns(tmp_path):
    proc, sys = stand_ins(tmp_path)
    s = ProcfsSampler(str(tmp_path / "out"), 1, proc=str(proc), sys=str(sys))
    s.open()
    s.sample()
    s.close()
    files = {n: (tmp_path / "out" / n).read_bytes() for n in COST_SOURCES}
    tables = procfs.read_bundle_procfs(files, ticks_per_s=250)
    assert {t: tables[t].column_names for t in ("psi_memory", "cpu_stat", "kthread_cpu", "mthp_stats")} == {
        "psi_memory": ["ts", "kind", "total_us", "avg10", "avg60", "avg300"],
        "cpu_stat": ["ts", "cpu", "user", "nice", "system", "idle", "iowait", "irq", "softirq",
                     "steal", "ticks_per_s"],
        "kthread_cpu": ["ts", "pid", "comm", "kind", "utime", "stime", "run_ns", "ticks_per_s"],
        "mthp_stats": ["ts", "size_kb", "counter", "value"],
    }
    rows = tables["kthread_cpu"].to_pylist()
    assert [(r["pid"], r["comm"], r["utime"], r["stime"]) for r in rows] == expected_threads()
    assert [r["kind"] for r in rows] == [OURS[c] for _, c, _, _ in expected_threads()]
    assert {r["ticks_per_s"] for r in rows} == {250}
    assert {r["run_ns"] for r in rows} == {None}       # the stand-ins have no schedstat
    assert set(tables["cpu_stat"].column("ticks_per_s").to_pylist()) == {250}
    mthp = {(r["size_kb"], r["counter"]): r["value"] for r in tables["mthp_stats"].to_pylist()}
    sysfs = dict(ln.split() for ln in (LIVE / "mthp-sysfs").read_text().splitlines())
    assert mthp[(2048, "anon_fault_alloc")] == int(sysfs["hugepages-2048kB/stats/anon_fault_alloc"])
    # without a tick rate (a bundle whose manifest has none) the column is NULL, not a guess
    tables = procfs.read_bundle_procfs(files)
    assert set(tables["kthread_cpu"].column("ticks_per_s").to_pylist()) == {None}


HEAD = "#kmemscope-sample mono_ns=5 realtime_ns=6\n"
# Malformed lines of each source: each is skipped, the good line beside it is kept.
HOSTILE = {
    "pressure_memory": ("some avg10=0.32 avg60=1.58 avg300=0.84 total=3959391", [
        "full avg10=inf avg60=0.40 avg300=0.23 total=1", "full avg10=nan avg60=1 avg300=1 total=1",
        "full avg10=0.09 avg60=0.40 avg300=0.23 total=-5", "full avg10=0.09 total=12",
        "some avg10=" + "9" * 500 + ".0 avg60=0.40 avg300=0.23 total=1", "other avg10=0.1 "
        "avg60=0.1 avg300=0.1 total=1", "full avg10=0.09 avg60=0.40 avg300=0.23 total=²",
        "=", "some ====", "\x00\x01\x1b[31m", "full avg10=0.09 avg60=0.40 avg300=0.23 total=٣"]),
    "stat": ("cpu0 1 2 3 4 5 6 7 8 9 10", [
        "cpu 1 2 x 4", "cpu-1 1 2 3 4", "cpux 1 2 3 4", "cpu1 1 2", "cpu2 --5 1 2 3",
        "cpu3 1 2 3 ²", "intr 1 2 3 4 5", "cpu٣ 1 2 3 4", "cpu"]),
    "kthreads": ("45 kswapd0 0 75", [
        "46 bash 1 2", "47 kswapd0 x 2", "-48 kswapd0 1 2", "49 kswapd0 1", "kswapd0 1 2",
        "50 kswapd0: 1 2", "51 kcompactd 1 2", "52 khugepaged0 1 2", "53 kswapd0 1 -2",
        "54 kswapd0 ² 2", "55 kswapd0\x1b[31m 1 2", "56 kswapd0 1 2 ns=x", "57 kswapd0 1 2 ns=-4",
        "58 kswapd0 1 ns=5", "59 kswapd0 1 2 ns=²"]),
    "mthp": ("2048 anon_fault_alloc 12", [
        "2048 ../../etc 1", "2048 anon_fault_alloc x", "x anon_fault_alloc 1", "2048 a b c",
        "-64 split 1", "64 Split 1", "64 " + "a" * 65 + " 1", "64 split ²", "64 split --1"]),
}
TABLE = {"pressure_memory": "psi_memory", "stat": "cpu_stat", "kthreads": "kthread_cpu",
         "mthp": "mthp_stats"}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_malformed_lines_are_skipped_and_the_good_one_kept(name):
    good, bad = HOSTILE[name]
    body = "\n".join(bad[:len(bad) // 2] + [good] + bad[len(bad) // 2:]) + "\n"
    notes = []
    tables = procfs.read_bundle_procfs({name: (HEAD + body).encode()}, notes, ticks_per_s=100)
    rows = tables[TABLE[name]].to_pylist()
    assert len(rows) == 1 and rows[0]["ts"] == 5 and notes == [], rows
    # the kept row is the good line's, split here
    tokens = good.replace("=", " ").split()
    assert [str(v) for v in rows[0].values() if v is not None] == [
        "5", *{"pressure_memory": lambda t: [t[0], t[8], t[2], t[4], t[6]],
               "stat": lambda t: ["0", *t[1:9], "100"],
               "kthreads": lambda t: [t[0], t[1], "kswapd", t[2], t[3], "100"],
               "mthp": lambda t: t}[name](tokens)]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_line_past_the_bound_is_one_note_and_the_samples_before_it_are_kept(name):
    good, _bad = HOSTILE[name]
    text = HEAD + good + "\n" + HEAD.replace("=5", "=7") + "x" * (procfs.MAX_LINE_BYTES + 10) + "\n"
    notes = []
    tables = procfs.read_bundle_procfs({name: text.encode()}, notes, ticks_per_s=100)
    assert tables[TABLE[name]].column("ts").to_pylist() == [5]
    assert len(notes) == 1 and f"procfs/{name}" in notes[0] and "longer than" in notes[0], notes


BUNDLE = Path(__file__).parent.parent / "examples" / "thp-faults"


@pytest.mark.parametrize("name, bad", [
    ("pressure_memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=99999999999999999999\n"),
    ("stat", "cpu7 1 2 3 99999999999999999999 5 6 7 8\n"),
    ("kthreads", "99999999999 kswapd0 1 2\n"),
    ("mthp", "2048 anon_fault_alloc " + "9" * 400 + "\n"),
])
def test_an_out_of_range_cost_number_is_one_line_naming_the_file_and_line(tmp_path, name, bad):
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    good = HOSTILE[name][0] + "\n"
    (bundle / "procfs" / name).write_text(HEAD + good + bad)
    proc = subprocess.run([*KMEMSCOPE, "parse", str(bundle), "-o", str(tmp_path / "ds")],
                          capture_output=True, text=True, timeout=300)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert "internal error" not in err[0] and "Traceback" not in proc.stderr
    assert f"procfs/{name}: line 3:" in err[0], err[0]
    assert len(err[0]) < 400, err[0]          # a 400-digit number is clipped
    assert not (tmp_path / "ds").exists()
