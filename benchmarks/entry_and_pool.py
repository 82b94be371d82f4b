#!/usr/bin/env python3
"""What the program's entry (the collector frozen) and the decoder child's Arrow pool (malloc's)
change: the figures docs/benchmarks.md gives for them, each rerunnable here.

1. Teardown: fresh Pythons that import the command line and the parse's modules and exit,
   as they are, with gc.freeze() before the exit, and by os._exit (no teardown: the floor).
2. The entry: `kmemscope parse TRACE` and `kmemscope sql DS "SELECT 1"` started through
   kmemscope.cli.verbs's main (no freeze) and through the program's entry kmemscope.cli.main,
   alternated (median ms of each).
3. The pool: `kmemscope parse TRACE` with ARROW_DEFAULT_MEMORY_POOL=mimalloc (Arrow's
   default) and =system (what the child now sets), alternated: median wall ms and peak RSS;
   then, per pool, a fresh Python staging the run in-process reports its AnonHugePages.

The load average is printed beside every figure; nothing is asserted.

usage: benchmarks/entry_and_pool.py TRACE [--repeat 21]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from parse_bench import byte_compile, timed     # benchmarks/: the script's own folder

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"

IMPORTS = "import kmemscope.cli.verbs, kmemscope.parsers.ingest\n"
OLD_ENTRY = "import sys\nfrom kmemscope.cli.verbs import main\nsys.exit(main())\n"
NEW_ENTRY = "import sys\nfrom kmemscope.cli import main\nsys.exit(main())\n"
STAGE = ("import sys, tempfile\n"
         "from pathlib import Path\n"
         "from kmemscope.parsers import ingest\n"
         "with tempfile.TemporaryDirectory() as tmp:\n"
         "    (Path(tmp) / 'stage').mkdir()\n"
         "    ingest.stage_run(sys.argv[1], Path(tmp) / 'stage')\n"
         "    print(next(line.split()[1] for line in open('/proc/self/smaps_rollup')\n"
         "               if line.startswith('AnonHugePages')))\n")


def load1():
    return os.getloadavg()[0]


def with_load(text):
    """`text` with the 1-minute load average beside it."""
    return "%s   load %.2f" % (text, load1())


def wall_ms(cmd, env=None):
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1e3


def alternated(variants, repeat, before=None):
    """{name: [ms...]} of `variants` ({name: (cmd, env)}) run in turn `repeat` times."""
    out = {name: [] for name in variants}
    for _ in range(repeat):
        for name, (cmd, env) in variants.items():
            if before:
                before()
            out[name].append(wall_ms(cmd, env))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=21)
    args = ap.parse_args()
    if not args.trace.is_file():
        raise SystemExit(f"{args.trace}: no such file")
    byte_compile()
    py = str(PYTHON)

    teardown = alternated({"as is": ([py, "-c", IMPORTS], None),
                           "gc.freeze() first": ([py, "-c", IMPORTS + "import gc; gc.freeze()\n"],
                                                 None),
                           "os._exit (no teardown at all)": (
                               [py, "-c", IMPORTS + "import os; os._exit(0)\n"], None)},
                          args.repeat)
    print(with_load(f"imports, then exit, median of {args.repeat}: "
                    + ", ".join(f"{k} {statistics.median(v):.1f} ms" for k, v in teardown.items())))

    with tempfile.TemporaryDirectory(prefix="kmemscope-entry-") as tmp:
        ds, dest = Path(tmp) / "ds", Path(tmp) / "out"
        subprocess.run([py, "-c", NEW_ENTRY, "parse", "-q", str(args.trace), "-o", str(ds)],
                       check=True)
        for label, argv, before in (
                ("parse TRACE", ["parse", "-q", str(args.trace), "-o", str(dest)],
                 lambda: shutil.rmtree(dest, ignore_errors=True)),
                ('sql DS "SELECT 1"', ["sql", str(ds), "SELECT 1"], None)):
            got = alternated({"cli.cli main": ([py, "-c", OLD_ENTRY, *argv], None),
                              "the entry": ([py, "-c", NEW_ENTRY, *argv], None)},
                             args.repeat, before)
            print(with_load(f"{label}, median of {args.repeat}: "
                            + ", ".join(f"{k} {statistics.median(v):.1f} ms"
                                        for k, v in got.items())))

        pools = {}
        for _ in range(args.repeat):
            for pool in ("mimalloc", "system"):
                shutil.rmtree(dest, ignore_errors=True)
                env = dict(os.environ, ARROW_DEFAULT_MEMORY_POOL=pool)
                start = time.perf_counter()
                proc = subprocess.Popen([py, "-c", NEW_ENTRY, "parse", "-q", str(args.trace),
                                         "-o", str(dest)], env=env)
                _, status, usage = os.wait4(proc.pid, 0)
                if os.waitstatus_to_exitcode(status):
                    raise SystemExit(f"the parse with the {pool} pool failed")
                pools.setdefault(pool, []).append(((time.perf_counter() - start) * 1e3,
                                                   usage.ru_maxrss / 1024))
        for pool, runs in pools.items():
            huge = subprocess.run([py, "-c", STAGE, str(args.trace)], check=True, text=True,
                                  capture_output=True,
                                  env=dict(os.environ, ARROW_DEFAULT_MEMORY_POOL=pool)
                                  ).stdout.split()[-1]
            print(with_load(f"parse with the {pool} pool, median of {args.repeat}: "
                            f"{statistics.median(w for w, _ in runs):.1f} ms, peak RSS "
                            f"{min(r for _, r in runs):.0f}-{max(r for _, r in runs):.0f} MB; "
                            f"staged in-process: AnonHugePages {int(huge) / 1024:.0f} MB"))


if __name__ == "__main__":
    sys.exit(main())
