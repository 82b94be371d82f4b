#!/usr/bin/env python3
"""A long fuzz run of `kmemscope parse` over structurally damaged real traces: `make fuzz`.

Each input is one valid trace.dat with one structure damaged (tests/fuzzlib.py,
`make_structural`): every 4 KiB truncation of the first 64 KiB of each seed (always
run first), then, drawn at random, duplicated or zeroed ring-buffer pages, header
fields, v7 section and option headers, the CPU data table, compressed chunks, page
headers, event headers, and fuzzlib's byte-level damage. Input i is a pure function
of (--seed, i), so any input can be rebuilt with --replay.

Every input goes through the command users run, `kmemscope parse -q INPUT -o DATASET`
(the decoder in its forked child), in a process group of its own, and each outcome is
classified:

  success          exit 0 and the run is in the dataset
  clean-error      exit 1, one `kmemscope: error:` line on stderr
  crash-contained  the decoder child died and the command said so in one line
  hang             no exit within --hang-seconds: the process group is killed
  traceback        a Python traceback or an `internal error` on stderr
  escape           the command itself died of a signal, or left a process running,
                   a work directory (.parse-*, or an older .staging-*/.trash-*) in the dataset, or a file outside it
                   (in its working directory, TMPDIR or beside the input)
  other            any other exit or stderr (e.g. a two-line error, exit 0 without a run)

It prints counts per class per mutation family and inputs per second, keeps the
inputs of every class but success and clean-error under --out (outside the
repository) with the command to replay each, and exits 1 if any input ended in hang,
traceback, escape or other. The command's memory is capped (--memory-gb) so that a
corrupt length cannot make a shared machine swap; hitting the cap shows up as an
error or a contained crash, not as a hang.

usage: tests/fuzz_long.py [--seconds 600] [--seed N] [--workers 2] [--out DIR]
                          [--families a,b] [--replay I]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import fuzzlib  # noqa: E402

KMEMSCOPE = ROOT / ".venv" / "bin" / "kmemscope"
EXAMPLES = ROOT / "examples"
PUBLIC_FIXTURES = ROOT.parent / "shared" / "fixtures" / "public"
CLASSES = ("success", "clean-error", "crash-contained", "hang", "traceback", "escape", "other")
FAILING = ("hang", "traceback", "escape", "other")
KEEP = ("crash-contained",) + FAILING
KEEP_PER_CELL = 25          # reproducers kept per family and class
RUN_DIR = re.compile(r"run_id=[0-9a-f]{16}")


# ---------------------------------------------------------------- seeds

def seed_files(cache, fixtures=PUBLIC_FIXTURES):
    """(name, path) of the valid traces to damage: the committed examples, the smaller one
    also converted to v7 uncompressed and to v6, and the public fixtures when present
    (long size 4, six and eight CPUs, an empty CPU, a 5.15 kernel's events)."""
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    mp = EXAMPLES / "memory-pressure" / "trace.dat"
    if mp.is_file():
        out.append(("memory-pressure-v7zstd", mp))
        for name, args in (("memory-pressure-v7none", ["--file-version", "7", "--compression", "none"]),
                           ("memory-pressure-v6", ["--file-version", "6"])):
            dest = cache / f"{name}.dat"
            if not dest.is_file() or dest.stat().st_mtime < mp.stat().st_mtime:
                tmp = dest.with_suffix(".tmp")
                subprocess.run(["trace-cmd", "convert", *args, "-i", str(mp), "-o", str(tmp)],
                               check=True, capture_output=True)
                tmp.rename(dest)
            out.append((name, dest))
    kc = EXAMPLES / "kmem-compaction" / "trace.dat"
    if kc.is_file():
        out.append(("kmem-compaction-v7zstd", kc))
    for name in ("langraph_v7_zstd148_le_l8_4cpu_5.15.dat", "trappy_tests_trace_v6_le_l4_8cpu_thermal.dat",
                 "trappy_trace_idle_v6_le_l8_6cpu.dat"):
        if (fixtures / name).is_file():
            out.append((name[:-4], fixtures / name))
    if not out:
        sys.exit("fuzz: no seed trace found (examples/ missing?)")
    return out


# ---------------------------------------------------------------- one input

def _leftovers(token):
    """Processes still carrying this input's environment token (the decoder child, say)."""
    needle = f"KMEMSCOPE_FUZZ_TOKEN={token}\0".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _strays(ds, cwd, tmp, indir):
    """What the command left where it should not have."""
    bad = []
    if ds.exists():
        for p in ds.rglob("*"):
            if p.name.startswith((".staging-", ".trash-", ".parse-")):
                bad.append(f"left {p.relative_to(ds.parent)}")
    for d, allowed in ((cwd, set()), (tmp, set()), (indir, {"input.dat"})):
        for p in d.iterdir():
            if p.name not in allowed:
                bad.append(f"wrote {p}")
    return bad


def run_one(path, work, token, hang_seconds, memory_bytes, command=KMEMSCOPE):
    """Run `kmemscope parse` on `path`; return (class, detail, exit code, stderr)."""
    ds, cwd, tmp = work / "ds", work / "cwd", work / "tmp"
    for d in (cwd, tmp):
        d.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp), KMEMSCOPE_FUZZ_TOKEN=token)
    cmd = ["prlimit", f"--as={memory_bytes}", "--core=0", "--", str(command), "parse", "-q",
           str(path), "-o", str(ds)]
    # stderr goes to a file, not a pipe: a process left behind that holds it open must
    # not make the command look hung.
    with open(work / "stderr.txt", "w+b") as errf:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errf, start_new_session=True)
        hung = False
        try:
            proc.wait(timeout=hang_seconds)
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        left = _leftovers(token)
        _kill(left)
        errf.seek(0)
        err = errf.read(1 << 20).decode("utf-8", "replace")
    code = proc.returncode
    if hung:
        return "hang", f"no exit after {hang_seconds:.0f} s", None, err
    strays = _strays(ds, cwd, tmp, path.parent)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code < 0:
        return "escape", f"kmemscope killed by {signal.Signals(-code).name}", code, err
    if left:
        return "escape", f"{len(left)} process(es) left running after exit {code}", code, err
    if strays:
        return "escape", "; ".join(strays[:3]), code, err
    if "Traceback" in err or "internal error" in err:
        return "traceback", (lines or [""])[-1][:300], code, err
    if code == 0:
        runs = ds / "runs"
        if runs.is_dir() and any(RUN_DIR.fullmatch(p.name) for p in runs.iterdir()) \
                and all(ln.startswith("kmemscope: warning: ") for ln in lines):
            return "success", "", code, err
        return "other", f"exit 0 but no run in the dataset, stderr {err[:200]!r}", code, err
    if code == 1 and len(lines) == 1 and lines[0].startswith("kmemscope: error: "):
        if "the trace decoder died" in lines[0]:
            return "crash-contained", lines[0], code, err
        return "clean-error", lines[0], code, err
    return "other", f"exit {code}, stderr {err[:300]!r}", code, err


def _clean(work):
    for name in ("ds", "cwd", "tmp"):
        shutil.rmtree(work / name, ignore_errors=True)
    (work / "stderr.txt").unlink(missing_ok=True)


# ---------------------------------------------------------------- the run

class Run:
    def __init__(self, args, seeds, out):
        self.args, self.seeds, self.out = args, seeds, out
        self.lock = threading.Lock()
        self.next_i = 0
        self.table = defaultdict(Counter)          # family -> class -> count
        self.kept = Counter()
        self.findings = []
        self.log = open(out / "results.jsonl", "w")
        self.families = args.families.split(",") if args.families else None
        self.deadline = time.monotonic() + args.seconds
        self.done = 0

    def take(self):
        with self.lock:
            if time.monotonic() >= self.deadline or (self.args.inputs and self.next_i >= self.args.inputs):
                return None
            i = self.next_i
            self.next_i += 1
            return i

    def worker(self, w):
        work = self.out / f"worker{w}"
        indir = work / "in"
        indir.mkdir(parents=True, exist_ok=True)
        path = indir / "input.dat"
        while (i := self.take()) is not None:
            data, family, seed, how = fuzzlib.make_structural(self.args.seed, i, self.seeds, self.families)
            path.write_bytes(data)
            started = time.monotonic()
            cls, detail, code, err = run_one(path, work, f"{self.args.seed}-{i}", self.args.hang_seconds,
                                             int(self.args.memory_gb * (1 << 30)))
            took = time.monotonic() - started
            _clean(work)
            rec = {"i": i, "family": family, "seed": seed, "how": how, "class": cls, "exit": code,
                   "seconds": round(took, 3), "detail": detail}
            with self.lock:
                self.table[family][cls] += 1
                self.done += 1
                self.log.write(json.dumps(rec) + "\n")
                if cls in KEEP and self.kept[family, cls] < KEEP_PER_CELL:
                    self.kept[family, cls] += 1
                    keep = self.out / "inputs" / f"{i:06d}-{family}-{cls}.dat"
                    keep.parent.mkdir(exist_ok=True)
                    keep.write_bytes(data)
                    rec["input"] = str(keep)
                    (keep.with_suffix(".txt")).write_text(
                        f"input {i} of seed {self.args.seed}: {family} on {seed}: {how}\n"
                        f"class {cls}: {detail}\nexit {code}, stderr:\n{err}\n"
                        f"replay: {KMEMSCOPE} parse {keep} -o /tmp/fuzz-ds\n"
                        f"   or: {sys.executable} {Path(__file__).resolve()} --seed {self.args.seed} "
                        f"--replay {i}\n")
                if cls in FAILING:
                    self.findings.append(rec)

    def progress(self, started):
        while time.monotonic() < self.deadline and not self.stopped.is_set():
            self.stopped.wait(30)
            with self.lock:
                total = Counter()
                for c in self.table.values():
                    total.update(c)
            el = time.monotonic() - started
            print(f"fuzz: {el:5.0f} s, {self.done} inputs ({self.done / el:.2f}/s): "
                  + ", ".join(f"{k} {total[k]}" for k in CLASSES if total[k]), file=sys.stderr, flush=True)

    def go(self):
        started = time.monotonic()
        self.stopped = threading.Event()
        threads = [threading.Thread(target=self.worker, args=(w,)) for w in range(self.args.workers)]
        for t in threads:
            t.start()
        ticker = threading.Thread(target=self.progress, args=(started,), daemon=True)
        ticker.start()
        try:
            for t in threads:
                t.join()
        except KeyboardInterrupt:      # stop taking inputs; the table covers what ran
            with self.lock:
                self.deadline = 0
            print("fuzz: interrupted, finishing the inputs under way", file=sys.stderr, flush=True)
            for t in threads:
                t.join()
        self.stopped.set()
        self.log.close()
        return time.monotonic() - started


def print_table(run, seconds, file=sys.stdout):
    fams = sorted(run.table, key=lambda f: (f != "truncate", f))
    cols = [c for c in CLASSES]
    w = max([len("family")] + [len(f) for f in fams] + [5])
    head = f"{'family':<{w}}  " + "  ".join(f"{c:>{max(len(c), 6)}}" for c in cols) + "   total"
    print(head, file=file)
    print("-" * len(head), file=file)
    grand = Counter()
    for f in fams:
        row = run.table[f]
        grand.update(row)
        print(f"{f:<{w}}  " + "  ".join(f"{row[c]:>{max(len(c), 6)}}" for c in cols)
              + f"  {sum(row.values()):>6}", file=file)
    print("-" * len(head), file=file)
    print(f"{'all':<{w}}  " + "  ".join(f"{grand[c]:>{max(len(c), 6)}}" for c in cols)
          + f"  {sum(grand.values()):>6}", file=file)
    n = sum(grand.values())
    print(f"\n{n} inputs in {seconds:.0f} s with {run.args.workers} workers: {n / seconds:.2f} inputs/s",
          file=file)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=600, help="how long to run (default 600)")
    ap.add_argument("--seed", type=int, default=None, help="master seed (default: a fresh one, printed)")
    ap.add_argument("--workers", type=int, default=2, help="commands run at once (default 2)")
    ap.add_argument("--inputs", type=int, default=0, help="stop after this many inputs (default: none)")
    ap.add_argument("--hang-seconds", type=float, default=30, help="a command running longer is a hang")
    ap.add_argument("--memory-gb", type=float, default=4, help="address-space cap of each command")
    ap.add_argument("--families", help="comma-separated families (default all): "
                    + ",".join(list(fuzzlib.FAMILIES) + ["bytes"]))
    ap.add_argument("--out", type=Path, default=Path("/var/tmp/kmemscope-fuzz"),
                    help="where seeds, results and kept inputs go (default /var/tmp/kmemscope-fuzz)")
    ap.add_argument("--fixtures", type=Path, default=PUBLIC_FIXTURES,
                    help="directory of the public trace.dat fixtures to use as seeds too, if present")
    ap.add_argument("--replay", type=int, metavar="I", help="rebuild input I of --seed, run it, print it")
    args = ap.parse_args()
    if not KMEMSCOPE.exists():
        sys.exit(f"fuzz: {KMEMSCOPE} is missing: run `make setup` first")
    if args.seed is None:
        if args.replay is not None:
            sys.exit("fuzz: --replay needs --seed")
        args.seed = random.SystemRandom().randrange(1, 1 << 31)
    seeds = [fuzzlib.Seed(name, Path(p).read_bytes()) for name, p in seed_files(args.out / "seeds", args.fixtures)]

    if args.replay is not None:
        data, family, seed, how = fuzzlib.make_structural(args.seed, args.replay, seeds,
                                                          args.families.split(",") if args.families else None)
        work = args.out / f"replay-{args.seed}-{args.replay}"
        shutil.rmtree(work, ignore_errors=True)
        (work / "in").mkdir(parents=True)
        path = work / "in" / "input.dat"
        path.write_bytes(data)
        cls, detail, code, err = run_one(path, work, f"replay-{args.replay}", args.hang_seconds,
                                         int(args.memory_gb * (1 << 30)))
        print(f"input {args.replay} of seed {args.seed}: {family} on {seed}: {how}\n"
              f"class {cls}: {detail}\nexit {code}, stderr:\n{err}"
              f"input kept as {path}; run it: {KMEMSCOPE} parse {path} -o {work / 'ds'}")
        return 1 if cls in FAILING else 0

    out = args.out / f"run-{args.seed}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"fuzz: seed {args.seed} (replay an input: {sys.argv[0]} --seed {args.seed} --replay I), "
          f"{args.seconds:.0f} s, {args.workers} workers, {len(fuzzlib.truncations(seeds))} truncations "
          f"first; seeds: {', '.join(s.name for s in seeds)}", file=sys.stderr, flush=True)
    run = Run(args, seeds, out)
    took = run.go()
    print()
    print_table(run, took)
    with open(out / "table.txt", "w") as f:
        print_table(run, took, file=f)
    print(f"results of every input: {out / 'results.jsonl'}; kept inputs: {out / 'inputs'}")
    for rec in run.findings[:30]:
        print(f"FAIL input {rec['i']} ({rec['family']} on {rec['seed']}: {rec['how']}): "
              f"{rec['class']}: {rec['detail']}\n  replay: {sys.executable} {sys.argv[0]} --seed "
              f"{args.seed} --replay {rec['i']}" + (f"  (kept as {rec['input']})" if "input" in rec else ""))
    return 1 if run.findings else 0


if __name__ == "__main__":
    sys.exit(main())
