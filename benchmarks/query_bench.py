#!/usr/bin/env python3
"""Time every analysis over a dataset of at least 50 M mm_page_alloc + mm_page_free rows.

    query_bench.py [TRACE] [--rows N] [--work DIR] [--keep]
    query_bench.py --cli DATASET [--repeat 5] [--max-load 1.5]

TRACE (default: examples/*.dat, else /var/tmp/km/small.dat) is parsed once with
`kmemscope parse`; its run is then copied (hard links where possible) under new
run ids until the dataset holds N allocation + free rows. Each copy also gets
procfs samples (vmstat, pagetypeinfo) made up for the benchmark, so that the
procfs analyses are timed too; a bare trace.dat has none. The dataset lives
under DIR (default /var/tmp/kmemscope-query-bench), never in the repository.

Printed: the one-time cost of the per-run derived tables (queries/derived_tables.py;
paid by the first query that needs them, or by parse), then per analysis the
first run's time, the best of three, the rows returned, and whether it met the
3 s target. Analyses whose events the trace lacks are listed as skipped with
the engine's own message.

--cli DATASET times the quick commands as a user runs them (the console script, a
new process each time): `kmemscope --help`, `kmemscope queries`,
`kmemscope sql DATASET "SELECT 1"`, `kmemscope info DATASET` and `kmemscope query
summary DATASET`, one call to warm the file cache then the best of --repeat (wall
time, and the CPU time of that call: a loaded machine inflates it far less), each
call after waiting (at most a minute) for a 1-minute load average below --max-load,
with the load it started at; target 0.3 s each for the first three.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kmemscope.dataset.handle import DatasetRef
from kmemscope.common.errors import KmemscopeError
from kmemscope.queries import derived_tables as derive
from kmemscope.queries import catalog, runner
from kmemscope.dataset import reader as ds

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 3.0


def default_trace():
    examples = sorted((ROOT / "examples").glob("*.dat"))
    return examples[0] if examples else Path("/var/tmp/km/small.dat")


def link_or_copy(src, dst):
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def procfs_rows(first_ts, last_ts, samples=120):
    """Made-up but well-formed procfs samples: 120 samples of 200 counters."""
    step = max(1, (last_ts - first_ts) // (samples - 1))
    names = [f"counter_{i}" for i in range(190)] + [
        "thp_fault_alloc", "thp_fault_fallback", "thp_fault_fallback_charge", "compact_stall",
        "compact_success", "compact_migrate_scanned", "compact_free_scanned", "pgscan_kswapd",
        "thp_collapse_alloc", "thp_collapse_alloc_failed"]
    vm = {"ts": [], "name": [], "value": []}
    blocks = {"ts": [], "node": [], "zone": [], "migratetype": [], "blocks": []}
    for s in range(samples):
        ts = first_ts + s * step
        for i, n in enumerate(names):
            vm["ts"].append(ts)
            vm["name"].append(n)
            vm["value"].append(1000 * i + 37 * s * (i % 7 + 1))
        for zone, total in (("DMA32", 1000), ("Normal", 30000)):
            for mt, b in (("Unmovable", 100), ("Movable", total - 100 - s), ("Reclaimable", 0),
                          ("HighAtomic", s), ("Isolate", 0)):
                for k, v in (("ts", ts), ("node", 0), ("zone", zone), ("migratetype", mt),
                             ("blocks", b)):
                    blocks[k].append(v)
    vm_t = pa.table(vm, schema=pa.schema([("ts", pa.int64()), ("name", pa.string()),
                                          ("value", pa.int64())]))
    bl_t = pa.table(blocks, schema=pa.schema([("ts", pa.int64()), ("node", pa.int32()),
                                              ("zone", pa.string()), ("migratetype", pa.string()),
                                              ("blocks", pa.int64())]))
    return vm_t, bl_t


def build(trace, work, rows_wanted):
    src = work / "source"
    dst = work / "dataset"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(dst, ignore_errors=True)
    kmemscope = Path(sys.executable).with_name("kmemscope")
    t0 = time.perf_counter()
    subprocess.run([str(kmemscope), "parse", str(trace), "-o", str(src)], check=True,
                   stdout=subprocess.DEVNULL)
    parse_s = time.perf_counter() - t0
    parts = DatasetRef.of(src).listing
    (run,) = parts["runs"]
    per_run = sum(pq.ParquetFile(f).metadata.num_rows
                  for t in ("mm_page_alloc", "mm_page_free") for f in parts.get(t, {}).get(run, []))
    copies = -(-rows_wanted // per_run)
    runs_row = pq.read_table(parts["runs"][run][0]).to_pylist()[0]
    vm_t, bl_t = procfs_rows(runs_row["first_ts"], runs_row["last_ts"])
    for i in range(copies):
        new = f"{run}c{i:03d}"
        for table, byrun in parts.items():
            for f in byrun.get(run, []):
                link_or_copy(f, dst / table / f"run_id={new}" / f.name)
        for table, t in (("vmstat", vm_t), ("pagetypeinfo_blocks", bl_t)):
            out = dst / table / f"run_id={new}" / "part-0.parquet"
            out.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, out)
    return dst, parse_s, per_run, copies


CLI_TARGET_S = 0.3


def _run_timed(cmd):
    """(wall seconds, CPU seconds) of a command: user + system time of it and its children,
    which a loaded machine inflates far less than the wall time."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)} failed")
    return wall, usage.ru_utime + usage.ru_stime


def cli_bench(dataset, repeat, max_load):
    """Best-of-`repeat` wall time of each quick command, its CPU time, and the load it started at."""
    from parse_bench import byte_compile     # benchmarks/: the script's own folder

    byte_compile()      # as installed: no module compiled again at every start
    kmemscope = str(Path(sys.executable).with_name("kmemscope"))
    # (label, command, held to CLI_TARGET_S)
    commands = [("kmemscope --help", [kmemscope, "--help"], True),
                ("kmemscope queries", [kmemscope, "queries"], True),
                ('kmemscope sql DATASET "SELECT 1"', [kmemscope, "sql", str(dataset), "SELECT 1"],
                 True),
                ("kmemscope info DATASET", [kmemscope, "info", str(dataset)], False),
                ("kmemscope query summary DATASET", [kmemscope, "query", "summary", str(dataset)],
                 False)]
    print(f"cpus: {os.cpu_count()}; dataset: {dataset}")
    print(f"{'command':36} {'best_s':>7} {'cpu_s':>6} {'load':>5} {'median_s':>9}  status")
    for label, cmd, held in commands:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)       # warm the file cache
        runs = []
        for _ in range(repeat):
            deadline = time.monotonic() + 60
            while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
                time.sleep(2)
            load = os.getloadavg()[0]
            wall, cpu = _run_timed(cmd)
            runs.append((wall, cpu, load))
        best = min(runs)
        median = sorted(r[0] for r in runs)[len(runs) // 2]
        status = ("-" if not held else "ok" if best[0] <= CLI_TARGET_S
                  else f"SLOW (> {CLI_TARGET_S} s)")
        print(f"{label:36} {best[0]:7.3f} {best[1]:6.3f} {best[2]:5.2f} {median:9.3f}  {status}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=default_trace())
    ap.add_argument("--rows", type=int, default=50_000_000)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/kmemscope-query-bench"))
    ap.add_argument("--reuse", action="store_true", help="reuse the dataset of a previous run")
    ap.add_argument("--cli", type=Path, metavar="DATASET",
                    help="time the quick commands (--help, queries, sql SELECT 1) over DATASET only")
    ap.add_argument("--repeat", type=int, default=5, help="calls per command with --cli")
    ap.add_argument("--max-load", type=float, default=1.5,
                    help="with --cli, wait for a 1-minute load average below this before each call")
    args = ap.parse_args()
    if args.cli:
        cli_bench(args.cli, args.repeat, args.max_load)
        return
    if str(args.work.resolve()).startswith(str(ROOT)):
        sys.exit("query_bench: --work must be outside the repository")
    args.work.mkdir(parents=True, exist_ok=True)

    if args.reuse and (args.work / "dataset").is_dir():
        dataset, parse_s, per_run, copies = args.work / "dataset", None, None, None
    else:
        dataset, parse_s, per_run, copies = build(args.trace, args.work, args.rows)
    parts = DatasetRef.of(dataset).listing
    total = sum(pq.ParquetFile(f).metadata.num_rows
                for t in ("mm_page_alloc", "mm_page_free")
                for fs in parts.get(t, {}).values() for f in fs)
    print(f"trace: {args.trace}" if copies else "trace: (dataset reused from an earlier run)")
    if copies:
        print(f"parse: {parse_s:.2f} s; {per_run:,} alloc+free rows per run x {copies} runs")
    print(f"dataset: {dataset}: {len(parts['runs'])} runs, {total:,} mm_page_alloc + mm_page_free rows")
    print(f"cpus: {os.cpu_count()}")

    t0 = time.perf_counter()
    derive.derive_runs(DatasetRef.of(dataset))
    derive_s = time.perf_counter() - t0
    print(f"derived tables (once per run; at parse or first query): {derive_s:.2f} s "
          f"= {derive_s / len(parts['runs']):.3f} s per run")
    print()
    print(f"{'analysis':30} {'first_s':>8} {'best_of_3_s':>12} {'rows':>7}  status")
    worst = 0.0
    for name, _ in catalog.list_queries():
        times = []
        try:
            for _ in range(3):
                t0 = time.perf_counter()
                table = runner.run_query(name, dataset)
                times.append(time.perf_counter() - t0)
        except KmemscopeError as exc:
            print(f"{name:30} {'':>8} {'':>12} {'':>7}  skipped: {exc}")
            continue
        worst = max(worst, min(times))
        status = "ok" if times[0] <= TARGET_S else (
            "ok when warm" if min(times) <= TARGET_S else f"SLOW (> {TARGET_S:.0f} s)")
        print(f"{name:30} {times[0]:8.2f} {min(times):12.2f} {table.num_rows:7d}  {status}")
    print()
    print(f"slowest analysis (best of 3): {worst:.2f} s; target {TARGET_S:.0f} s")


if __name__ == "__main__":
    main()
