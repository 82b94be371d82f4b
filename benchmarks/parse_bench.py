#!/usr/bin/env python3
"""How fast `kmemscope parse` is, against `trace-cmd report` on the same files, in one run.

Targets: on a real kmem trace of at least 4 M events, parse-to-Parquet
end to end takes at most 1/15 of `trace-cmd report -i F > /dev/null`, for both
v6 and v7+zstd; per-event time on a trace about 4x larger is at most 1.3x; peak
RSS on a trace of at least 10 M events stays under 600 MB.

The traces are recorded on this machine (root and tracefs needed) the first
time and kept in --cache; they are real kmem traces of a page-churning
workload. Nothing here is asserted: the script prints the table and the verdicts.

usage: benchmarks/parse_bench.py [--cache DIR] [--small-seconds 9] [--large-seconds 36]
"""
import argparse
import fcntl
import os
import resource
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


def count_events(dataset):
    out = subprocess.run([str(KMEMSCOPE), "sql", str(dataset), "SELECT sum(events) FROM runs",
                          "--format", "csv"], capture_output=True, text=True, check=True).stdout
    return int(out.splitlines()[1])


def measure(trace, label):
    with tempfile.TemporaryDirectory(prefix="kmemscope-bench-") as tmp:
        ds = Path(tmp) / "ds"
        parse_s, parse_rss, _ = timed([str(KMEMSCOPE), "parse", str(trace), "-o", str(ds), "-q"])
        events = count_events(ds)
    report_s, report_rss, _ = timed(["trace-cmd", "report", "-i", str(trace)])
    return {"label": label, "events": events, "parse_s": parse_s, "report_s": report_s,
            "parse_rss": parse_rss, "report_rss": report_rss, "size_mb": trace.stat().st_size / 1e6}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="/var/tmp/kmemscope-bench", type=Path)
    ap.add_argument("--small-seconds", type=float, default=9)
    ap.add_argument("--large-seconds", type=float, default=36)
    args = ap.parse_args()
    if not KMEMSCOPE.exists():
        raise SystemExit("run `make setup` first")
    args.cache.mkdir(parents=True, exist_ok=True)
    small, large = args.cache / "small-v7.dat", args.cache / "large-v7.dat"
    for path, seconds in ((small, args.small_seconds), (large, args.large_seconds)):
        if not path.exists():
            if os.geteuid() != 0 or not shutil.which("trace-cmd"):
                raise SystemExit(f"{path} is missing and recording it needs root and trace-cmd")
            record(path, seconds)
        v6 = path.with_name(path.name.replace("-v7", "-v6"))
        if not v6.exists():
            convert_v6(path, v6)

    rows = []
    for name in ("small-v6", "small-v7", "large-v6", "large-v7"):
        rows.append(measure(args.cache / f"{name}.dat", name.replace("v7", "v7+zstd")))

    print(f"\nkmemscope parse vs trace-cmd report, {os.cpu_count()} cores "
          f"({subprocess.run(['trace-cmd', '--version'], capture_output=True, text=True).stdout.split()[2]})")
    hdr = (f"{'trace':<15}{'MB':>7}{'events':>12}{'report s':>10}{'parse s':>9}{'ratio':>8}"
           f"{'parse Mev/s':>13}{'ns/event':>10}{'parse RSS MB':>14}{'report RSS MB':>15}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        r["ratio"] = r["report_s"] / r["parse_s"]
        r["ns"] = r["parse_s"] / r["events"] * 1e9
        print(f"{r['label']:<15}{r['size_mb']:>7.1f}{r['events']:>12,}{r['report_s']:>10.2f}"
              f"{r['parse_s']:>9.2f}{r['ratio']:>7.1f}x{r['events'] / r['parse_s'] / 1e6:>13.2f}"
              f"{r['ns']:>10.0f}{r['parse_rss']:>14.0f}{r['report_rss']:>15.0f}")
    print()
    by = {r["label"]: r for r in rows}
    for fmt in ("v6", "v7+zstd"):
        s, l = by[f"small-{fmt}"], by[f"large-{fmt}"]
        verdict = "meets" if s["ratio"] >= 15 and s["events"] >= 4e6 else "MISSES"
        print(f"{fmt}: parse is {s['ratio']:.1f}x faster than trace-cmd report on "
              f"{s['events'] / 1e6:.1f} M events ({verdict} the 15x target)")
        growth = l["ns"] / s["ns"]
        print(f"{fmt}: per-event time on a {l['events'] / s['events']:.1f}x larger trace is "
              f"{growth:.2f}x ({'meets' if growth <= 1.3 else 'MISSES'} the 1.3x target)")
        print(f"{fmt}: peak RSS on {l['events'] / 1e6:.1f} M events {l['parse_rss']:.0f} MB "
              f"({'meets' if l['parse_rss'] < 600 and l['events'] >= 10e6 else 'MISSES'} the 600 MB target)")


if __name__ == "__main__":
    main()
