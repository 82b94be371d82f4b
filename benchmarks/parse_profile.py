#!/usr/bin/env python3
"""Where the time of a plain `kmemscope parse` goes: one stage added at a time.

    parse_profile.py TRACE [TRACE...] [--threads 2] [--repeat 3]

For each trace.dat, in this process (file in the page cache after a first read):

  read            read the whole file (the disk's part of the floor)
  open            read its layout and metadata and hand the event formats, printk formats
                  and cmdlines to libtraceevent (the kallsyms text is kept for the first
                  stack): paid
                  once per parse, whatever its size
  walk            the native decoder with no event wanted: read, decompress and
                  walk every page, build nothing (the floor of any decoder)
  decode          decode every event into Arrow record batches, then drop them
  + canonical     ... and give known columns their canonical types (dataset format)
  + parquet       ... and write them with the parse's Parquet writers (the staging)
  parse           `kmemscope parse TRACE -o DS -q` end to end, a new process (adds
                  imports, the child process, the sha256, the small tables, the commit)

Each figure is the best of --repeat of wall seconds and the CPU seconds of that
call (user + system, all threads), with the 1-minute load average before it: on
a shared machine the wall figures are noisy and the CPU figures less so.
Nothing is asserted.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KMEMSCOPE = ROOT / ".venv" / "bin" / "kmemscope"


def cpu_now(children=False):
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def best(fn, repeat, children=False):
    """(wall s, cpu s, load) of the fastest of `repeat` calls of fn."""
    out = None
    for _ in range(repeat):
        load = os.getloadavg()[0]
        c0, t0 = cpu_now(children), time.perf_counter()
        fn()
        wall, cpu = time.perf_counter() - t0, cpu_now(children) - c0
        if out is None or wall < out[0]:
            out = (wall, cpu, load)
    return out


def stages(trace, threads, repeat):
    from kmemscope.dataset import format as dataset_format
    from kmemscope.parsers.ingest import _PartSink
    from kmemscope.parsers.tracedat import TraceFile

    def read():
        with open(trace, "rb") as f:
            while f.read(8 << 20):
                pass

    def decode(make_sink, event_ids=None):
        t = TraceFile(trace)
        t.decode(make_sink, event_ids=event_ids, threads=threads)

    def open_only():
        TraceFile(trace)

    def walk():
        decode(lambda i: (lambda table, batch: None), event_ids=set())

    def arrow():
        decode(lambda i: (lambda table, batch: None))

    def canonical():
        def make(i):
            canon = dataset_format.Canonicalizer()
            return lambda table, batch: canon(table, batch)
        decode(make)

    def parquet():
        with tempfile.TemporaryDirectory(prefix="kmemscope-prof-", dir="/var/tmp") as tmp:
            sinks, rows, lock = [], {}, threading.Lock()

            def make(i):
                s = _PartSink(Path(tmp), i, rows, lock)
                with lock:
                    sinks.append(s)
                return s
            try:
                decode(make)
            finally:
                for s in sinks:
                    s.close()

    def parse():
        with tempfile.TemporaryDirectory(prefix="kmemscope-prof-", dir="/var/tmp") as tmp:
            subprocess.run([str(KMEMSCOPE), "parse", str(trace), "-o", f"{tmp}/ds", "-q"],
                           check=True)

    read()
    rows = [("read", *best(read, repeat)), ("open", *best(open_only, repeat)),
            ("walk (no event wanted)", *best(walk, repeat)),
            ("decode to Arrow", *best(arrow, repeat)),
            ("+ canonical types", *best(canonical, repeat)),
            ("+ Parquet writing", *best(parquet, repeat)),
            ("parse, end to end", *best(parse, repeat, children=True))]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for trace in args.traces:
        print(f"{trace} ({trace.stat().st_size / 1e6:.1f} MB), {args.threads} decoder threads, "
              f"best of {args.repeat}")
        print(f"  {'stage':28s} {'wall s':>8s} {'cpu s':>8s} {'load':>6s}")
        for name, wall, cpu, load in stages(trace, args.threads, args.repeat):
            print(f"  {name:28s} {wall:8.2f} {cpu:8.2f} {load:6.2f}", flush=True)


if __name__ == "__main__":
    main()
