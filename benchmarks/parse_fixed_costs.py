#!/usr/bin/env python3
"""The parse's fixed costs, one at a time: what docs/benchmarks.md says of the open, the
collector and the decoder child.

For each trace: the system calls of opening it (`strace -c`, when strace is installed), the
layout and the whole open (`TraceFile`) timed alone, and the collector's passes during an
in-process staging of the run (`gc.callbacks`; the parse's child runs without the collector).
Then the start of a child: parsers/forked.py against multiprocessing's fork Process, and the
import floor: a fresh Python importing what a parse's two processes import, then exiting. The
load average is printed beside every figure; nothing is asserted.

usage: benchmarks/parse_fixed_costs.py TRACE... [--repeat 7]
"""
import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"


def load1():
    return os.getloadavg()[0]


def median_ms(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def open_syscalls(trace):
    """read and lseek calls of opening `trace`, from strace -c of a Python that only opens it."""
    if not shutil.which("strace"):
        return "strace not installed"
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        subprocess.run(["strace", "-f", "-c", "-e", "trace=read,lseek,pread64", "-o", out.name,
                        str(PYTHON), "-c", "import sys; from kmemscope.parsers.tracedat import "
                        "TraceFile; TraceFile(sys.argv[1])", str(trace)],
                       check=True, stdout=subprocess.DEVNULL)
        calls = {line.split()[-1]: int(line.split()[3]) for line in out.read().splitlines()
                 if line.split() and line.split()[-1] in ("read", "lseek", "pread64")}
    return ", ".join(f"{name} {n:,}" for name, n in sorted(calls.items()))


def in_fresh_python(*mode):
    """Run this script's `mode` in a new Python that has imported what a parse's parent
    imports (the command line, the ingest), as the decoder child starts from; its output."""
    return subprocess.run([str(PYTHON), __file__, *map(str, mode)], check=True,
                          capture_output=True, text=True).stdout.strip()


def _parent_imports():
    import kmemscope.cli.verbs  # noqa: F401
    import kmemscope.parsers.ingest  # noqa: F401


def collector_passes(trace):
    """{generation: (passes, ms)} of the cyclic collector while the run is staged here
    (pyarrow imported on the way, as in the parse's child)."""
    from kmemscope.parsers import ingest

    spent, started = {}, {}

    def watch(phase, info):
        gen = info["generation"]
        if phase == "start":
            started[gen] = time.perf_counter()
        else:
            n, ms = spent.get(gen, (0, 0.0))
            spent[gen] = (n + 1, ms + (time.perf_counter() - started[gen]) * 1e3)

    with tempfile.TemporaryDirectory(prefix="kmemscope-costs-") as tmp:
        stage = Path(tmp) / "stage"
        stage.mkdir()
        gc.callbacks.append(watch)
        try:
            ingest.stage_run(str(trace), stage)
        finally:
            gc.callbacks.remove(watch)
    return spent


def _child(conn, *args):
    conn.send(("ok", None))


def child_start_ms(how):
    """ms from asking for a child (importing what that needs) to its first message and reap."""
    start = time.perf_counter()
    if how == "forked":
        from kmemscope.parsers.forked import ForkedChild

        child = ForkedChild(_child)
        child.recv()
        child.join()
    else:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        parent_end, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child_end,), daemon=True)
        proc.start()
        child_end.close()
        parent_end.recv()
        proc.join()
    return (time.perf_counter() - start) * 1e3


def import_floor_ms(repeat):
    """Median wall ms of fresh Pythons that import what a parse's two processes import (the
    command line and the parse's modules; pyarrow and pyarrow.parquet without numpy or
    pandas, as the child has them) and exit: what no parse can go below on this machine."""
    code = ("import sys\n"
            "import kmemscope.cli.verbs, kmemscope.parsers.ingest\n"
            "from kmemscope.parsers.ingest import _Unimportable\n"
            "sys.meta_path.insert(0, _Unimportable(['numpy', 'pandas']))\n"
            "import pyarrow, pyarrow.parquet\n")
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([str(PYTHON), "-c", code], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=7)
    if sys.argv[1:2] in (["--collector"], ["--child-start"]):      # the fresh Pythons' part
        _parent_imports()
        if sys.argv[1] == "--collector":
            spent = collector_passes(Path(sys.argv[2]))
            print(sum(n for n, _ in spent.values()), sum(ms for _, ms in spent.values()),
                  ", ".join(f"gen {g}: {n} in {ms:.1f} ms" for g, (n, ms) in sorted(spent.items())),
                  sep="|")
        else:
            print(child_start_ms(sys.argv[2]))
        return
    args = ap.parse_args()
    from kmemscope.parsers import _tracedat, layout
    from kmemscope.parsers.tracedat import TraceFile

    for trace in args.traces:
        if not trace.is_file():
            raise SystemExit(f"{trace}: no such file")
        print(f"{trace} ({trace.stat().st_size / 1e6:.1f} MB)")
        print(f"  open's system calls          {open_syscalls(trace)}   load {load1():.2f}")
        lay = median_ms(lambda: layout.read_layout(str(trace), _tracedat.decompress), args.repeat)
        whole = median_ms(lambda: TraceFile(str(trace)), args.repeat)
        print(f"  layout / open, median of {args.repeat}  {lay:.1f} / {whole:.1f} ms   load {load1():.2f}")
        passes, ms, by_gen = in_fresh_python("--collector", trace).splitlines()[-1].split("|")
        print(f"  collector while staging      {passes} passes, {float(ms):.1f} ms ({by_gen})"
              f"   load {load1():.2f}")
    starts = {how: statistics.median(float(in_fresh_python("--child-start", how).splitlines()[-1])
                                     for _ in range(args.repeat))
              for how in ("forked", "multiprocessing")}
    print(f"a child's start, import included, to its first message and reap, median of "
          f"{args.repeat}: forked.py {starts['forked']:.1f} ms, multiprocessing "
          f"{starts['multiprocessing']:.1f} ms   load {load1():.2f}")
    print(f"the import floor (a Python importing what a parse's processes import, then exiting), "
          f"median of {args.repeat}: {import_floor_ms(args.repeat):.1f} ms   load {load1():.2f}")


if __name__ == "__main__":
    sys.exit(main())
