#!/usr/bin/env python3
"""Peak memory and time of kmemscope's commands on hostile datasets and bundles ("bombs").

    bomb_bench.py [--work DIR] [--rows N] [--host-mib M] [--columns C] [--only LIST]

Each bomb is built from the thp-faults example bundle under DIR (default
/var/tmp/kmemscope-bombs, never the repository) with tests/hostile.py's helpers:

  row bomb     mm_page_alloc of one run replaced by N copies of one row (a few MB)
  wide table   a table of C columns and one row (a footer of tens of MB)
  long host    the runs file's host a string of M MiB
  sparse part  a part file replaced by a 64 GiB sparse file
and, for `parse`, packed bundles (the example's trace.dat and manifest.json beside them):
  paxzst       a 3 GiB pax header in a .tar.zst (about 1.4 MB)
  paxgz        a 1 GiB pax header in a .tar.gz (about 6 MB)
  skipped      an 8 GiB member that is not part of a bundle, before the bundle's, in .tar.zst
  vmstat       procfs/vmstat: one sample of 240 MiB of counter lines, in .tar.zst (about 1 MB)
  samples      procfs/vmstat: 64 MiB of real samples (the example's first, over and over)
  buddyinfo    procfs/buddyinfo: one sample of 40 MB, a million zone lines

Each command runs under the defaults (memory limit a quarter of the machine's memory,
timeout 3600 s; sql --read-only 300 s) unless the line says otherwise; printed per
command: exit status, peak RSS of its process (VmHWM), wall seconds, the last line of
stderr, and the 1-minute load average when it started. Other work on the machine makes
the seconds noisy: read them with the load average beside them.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
KMEMSCOPE = [str(Path(sys.executable).parent / "kmemscope")]


def measure(*args):
    """(exit status, peak RSS MiB, seconds, last stderr line, load) of one command."""
    import hostile

    load = os.getloadavg()[0]
    code, _out, err, rss, seconds = hostile.run_measured([*KMEMSCOPE, *map(str, args)], 3900)
    lines = err.strip().splitlines()
    return code, rss, seconds, (lines or [""])[-1][:150], load


def show(what, result):
    code, rss, seconds, last, load = result
    print(f"{what:58} exit {code:3}  peak {rss:8.0f} MiB  {seconds:7.1f} s  load {load:4.2f}  "
          f"| {last}", flush=True)


def fresh(work, name):
    ds = work / name
    if ds.exists():
        shutil.rmtree(ds)
    subprocess.run([*KMEMSCOPE, "parse", "-q", ROOT / "examples" / "thp-faults", "-o", ds],
                   check=True)
    run = next((ds / "runs").iterdir()).name.split("=", 1)[1]
    return ds, run


def main():
    import hostile

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/kmemscope-bombs"))
    ap.add_argument("--rows", type=int, default=200_000_000)
    ap.add_argument("--host-mib", type=int, default=512)
    ap.add_argument("--columns", type=int, default=100_000)
    ap.add_argument("--only", help="comma-separated: " + ",".join(ALL))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else set(ALL)
    print(f"machine: {os.cpu_count()} CPUs, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB")

    if "rows" in only:
        ds, run = fresh(args.work, "rows")
        f = hostile.row_bomb(ds, "mm_page_alloc", run, args.rows)
        print(f"row bomb: {args.rows:,} rows in {f.stat().st_size / 1e6:.1f} MB")
        show("query hot_pfns", measure("query", "hot_pfns", ds, "--format", "csv"))
        show("query hot_pfns --memory-limit 1GB",
             measure("query", "hot_pfns", ds, "--format", "csv", "--memory-limit", "1GB"))
        (ds / "runs" / f"run_id={run}" / "_files.json").unlink()
        shutil.rmtree(ds / "_derived", ignore_errors=True)
        show("verify (a run without digests: every page read)", measure("verify", ds))

    if "wide" in only:
        ds, run = fresh(args.work, "wide")
        f = hostile.wide_table(ds, "wide", run, args.columns)
        print(f"wide table: {args.columns:,} columns in {f.stat().st_size / 1e6:.1f} MB")
        show("sql --read-only --timeout 5 SELECT 1",
             measure("sql", "--read-only", "--timeout", "5", ds, "SELECT 1"))
        show("info", measure("info", ds))
        show("info --timeout 5", measure("info", ds, "--timeout", "5"))

    if "host" in only:
        ds, run = fresh(args.work, "host")
        f = hostile.long_host(ds, run, args.host_mib << 20)
        print(f"long host: {args.host_mib} MiB in a runs file of {f.stat().st_size / 1e6:.1f} MB")
        show("info", measure("info", ds))
        csv = args.work / "m.csv"
        csv.write_text(f"run,metric,value,unit,better\n{run},tps,1,tps,higher\n")
        show("metrics import", measure("metrics", "import", ds, csv))

    if "sparse" in only:
        ds, run = fresh(args.work, "sparse")
        part = next((ds / "mm_page_alloc" / f"run_id={run}").glob("*.parquet"))
        hostile.sparse_part(part, 64 << 30)
        show("verify (a 64 GiB sparse part file)", measure("verify", ds))

    for name, what, build in BUNDLE_BOMBS:
        if name in only:
            archive = build(args.work / name)
            print(f"{name}: {what}, {archive.stat().st_size / 1e6:.2f} MB packed")
            ds = args.work / f"{name}-ds"
            shutil.rmtree(ds, ignore_errors=True)
            show(f"parse {archive.name}", measure("parse", archive, "-o", ds))


# ---------------------------------------------------------------- bundle bombs (parse)

EXAMPLE = ROOT / "examples" / "thp-faults"


def _members():
    return {"b/trace.dat": (EXAMPLE / "trace.dat").read_bytes(),
            "b/manifest.json": (EXAMPLE / "manifest.json").read_bytes()}


def _packed(stem, extra, compression="zst"):
    import hostile

    return hostile.write_tar(Path(f"{stem}.tar.{compression}"), {**extra, **_members()}, compression)


def _first_sample(name):
    text = (EXAMPLE / "procfs" / name).read_text()
    second = text.index("#kmemscope-sample ", 1)
    head_end = text.index("\n") + 1
    return text[:head_end], text[head_end:second]


def _pax(stem, size, compression):
    import hostile

    return hostile.pax_header_bomb(Path(f"{stem}.tar.{compression}"), size, _members(),
                                   compression)


def _samples(stem):
    import re

    head, body = _first_sample("vmstat")
    mono = int(re.search(r"mono_ns=(\d+)", head).group(1))
    sample = (head + body).encode()
    text = b"".join(sample.replace(str(mono).encode(), str(mono + i * 1000).encode(), 1)
                    for i in range((64 << 20) // len(sample)))
    return _packed(stem, {"b/procfs/vmstat": text})


def _one_sample(stem, name, line, size):
    head, _body = _first_sample(name)
    return _packed(stem, {f"b/procfs/{name}": (size, line, head.encode())})


BUNDLE_BOMBS = [
    ("paxzst", "a 3 GiB pax header", lambda s: _pax(s, 3 << 30, "zst")),
    ("paxgz", "a 1 GiB pax header", lambda s: _pax(s, 1 << 30, "gz")),
    ("skipped", "an 8 GiB member that is skipped",
     lambda s: _packed(s, {"b/junk.bin": (8 << 30, b"\0")})),
    ("vmstat", "one vmstat sample of 240 MiB",
     lambda s: _one_sample(s, "vmstat", b"pgalloc_normal 123456\n", 240 << 20)),
    ("samples", "64 MiB of real vmstat samples", _samples),
    ("buddyinfo", "one buddyinfo sample of a million zones",
     lambda s: _one_sample(s, "buddyinfo", b"Node 0, zone   Normal   1   2   3   4   5   6   7   8"
                           b"   9  10  11\n", 40 << 20)),
]
ALL = ["rows", "wide", "host", "sparse"] + [name for name, _w, _b in BUNDLE_BOMBS]


if __name__ == "__main__":
    main()
