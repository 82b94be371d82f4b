#!/usr/bin/env python3
"""Parsing many bundles: serial `kmemscope parse` against parse_on_spark (parsers/spark_parse.py).

The inputs are the three example bundles plus --copies copies of them, each
copy's trace.dat with a few bytes appended so that it is a distinct run (run
ids are content hashes). The serial side is one `kmemscope parse` command over
every input; the Spark side creates a session on --master (timed apart, it is
paid once per driver) and calls parse_on_spark twice, into two datasets
(the first job also starts the executors' Python workers). The datasets must
hold the same runs and table row counts, which is checked. Nothing else is asserted:
the script prints the times.

usage: benchmarks/spark_parse_bench.py [--copies 21] [--master local[2]] [--work DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = [ROOT / "examples" / n for n in ("kmem-compaction", "thp-faults", "memory-pressure")]
KMEMSCOPE = ROOT / ".venv" / "bin" / "kmemscope"


def make_inputs(work, copies):
    inputs = [str(p) for p in EXAMPLES]
    for i in range(copies):
        src = EXAMPLES[i % len(EXAMPLES)]
        # sql-safe: a directory name, not SQL
        dst = work / f"copy{i:03d}-{src.name}"
        shutil.copytree(src, dst)
        with open(dst / "trace.dat", "ab") as f:
            # sql-safe: bytes that make each copy a distinct trace, not SQL
            f.write(f"copy {i}".encode())
        inputs.append(str(dst))
    return inputs


def rows(ds):
    out = {}
    import pyarrow.parquet as pq
    for table in Path(ds).iterdir():
        if table.is_dir() and not table.name.startswith((".", "_")):
            for part in table.iterdir():
                out[(table.name, part.name)] = sum(pq.ParquetFile(f).metadata.num_rows
                                                   for f in part.glob("*.parquet"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=21)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="kmemscope-spark-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    inputs = make_inputs(work, args.copies)
    size = sum(os.path.getsize(Path(p) / "trace.dat") for p in inputs)
    print(f"{len(inputs)} bundles, {size / 1e6:.1f} MB of trace.dat; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    serial_ds = work / "serial"
    t = time.monotonic()
    subprocess.run([str(KMEMSCOPE), "parse", "-q", *inputs, "-o", str(serial_ds)], check=True)
    serial_s = time.monotonic() - t
    print(f"serial kmemscope parse:        {serial_s:6.1f} s")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kmemscope.parsers.spark_parse import parse_on_spark
    from kmemscope.queries.engines import spark_engine
    t = time.monotonic()
    spark = spark_engine.session(args.master)
    session_s = time.monotonic() - t
    print(f"Spark {args.master} session start: {session_s:6.1f} s")
    same, failed = True, []
    # The first job also starts the executors' Python workers; the second shows
    # what a driver that has already run a job pays.
    for attempt in ("first job", "second job"):
        spark_ds = work / f"spark-{attempt.split()[0]}"
        t = time.monotonic()
        out = parse_on_spark(inputs, spark_ds, spark=spark)
        spark_s = time.monotonic() - t
        failed += [e for e in out if isinstance(e, Exception)]
        print(f"Spark {args.master} parse_on_spark, {attempt}: {spark_s:6.1f} s "
              f"({len(out) - len(failed)} runs, {len(failed)} failed)")
        same = same and rows(serial_ds) == rows(spark_ds)
    spark.stop()
    print(f"same runs and row counts in both datasets: {same}; "
          f"load average now {os.getloadavg()[0]:.1f}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if same and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
