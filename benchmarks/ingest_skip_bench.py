#!/usr/bin/env python3
"""What re-ingesting a folder of bundles costs once most of it is in the dataset.

    ingest_skip_bench.py [--work DIR] [--repeat 3]

Under DIR (default /var/tmp/kmemscope-ingest-bench, never the repository) a folder of the
ten committed example bundles (examples/ab-defrag-mode's eight, kmem-compaction, thp-faults)
is parsed into a dataset; then, each round:

  new alone      `kmemscope parse NEW -o DS2`: the one new bundle (memory-pressure) into a
                 dataset of its own: the cost of the new work by itself
  folder         `kmemscope parse FOLDER -o DS` where FOLDER holds the ten committed bundles
                 and the new one: 1 decoded, 10 skipped
  folder again   the same once more: 11 skipped, nothing decoded

Printed per command: wall seconds, how many inputs were decoded (the decoder's own log,
KMEMSCOPE_TEST_DECODE_LOG) and the 1-minute load average when it started. The figure that
matters is `folder` minus `new alone`: what the ten skips cost.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KMEMSCOPE = [str(Path(sys.executable).parent / "kmemscope")]
EXAMPLES = ROOT / "examples"
TEN = sorted((EXAMPLES / "ab-defrag-mode").iterdir()) + [EXAMPLES / "kmem-compaction",
                                                          EXAMPLES / "thp-faults"]
NEW = EXAMPLES / "memory-pressure"


def timed(log, *args):
    """(seconds, inputs decoded, load average at the start) of `kmemscope ARGS`."""
    if log.exists():
        log.unlink()
    load = os.getloadavg()[0]
    started = time.monotonic()
    subprocess.run([*KMEMSCOPE, *map(str, args)], check=True, capture_output=True,
                   env={**os.environ, "KMEMSCOPE_TEST_DECODE_LOG": str(log)})
    seconds = time.monotonic() - started
    decoded = len(log.read_text().splitlines()) if log.exists() else 0
    return seconds, decoded, load


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/var/tmp/kmemscope-ingest-bench")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    try:
        folder, log = work / "bundles", work / "decoded.log"
        for i, bundle in enumerate(TEN):
            shutil.copytree(bundle, folder / f"{i:02d}-{bundle.name}")
        base = work / "base"
        timed(log, "parse", "-q", folder, "-o", base)
        shutil.copytree(NEW, folder / "10-new")
        for r in range(args.repeat):
            ds, alone = work / f"ds{r}", work / f"alone{r}"
            shutil.copytree(base, ds)
            rows = [("new alone", timed(log, "parse", "-q", folder / "10-new", "-o", alone)),
                    ("folder (10 committed + 1 new)", timed(log, "parse", "-q", folder, "-o", ds)),
                    ("folder again (11 committed)", timed(log, "parse", "-q", folder, "-o", ds))]
            for what, (seconds, decoded, load) in rows:
                print(f"round {r + 1}  {what:32} {seconds:6.2f} s  decoded {decoded:2}  "
                      f"load {load:5.2f}", flush=True)
            extra = rows[1][1][0] - rows[0][1][0]
            print(f"round {r + 1}  the ten skips cost {extra:+.2f} s beside the new bundle alone")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
