"""Mutated trace.dat inputs for tests/test_fuzz.py, and the worker process that parses them.

Input i of a run is a pure function of (master seed, i, seed files): the test, the worker and
anyone reproducing a failure regenerate the same bytes with `make_input`. Mutations are aimed
at the metadata (everything before the first CPU's data), at the ring-buffer pages, or
anywhere, a third each, so that both libtracecmd's metadata parsing and kmemscope's page
decoding see damage.

Worker protocol (python fuzzlib.py worker SPEC.json): for each i in SPEC's list it prints
`start <i>` before parsing and one JSON line after; if the process dies in between, the parent
knows which input killed it.
"""
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def data_offset(path):
    """Where the first CPU's ring-buffer data starts, from `trace-cmd dump --flyrecord`."""
    out = subprocess.run(["trace-cmd", "dump", "--flyrecord", "-i", str(path)],
                         capture_output=True, text=True).stdout
    offs = [int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s+\d*\s*\[offset, size of cpu", out, re.M)]
    offs += [int(m.group(1)) for m in re.finditer(r"^\s+\d+ (\d+)\s+\d+\s+\[id, data offset and size\]",
                                                  out, re.M)]
    return min(offs) if offs else None


def _region(rng, n, split):
    """(lo, hi) of the part of the file to damage: metadata, pages or all."""
    which = rng.randrange(3)
    if split and which == 0:
        return 0, split
    if split and which == 1:
        return split, n
    return 0, n


def make_input(master, i, seeds):
    """The bytes of input i; `seeds` is [(bytes, data offset or None), ...]. Returns (bytes, how)."""
    rng = random.Random(f"{master}:{i}")
    data, split = seeds[rng.randrange(len(seeds))]
    b = bytearray(data)
    n = len(b)
    hows = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        lo, hi = _region(rng, len(b), split if split and split < len(b) else None)
        if hi <= lo:
            lo, hi = 0, len(b)
        kind = rng.choice(("flip", "flip", "bytes", "ints", "zero", "truncate", "splice", "insert"))
        pos = rng.randrange(lo, hi) if hi > lo else 0
        if kind == "flip":
            for _ in range(rng.choice((1, 2, 4, 16, 64))):
                p = rng.randrange(lo, hi)
                b[p] ^= 1 << rng.randrange(8)
        elif kind == "bytes":
            for _ in range(rng.choice((1, 4, 32))):
                b[rng.randrange(lo, hi)] = rng.randrange(256)
        elif kind == "ints":           # lengths and offsets: extremes at 4-byte alignment
            p = pos & ~3
            val = rng.choice((0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0xfffffff0, n, n * 2))
            b[p:p + 4] = val.to_bytes(4, "little")
            b = b[:n] if len(b) > n else b
        elif kind == "zero":
            ln = rng.choice((1, 8, 64, 4096, 65536))
            b[pos:pos + ln] = bytes(min(ln, len(b) - pos))
        elif kind == "truncate":
            b = b[:pos]
        elif kind == "splice":
            src = rng.randrange(len(b)) if b else 0
            ln = rng.choice((8, 64, 4096))
            chunk = bytes(b[src:src + ln])
            b[pos:pos + len(chunk)] = chunk
        elif kind == "insert":
            b[pos:pos] = rng.randbytes(rng.choice((1, 4, 4096)))
        hows.append(f"{kind}@{pos}")
    return bytes(b), ",".join(hows)


def load_seeds(paths):
    return [(Path(p).read_bytes(), data_offset(p)) for p in paths]


def worker(spec_path):
    """Parse each input of the spec in this process (no isolation): a crash ends the process."""
    spec = json.loads(Path(spec_path).read_text())
    # A corrupt length must not make the test machine swap: cap this process's memory.
    limit = spec.get("memory_limit")
    if limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from kmemscope.errors import KmemscopeError
    from kmemscope.parsers.tracedat import TraceFile

    seeds = load_seeds(spec["seeds"])
    tmp = Path(tempfile.mkdtemp(prefix="kmemscope-fuzz-", dir=spec.get("tmp")))
    path, ds = tmp / "input.dat", tmp / "ds"
    for i in spec["inputs"]:
        data, _ = make_input(spec["master"], i, seeds)
        path.write_bytes(data)
        print(f"start {i}", flush=True)
        try:
            # Everything native that `parse` runs on the input: libtracecmd's open,
            # the layout, page decoding on two threads, and the Arrow import of
            # every batch. Writing Parquet is pyarrow's job and is left out to
            # fit thousands of inputs in the time bound.
            trace = TraceFile(path)
            trace.metadata()
            stats = trace.decode(lambda _index: (lambda table, batch: batch.validate(full=True)),
                                 threads=2)
            res = {"i": i, "result": "ok", "events": sum(st["events"] for st in stats)}
        except KmemscopeError as exc:
            res = {"i": i, "result": "error", "type": type(exc).__name__, "message": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - anything else is a finding
            res = {"i": i, "result": "exception", "type": type(exc).__name__, "message": repr(exc)[:2000]}
        print(json.dumps(res), flush=True)
        for p in ds.glob("*/run_id=*"):
            # Keep the dataset small: drop the run that a mutated input may have added.
            for f in p.glob("*"):
                f.unlink()
            p.rmdir()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker(sys.argv[2])
    else:
        sys.exit("usage: fuzzlib.py worker SPEC.json")
