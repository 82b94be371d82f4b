"""A trace, bundle, manifest or archive from any host can never write outside the dataset,
run SQL, hang, or leave processes and debris behind; a killed parse or commit loses nothing.

Hostile inputs are made here at run time (tests/hostile.py) from a public fixture and the
committed example bundles; the oracles are `trace-cmd report` (event counts of the original
file), the file system (what exists outside the dataset) and /proc (what processes live).
"""
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import requirements

import hostile
from conftest import EXAMPLES, PUBLIC_FIXTURES
from kmrun import default_signals, kmemscope, one_error_line, popen, rows_of
from oracle_compare import work_dirs_left

LISA = PUBLIC_FIXTURES / "lisa_sched_load_v6_le_l8_6cpu.dat"
EXAMPLE = EXAMPLES / "kmem-compaction"
SMALL = EXAMPLES / "memory-pressure"
SAFE_TABLE = re.compile(r"[a-z][a-z0-9_]*")


def lisa_bytes():
    if not LISA.is_file():
        requirements.skip("fixtures", f"public fixture {LISA} is absent")
    return LISA.read_bytes()


def report_counts(path):
    """Events per name as `trace-cmd report` prints them (independent of kmemscope)."""
    out = subprocess.run(["trace-cmd", "report", "-i", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return Counter(m.group(1) for m in re.finditer(r"\]\s+(?:\S+\s+)?\d+\.\d+:\s+(\w+):", out))


def files_under(root, skip=None):
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        if skip and Path(dirpath).resolve().is_relative_to(skip):
            continue
        out.update(os.path.join(dirpath, f) for f in filenames + dirnames)
    return out


def sql_rows(ds, query):
    return rows_of(kmemscope("sql", ds, query, "--format", "json"))


# ---------------------------------------------------------------- names from the trace

@pytest.mark.parametrize("system", ["../..", "/tmp/"])
def test_system_names_never_become_paths_outside_the_dataset(tmp_path, system):
    data = hostile.rename_system(lisa_bytes(), "sched", system)
    # Two events called sched_switch: the tables would be named `<system>__sched_switch`.
    data = hostile.rename_event(data, "timer_cancel", "sched_switch")
    trace = tmp_path / "in" / "trace.dat"
    trace.parent.mkdir()
    trace.write_bytes(data)
    ds = tmp_path / "a" / "b" / "ds"
    ds.parent.mkdir(parents=True)
    escape = Path(system.rstrip("/") + "__sched_switch") if system.startswith("/") else None
    assert escape is None or not escape.exists(), \
        f"{escape} exists already: left by an earlier parse that escaped its dataset? remove it"
    before = files_under(tmp_path)

    kmemscope("parse", "-q", trace, "-o", ds)

    created = files_under(tmp_path) - before
    outside = [f for f in created if not Path(f).resolve().is_relative_to(ds.resolve())]
    assert not outside, f"written outside the dataset: {outside}"
    assert escape is None or not escape.exists()
    expected = report_counts(LISA)["sched_switch"]
    assert expected > 0
    rows = sql_rows(ds, "SELECT system, event, \"table\", rows FROM event_tables "
                        "WHERE event = 'sched_switch' ORDER BY system")
    by_system = {r["system"]: r for r in rows}
    assert set(by_system) == {system, "timer"}, "event_tables keeps the trace's own names"
    hostile_row = by_system[system]
    assert SAFE_TABLE.fullmatch(hostile_row["table"])
    assert hostile_row["rows"] == expected
    counted = sql_rows(ds, f'SELECT count(*) AS n FROM "{hostile_row["table"]}"')
    assert counted == [{"n": expected}], "every event of the renamed system is in the dataset"


def test_a_quote_in_a_system_name_runs_no_sql(tmp_path):
    name = "';--\""
    data = hostile.rename_event(hostile.rename_system(lisa_bytes(), "sched", name),
                                "timer_cancel", "sched_switch")
    trace = tmp_path / "trace.dat"
    trace.write_bytes(data)
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", trace, "-o", ds)
    info = kmemscope("info", ds)
    tables = [line.split()[0] for line in info.stdout.split("tables (", 1)[1].splitlines()[3:]]
    assert all(SAFE_TABLE.fullmatch(t) for t in tables), tables
    kept = sql_rows(ds, "SELECT DISTINCT system FROM event_tables WHERE event = 'sched_switch'")
    assert {r["system"] for r in kept} == {name, "timer"}


def test_table_names_are_safe_unique_and_never_reserved():
    from kmemscope.parsers.tablenames import RESERVED_TABLES, name_tables

    formats = [(1, "kmem", "mm_page_alloc"), (2, "x", "runs"), (3, "y", "print_flags"),
               (4, "../../etc", "dup"), (5, "/abs", "dup"), (6, "a'b", "q\"uote"),
               (7, "s", "UPPER"), (8, "s", "é"), (9, "s", ""), (10, "s", "x" * 300),
               (11, "s", "event_tables"), (12, "t", "ev_s__runs_2"), (13, "s", "_derived")]
    names = name_tables(formats)
    assert names[1] == "mm_page_alloc"
    assert all(SAFE_TABLE.fullmatch(n) and len(n) <= 80 for n in names.values()), names
    assert not set(names.values()) & RESERVED_TABLES
    assert len(set(names.values())) == len(formats), "two events share a table"
    assert name_tables(list(reversed(formats))) == names, "names depend on the trace only"


# ---------------------------------------------------------------- endless and odd inputs

def test_dev_zero_and_a_fifo_are_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo.dat"
    os.mkfifo(fifo)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    os.mkfifo(bundle / "trace.dat")
    for source in ("/dev/zero", fifo, bundle):
        # read, either would never end: the run's timeout is the bound that fails the test
        proc = kmemscope("parse", source, "-o", tmp_path / "ds", check=False, timeout=60)
        assert "not a regular file" in one_error_line(proc)


def test_a_fifo_manifest_is_refused_not_waited_for(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(SMALL / "trace.dat", bundle / "trace.dat")
    os.mkfifo(bundle / "manifest.json")
    proc = kmemscope("parse", bundle, "-o", tmp_path / "ds", check=False, timeout=60)
    assert "manifest.json is a FIFO" in one_error_line(proc)


# ---------------------------------------------------------------- archives

@pytest.mark.parametrize("compression", ["gz", "zst"])
def test_an_archive_bomb_is_refused_before_it_is_unpacked(tmp_path, compression):
    archive = hostile.write_tar(tmp_path / f"bomb.tar.{compression}",
                                {"b/manifest.json": b"{}", "b/trace.dat": (300 << 20, b"\0")},
                                compression)
    assert archive.stat().st_size < 2 << 20
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    # Refused before it is unpacked: no file of the parse may grow past 16 MiB (the bomb's
    # 300 MiB member, unpacked, would end it with EFBIG instead of the refusal).
    proc = kmemscope("parse", archive, "-o", tmp_path / "ds", check=False, timeout=120,
                     env={**os.environ, "TMPDIR": str(tmpdir)},
                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                                           (16 << 20, 16 << 20)))
    assert "archive bomb" in one_error_line(proc)
    assert not list(tmpdir.iterdir())
    assert not (tmp_path / "ds").exists()


def test_an_archive_of_many_members_is_refused(tmp_path):
    members = {f"b/procfs/f{i}": b"x" for i in range(600)}
    archive = hostile.write_tar(tmp_path / "many.tar.gz", members)
    proc = kmemscope("parse", archive, "-o", tmp_path / "ds", check=False)
    assert "more than 512 members" in one_error_line(proc)


def test_archive_members_outside_the_bundle_are_never_written(tmp_path):
    import tarfile

    archive = tmp_path / "b.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(SMALL / "trace.dat", arcname="b/trace.dat")
        tar.add(SMALL / "manifest.json", arcname="b/manifest.json")
        for name in ("../../evil1", "/tmp/evil2", "b/procfs/../../evil3"):
            info = tarfile.TarInfo(name)
            info.size = 4
            tar.addfile(info, hostile._Bytes(b"evil"))
        link = tarfile.TarInfo("b/procfs/vmstat")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    before = files_under(tmp_path)
    kmemscope("parse", "-q", archive, "-o", tmp_path / "ds")
    created = files_under(tmp_path) - before
    assert all(Path(f).resolve().is_relative_to((tmp_path / "ds").resolve()) for f in created)
    assert not Path("/tmp/evil2").exists()
    direct = kmemscope("parse", SMALL / "trace.dat", "-o", tmp_path / "ds2").stderr
    packed_run = sql_rows(tmp_path / "ds", "SELECT run_id, events FROM runs")
    assert packed_run[0]["run_id"] in direct and packed_run[0]["events"] > 0
    tables = {p.name for p in (tmp_path / "ds").iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert "vmstat" not in tables, "a symlink member became a procfs sample"


def test_a_packed_bundle_gives_the_same_run_as_its_directory(tmp_path):
    import tarfile

    archive = tmp_path / "memory-pressure.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(SMALL, arcname="memory-pressure")
    kmemscope("parse", "-q", archive, "-o", tmp_path / "a")
    kmemscope("parse", "-q", SMALL, "-o", tmp_path / "b")
    query = "SELECT run_id, events, labels FROM runs"
    assert sql_rows(tmp_path / "a", query) == sql_rows(tmp_path / "b", query)
    vm = "SELECT count(*) AS n, sum(value) AS total FROM vmstat"
    assert sql_rows(tmp_path / "a", vm) == sql_rows(tmp_path / "b", vm)


# ---------------------------------------------------------------- manifests

HOSTILE_MANIFESTS = {
    "oversized": ('{"host": "' + "x" * (2 << 20) + '"}', "KiB"),
    "a list": ("[1, 2, 3]", "not a JSON object"),
    "bad json": ('{"labels": ', "unreadable manifest"),
    "label not a string": ('{"labels": {"kernel": 5}}', "label 'kernel' must be a string"),
    "labels a list": ('{"labels": ["kernel=a"]}', "'labels' must be an object"),
    "uname a list": ('{"uname": ["6.18"]}', "'uname' must be an object"),
    "release a number": ('{"uname": {"release": 6}}', "'release' must be a string"),
    "order a string": ('{"pageblock_order": "9"}', "'pageblock_order' must be an integer"),
    "order out of range": ('{"pageblock_order": 4000000000}', "out of range"),
    "migratetypes of numbers": ('{"migratetypes": [1, 2]}', "migratetypes"),
    "tick rate a string": ('{"clock_ticks_per_s": "100"}', "'clock_ticks_per_s' must be an integer"),
    "tick rate zero": ('{"clock_ticks_per_s": 0}', "clock_ticks_per_s 0 is out of range"),
    "tick rate huge": ('{"clock_ticks_per_s": 1e400}', "'clock_ticks_per_s' must be an integer"),
    "tick rate a bool": ('{"clock_ticks_per_s": true}', "clock_ticks_per_s True is out of range"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MANIFESTS))
def test_a_hostile_manifest_is_one_line_and_adds_nothing(tmp_path, case):
    text, expected = HOSTILE_MANIFESTS[case]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(SMALL / "trace.dat", bundle / "trace.dat")
    (bundle / "manifest.json").write_text(text)
    ds = tmp_path / "ds"
    line = one_error_line(kmemscope("parse", bundle, "-o", ds, check=False))
    assert "manifest" in line and expected in line, line
    assert not ds.exists(), "a failed parse into a new path left it behind"


# ---------------------------------------------------------------- killed parses

def children_of(pid):
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def alive(pid):
    """True while any thread of `pid` runs. A killed decoder's leader thread shows Z while its
    other threads still exit, and the files they share (the owner lock) stay open until the last."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            state = Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            return True
    return False


def paused_parse(source, ds, seconds=60):
    """Start `kmemscope parse` whose decoder stops mid-trace; returns (process, decoder pid)."""
    proc = popen("parse", "-q", source, "-o", ds,
                 env={**os.environ, "KMEMSCOPE_TEST_PAUSE_DECODER_S": str(seconds)},
                 preexec_fn=default_signals)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # The decoder pauses once its first segment is decoded (a progress message).
        working = list(Path(ds).glob(".parse-*/stage")) if Path(ds).exists() else []
        kids = children_of(proc.pid)
        if working and kids and proc.poll() is None:
            time.sleep(0.3)
            return proc, kids[0]
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the parse never reached its decoder")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_terminated_parse_leaves_no_process_and_no_debris(tmp_path, sig):
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", SMALL, "-o", ds)
    before = sql_rows(ds, "SELECT run_id FROM runs")
    proc, child = paused_parse(EXAMPLE, ds)
    proc.send_signal(sig)
    # Generous bounds: on a machine loaded 10 times over its cores the exit took over 30 s.
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == (130 if sig == signal.SIGINT else 128 + sig), err
    assert len(err.strip().splitlines()) == 1 and "kmemscope: error:" in err, err
    deadline = time.monotonic() + 60
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the decoder child outlived its parse"
    assert not work_dirs_left(ds)
    assert sql_rows(ds, "SELECT run_id FROM runs") == before


def test_a_killed_parse_is_cleaned_up_by_the_next_one_and_only_then(tmp_path):
    ds = tmp_path / "ds"
    proc, child = paused_parse(EXAMPLE, ds)
    # A live parse's work directory is not debris: another parse leaves it alone.
    other, other_child = paused_parse(EXAMPLE, tmp_path / "elsewhere")
    kmemscope("parse", "-q", SMALL, "-o", ds)
    assert len(work_dirs_left(ds)) == 1
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the decoder child outlived a SIGKILLed parse (PR_SET_PDEATHSIG)"
    assert alive(other_child), "an unrelated parse's decoder was killed"
    other.kill()
    other.wait(timeout=10)
    kmemscope("parse", "-q", SMALL, "-o", ds)
    assert not work_dirs_left(ds)
    assert len(sql_rows(ds, "SELECT run_id FROM runs")) == 1


def table_rows(ds, run_id="*"):
    import pyarrow.parquet as pq

    return {p.parent.name: sum(pq.ParquetFile(f).metadata.num_rows for f in p.glob("*.parquet"))
            for p in Path(ds).glob(f"*/run_id={run_id}")}


def small_run_id(ds):
    return sql_rows(ds, "SELECT run_id FROM runs WHERE source LIKE '%memory-pressure%'")[0]["run_id"]


@pytest.mark.slow   # a parse killed at every rename of a commit
def test_a_commit_killed_between_any_two_renames_is_left_by_readers_and_finished_by_the_next_parse(tmp_path):
    base = tmp_path / "base"
    kmemscope("parse", "-q", SMALL, "-o", base, "--label", "side=old")
    expected_rows = table_rows(base)
    run_id = sql_rows(base, "SELECT run_id FROM runs")[0]["run_id"]
    partitions = len(list(base.glob("*/run_id=*")))
    renames = 2 * partitions      # replacing: every old partition out, every new one in
    for n in sorted({1, 2, 3, partitions, renames - 1, renames}):
        ds = tmp_path / f"ds{n}"
        shutil.copytree(base, ds)
        proc = kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "side=new", check=False,
                         env={**os.environ, "KMEMSCOPE_TEST_CRASH_AFTER_RENAMES": str(n)})
        assert proc.returncode == 99, f"the commit was not interrupted at rename {n}"
        left = work_dirs_left(ds)
        assert left, "a killed commit leaves its journal"
        reader = kmemscope("sql", ds, "SELECT labels['side'] AS side FROM runs",
                           "--format", "json", check=False)
        # A reader sees the old run or the new one whole, or no run and says why; it never writes.
        assert (reader.returncode == 0 and rows_of(reader) in ([{"side": "old"}],
                                                               [{"side": "new"}])
                or "its commit was interrupted" in one_error_line(reader)), reader.stderr
        assert work_dirs_left(ds) == left
        kmemscope("parse", "-q", EXAMPLE / "trace.dat", "-o", ds, "--events", "compaction:*")
        runs = sql_rows(ds, f"SELECT labels['side'] AS side FROM runs WHERE run_id = '{run_id}'")
        assert runs == [{"side": "new"}], f"after a crash at rename {n}: {runs}"
        assert table_rows(ds, run_id) == expected_rows
        assert not work_dirs_left(ds)


def test_a_commit_killed_mid_way_is_finished_by_the_next_parse(tmp_path):
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "side=old")
    expected_rows = table_rows(ds)
    proc = kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "side=new", check=False,
                     env={**os.environ, "KMEMSCOPE_TEST_CRASH_AFTER_RENAMES": "5"})
    assert proc.returncode == 99
    assert work_dirs_left(ds), "a killed commit leaves its journal"
    kmemscope("parse", "-q", LISA if LISA.is_file() else EXAMPLE, "-o", ds)
    assert not work_dirs_left(ds)
    sides = sql_rows(ds, "SELECT labels['side'] AS side FROM runs WHERE labels['side'] IS NOT NULL")
    assert sides == [{"side": "new"}]
    assert table_rows(ds, small_run_id(ds)) == expected_rows


def test_an_earlier_kmemscope_s_debris_is_removed_and_a_vanished_run_restored(tmp_path):
    ds = tmp_path / "ds"
    kmemscope("parse", "-q", SMALL, "-o", ds)
    run_id = sql_rows(ds, "SELECT run_id FROM runs")[0]["run_id"]
    expected_rows = table_rows(ds)
    # What a parse killed during its commit used to leave: the old run in a trash directory.
    trash = ds / ".trash-1234abcd"
    trash.mkdir()
    for part in ds.glob(f"*/run_id={run_id}"):
        os.rename(part, trash / part.parent.name)
    (ds / ".staging-0123456789ab" / "mm_page_alloc").mkdir(parents=True)
    kmemscope("parse", "-q", EXAMPLE / "trace.dat", "-o", ds, "--events", "compaction:*")
    assert not work_dirs_left(ds)
    assert table_rows(ds, run_id) == expected_rows


def test_two_parses_of_one_trace_at_once_both_succeed_with_one_run(tmp_path):
    ds = tmp_path / "ds"
    procs = [popen("parse", EXAMPLE, "-o", ds) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert not any("disk space" in e or "error" in e for e in errs), errs
    assert len(sql_rows(ds, "SELECT run_id FROM runs")) == 1
    assert not work_dirs_left(ds)


# ---------------------------------------------------------------- the command line

@pytest.fixture(scope="module")
def small_ds(tmp_path_factory):
    ds = tmp_path_factory.mktemp("small") / "ds"
    kmemscope("parse", "-q", SMALL, "-o", ds, "--label", "kernel=a\nfake-row  x=1")
    return ds


@pytest.mark.parametrize("query,param,expected", [
    ("fallback_pollution.over_time", "bucket_s=-1", "from 0.001 to 86400"),
    ("fallback_pollution.over_time", "bucket_s=0", "from 0.001 to 86400"),
    ("fallback_pollution.over_time", "bucket_s=inf", "finite"),
    ("fallback_pollution.over_time", "bucket_s=nan", "finite"),
    ("hot_pfns", "top_n=-5", "from 1 to 1000000"),
    ("hot_pfns", "top_n=1e3", "must be integer"),
])
def test_out_of_range_parameters_name_the_valid_range(small_ds, query, param, expected):
    line = one_error_line(kmemscope("query", query, small_ds, "--param", param, check=False))
    assert expected in line and param.split("=")[0] in line


def test_control_characters_in_labels_cannot_forge_rows(small_ds):
    out = kmemscope("info", small_ds).stdout
    assert not any(line.startswith("fake-row") for line in out.splitlines())
    assert "kernel=a\\nfake-row  x=1" in out


def test_a_path_that_is_not_utf8_is_one_line(small_ds, tmp_path):
    bad = os.fsdecode(bytes(tmp_path) + b"/\xff.csv")
    line = one_error_line(kmemscope("sql", small_ds, "SELECT 1", "-o", bad, "--format", "csv",
                                    check=False), code=2)        # a usage error
    assert "not valid UTF-8" in line


def test_sql_read_only_reads_the_dataset_and_nothing_else(small_ds, tmp_path):
    target = tmp_path / "out.csv"
    copy = f"COPY (SELECT 1) TO '{target}'"
    line = one_error_line(kmemscope("sql", "--read-only", small_ds, copy, check=False))
    assert "SELECT statements only" in line and not target.exists()
    line = one_error_line(kmemscope("sql", "--read-only", small_ds,
                                    "SELECT * FROM read_csv('/etc/passwd')", check=False))
    assert "disabled" in line
    n = sql_rows(small_ds, "SELECT count(*) AS n FROM mm_compaction_begin")
    ro = rows_of(kmemscope("sql", "--read-only", small_ds,
                           "SELECT count(*) AS n FROM mm_compaction_begin",
                           "--format", "json"))
    assert ro == n
    # Without --read-only it is DuckDB's full SQL, as documented.
    kmemscope("sql", small_ds, copy)
    assert target.read_text().split() == ["1", "1"]


@pytest.mark.parametrize("sql, named", [
    ("INSTALL httpfs", "INSTALL"),
    ("-- a comment\n/* and another */ force   install httpfs", "FORCE INSTALL"),
    ("LOAD httpfs", "LOAD"),
    ("UPDATE EXTENSIONS", "UPDATE EXTENSIONS"),     # a type DuckDB's Python enum cannot name
    ("SELECT 1; ATTACH ':memory:' AS x; (SELECT 2)", "ATTACH"),
    ("COPY (SELECT 1) TO 'x.csv'", "COPY"),
])
def test_sql_read_only_names_the_statement_it_refuses_as_written(small_ds, tmp_path, sql, named):
    """DuckDB types INSTALL and LOAD alike: the refusal names what the SQL says."""
    proc = kmemscope("sql", "--read-only", small_ds, sql, check=False, cwd=tmp_path)
    line = one_error_line(proc)
    assert line == f"kmemscope: error: --read-only allows SELECT statements only, not {named}", line
    assert not list(tmp_path.iterdir())


def test_a_special_file_is_named_once_for_what_it_is(tmp_path):
    """Every kind of file that is not a regular one, named by its kind: never "is not a
    regular file, not a regular file"."""
    import socket

    from kmemscope.common.errors import TraceFileError
    from kmemscope.parsers.sources import open_bundle_file, regular_file

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        for name, kind in (("fifo", "a FIFO"), ("dir", "a folder"), ("sock", "a socket")):
            # a socket cannot be opened (ENXIO): only its stat is named
            for read in (regular_file, lambda p: open_bundle_file(p, "input"))[:2 - (name == "sock")]:
                with pytest.raises(TraceFileError) as caught:
                    read(tmp_path / name)
                text = str(caught.value)
                assert f"is {kind}, not a regular file" in text, text
                assert text.count("regular file") == 1, text
        with pytest.raises(TraceFileError) as caught:
            regular_file("/dev/null")
        assert "is a device, not a regular file" in str(caught.value)
    finally:
        sock.close()


def test_no_event_can_take_the_name_of_a_view_the_analyses_define():
    from kmemscope.parsers.tablenames import RESERVED_TABLES, is_safe
    from kmemscope.queries import runner, sql_lib

    public = sql_lib.public_views() | set(runner.DERIVED_COLUMNS) | {
        "run_facts", "migratetype_names", "extfrag_ownership", "query_params"}
    assert public <= RESERVED_TABLES, f"not reserved: {sorted(public - RESERVED_TABLES)}"
    internal = {v for m in sql_lib.modules().values() for v in m.internal}
    assert internal and not any(is_safe(v) for v in internal)     # `_` names: no table takes them


def test_an_event_named_stacks_does_not_take_the_stacks_table():
    """`stacks` is the table parse writes for a run's kernel stacks: an event of that name
    (any system) gets a table of its own name instead of mixing into it."""
    from kmemscope.parsers.tablenames import name_tables

    names = name_tables([(7, "mysys", "stacks"), (8, "ftrace", "kernel_stack")])
    assert names[7] != "stacks" and names[7].startswith("ev_mysys__stacks_")
    assert names[8] == "kernel_stack"
