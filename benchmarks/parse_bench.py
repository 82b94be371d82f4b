#!/usr/bin/env python3
"""How fast `kmemscope parse` is, against `trace-cmd report` on the same files, in one run.

Targets: on a real plain kmem trace of a few million events (v7+zstd), parse to
Parquet end to end takes at most 1/25 of `trace-cmd report -i F > /dev/null`
(the goal: 1/35); on a stack-heavy trace (a kernel stack after every page
allocation) at most 1/20 (measured on two: `stacks`, about a million and a half
events, where the parse's fixed cost of about 0.2 s is half of it, and
`stacks-large`, several times that); per-event time on a trace about 4x larger is at most
1.3x; peak RSS on a trace of at least 10 M events stays under 600 MB.

The traces are recorded on this machine (root and tracefs needed) the first
time and kept in --cache; they are real kmem traces of a page-churning
workload. The plain ones are `trace-cmd record` of the kmem events; the
stack-heavy one is `kmemscope record --preset atomic-origins -e
kmem:mm_page_alloc` (the preset's stack on every event, with the allocation
event unfiltered) around the same workload. Recording holds
/var/tmp/kmemscope-trace.lock, as every tracer on this machine does.

The machine's 1-minute load average is printed beside every figure. A trace
whose measurement ran at a load above --max-load is measured again (up to
--tries times) and the quietest attempt is kept; parse and report of a row
always come from the same attempt. Nothing here is asserted: the script
prints the table and the verdicts.

Each parse is timed --repeat times (the median is the row's figure, the fastest is
printed beside it): this machine's call times vary by a fifth from call to call.

usage: benchmarks/parse_bench.py [--cache DIR] [--small-seconds 9] [--medium-seconds 7]
                                 [--large-seconds 36] [--stack-seconds 12]
                                 [--stack-large-seconds 60]
                                 [--only small-v6,stacks] [--tries 3] [--repeat 5]
"""
import argparse
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KMEMSCOPE = ROOT / ".venv" / "bin" / "kmemscope"
LOCK = "/var/tmp/kmemscope-trace.lock"
TRACEFS = Path("/sys/kernel/tracing")
TRACES = ["small-v6", "small-v7", "medium-v7", "large-v6", "large-v7", "stacks", "stacks-large"]
EVENTS = ["kmem:mm_page_alloc", "kmem:mm_page_free", "kmem:mm_page_alloc_zone_locked",
          "kmem:mm_page_pcpu_drain", "kmem:mm_page_alloc_extfrag", "compaction"]


def record(out, seconds):
    """Record `seconds` of a two-process churn workload system-wide (v7 + zstd)."""
    print(f"recording {out} ({seconds} s of page churn)...", file=sys.stderr)
    cmd = ["trace-cmd", "record", "-d", "--no-filter", "-C", "mono", "-b", "16384", "-o", str(out)]
    for e in EVENTS:
        cmd += ["-e", e]
    # trace-cmd leaves its buffer size and tracing_on behind on hosts where it
    # cannot reset tracefs: put them back as they were.
    # A fresh boot reads '7 (expanded: 1408)': save the size a tracer gets, not the token 7.
    saved = {name: (TRACEFS / name).read_text().split("expanded:")[-1].strip(" )\n")
             for name in ("buffer_size_kb", "tracing_on")}
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.5)
            workers = [subprocess.Popen([sys.executable, str(HERE / "workload_churn.py"), str(seconds)])
                       for _ in range(2)]
            for w in workers:
                w.wait()
        finally:
            rec.send_signal(signal.SIGINT)
            rec.wait()
            for name, value in saved.items():
                (TRACEFS / name).write_text(value)


def record_stacks(out, seconds):
    """Record `seconds` of the churn workload with a kernel stack after every page allocation."""
    print(f"recording {out} ({seconds} s of page churn, a kernel stack on every allocation)...",
          file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="kmemscope-bench-", dir=out.parent) as tmp:
        bundle = Path(tmp) / "bundle"
        cmd = [str(KMEMSCOPE), "record", "-o", str(bundle), "--preset", "atomic-origins",
               "-e", "kmem:mm_page_alloc", "--buffer-kb", "65536", "--",
               sys.executable, str(HERE / "workload_churn.py"), str(seconds)]
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        os.replace(bundle / "trace.dat", out)


def load1():
    return os.getloadavg()[0]


def convert_v6(src, dst):
    subprocess.run(["trace-cmd", "convert", "--file-version", "6", "-i", str(src), "-o", str(dst)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timed(cmd, stdout=subprocess.DEVNULL):
    """Wall seconds and peak RSS (MB) of a command and the children it waited for."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed: {err.strip()}")
    return wall, usage.ru_maxrss / 1024, err


def byte_compile():
    """Byte-compile kmemscope's modules, as an installed package has them: where a module's
    .pyc is stale and cannot be written (PYTHONDONTWRITEBYTECODE, a read-only tree), every
    start compiles it again (ingest.py alone: ~10 ms of each parse)."""
    dirs = [str(ROOT / d) for d in ("kmemscope", "dataset", "cli", "capture", "parsers", "queries",
                                    "notebooks")]
    subprocess.run([str(KMEMSCOPE.with_name("python")), "-m", "compileall", "-q", *dirs],
                   check=True, stdout=subprocess.DEVNULL)


def count_events(dataset):
    out = subprocess.run([str(KMEMSCOPE), "sql", str(dataset), "SELECT sum(events) FROM runs",
                          "--format", "csv"], capture_output=True, text=True, check=True).stdout
    return int(out.splitlines()[1])


def measure_once(trace, label, repeat):
    loads, parses = [load1()], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="kmemscope-bench-") as tmp:
            ds = Path(tmp) / "ds"
            parses.append(timed([str(KMEMSCOPE), "parse", str(trace), "-o", str(ds), "-q"])[:2])
            loads.append(load1())
            events = count_events(ds)
    walls = sorted(w for w, _ in parses)
    report_s, report_rss, _ = timed(["trace-cmd", "report", "-i", str(trace)])
    return {"label": label, "events": events, "parse_s": walls[len(walls) // 2],
            "parse_best_s": walls[0], "report_s": report_s,
            "parse_rss": max(rss for _, rss in parses), "report_rss": report_rss,
            "size_mb": trace.stat().st_size / 1e6, "load": max(loads + [load1()])}


def measure(trace, label, tries, max_load, repeat):
    """The quietest of up to `tries` attempts; stops at the first at or below `max_load`."""
    best = None
    for attempt in range(tries):
        r = measure_once(trace, label, repeat)
        print(f"{label}: parse median {r['parse_s']:.2f} s (best {r['parse_best_s']:.2f} of "
              f"{repeat}), report {r['report_s']:.2f} s, {r['report_s'] / r['parse_s']:.1f}x "
              f"at load {r['load']:.2f}", file=sys.stderr)
        if best is None or r["load"] < best["load"]:
            best = r
        if r["load"] <= max_load:
            break
        if attempt + 1 < tries:
            time.sleep(20)      # let the other jobs on the machine pass
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="/var/tmp/kmemscope-bench", type=Path)
    ap.add_argument("--small-seconds", type=float, default=9)
    ap.add_argument("--medium-seconds", type=float, default=7)
    ap.add_argument("--large-seconds", type=float, default=36)
    ap.add_argument("--stack-seconds", type=float, default=12)
    ap.add_argument("--stack-large-seconds", type=float, default=60)
    ap.add_argument("--only", default=",".join(TRACES),
                    help=f"traces to measure, of {','.join(TRACES)} (default: all)")
    ap.add_argument("--tries", type=int, default=3, help="attempts per trace while the load is high")
    ap.add_argument("--max-load", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=5, help="parses per attempt (median kept)")
    args = ap.parse_args()
    if not KMEMSCOPE.exists():
        raise SystemExit("run `make setup` first")
    only = [t.strip() for t in args.only.split(",") if t.strip()]
    if not only or set(only) - set(TRACES):
        raise SystemExit(f"--only takes names of {', '.join(TRACES)}")
    args.cache.mkdir(parents=True, exist_ok=True)
    wanted = [("small", args.small_seconds, record), ("medium", args.medium_seconds, record),
              ("large", args.large_seconds, record), ("stacks", args.stack_seconds, record_stacks),
              ("stacks-large", args.stack_large_seconds, record_stacks)]
    for name, seconds, recorder in wanted:
        path = args.cache / f"{name}-v7.dat"
        if not any(t == name or t.startswith(f"{name}-v") for t in only):
            continue
        if not path.exists():
            if os.geteuid() != 0 or not shutil.which("trace-cmd"):
                raise SystemExit(f"{path} is missing and recording it needs root and trace-cmd")
            recorder(path, seconds)
        v6 = path.with_name(path.name.replace("-v7", "-v6"))
        if recorder is record and f"{name}-v6" in only and not v6.exists():
            convert_v6(path, v6)

    byte_compile()
    rows = []
    for name in only:
        stacks = name.startswith("stacks")
        file = args.cache / (f"{name}-v7.dat" if stacks else f"{name}.dat")
        label = f"{name}-v7+zstd" if stacks else name.replace("v7", "v7+zstd")
        rows.append(measure(file, label, args.tries, args.max_load, max(1, args.repeat)))

    print(f"\nkmemscope parse vs trace-cmd report, {os.cpu_count()} cores "
          f"({subprocess.run(['trace-cmd', '--version'], capture_output=True, text=True).stdout.split()[2]})")
    print(f"parse s: the median of {args.repeat} parses (best: the fastest of them)")
    hdr = (f"{'trace':<16}{'MB':>7}{'events':>12}{'report s':>10}{'parse s':>9}{'best':>6}"
           f"{'ratio':>8}{'parse Mev/s':>13}{'ns/event':>10}{'parse RSS MB':>14}"
           f"{'report RSS MB':>15}{'load':>6}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        r["ratio"] = r["report_s"] / r["parse_s"]
        r["ns"] = r["parse_s"] / r["events"] * 1e9
        print(f"{r['label']:<16}{r['size_mb']:>7.1f}{r['events']:>12,}{r['report_s']:>10.2f}"
              f"{r['parse_s']:>9.2f}{r['parse_best_s']:>6.2f}{r['ratio']:>7.1f}x"
              f"{r['events'] / r['parse_s'] / 1e6:>13.2f}"
              f"{r['ns']:>10.0f}{r['parse_rss']:>14.0f}{r['report_rss']:>15.0f}{r['load']:>6.2f}")
    print()
    by = {r["label"]: r for r in rows}
    for fmt in ("v6", "v7+zstd"):
        s, l = by.get(f"small-{fmt}"), by.get(f"large-{fmt}")
        for size in ("small", "medium"):
            r = by.get(f"{size}-{fmt}")
            if r:
                verdict = ("meets the 35x goal" if r["ratio"] >= 35 else
                           "meets the 25x target, not the 35x goal" if r["ratio"] >= 25 else
                           "MISSES the 25x target")
                print(f"{fmt}: parse is {r['ratio']:.1f}x faster than trace-cmd report on "
                      f"{r['events'] / 1e6:.1f} M events ({verdict}; load {r['load']:.2f})")
        if s and l:
            growth = l["ns"] / s["ns"]
            print(f"{fmt}: per-event time on a {l['events'] / s['events']:.1f}x larger trace is "
                  f"{growth:.2f}x ({'meets' if growth <= 1.3 else 'MISSES'} the 1.3x target)")
        if l:
            print(f"{fmt}: peak RSS on {l['events'] / 1e6:.1f} M events {l['parse_rss']:.0f} MB "
                  f"({'meets' if l['parse_rss'] < 600 and l['events'] >= 10e6 else 'MISSES'} "
                  "the 600 MB target)")
    for name in ("stacks", "stacks-large"):
        st = by.get(f"{name}-v7+zstd")
        if st:
            verdict = "meets the 20x target" if st["ratio"] >= 20 else "MISSES the 20x target"
            print(f"{name}: parse is {st['ratio']:.1f}x faster than trace-cmd report on "
                  f"{st['events'] / 1e6:.1f} M events, half of them kernel stacks ({verdict}; "
                  f"peak RSS {st['parse_rss']:.0f} MB; load {st['load']:.2f})")


if __name__ == "__main__":
    main()
