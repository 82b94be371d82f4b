"""The progress of a long answer: `compare` tells its steps and the runs it builds.

Oracle: the runs of the dataset (their ids from sha256 of each trace.dat) are each built once
on the first comparison and never on the second (their caches are kept); every step names
an analysis over as many runs as the dataset holds; without --progress, a command whose
stderr is not a terminal prints no progress line, and -q none either.
"""
import hashlib
import re

import pytest

import kmemscope
import requirements
from conftest import EXAMPLES
from kmrun import kmemscope as run

AB = EXAMPLES / "ab-defrag-mode"
BUNDLES = [AB / n for n in ("run1-defrag0", "run1-defrag1", "run2-defrag0", "run2-defrag1")]
LINE = re.compile(r"^kmemscope: compare: \[\s*\d+\.\d s\] (.*)$")
BUILT = re.compile(r"^run ([0-9a-f]{16}): ")
STEP = re.compile(r"^([a-z_.]+) over (\d+) runs?$")


@pytest.fixture()
def ds(tmp_path):
    if not all(b.is_dir() for b in BUNDLES):
        requirements.skip("setup", f"the committed examples under {AB} are missing")
    out = tmp_path / "ds"
    kmemscope.parse(BUNDLES, out)
    return out


def run_ids():
    return sorted(hashlib.sha256((b / "trace.dat").read_bytes()).hexdigest()[:16]
                  for b in BUNDLES)


def said(stderr):
    return [m.group(1) for m in map(LINE.match, stderr.splitlines()) if m]


def test_progress_names_each_step_and_each_run_built_once(ds):
    first = run("compare", ds, "--by", "kernel", "--progress", "-q")
    lines = said(first.stderr)
    built = [m.group(1) for m in map(BUILT.match, lines) if m]
    assert sorted(built) == run_ids()                    # each run built once, every run
    steps = [m for m in map(STEP.match, lines) if m]
    assert steps and {int(m.group(2)) for m in steps} == {len(BUNDLES)}
    assert "summary" in {m.group(1) for m in steps}
    assert lines[-1] == f"done: {len(steps)} step(s), {len(built)} run(s) built"
    assert len(lines) == len(steps) + len(built) + 1     # nothing else said
    again = said(run("compare", ds, "--by", "kernel", "--progress", "-q").stderr)
    assert not [x for x in again if BUILT.match(x)]      # kept: built no more
    plain = run("compare", ds, "--by", "kernel", "--progress", "-q").stdout
    assert plain == run("compare", ds, "--by", "kernel", "-q").stdout   # output unchanged


def test_no_progress_line_off_a_terminal_or_when_quiet(ds):
    for args in ((), ("-q",)):
        proc = run("compare", ds, "--by", "kernel", *args)
        assert not said(proc.stderr) and "compare:" not in proc.stderr


def test_the_python_api_hears_the_same_steps(ds):
    heard = []
    kmemscope.open(ds).compare("kernel", progress=heard.append)
    assert sorted(m.group(1) for m in map(BUILT.match, heard) if m) == run_ids()
    assert any(STEP.match(x) for x in heard)
