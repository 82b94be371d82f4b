#!/usr/bin/env python3
"""What one Spark task of a named analysis costs besides its runs' own work.

    spark_task_cost.py [--runs 24] [--analysis summary] [--repeat 3] [--no-spark]

A dataset of N re-labelled copies of the three example runs is built
(fleet_dataset.py). Then, warm (derived tables built, files in the page cache):

  duckdb, one opening   runner.run_local over all N runs at once: what one task over
                        a group of N runs does (one connection, views, lib views, facts)
  duckdb, N openings    runner.run_local over each run alone, N times: what N tasks
                        of one run each did before runs were grouped
  fixed cost per opening = (N openings - one opening) / (N - 1)

  spark, 1 run per task     SparkEngine(tasks=N): one task per run
  spark, grouped            SparkEngine() (TASKS_PER_CORE per core)
  spark, 1 task             SparkEngine(tasks=1)
  spark, empty tasks        a job of N tasks that do nothing: Spark's own scheduling
                            and Python worker cost per task
  fixed core-seconds per task = (1 run per task - grouped) x cores / (N - grouped tasks)

Each figure is the best of --repeat calls, with the 1-minute load average just
before it: the machine may be shared, and every figure is then noisy. Nothing
is asserted.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fleet_dataset  # noqa: E402


def best(fn, repeat):
    """(best seconds, CPU seconds of this process in that call, load average before it) of
    `repeat` calls of fn. Spark's work runs in its JVM and Python workers: not in the CPU
    figure, which is for the in-process DuckDB measurements."""
    out = None
    for _ in range(repeat):
        load = os.getloadavg()[0]
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        s, cpu = time.perf_counter() - t0, time.process_time() - c0
        if out is None or s < out[0]:
            out = (s, cpu, load)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--analysis", default="summary")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()

    from kmemscope.queries import runner

    tmp = Path(tempfile.mkdtemp(prefix="kmemscope-taskcost-", dir="/var/tmp"))
    rows = []
    try:
        src = tmp / "src"
        fleet_dataset.parse_sources(src)
        ds = tmp / "ds"
        fleet_dataset.build(src, ds, args.runs)
        plan = runner.prepare(args.analysis, ds)
        runs = sorted(plan.chosen)
        n = len(runs)
        runner.run_query(args.analysis, ds)            # derived tables, page cache

        def one_opening():
            runner.run_local(plan, ds, 1)

        def n_openings():
            from kmemscope.queries.engines.spark_engine import plan_of_runs
            for r in runs:
                runner.run_local(plan_of_runs(plan, [r]), ds, 1)

        one, one_cpu, load1 = best(one_opening, args.repeat)
        each, each_cpu, load2 = best(n_openings, args.repeat)
        rows.append(("duckdb, one opening over all runs", one, one_cpu, load1))
        rows.append((f"duckdb, {n} openings of one run", each, each_cpu, load2))
        rows.append(("duckdb, fixed cost per opening", (each - one) / max(1, n - 1),
                     (each_cpu - one_cpu) / max(1, n - 1), max(load1, load2)))

        if not args.no_spark:
            from kmemscope.queries.engines.spark_engine import SparkEngine
            base = SparkEngine(master=args.master)
            t0 = time.perf_counter()
            sc = base.spark.sparkContext
            print(f"spark session started in {time.perf_counter() - t0:.1f} s "
                  f"(not in the figures)", file=sys.stderr)
            cores = int(sc.defaultParallelism)
            grouped_tasks = base._task_count(sc, n)

            def spark(tasks):
                eng = SparkEngine(spark=base.spark, tasks=tasks)
                return lambda: runner.run_query(args.analysis, ds, engine=eng)

            spark(None)()                                # the workers' Python, warm
            per_run, _c, l1 = best(spark(n), args.repeat)
            grouped, _c, l2 = best(spark(None), args.repeat)
            single, _c, l3 = best(spark(1), args.repeat)
            empty, _c, l4 = best(lambda: sc.parallelize(range(n), n).map(lambda x: x).collect(),
                                 args.repeat)
            rows.append((f"spark {args.master}, {n} tasks of one run", per_run, None, l1))
            rows.append((f"spark {args.master}, {grouped_tasks} grouped tasks", grouped, None, l2))
            rows.append((f"spark {args.master}, 1 task", single, None, l3))
            rows.append((f"spark {args.master}, {n} empty tasks", empty, None, l4))
            rows.append(("spark, fixed core-seconds per task",
                         (per_run - grouped) * cores / max(1, n - grouped_tasks), None,
                         max(l1, l2)))
            rows.append(("spark, scheduling core-seconds per empty task", empty * cores / n,
                         None, l4))
            base.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{args.analysis} over {args.runs} runs (best of {args.repeat}; load = 1-minute "
          "load average before the call)")
    print(f"{'measurement':50s} {'seconds':>9s} {'cpu s':>8s} {'load':>6s}")
    for name, s, cpu, load in rows:
        shown = "-" if cpu is None else f"{cpu:.3f}"
        print(f"{name:50s} {s:9.3f} {shown:>8s} {load:6.2f}")


if __name__ == "__main__":
    main()
