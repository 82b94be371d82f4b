"""A cache write into a dataset leaves its file and its record agreeing (dataset/cache_write.py).

Every failure of a write (a step that raises, a lock file that is not one, a writer killed
at any point) leaves the old cache file and its record, or neither; what a killed writer
leaves (its temp file) is reported by `verify` and removed by the next writer of that cache.
The oracles are the file system (bytes before and after), the run's digests as JSON, the
analysis computed with the cache off, and `verify`.
"""
import hashlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import requirements

from kmemscope.dataset import cache_write
from kmemscope.api import verify
from kmemscope.queries import result_cache, runner
from kmrun import KMEMSCOPE
from test_result_cache import _forget_derived

DEADLINE_S = 120


@pytest.fixture(autouse=True)
def cache_on(monkeypatch):
    monkeypatch.setenv(result_cache.ENV_SWITCH, "1")


@pytest.fixture
def dataset(examples_dataset, tmp_path, monkeypatch):
    from kmemscope.dataset import derived

    monkeypatch.setattr(derived, "_BUILT", {})     # tables built privately by earlier tests
    copy = tmp_path / "ds"
    shutil.copytree(examples_dataset, copy, symlinks=True)
    shutil.rmtree(copy / "_derived", ignore_errors=True)
    _forget_derived(copy)
    return copy


def _fresh(qname, ds, **kw):
    from test_result_cache import _fresh as fresh

    return fresh(qname, ds, **kw)


def _caches(ds):
    """{path under the dataset: bytes} of every file under _derived, dot-files too, and
    {run: its digests' derived section}: what a failed write must leave as it was."""
    files = {str(p.relative_to(ds)): p.read_bytes()
             for p in sorted((ds / "_derived").rglob("*")) if p.is_file()}
    records = {p.parent.name: json.loads(p.read_text()).get("derived", {})
               for p in sorted((ds / "runs").glob("run_id=*/_files.json"))}
    return files, records


def _temps(ds):
    """Temp files of cache writers: cache parts under _derived, digests under runs/."""
    return sorted(p for top in ("_derived", "runs") if (ds / top).exists()
                  for p in (ds / top).rglob(".*.tmp"))


def _agree(ds):
    """Every recorded cache file is there with its recorded sha256 and bytes, and every
    part file under _derived is recorded: recounted here with hashlib."""
    _files, records = _caches(ds)
    recorded = {k: v for doc in records.values() for k, v in doc.items()}
    for key, entry in recorded.items():
        data = (ds / key).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (entry["sha256"], entry["bytes"]), key
    parts = {str(p.relative_to(ds)) for p in (ds / "_derived").rglob("part-0.parquet")} \
        if (ds / "_derived").exists() else set()
    assert parts <= set(recorded), parts - set(recorded)


# ---------------------------------------------------------------- a step that fails

def _fail_at(monkeypatch, step):
    """Make one step of cache_write.write_recorded raise ENOSPC."""
    import errno

    def boom(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    if step == "writing the temp file":
        real = cache_write._Hashing.write

        def write(self, data):
            if self.n > 0:
                boom()
            return real(self, data)
        monkeypatch.setattr(cache_write._Hashing, "write", write)
    elif step == "recording":
        monkeypatch.setattr(cache_write, "write_digests", boom)
    elif step == "renaming into place":
        real_rename = os.rename

        def rename(src, dst, *a, **k):
            if dst == "part-0.parquet":
                boom()
            return real_rename(src, dst, *a, **k)
        monkeypatch.setattr(cache_write.os, "rename", rename)


@pytest.mark.parametrize("step", ["writing the temp file", "recording", "renaming into place"])
def test_a_cache_write_failing_at_any_step_leaves_the_old_file_and_its_record(
        dataset, monkeypatch, step):
    three = runner.run_query("hot_pfns", dataset, params={"top_n": 3})
    before = _caches(dataset)
    assert any("result_hot_pfns" in k for k in before[0])
    _fail_at(monkeypatch, step)
    got = runner.run_query("hot_pfns", dataset, params={"top_n": 5})
    monkeypatch.undo()
    monkeypatch.setenv(result_cache.ENV_SWITCH, "1")
    assert got.to_pylist() == _fresh("hot_pfns", dataset, params={"top_n": 5}).to_pylist()
    assert _caches(dataset) == before, step
    assert not _temps(dataset)
    assert verify(dataset).ok, verify(dataset).problems
    # the old rows are still the ones kept, and read back
    assert runner.run_query("hot_pfns", dataset, params={"top_n": 3}).to_pylist() \
        == three.to_pylist()


@pytest.mark.parametrize("lock", ["fifo", "link"])
def test_a_lock_that_cannot_be_taken_changes_no_cache_and_the_query_answers(
        dataset, tmp_path, lock):
    """The dataset's lock file replaced by a FIFO or a link: a query still answers (from its
    own private caches), and neither the dataset's caches nor their records change."""
    runner.run_query("hot_pfns", dataset, params={"top_n": 3})
    before = _caches(dataset)
    lock_path = dataset / ".kmemscope.lock"
    lock_path.unlink(missing_ok=True)
    if lock == "fifo":
        os.mkfifo(lock_path)
    else:
        outside = tmp_path / "outside.lock"
        outside.write_bytes(b"")
        lock_path.symlink_to(outside)
    got = runner.run_query("hot_pfns", dataset, params={"top_n": 5})
    assert got.to_pylist() == _fresh("hot_pfns", dataset, params={"top_n": 5}).to_pylist()
    assert _caches(dataset) == before
    assert not _temps(dataset)
    shutil.rmtree(dataset / "_derived")       # and a first build, with nothing cached
    after_first = _caches(dataset)
    runner.run_query("summary", dataset)
    assert not (dataset / "_derived").exists() or not list((dataset / "_derived").rglob("*.parquet"))
    assert _caches(dataset)[1] == after_first[1]
    lock_path.unlink()
    if lock == "link":
        assert outside.read_bytes() == b""


def test_a_cache_written_again_after_a_failure_is_recorded_and_read(dataset, monkeypatch):
    _fail_at(monkeypatch, "recording")
    runner.run_query("hot_pfns", dataset)
    monkeypatch.undo()
    monkeypatch.setenv(result_cache.ENV_SWITCH, "1")
    assert not list((dataset / "_derived").rglob("part-0.parquet")) \
        if (dataset / "_derived").exists() else True
    runner.run_query("hot_pfns", dataset)
    _agree(dataset)
    assert list((dataset / "_derived").rglob("part-0.parquet"))
    assert verify(dataset, deep=True).ok


# ---------------------------------------------------------------- writers killed

def _wait_line(proc, deadline):
    """The first line of proc's stdout, waiting until `deadline` (monotonic)."""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            return proc.stdout.readline()
        if proc.poll() is not None:
            break
    raise AssertionError(f"no line from the writer (exit {proc.poll()}): {proc.stderr.read()}")


_HELD_WRITER = """
import sys
from kmemscope.dataset import cache_write
ds, run = sys.argv[1], sys.argv[2]
def write(f):
    f.write(b"PAR1" * 4096)
    f.flush()
    print("writing", flush=True)
    sys.stdin.read()            # held here, mid-write, until killed
cache_write.write_recorded(ds, ["_derived", "page_pairs", "run_id=" + run], "part-0.parquet",
                           run, "_derived/page_pairs/run_id=" + run + "/part-0.parquet", write,
                           {"from": "held"})
"""


def _runs(ds):
    return sorted(p.name.split("=", 1)[1] for p in (ds / "runs").iterdir())


def test_a_killed_writers_temp_file_is_reported_then_removed_and_a_live_ones_kept(dataset):
    run = next(r for r in _runs(dataset) if (dataset / "mm_page_alloc" / f"run_id={r}").exists())
    held = subprocess.Popen([sys.executable, "-c", _HELD_WRITER, str(dataset), run],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert _wait_line(held, time.monotonic() + DEADLINE_S).strip() == "writing"
        live = _temps(dataset)
        assert len(live) == 1
        # a live writer's temp file: neither reported nor removed by another writer
        assert verify(dataset).ok, verify(dataset).problems
        runner.run_query("hot_pfns", dataset)
        assert _temps(dataset) == live
    finally:
        held.kill()
        held.wait(timeout=DEADLINE_S)
    problems = verify(dataset).problems
    assert [(k, p.split(" ")[0]) for k, p in problems] == [
        ("extra", str(live[0].relative_to(dataset)))], problems
    # the next writer of that cache removes it
    os.unlink(dataset / "_derived" / "page_pairs" / f"run_id={run}" / "part-0.parquet")
    runner.run_query("hot_pfns", dataset, params={"top_n": 7})
    assert not _temps(dataset)
    _agree(dataset)
    assert verify(dataset).ok, verify(dataset).problems


def _writing(ds, proc, deadline):
    """Poll until a file appears under ds/_derived (the command writes its caches): True;
    False when the command ended first."""
    derived = ds / "_derived"
    while not (derived.exists() and any(p.is_file() for p in derived.rglob("*"))):
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the command wrote no cache in time"
        time.sleep(0.002)
    return True


# slow: a dozen queries killed at random points (~6 s); the single-fault tests stay in make check
@pytest.mark.slow
def test_writers_killed_at_random_points_leave_what_verify_reports_and_the_next_removes(
        dataset):
    """SIGKILL of `kmemscope query` at random points while it writes its caches (between its
    first cache file and its end, as one uncut run times them): afterwards every leftover is
    a temp file verify reports, or a cache whose record went first (changed or missing), and
    the next query leaves no temp file and the dataset verified clean."""
    rng = random.Random(os.environ.get("PYTEST_SEED", "39"))
    env = dict(os.environ, **{result_cache.ENV_SWITCH: "1"})
    argv = [*KMEMSCOPE, "query", "hot_pfns", str(dataset), "--param", "top_n=4"]

    def fresh_start():
        shutil.rmtree(dataset / "_derived", ignore_errors=True)
        _forget_derived(dataset)
        return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    proc = fresh_start()
    assert _writing(dataset, proc, time.monotonic() + DEADLINE_S)
    first = time.monotonic()
    assert proc.wait(timeout=DEADLINE_S) == 0
    span = time.monotonic() - first          # how long an uncut run writes caches
    kills = 0
    for _ in range(6):
        proc = fresh_start()
        if _writing(dataset, proc, time.monotonic() + DEADLINE_S):
            at = time.monotonic() + rng.uniform(0, span)
            while time.monotonic() < at and proc.poll() is None:
                time.sleep(0.001)       # polling the random point, not waiting for an effect
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
        proc.wait(timeout=DEADLINE_S)
        result = verify(dataset)
        for kind, path in result.problems:
            # what a kill leaves: a temp file (reported), or a file whose record went first
            assert kind in ("extra", "changed", "missing"), result.problems
            assert Path(path.split(" ")[0]).name.startswith(
                (".part-0.parquet", "part-0.parquet", "._files.json."))
        listed = {str(t.relative_to(dataset)) for t in _temps(dataset)}
        reported = {p.split(" ")[0] for k, p in result.problems if k == "extra"}
        assert listed == reported, (listed, reported)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert not _temps(dataset)
        _agree(dataset)
        assert verify(dataset).ok, verify(dataset).problems
    assert kills, "no run was killed while it wrote its caches"


def test_export_perfetto_with_a_lock_that_is_a_fifo_leaves_the_dataset_verified(dataset,
                                                                                 tmp_path):
    """`export perfetto` reads stalls.each through the kept rows: with the lock a FIFO it
    exported and exited 0 leaving an unrecorded cache file, and `verify` failed from then
    on. Now it exports and the dataset's caches and records are as they were."""
    import importlib.util

    if importlib.util.find_spec("perfetto") is None:
        requirements.skip("setup", "the perfetto package ([report] extra) is not installed "
                          "(pip install 'kmemscope[report]')")
    before = _caches(dataset)
    (dataset / ".kmemscope.lock").unlink(missing_ok=True)
    os.mkfifo(dataset / ".kmemscope.lock")
    run = next(r for r in _runs(dataset) if (dataset / "mm_page_alloc" / f"run_id={r}").exists())
    env = dict(os.environ, **{result_cache.ENV_SWITCH: "1"})
    done = subprocess.run([*KMEMSCOPE, "export", "perfetto", str(dataset), "--run", run,
                           "-o", str(tmp_path / "t.pftrace")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t.pftrace").stat().st_size > 0
    (dataset / ".kmemscope.lock").unlink()
    assert _caches(dataset)[1] == before[1]
    assert not [p for p in (dataset / "_derived").rglob("*") if p.is_file()] \
        if (dataset / "_derived").exists() else True
    assert verify(dataset).ok, verify(dataset).problems


# ---------------------------------------------------------------- a run parsed again

def _parse_again(ds, label):
    from conftest import EXAMPLES

    subprocess.run([*KMEMSCOPE, "parse", "-q", str(EXAMPLES / "kmem-compaction"), "-o", str(ds),
                    "--label", f"kernel={label}"], check=True, capture_output=True, timeout=300)


def _compaction_run(ds):
    import pyarrow.parquet as pq

    for run in _runs(ds):
        (part,) = (ds / "runs" / f"run_id={run}").glob("*.parquet")
        if dict(pq.read_table(part).column("labels")[0].as_py()).get("kernel") == "a":
            return run
    raise AssertionError("no run labelled kernel=a")


def test_a_run_parsed_again_with_a_new_label_leaves_none_of_its_old_caches(dataset):
    run = _compaction_run(dataset)
    runner.run_query("hot_pfns", dataset)
    runner.run_query("summary", dataset)
    mine = lambda: sorted(p.relative_to(dataset) for p in (dataset / "_derived").rglob("*")   # noqa: E731
                          if f"run_id={run}" in p.parts and p.is_file())
    assert len(mine()) >= 3
    _parse_again(dataset, "relabelled")
    assert mine() == []
    report = verify(dataset)
    assert report.ok, report
    # and a query builds them again, recorded in the new run's digests
    runner.run_query("hot_pfns", dataset)
    assert mine() and verify(dataset, deep=True).ok
    _agree(dataset)


@pytest.mark.parametrize("when", ["after the rows were computed", "while the file is written"])
def test_a_run_parsed_again_while_its_cache_is_written_gets_no_cache_of_the_old_run(
        dataset, monkeypatch, when):
    """The seen-once fault of docs/reliability.md made to happen: a parse replaces the run
    (a new label, so a new runs file) after the query computed its rows from the old one,
    before the cache write starts or while it writes (step 2 holds no lock)."""
    run = _compaction_run(dataset)
    real, parsed = cache_write.write_recorded, []

    def parse_once(folders):
        if folders[1].startswith("result_") and not parsed:
            parsed.append(True)
            _parse_again(dataset, "relabelled")

    def write_recorded(ds, folders, part_name, run_id, key, write, extra, **kw):
        def write_then_parse(f):
            write(f)
            if when == "while the file is written":
                parse_once(folders)
        if when == "after the rows were computed":
            parse_once(folders)
        return real(ds, folders, part_name, run_id, key, write_then_parse, extra, **kw)

    monkeypatch.setattr(cache_write, "write_recorded", write_recorded)
    runner.run_query("summary", dataset, run_ids=[run])    # its rows are kept, or not: no error
    monkeypatch.setattr(cache_write, "write_recorded", real)
    assert parsed
    report = verify(dataset, deep=True)
    assert report.ok, report
    _agree(dataset)
    # what the query keeps from now on answers as the analysis does with the cache off
    kept = runner.run_query("summary", dataset, run_ids=[run])
    fresh = _fresh("summary", dataset, run_ids=[run])
    assert kept.replace_schema_metadata(None).equals(fresh.replace_schema_metadata(None))
    assert "relabelled" in str(fresh.column("labels").to_pylist())


def test_a_digests_temp_a_killed_writer_left_is_removed_by_the_next_cache_write(dataset):
    """A writer killed between writing a run's new digests and renaming them leaves
    runs/run_id=X/._files.json.<hex>.tmp; the next cache write of that run removes it (under
    the dataset lock such a temp is stale) and the dataset verifies clean."""
    from kmrun import kmemscope

    runs = sorted((dataset / "runs").glob("run_id=*"))
    left = [run / "._files.json.0123456789abcdef.tmp" for run in runs]
    for path in left:
        path.write_text("{}")
    assert {str(p.relative_to(dataset)) for p in left} <= \
        {p.split(" ")[0] for k, p in verify(dataset).problems if k == "extra"}
    kmemscope("query", "hot_pfns", dataset, "--param", "top_n=4")
    written = {p.parent for p in (dataset / "_derived").rglob("part-0.parquet")}
    assert written, "the query wrote no cache"
    cached_runs = {p.name for p in written}
    for path in left:
        assert path.exists() != (path.parent.name in cached_runs), path
    assert not any(p.exists() for p in left if p.parent.name in cached_runs)
