"""A live recording's cost samples against the kernel's own files read around it.

`kmemscope record` runs for about 2 s around a workload that faults 64 MiB of
MADV_HUGEPAGE memory and keeps a CPU busy; just before and just after, the test reads
/proc/<kswapd pid>/stat, /proc/pressure/memory, /proc/stat and one sysfs mTHP counter
itself. Every sampled increase (last sample minus first, from the parsed dataset) lies
between 0 and the increase the test's own readings give, since the sampler's first and
last samples fall between them. The pids of kthread_cpu are those of an independent walk
of /proc. Oracles: plain reads and splits of the live files here, nothing of capture/.
"""
import json
import os
import re
import sys
from pathlib import Path

import pytest

import requirements
from conftest import record_lock
from kmrun import kmemscope, rows_of

THP = Path("/sys/kernel/mm/transparent_hugepage")
PMD_STATS = THP / "hugepages-2048kB" / "stats"
PF_KTHREAD = 0x00200000
# 64 MiB of private anonymous memory with MADV_HUGEPAGE (mmap's default, MAP_SHARED, is shmem:
# no anonymous THP), each 4 KiB touched, then about 1.5 s of CPU (bounded by the clock)
WORKLOAD = r'''
import mmap, time
m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
if hasattr(mmap, "MADV_HUGEPAGE"):
    m.madvise(mmap.MADV_HUGEPAGE)
for off in range(0, 64 << 20, 4096):
    m[off] = 1
end = time.monotonic() + 1.5
n = 0
while time.monotonic() < end:
    n += 1
m.close()
'''


def kernel_threads():
    """{pid: comm} of the kswapd*, kcompactd* and khugepaged kernel threads, from /proc."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        flags = int(text[text.rindex(")") + 2:].split()[6])
        if flags & PF_KTHREAD and re.fullmatch(r"kswapd\d+(:\d+)?|kcompactd\d+|khugepaged", comm):
            out[int(stat.parent.name)] = comm
    return out


def readings(kswapd):
    """The test's own reading of every cost file it checks."""
    fields = Path(f"/proc/{kswapd}/stat").read_text().rsplit(")", 1)[1].split()
    psi = {line.split()[0]: int(line.split("total=")[1])
           for line in Path("/proc/pressure/memory").read_text().splitlines()}
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()
    return {"kswapd": int(fields[11]) + int(fields[12]), "psi_some": psi["some"],
            "psi_full": psi["full"], "system": int(cpu[3]), "user": int(cpu[1]),
            "mthp_alloc": int((PMD_STATS / "anon_fault_alloc").read_text()),
            "mthp_fallback": int((PMD_STATS / "anon_fault_fallback").read_text())}


def sampled(ds, sql):
    """The increase from a run's first sample to its last, of the one value `sql` selects
    per ts (columns ts, v)."""
    rows = rows_of(kmemscope("sql", ds, f"SELECT ts, v FROM ({sql}) ORDER BY ts",
                             "--format", "json"))
    assert len(rows) >= 2, rows
    return rows[-1]["v"] - rows[0]["v"]


def test_recorded_cost_samples_lie_within_readings_taken_around_the_recording(live_tracefs, tmp_path):
    if not Path("/proc/pressure/memory").is_file():
        requirements.skip("tracefs", "no /proc/pressure/memory (CONFIG_PSI)")
    if not (PMD_STATS / "anon_fault_alloc").is_file():
        requirements.skip("tracefs", "no per-size mTHP stats on this kernel (6.10+)")
    threads = kernel_threads()
    kswapd = min(pid for pid, comm in threads.items() if comm.startswith("kswapd"))
    load = tmp_path / "load.py"
    load.write_text(WORKLOAD)
    bundle, ds = tmp_path / "bundle", tmp_path / "ds"
    with record_lock():
        before = readings(kswapd)
        kmemscope("record", "-o", bundle, "--preset", "light", "--duration", "10",
                  "--", sys.executable, load)
        after = readings(kswapd)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["cost_samples"]["sampled"] == ["pressure_memory", "stat", "kthreads", "mthp"]
    assert manifest["clock_ticks_per_s"] == os.sysconf("SC_CLK_TCK")
    kmemscope("parse", "-q", bundle, "-o", ds)

    outside = {k: after[k] - before[k] for k in before}
    inside = {
        "kswapd": sampled(ds, f"SELECT ts, utime + stime AS v FROM kthread_cpu WHERE pid = {kswapd}"),
        "psi_some": sampled(ds, "SELECT ts, total_us AS v FROM psi_memory WHERE kind = 'some'"),
        "psi_full": sampled(ds, "SELECT ts, total_us AS v FROM psi_memory WHERE kind = 'full'"),
        "system": sampled(ds, "SELECT ts, system AS v FROM cpu_stat WHERE cpu = -1"),
        "user": sampled(ds, "SELECT ts, \"user\" AS v FROM cpu_stat WHERE cpu = -1"),
        "mthp_alloc": sampled(ds, "SELECT ts, value AS v FROM mthp_stats WHERE size_kb = 2048 "
                                  "AND counter = 'anon_fault_alloc'"),
        "mthp_fallback": sampled(ds, "SELECT ts, value AS v FROM mthp_stats WHERE size_kb = 2048 "
                                     "AND counter = 'anon_fault_fallback'"),
    }
    for key in outside:
        assert 0 <= inside[key] <= outside[key], (key, inside[key], outside[key])
    # the workload ran inside the recording: its huge-page faults and its CPU were sampled
    assert inside["mthp_alloc"] + inside["mthp_fallback"] > 0, inside
    assert inside["user"] > 0, inside

    got = rows_of(kmemscope("sql", ds, "SELECT DISTINCT pid, comm, kind, ticks_per_s FROM "
                            "kthread_cpu ORDER BY pid", "--format", "json"))
    assert {r["pid"]: r["comm"] for r in got} == threads
    assert {r["kind"] for r in got} <= {"kswapd", "kcompactd", "khugepaged"}
    assert {r["ticks_per_s"] for r in got} == {os.sysconf("SC_CLK_TCK")}
    sizes = sorted(int(p.name[len("hugepages-"):-2]) for p in THP.glob("hugepages-*kB")
                   if (p / "stats").is_dir())
    got_sizes = rows_of(kmemscope("sql", ds, "SELECT DISTINCT size_kb FROM mthp_stats ORDER BY 1",
                                  "--format", "json"))
    assert [r["size_kb"] for r in got_sizes] == sizes
