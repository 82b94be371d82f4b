#!/usr/bin/env python3
"""Wall time of `kmemscope parse -o s3://...` against a local S3 server (moto), beside the
same parse into a local directory.

    s3_write_bench.py [--bundles N] [--repeat R]

Starts moto's server on a free loopback port (pip install 'kmemscope[test]'), then, for the
first N bundles of examples/ab-defrag-mode (default 8), times as one command each:

  local        parse into a local directory (a fresh one each repeat)
  s3 first     parse into a fresh s3 prefix (decode, upload, runs last)
  s3 again     the same parse again: every input skipped ("already in the dataset")
  s3 two       two ingesters at once on the same inputs into a fresh prefix (wall of the
               slower; both must exit 0 and add every run once between them)

Each line prints the seconds (best of R), per bundle, and the 1-minute load average when it
started: other work on the machine makes the seconds noisy. moto on loopback has no network
latency: against a real store each request costs a round trip (tens of ms), and a run is
~2 requests per table file plus ~one listing per table.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KMEMSCOPE = [str(Path(sys.executable).parent / "kmemscope")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(commands, env):
    load = os.getloadavg()[0]
    started = time.monotonic()
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for c in commands]
    outs = [p.communicate() for p in procs]
    seconds = time.monotonic() - started
    for p, (_o, err) in zip(procs, outs):
        if p.returncode:
            sys.exit(f"failed: {err.strip()[-300:]}")
    return seconds, load, "".join(err for _o, err in outs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundles", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import moto.server
    import s3fs

    bundles = sorted((ROOT / "examples" / "ab-defrag-mode").iterdir())[:args.bundles]
    port = free_port()
    server = moto.server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="x",
               AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
    os.environ.update({k: env[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                           "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")})
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir("bench")
    work = Path(tempfile.mkdtemp(prefix="kmemscope-s3bench-", dir="/var/tmp"))
    parse = [*KMEMSCOPE, "parse", "-q", *map(str, bundles), "-o"]
    results: dict = {}
    try:
        for r in range(args.repeat):
            for name, commands in (
                    ("local", [parse + [str(work / f"local{r}")]]),
                    ("s3 first", [parse + [f"s3://bench/first{r}"]]),
                    ("s3 again", [parse + [f"s3://bench/first{r}"]]),
                    ("s3 two", [parse + [f"s3://bench/two{r}"]] * 2)):
                seconds, load, _err = timed(commands, env)
                if name == "s3 two":
                    keys = s3fs.S3FileSystem(skip_instance_cache=True).find(f"bench/two{r}/runs")
                    runs = {k.split("/")[3] for k in keys if k.endswith(".parquet")}
                    assert len(runs) == len(bundles), runs
                best = results.get(name)
                if best is None or seconds < best[0]:
                    results[name] = (seconds, load)
        for name, (seconds, load) in results.items():
            print(f"{name:9s} {len(bundles)} bundles: {seconds:6.2f} s "
                  f"({seconds / len(bundles):.3f} s a bundle), load {load:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    main()
