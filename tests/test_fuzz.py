"""Fuzz `kmemscope parse` with a fixed number of mutated real traces (KMEMSCOPE_FUZZ_INPUTS).

Inputs come from small real trace.dat files (a public fixture in v6, v7+zstd and
v7-uncompressed forms, the v7+zstd langraph file, and the committed example), damaged by byte
flips, random bytes, extreme 32-bit values, zeroed ranges, truncations, splices and
insertions, aimed at the metadata and at the pages; every third input has one structure
damaged instead (a duplicated or zeroed page, a header, section, option, CPU-table, chunk,
page-header or event-header field: tests/fuzzlib.py, whose long run is tests/fuzz_long.py). Two worker processes
parse them without kmemscope's isolation, so that a crash in the decoder shows up as a dead
worker instead of being hidden; the input that killed it is then parsed again the way the
command does it (`ingest(isolate=True)`), which must turn the crash into a one-line error.

The master seed is printed; KMEMSCOPE_FUZZ_SEED=<n> replays a run. The run is bounded by its
number of inputs, the same on a busy machine as on an idle one: KMEMSCOPE_FUZZ_INPUTS (400,
about 80 s here; `make check` runs 30, a few seconds). KMEMSCOPE_FUZZ_SECONDS (1200) is only a safety bound: a
run that has not finished its inputs by then fails. `make fuzz` runs the long fuzzer.
"""
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import requirements

from conftest import EXAMPLES, PUBLIC_FIXTURES

HERE = Path(__file__).resolve().parent
MASTER = int(os.environ.get("KMEMSCOPE_FUZZ_SEED", "20240611"))
SECONDS = float(os.environ.get("KMEMSCOPE_FUZZ_SECONDS", "1200"))
INPUTS = int(os.environ.get("KMEMSCOPE_FUZZ_INPUTS", "400"))
WORKERS = 2
HANG_SECONDS = 30.0


@pytest.fixture(scope="module")
def seed_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz-seeds")
    seeds = []
    idle = PUBLIC_FIXTURES / "trappy_trace_idle_v6_le_l8_6cpu.dat"
    if not idle.is_file() and requirements.required("fixtures"):
        requirements.skip("fixtures", f"the fuzz seed {idle} is missing")
    if idle.is_file():
        seeds.append(idle)
        for name, opts in (("idle-v7-zstd.dat", ["--compression", "zstd"]),
                           ("idle-v7-none.dat", ["--compression", "none"])):
            out = tmp / name
            subprocess.run(["trace-cmd", "convert", "--file-version", "7", *opts, "-i", str(idle),
                            "-o", str(out)], check=True, capture_output=True)
            seeds.append(out)
    langraph = PUBLIC_FIXTURES / "langraph_v7_zstd148_le_l8_4cpu_5.15.dat"
    if langraph.is_file():
        seeds.append(langraph)
    elif requirements.required("fixtures"):
        requirements.skip("fixtures", f"the fuzz seed {langraph} is missing")
    if (EXAMPLES / "kmem-compaction" / "trace.dat").is_file():
        seeds.append(EXAMPLES / "kmem-compaction" / "trace.dat")
    if not seeds:
        requirements.skip("setup", "no real trace to mutate (public fixtures and examples/ absent)")
    return seeds


class Worker:
    def __init__(self, spec_path, env):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "fuzzlib.py"), "worker", str(spec_path)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     cwd=HERE)
        self.lines = queue.SimpleQueue()
        self.current, self.started = None, None
        threading.Thread(target=self._read, daemon=True).start()
        self.stderr = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)


def run_fuzz(seeds, tmp):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    todo = [list(range(w, INPUTS, WORKERS)) for w in range(WORKERS)]
    results, crashes, hangs = {}, [], []
    deadline = time.monotonic() + SECONDS
    spec_n = 0

    def start(w):
        nonlocal spec_n
        spec_n += 1
        spec = tmp / f"spec{spec_n}.json"
        spec.write_text(json.dumps({"master": MASTER, "inputs": todo[w], "seeds": [str(s) for s in seeds],
                                    "memory_limit": 3 << 30, "tmp": str(tmp)}))
        return Worker(spec, env)

    workers = {w: start(w) for w in range(WORKERS) if todo[w]}
    while workers and time.monotonic() < deadline:
        for w, wk in list(workers.items()):
            try:
                line = wk.lines.get(timeout=0.05)
            except queue.Empty:
                if wk.started and time.monotonic() - wk.started > HANG_SECONDS:
                    wk.proc.kill()
                    wk.proc.wait()
                    hangs.append(wk.current)
                    todo[w] = todo[w][todo[w].index(wk.current) + 1:]
                    workers[w] = start(w) if todo[w] else None
                    if not todo[w]:
                        del workers[w]
                continue
            if line is None:           # the worker ended
                code = wk.proc.wait()
                if wk.current is not None and wk.current not in results:
                    crashes.append((wk.current, code, "".join(wk.stderr)[-2000:]))
                    todo[w] = todo[w][todo[w].index(wk.current) + 1:]
                    if todo[w]:
                        workers[w] = start(w)
                        continue
                del workers[w]
                continue
            if line.startswith("start "):
                wk.current, wk.started = int(line.split()[1]), time.monotonic()
            else:
                res = json.loads(line)
                results[res["i"]] = res
                wk.started = None
    for wk in workers.values():
        wk.proc.kill()
        wk.proc.wait()
    return results, crashes, hangs


def test_mutated_traces_never_crash_and_fail_with_one_line_errors(seed_files, tmp_path):
    from kmemscope.common.errors import KmemscopeError
    from kmemscope.parsers.ingest import ingest

    from fuzzlib import load_seeds, make_test_input as make_input

    print(f"fuzz: master seed {MASTER} (replay with KMEMSCOPE_FUZZ_SEED={MASTER}), "
          f"{INPUTS} inputs, {SECONDS:.0f} s, seeds {[s.name for s in seed_files]}")
    started = time.monotonic()
    results, crashes, hangs = run_fuzz(seed_files, tmp_path)
    took = time.monotonic() - started
    outcomes = Counter(r["result"] for r in results.values())
    errors = Counter(r.get("type") for r in results.values() if r["result"] == "error")
    print(f"fuzz: {len(results) + len(crashes) + len(hangs)} inputs in {took:.1f} s: {dict(outcomes)}, "
          f"errors by type {dict(errors)}, decoder crashes {len(crashes)}, hangs {len(hangs)}")

    seeds = load_seeds(seed_files)

    def repro(i):
        p = tmp_path / f"input-{i}.dat"
        p.write_bytes(make_input(MASTER, i, seeds)[0])
        return p

    problems = []
    for r in results.values():
        if r["result"] == "exception":
            problems.append(f"input {r['i']} ({make_input(MASTER, r['i'], seeds)[1]}): not a KmemscopeError: "
                            f"{r['type']}: {r['message'][:300]}")
        elif r["result"] == "error" and ("\n" in r["message"] or not r["message"].strip()):
            problems.append(f"input {r['i']}: error message is not one line: {r['message'][:300]!r}")
    for i in hangs:
        problems.append(f"input {i} ({make_input(MASTER, i, seeds)[1]}): no result after {HANG_SECONDS:.0f} s")
    # A crash of the unprotected decoder: the command's isolation must turn it into an error.
    for i, code, stderr in crashes[:20]:
        path = repro(i)
        print(f"fuzz: input {i} ({make_input(MASTER, i, seeds)[1]}) killed the decoder (exit {code}); "
              f"saved as {path}")
        try:
            ingest(path, tmp_path / "isolated", threads=1, isolate=True)
            problems.append(f"input {i}: crashed the decoder (exit {code}), then parsed under isolation")
        except KmemscopeError as exc:
            if "\n" in str(exc):
                problems.append(f"input {i}: crash became a multi-line error: {str(exc)[:300]!r}")
        except BaseException as exc:  # noqa: BLE001
            problems.append(f"input {i}: crash under isolation raised {exc!r}")
    if crashes:
        # And the command itself, as a user meets it: one line, non-zero, not killed.
        from kmrun import kmemscope

        proc = kmemscope("parse", "-q", repro(crashes[0][0]), "-o", tmp_path / "cli", check=False)
        lines = proc.stderr.splitlines()
        if not (proc.returncode > 0 and len(lines) == 1 and lines[0].startswith("kmemscope: error: ")):
            problems.append(f"input {crashes[0][0]}: kmemscope parse exited {proc.returncode} "
                            f"with {proc.stderr!r}")
    assert not problems, "\n".join(problems[:30])
    ran = len(results) + len(crashes) + len(hangs)
    assert ran == INPUTS, f"{ran} of {INPUTS} inputs ran within the {SECONDS:.0f} s safety bound"
    assert outcomes["error"] > 0, "no input failed: the mutations are not reaching the parser"


def _damaged(seed, damage):
    """The seed's bytes with `damage(bytearray, structure)` applied."""
    from fuzzlib import structure

    b = bytearray(seed.read_bytes())
    damage(b, structure(b))
    return bytes(b)


def _first_cpu(s):
    return next(c for c in s.cpus if c.size)


# Each of these made libtracecmd crash (or an Arrow conversion fail) before layout.py
# checked it; each must now be layout's own one-line error, before the C library runs.
LAYOUT_CASES = {
    "chunk count": (False, lambda b, s: s.put(b, _first_cpu(s).offset, "I", 0xffffffff),
                    "compressed chunks in"),
    "chunk usize": (False, lambda b, s: s.put(b, _first_cpu(s).offset + 8, "I", 40959),
                    "bytes uncompressed"),
    "first page commit": (True, lambda b, s: s.put(b, _first_cpu(s).offset + 8, "Q", 0xffffffff),
                          "bytes of events in a 4096-byte page"),
    "flyrecord flags": (False, lambda b, s: s.put(b, _first_cpu(s).section_size_pos - 6, "H", 0),
                        "not a compressed flyrecord section"),
    "buffer page size": (False, lambda b, s: s.put(b, next(p for p, _, w in s.counts
                                                           if w == "buffer page size"), "I", 0),
                         "page size 0"),
    "buffer cpu id": (False, lambda b, s: s.put(b, _first_cpu(s).cpu_id_pos, "I", 0xffffffff),
                      "CPU id 4294967295"),
    "cpucount option": (False, lambda b, s: s.put(b, next(p for p, i in s.options if i == 8) + 6,
                                                  "I", 0xffffffff), "CPUCOUNT option says"),
    "options flagged compressed": (True, lambda b, s: s.put(b, max(s.sections) + 2, "H", 1),
                                   "options section at"),
}


@pytest.mark.parametrize("case", sorted(LAYOUT_CASES))
def test_structural_damage_is_a_layout_error(case, tmp_path):
    """Damage one field of a real trace (the example bundle, or its v7-uncompressed form)
    where the fuzz runs found it crashing the decoder; parse must fail in one line."""
    from kmemscope.common.errors import TraceFileError
    from kmemscope.parsers.layout import read_layout
    from kmrun import kmemscope

    uncompressed, damage, expect = LAYOUT_CASES[case]
    seed = EXAMPLES / "memory-pressure" / "trace.dat"
    if uncompressed:
        plain = tmp_path / "plain.dat"
        subprocess.run(["trace-cmd", "convert", "--file-version", "7", "--compression", "none",
                        "-i", str(seed), "-o", str(plain)], check=True, capture_output=True)
        seed = plain
    bad = tmp_path / "bad.dat"
    bad.write_bytes(_damaged(seed, damage))
    with pytest.raises(TraceFileError) as err:
        read_layout(str(bad), lambda proto, data, size: (_ for _ in ()).throw(ValueError("bad data")))
    assert expect in str(err.value) and "\n" not in str(err.value)
    proc = kmemscope("parse", "-q", bad, "-o", tmp_path / "ds", check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("kmemscope: error: ") and expect in proc.stderr, proc.stderr
    # The undamaged file parses: the damage, not the conversion, is what fails.
    assert kmemscope("parse", "-q", seed, "-o", tmp_path / "ok", check=False).returncode == 0


# What a broken `kmemscope parse` could do, and the class tests/fuzz_long.py must give it.
FAKE_PARSE = {
    "success": ('mkdir -p "$5/runs/run_id=0123456789abcdef"', "success"),
    "clean-error": ('echo "kmemscope: error: $3: corrupt" >&2; exit 1', "clean-error"),
    "crash-contained": ('echo "kmemscope: error: $3: the trace decoder died (signal SIGSEGV)" >&2; exit 1',
                        "crash-contained"),
    "two lines": ('echo "noise" >&2; echo "kmemscope: error: x" >&2; exit 1', "other"),
    "no run": ("exit 0", "other"),
    "traceback": ('echo "Traceback (most recent call last):" >&2; exit 1', "traceback"),
    "hang": ("sleep 30", "hang"),
    "killed": ("kill -SEGV $$", "escape"),
    "child left": ('(exec -a kmemscope-fuzz-test-child sleep 30) & echo "kmemscope: error: x" >&2; exit 1',
                   "escape"),
    "staging left": ('mkdir -p "$5/.staging-1"; echo "kmemscope: error: x" >&2; exit 1', "escape"),
    "file in cwd": ('touch stray; echo "kmemscope: error: x" >&2; exit 1', "escape"),
    "file in TMPDIR": ('touch "$TMPDIR/x"; echo "kmemscope: error: x" >&2; exit 1', "escape"),
}


@pytest.mark.parametrize("case", sorted(FAKE_PARSE))
def test_fuzz_runner_classifies_outcomes(case, tmp_path):
    """The long runner's classes, checked against a stand-in for the command that does
    each thing on purpose (arguments as the runner passes them: parse -q INPUT -o DS)."""
    sys.path.insert(0, str(HERE))
    from fuzz_long import run_one

    script, expected = FAKE_PARSE[case]
    fake = tmp_path / "fake-kmemscope"
    fake.write_text(f"#!/bin/bash\n{script}\n")
    fake.chmod(0o755)
    work = tmp_path / "work"
    (work / "in").mkdir(parents=True)
    (work / "in" / "input.dat").write_bytes(b"x")
    cls, detail, _code, _err = run_one(work / "in" / "input.dat", work, f"test-{os.getpid()}-{case}",
                                       hang_seconds=3, memory_bytes=1 << 30, command=fake)
    assert cls == expected, (cls, detail)
    # Whatever the fake left running was killed by the runner.
    out = subprocess.run(["pgrep", "-f", "kmemscope-fuzz-test-child"], capture_output=True, text=True)
    assert not out.stdout.strip() or case != "child left"
