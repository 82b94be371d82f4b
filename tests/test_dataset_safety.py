"""A dataset or bundle that someone else wrote can never make kmemscope move, delete, read or
write anything outside it, hang a reader, or pass a file of the analysing host off as data.

Every hostile dataset and bundle is built here at run time (tests/hostile.py) from the
committed example bundles. The oracles are the file system itself (a snapshot of every entry
outside the dataset, and of the dataset, taken before and compared after: hashes of files,
targets of links) and the real run's row counts read with plain pyarrow.
"""
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

import hostile
import requirements
from conftest import EXAMPLES
from kmrun import default_signals, KMEMSCOPE, kmemscope, one_error_line, popen, rows_of
from kmemscope.dataset.handle import DatasetRef

SMALL = EXAMPLES / "memory-pressure"      # the run every dataset here holds
OTHER = EXAMPLES / "thp-faults"           # a second bundle: its run has mm_page_alloc
READERS = [("info", "{ds}"), ("query", "compaction", "{ds}"),
           ("sql", "--read-only", "{ds}", "SELECT count(*) AS n FROM runs")]


def run(*args, timeout=120):
    return kmemscope(*args, check=False, timeout=timeout)


def readers(ds):
    return [[str(a).format(ds=ds) for a in args] for args in READERS]


def part_rows(ds, run_id="*"):
    """{table: rows} of a run's partitions (every run's by default), read with plain pyarrow."""
    import pyarrow.parquet as pq

    return {p.parent.name: sum(pq.ParquetFile(f).metadata.num_rows for f in p.glob("*.parquet"))
            for p in Path(ds).glob(f"*/run_id={run_id}") if p.is_dir() and not p.is_symlink()}


def answered_runs(ds):
    return rows_of(kmemscope("sql", ds, "SELECT run_id FROM runs ORDER BY run_id",
                             "--format", "json"))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    ds = tmp_path_factory.mktemp("safety") / "ds"
    kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "side=base")
    run_id = answered_runs(ds)[0]["run_id"]
    return ds, run_id, part_rows(ds)


@pytest.fixture
def ds(base, tmp_path):
    """A fresh copy of the one-run dataset, and a folder outside it with files in it."""
    src, run_id, rows = base
    dest = tmp_path / "ds"
    shutil.copytree(src, dest, symlinks=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    return dest, run_id, rows, outside


def tiny_parquet(path, **columns):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns or {"ts": [1, 2, 3], "pfn": [7, 8, 9]}), path)
    return path


# ---------------------------------------------------------------- 1. recovery through links

def test_a_journal_whose_stage_links_outside_moves_and_deletes_nothing(ds):
    ds, run_id, rows, outside = ds
    victim = outside / "victim"
    tiny_parquet(victim / "secret" / "part-0.parquet")
    (victim / "secret" / "notes.txt").write_text("precious")
    # The first journal pulls the outside folder in; the second retires it and deletes it.
    hostile.plant_work_dir(ds, ".parse-aaaaaaaaaaaa", stage=victim,
                           journal={"run_id": "deadbeefdeadbeef", "tables": ["secret", "runs"]})
    hostile.plant_work_dir(ds, ".parse-bbbbbbbbbbbb",
                           journal={"run_id": "deadbeefdeadbeef", "tables": ["runs"]})
    outside_before, ds_before = hostile.tree_state(outside), hostile.tree_state(ds)

    for args in readers(ds):
        proc = run(*args)
        assert proc.returncode == 0, proc.stderr
        assert hostile.tree_state(ds) == ds_before, f"`kmemscope {args[0]}` wrote to the dataset"
    assert hostile.tree_state(outside) == outside_before

    kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "side=base")    # the writer recovers
    assert hostile.tree_state(outside) == outside_before, "recovery touched a folder outside"
    assert (ds / ".parse-aaaaaaaaaaaa" / "stage").is_symlink(), "the hostile folder was not left alone"
    assert not (ds / "secret").exists()
    assert answered_runs(ds) == [{"run_id": run_id}]
    assert part_rows(ds) == rows


# ---------------------------------------------------------------- 2. a work folder that is a link

def test_a_work_folder_linking_outside_never_takes_the_runs_out(ds):
    ds, run_id, rows, outside = ds
    evil = outside / "evil"
    (evil / "stage" / "runs").mkdir(parents=True)
    (evil / "owner.lock").touch()
    (evil / "commit.json").write_text(json.dumps({"run_id": run_id, "tables": ["runs"]}))
    os.symlink(evil, ds / ".parse-0123456789ab")
    outside_before, ds_before = hostile.tree_state(outside), hostile.tree_state(ds)

    for args in readers(ds):
        proc = run(*args)
        assert proc.returncode == 0, proc.stderr
        assert hostile.tree_state(ds) == ds_before, f"`kmemscope {args[0]}` wrote to the dataset"
    kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "side=base")
    assert hostile.tree_state(outside) == outside_before, "partitions were moved out"
    assert (ds / ".parse-0123456789ab").is_symlink()
    assert answered_runs(ds) == [{"run_id": run_id}]
    assert part_rows(ds) == rows


@pytest.mark.parametrize("shape", ["journal a link", "journal a FIFO", "table a path",
                                   "run id a path", "owner lock a FIFO"])
def test_a_journal_of_another_shape_is_left_alone(ds, shape):
    ds, run_id, rows, outside = ds
    journal = {"run_id": run_id, "tables": ["runs"]}
    if shape == "table a path":
        journal["tables"].append("../outside")
    elif shape == "run id a path":
        journal["run_id"] = "../../outside"
    work = hostile.plant_work_dir(ds, ".parse-cccccccccccc",
                                  journal=None if shape.startswith("journal") else journal)
    if shape == "journal a link":
        # A journal elsewhere that, followed, retires every table of the real run but runs.
        (outside / "commit.json").write_text(json.dumps(journal))
        os.symlink(outside / "commit.json", work / "commit.json")
    elif shape == "journal a FIFO":
        os.mkfifo(work / "commit.json")
    elif shape == "owner lock a FIFO":
        (work / "owner.lock").unlink()
        os.mkfifo(work / "owner.lock")
    outside_before, ds_before = hostile.tree_state(outside), hostile.tree_state(ds)
    for args in readers(ds):
        proc = run(*args, timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert hostile.tree_state(ds) == ds_before
    kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "side=base", timeout=120)
    assert hostile.tree_state(work) == {k[len(work.name) + 1:]: v for k, v in ds_before.items()
                                        if k.startswith(work.name + "/")}, "the folder was changed"
    assert hostile.tree_state(outside) == outside_before
    assert part_rows(ds, run_id) == rows


# ---------------------------------------------------------------- 3. reading and writing through links

def test_a_table_folder_linking_outside_is_refused_by_readers_and_by_parse(ds):
    ds, run_id, rows, outside = ds
    tiny_parquet(outside / "tables" / "mm_page_alloc" / f"run_id={run_id}" / "part-0.parquet")
    os.symlink(outside / "tables" / "mm_page_alloc", ds / "mm_page_alloc")
    outside_before, ds_before = hostile.tree_state(outside), hostile.tree_state(ds)

    for args in readers(ds):
        line = one_error_line(run(*args))
        assert "mm_page_alloc" in line and "symbolic link" in line, line
    # OTHER's run has an mm_page_alloc table: its partition would land outside.
    line = one_error_line(run("parse", "-q", OTHER, "-o", ds))
    assert "mm_page_alloc" in line and "symbolic link" in line, line
    assert hostile.tree_state(outside) == outside_before, "parse wrote through the link"
    assert hostile.tree_state(ds) == ds_before, "a refused parse changed the dataset"
    os.unlink(ds / "mm_page_alloc")
    assert answered_runs(ds) == [{"run_id": run_id}]
    assert part_rows(ds) == rows


def test_a_part_file_linking_to_another_file_is_not_read_as_data(ds):
    ds, run_id, rows, outside = ds
    part = ds / "runs" / f"run_id={run_id}" / "part-0.parquet"
    shutil.copy(part, outside / "other.parquet")
    os.symlink(outside / "other.parquet", part.with_name("part-1.parquet"))
    outside_before = hostile.tree_state(outside)
    for args in readers(ds):
        line = one_error_line(run(*args))
        assert "part-1.parquet" in line and "symbolic link" in line, line
    assert hostile.tree_state(outside) == outside_before
    os.unlink(part.with_name("part-1.parquet"))
    assert answered_runs(ds) == [{"run_id": run_id}]


# ---------------------------------------------------------------- 4. FIFOs and devices

@pytest.mark.parametrize("where", ["part file", "run folder", "device"])
def test_a_fifo_or_device_in_a_dataset_is_an_error_not_a_hang(ds, where):
    ds, run_id, rows, outside = ds
    run_dir = ds / "mm_compaction_begin" / f"run_id={run_id}"
    if where == "part file":
        bad = run_dir / "part-7.parquet"
        os.mkfifo(bad)
    elif where == "run folder":
        bad = ds / "mm_compaction_begin" / "run_id=0123456789abcdef"
        os.mkfifo(bad)
    else:
        bad = run_dir / "part-7.parquet"
        try:
            os.mknod(bad, stat.S_IFCHR | 0o600, os.makedev(1, 5))     # what /dev/zero is
        except PermissionError:
            requirements.skip("tracefs", "making a device node needs root")
    before = hostile.tree_state(ds)
    for args in readers(ds):
        try:
            proc = run(*args, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`kmemscope {args[0]}` hung on a {where} that is no regular file")
        line = one_error_line(proc)
        assert bad.name in line and "not a regular" in line, line
    assert hostile.tree_state(ds) == before
    os.unlink(bad)
    assert answered_runs(ds) == [{"run_id": run_id}]


# ---------------------------------------------------------------- 6. bundle files that are links

@pytest.mark.parametrize("item", ["manifest.json", "metrics.json", "procfs/vmstat", "procfs",
                                  "trace.dat"])
def test_a_bundle_file_linking_to_the_analysing_host_is_refused(tmp_path, item):
    bundle = tmp_path / "bundle"
    shutil.copytree(SMALL, bundle)
    outside = tmp_path / "host"
    outside.mkdir()
    target = outside / Path(item).name
    if item == "manifest.json":
        target.write_text(json.dumps({"host": "the-analysing-host", "labels": {"secret": "s3cr3t"}}))
    elif item == "metrics.json":
        target.write_text(json.dumps([{"metric": "secret", "value": 1, "better": "higher"}]))
    elif item == "procfs":
        shutil.copytree(bundle / "procfs", target)
    else:
        shutil.copy(bundle / item, target)
    if (bundle / item).is_dir():
        shutil.rmtree(bundle / item)
    else:
        (bundle / item).unlink(missing_ok=True)
    os.symlink(target, bundle / item)
    outside_before = hostile.tree_state(outside)
    ds = tmp_path / "ds"

    line = one_error_line(run("parse", "-q", bundle, "-o", ds))
    assert Path(item).name in line and "symbolic link" in line, line
    assert not os.path.lexists(ds), "a refused parse into a new path left it behind"
    assert hostile.tree_state(outside) == outside_before


# ---------------------------------------------------------------- 10. a failed parse leaves nothing

def test_a_failed_parse_into_a_new_path_leaves_nothing_behind(tmp_path):
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"this is not a trace.dat\n" * 100)
    new = tmp_path / "new" / "deeper" / "ds"
    one_error_line(run("parse", bad, "-o", new))
    assert not (tmp_path / "new").exists(), sorted(map(str, (tmp_path / "new").rglob("*")))
    empty = tmp_path / "empty"
    empty.mkdir()
    one_error_line(run("parse", bad, "-o", empty))
    assert list(empty.iterdir()) == [], "a failed parse left files in an empty folder"


def test_a_failed_parse_leaves_an_existing_dataset_exactly_as_it_was(ds):
    ds, run_id, rows, _outside = ds
    (ds / ".kmemscope.lock").unlink()       # a copy made without it
    bad = ds.parent / "bad.dat"
    bad.write_bytes(b"this is not a trace.dat\n" * 100)
    before = hostile.tree_state(ds)
    one_error_line(run("parse", bad, "-o", ds))
    assert hostile.tree_state(ds) == before
    assert answered_runs(ds) == [{"run_id": run_id}]


# ---------------------------------------------------------------- only parse recovers

def test_readers_leave_an_interrupted_commit_to_the_next_parse(ds):
    from kmemscope.dataset.reader import finish_interrupted_commits

    ds, run_id, rows, _outside = ds
    proc = kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "side=new", check=False,
                     env={**os.environ, "KMEMSCOPE_TEST_CRASH_AFTER_RENAMES": "3"})
    assert proc.returncode == 99, "the commit was not interrupted"
    (ds / ".kmemscope.lock").unlink()
    before = hostile.tree_state(ds)
    for args in readers(ds):
        run(*args)
        assert hostile.tree_state(ds) == before, f"`kmemscope {args[0]}` wrote to the dataset"
    notes = finish_interrupted_commits(DatasetRef.of(ds))
    assert len(notes) == 1 and run_id in notes[0] and "kmemscope parse" in notes[0], notes
    assert hostile.tree_state(ds) == before

    kmemscope("parse", "-q", OTHER, "-o", ds)       # any parse finishes it
    assert not [p for p in ds.iterdir() if p.name.startswith(".parse-")]
    sides = rows_of(kmemscope("sql", ds, "SELECT labels['side'] AS side FROM runs "
                              f"WHERE run_id = '{run_id}'", "--format", "json"))
    assert sides == [{"side": "new"}]
    assert part_rows(ds, run_id) == rows
    assert finish_interrupted_commits(DatasetRef.of(ds)) == []


# ---------------------------------------------------------------- 7. bounded SQL

SLOW_SQL = "SELECT sum(hash(a.range * b.range)) AS h FROM range(400000) a, range(400000) b"


def test_a_replacement_killed_at_any_rename_leaves_readers_the_old_run_whole(ds):
    """docs/safety.md: killed while it replaces a run, a parse leaves the old run to readers
    until the next parse. The commit is cut at renames from the first to the one before the
    new run shows: readers list every table of the run with the old rows (recounted with
    pyarrow from the listed files), SQL reads its old labels, and nothing is written."""
    import random

    import pyarrow.parquet as pq

    from kmemscope.dataset import reader

    src, run_id, rows, _outside = ds
    renames = 2 * len(rows)               # every old partition out, every new one in
    rng = random.Random(os.environ.get("PYTEST_SEED", "39"))
    cuts = sorted({1, renames - 1, *rng.sample(range(2, renames - 1), 2)})
    for n in cuts:
        copy = src.parent / f"cut{n}"
        shutil.copytree(src, copy, symlinks=True)
        proc = subprocess.run([*KMEMSCOPE, "parse", "-q", str(SMALL), "-o", str(copy),
                               "--label", "side=new"], capture_output=True, text=True,
                              env={**os.environ, "KMEMSCOPE_TEST_CRASH_AFTER_RENAMES": str(n)})
        assert proc.returncode == 99, f"the commit was not interrupted at rename {n}"
        before = hostile.tree_state(copy)
        listed = reader.table_runs(DatasetRef.of(copy))
        seen = {t: sum(pq.ParquetFile(f).metadata.num_rows for f in runs[run_id])
                for t, runs in listed.items() if run_id in runs}
        assert seen == rows, f"cut at rename {n}"
        proc = run("sql", "--read-only", copy, "SELECT run_id, labels['side'] AS side FROM runs",
                   "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert rows_of(proc) == [{"run_id": run_id, "side": "base"}], n
        assert "replacement was interrupted" in proc.stderr, proc.stderr
        assert hostile.tree_state(copy) == before
        kmemscope("parse", "-q", OTHER, "-o", copy)      # the next parse finishes it
        sides = rows_of(kmemscope("sql", copy, "SELECT labels['side'] AS side FROM runs "
                                  f"WHERE run_id = '{run_id}'", "--format", "json"))
        assert sides == [{"side": "new"}]
        assert part_rows(copy, run_id) == rows


def test_sql_read_only_stops_a_query_at_its_timeout(ds):
    ds, _run_id, _rows, _outside = ds
    line = one_error_line(run("sql", "--read-only", "--timeout", "1", ds, SLOW_SQL, timeout=60))
    assert "longer than 1 s" in line, line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
@pytest.mark.parametrize("mode", [["--read-only"], []])
def test_a_signal_ends_sql_at_once_in_one_line(ds, tmp_path, sig, mode):
    ds, _run_id, _rows, _outside = ds
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = popen("sql", *mode, ds, SLOW_SQL, env={**os.environ, "TMPDIR": str(tmp)},
                 preexec_fn=default_signals)
    # Ready when its SQL session's private spill folder exists: the dataset is open and the
    # statement starts (a generous bound for a loaded machine, not a timing assertion).
    waited = 0
    while not any(p.name.startswith("kmemscope-sql-") for p in tmp.iterdir()):
        assert proc.poll() is None and waited < 1200, proc.communicate()
        time.sleep(0.05)
        waited += 1
    proc.send_signal(sig)
    # stopped at once: a query that went on would outlive this bound (SLOW_SQL takes minutes)
    try:
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:       # a failure leaves no query running behind the test
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemscope: error: "), err
    assert "internal error" not in err and "Traceback" not in err


def test_sql_spills_into_a_private_directory_it_removes(ds, tmp_path):
    ds, _run_id, _rows, _outside = ds
    work = tmp_path / "cwd"
    work.mkdir()
    proc = kmemscope("sql", "--read-only", "--memory-limit", "64MB", ds,
                     "SELECT current_setting('temp_directory') AS t, "
                     "current_setting('memory_limit') AS m", "--format", "json",
                     check=False, cwd=work, timeout=120)
    assert proc.returncode == 0, proc.stderr
    row = rows_of(proc)[0]
    assert Path(row["t"]).is_absolute() and not Path(row["t"]).is_relative_to(work), row
    assert not os.path.lexists(row["t"]), "the temporary directory is left behind"
    assert row["m"].startswith(("61.0 MiB", "64.0 MB", "61.0MiB")), row
    assert list(work.iterdir()) == []
    one_error_line(run("sql", "--read-only", "--memory-limit", "lots", ds, "SELECT 1"))


# ---------------------------------------------------------------- 8. one clean line for every input

def test_a_deeply_nested_manifest_is_one_line(tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(SMALL, bundle)
    text = (bundle / "manifest.json").read_text().rstrip().rstrip("}")
    (bundle / "manifest.json").write_text(text + ', "deep": ' + "[" * 100000 + "]" * 100000 + "}")
    line = one_error_line(run("parse", "-q", bundle, "-o", tmp_path / "ds"))
    assert "nested too deeply" in line, line
    assert not (tmp_path / "ds").exists()


def test_a_lone_surrogate_in_a_label_is_one_line(tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(SMALL, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["labels"] = {"side": "\ud800"}
    (bundle / "manifest.json").write_text(json.dumps(manifest))      # "\ud800" escaped
    one_error_line(run("parse", "-q", bundle, "-o", tmp_path / "ds"))
    proc = kmemscope("parse", "-q", SMALL, "-o", tmp_path / "ds", b"--label",
                     b"side=\xed\xa0\x80", check=False, timeout=120)
    assert "not valid UTF-8" in one_error_line(proc)
    assert not (tmp_path / "ds").exists()


def test_a_runs_file_of_another_table_is_one_line_not_a_runaway_join(ds):
    ds, run_id, _rows, _outside = ds
    runs_file = next((ds / "runs" / f"run_id={run_id}").glob("*.parquet"))
    vmstat_file = next((ds / "vmstat" / f"run_id={run_id}").glob("*.parquet"))
    shutil.copyfile(vmstat_file, runs_file)
    line = one_error_line(run("query", "compaction", ds, timeout=60))
    assert "holds" in line and "rows, not one" in line, line


@pytest.mark.slow   # every analysis over a damaged copy, per column
def test_a_flipped_byte_in_any_column_the_analyses_read_is_one_line(ds):
    """A damaged page of the runs file, in each column every analysis reads first."""
    import pyarrow.parquet as pq

    ds, run_id, _rows, _outside = ds
    runs_file = next((ds / "runs" / f"run_id={run_id}").glob("*.parquet"))
    intact = runs_file.read_bytes()
    meta = pq.ParquetFile(runs_file).metadata.row_group(0)
    columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    for name in ("kernel_release", "arch", "first_ts", "pageblock_order", "manifest"):
        col = columns[name]
        start = col.dictionary_page_offset or col.data_page_offset
        for offset in (start + col.total_compressed_size // 2, start + col.total_compressed_size - 1):
            damaged = bytearray(intact)
            damaged[offset] ^= 0xFF
            runs_file.write_bytes(bytes(damaged))
            proc = run("query", "compaction", ds, "--format", "json", timeout=60)
            assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, \
                (name, offset, proc.stderr)
            assert proc.returncode in (0, 1), (name, offset, proc.stderr)
            if proc.returncode:
                assert proc.stderr.strip().splitlines()[-1].startswith("kmemscope: error: ")
    runs_file.write_bytes(intact)


def test_the_api_read_only_sql_spills_privately_and_writes_nothing(ds, tmp_path, monkeypatch):
    import kmemscope

    ds, _run_id, _rows, _outside = ds
    monkeypatch.chdir(tmp_path)
    before = hostile.tree_state(ds)
    rows = kmemscope.open(ds).sql("SELECT current_setting('temp_directory') AS t",
                                  read_only=True).rows()
    assert not Path(rows[0]["t"]).is_relative_to(tmp_path) and not os.path.lexists(rows[0]["t"])
    assert hostile.tree_state(ds) == before
    assert not (tmp_path / ".tmp").exists()
