"""Nothing hidden in a dataset: what a reader reads, verify checks; every writer's temp file
is found by the next writer and by verify (dataset/safefs.py DATA_FILE, TEMP_FILE).

Oracles: pyarrow's row count of the part files kmemscope wrote (named by `find`, not by the
reader), the file system after each step, and a child process SIGKILLed in the middle of a
real write.
"""
import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kmemscope.api import verify
from kmrun import kmemscope

DEADLINE_S = 60


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    """The examples as parsed, never queried: each test's copy starts without caches
    (the session's examples dataset is queried by other tests of the worker)."""
    from conftest import EXAMPLES_TWO, examples_parsed

    return examples_parsed(tmp_path_factory, "examples", EXAMPLES_TWO)


@pytest.fixture
def ds(parsed, tmp_path):
    copy = tmp_path / "ds"
    shutil.copytree(parsed, copy, symlinks=True)
    return copy


def _problems(ds):
    return [(kind, path.split(" ")[0]) for kind, path in verify(ds).problems]


def _alloc_rows(ds):
    """Rows of mm_page_alloc as pyarrow counts them in the files named part-<n>.parquet."""
    return sum(pq.ParquetFile(p).metadata.num_rows
               for p in (ds / "mm_page_alloc").glob("run_id=*/part-*.parquet"))


def test_a_planted_dot_file_fails_verify_and_no_reader_reads_it(ds):
    part = next((ds / "mm_page_alloc").glob("run_id=*"))
    want = _alloc_rows(ds)
    shutil.copy(part / "part-0.parquet", part / ".x.parquet")
    shutil.copy(part / "part-0.parquet", part / "x y.parquet")    # outside the alphabet too
    rel = f"mm_page_alloc/{part.name}"
    assert sorted(_problems(ds)) == [("extra", f"{rel}/.x.parquet"), ("extra", f"{rel}/x")]
    out = kmemscope("sql", ds, "SELECT count(*) AS n FROM mm_page_alloc", "--format", "csv")
    assert out.stdout.split()[1:] == [str(want)]
    assert ".x.parquet is left out" in out.stderr
    got = kmemscope("verify", ds, check=False)
    assert got.returncode == 1 and f"{rel}/.x.parquet" in got.stdout
    # and under _derived, which verify walked past dot-files before
    (part / ".x.parquet").unlink()
    (part / "x y.parquet").unlink()
    kmemscope("query", "hot_pfns", ds)
    cache = next((ds / "_derived" / "page_pairs").glob("run_id=*"))
    shutil.copy(cache / "part-0.parquet", cache / ".part-0.parquet")
    assert _problems(ds) == [("extra", f"_derived/page_pairs/{cache.name}/.part-0.parquet")]


def test_planted_temps_of_each_writer_are_reported_and_the_next_writer_removes_them(ds):
    kmemscope("query", "hot_pfns", ds)
    cache = next((ds / "_derived" / "page_pairs").glob("run_id=*"))
    run = ds / "runs" / cache.name
    temps = [run / "._files.json.0123abcd.tmp",                    # write_atomic, 8 hex
             run / "._files.json.0123456789abcdef.tmp",            # 16 hex
             cache / ".part-0.parquet.0123456789abcdef.tmp"]       # a cache write's
    for t in temps:
        t.write_bytes(b"left by a killed writer")
    reported = {p for kind, p in verify(ds).problems if kind == "extra" and "did not finish" in p}
    assert {p.split(" ")[0] for p in reported} == {str(t.relative_to(ds)) for t in temps}
    # the next writer into each folder: the cache written again, recorded in the run's digests
    (cache / "part-0.parquet").unlink()
    kmemscope("query", "hot_pfns", ds)
    assert not [t for t in temps if t.exists()]
    assert verify(ds).ok


_WRITER = r"""
import os, sys, time
from kmemscope.dataset import safefs
folder = safefs.Dir.root(sys.argv[1])
def write(f):
    f.write(b"x" * 39000)
    f.flush()
    os.write(1, b"writing\n")
    sys.stdin.read()            # until killed
folder.write_atomic("_files.json", write)
"""


def _wait_line(proc):
    ready, _, _ = select.select([proc.stdout], [], [], DEADLINE_S)
    assert ready, "the writer never started writing"
    assert proc.stdout.readline() == b"writing\n"


def _page_run(ds):
    """The runs partition of the run with page events (whose caches hot_pfns writes)."""
    rid = next((ds / "mm_page_alloc").glob("run_id=*")).name
    return ds / "runs" / rid


def test_a_writer_killed_by_sigkill_leaves_a_temp_that_verify_reports_and_the_next_removes(ds):
    run = _page_run(ds)
    before = (run / "_files.json").read_bytes()
    child = subprocess.Popen([sys.executable, "-c", _WRITER, str(run)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        _wait_line(child)
        temps = [p for p in os.listdir(run) if p.startswith("._files.json.")]
        assert len(temps) == 1
        assert verify(ds).ok            # a live writer's temp is neither reported ...
        kmemscope("query", "hot_pfns", ds)
        assert (run / temps[0]).exists()    # ... nor removed
    finally:
        child.kill()
        child.wait(DEADLINE_S)
        child.stdin.close()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    assert (run / temps[0]).stat().st_size == 39000
    assert (ds / "runs" / run.name / "_files.json").read_bytes() != before   # the query's record
    assert _problems(ds) == [("extra", f"runs/{run.name}/{temps[0]}")]
    shutil.rmtree(ds / "_derived")
    kmemscope("query", "hot_pfns", ds)
    assert not (run / temps[0]).exists()
    assert verify(ds).ok


def test_a_temp_name_that_is_a_link_is_reported_never_removed_or_followed(ds, tmp_path):
    run = _page_run(ds)
    victim = tmp_path / "victim"
    victim.write_text("mine")
    link = run / "._files.json.0123456789abcdef.tmp"
    link.symlink_to(victim)
    assert ("extra", str(link.relative_to(ds))) in _problems(ds)
    kmemscope("query", "hot_pfns", ds)
    assert link.is_symlink() and victim.read_text() == "mine"
