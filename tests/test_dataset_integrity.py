"""One run that does not fit can never break the other runs' answers, and a dataset's files are
checked against what was committed.

Hostile traces and datasets are made here at run time (tests/hostile.py) from the committed
example bundles: a trace's event format is altered in a v6 copy that trace-cmd itself writes,
and a run's partition is replaced with a Parquet file written by plain pyarrow. The oracles are
the honest run's own rows, read with plain pyarrow, and the file system.
"""
import json
import shutil
from pathlib import Path

import pytest

import hostile
from conftest import EXAMPLES
from kmrun import kmemscope, one_error_line, rows_of

HONEST = EXAMPLES / "kmem-compaction"
OTHER = EXAMPLES / "thp-faults"
ANALYSES = ["summary", "hot_pfns", "atomic_orders"]


def run(*args, timeout=300):
    return kmemscope(*args, check=False, timeout=timeout)


def run_ids(ds):
    rows = rows_of(kmemscope("sql", ds, "SELECT run_id, labels['side'] AS side FROM runs",
                             "--format", "json"))
    return {r["side"]: r["run_id"] for r in rows}


def alloc_rows(ds, run_id):
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows
               for f in (Path(ds) / "mm_page_alloc" / f"run_id={run_id}").glob("*.parquet"))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    ds = tmp_path_factory.mktemp("integrity") / "ds"
    kmemscope("parse", "-q", HONEST, "-o", ds, "--label", "side=honest")
    kmemscope("parse", "-q", OTHER, "-o", ds, "--label", "side=hostile")
    return ds, run_ids(ds)


@pytest.fixture
def ds(two_runs, tmp_path):
    src, ids = two_runs
    dest = tmp_path / "ds"
    shutil.copytree(src, dest, symlinks=True)
    return dest, ids


@pytest.fixture(scope="module")
def v6_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("v6") / "thp.dat"
    return hostile.v6_copy(OTHER / "trace.dat", path)


# ---------------------------------------------------------------- at parse

@pytest.mark.parametrize("old,new,says", [
    ("unsigned int order;", "char order[4];", "field 'order'"),
    ("unsigned long pfn;", "char pfn[8];", "field 'pfn'"),
    ("int migratetype;", "int ts;", "field ts takes the name"),
    ("int migratetype;", "int run_id;", "column named run_id"),
])
def test_a_trace_whose_known_field_does_not_fit_is_refused_naming_it(ds, v6_trace, old, new,
                                                                      says):
    ds, ids = ds
    bad = ds.parent / "bad.dat"
    bad.write_bytes(hostile.alter_field(v6_trace, "mm_page_alloc", old, new))
    before = hostile.tree_state(ds)
    line = one_error_line(run("parse", "-q", bad, "-o", ds))
    assert "mm_page_alloc" in line and says in line, line
    assert hostile.tree_state(ds) == before


def test_two_events_of_one_known_name_are_refused_not_hidden(ds, v6_trace):
    ds, ids = ds
    bad = ds.parent / "two.dat"
    bad.write_bytes(hostile.rename_event(v6_trace, "mmiotrace_map", "mm_page_alloc"))
    before = hostile.tree_state(ds)
    line = one_error_line(run("parse", "-q", bad, "-o", ds))
    assert "2 events are named mm_page_alloc" in line, line
    assert hostile.tree_state(ds) == before


# ---------------------------------------------------------------- a dataset someone else wrote

def _plant(ds, run_id, kind):
    import pyarrow as pa

    n = 3
    cols = {"ts": pa.array(range(n), pa.int64()), "cpu": pa.array([0] * n, pa.int32()),
            "pfn": pa.array([1] * n, pa.uint64()), "order": pa.array([0] * n, pa.uint32())}
    if kind == "char order":
        cols["order"] = pa.array(["\x02\x00\x00\x00"] * n)
    elif kind == "list pfn":
        cols["pfn"] = pa.array([[1, 2]] * n, pa.list_(pa.uint8()))
    elif kind == "run_id column":
        cols["run_id"] = pa.array(["0"] * n)
    elif kind == "truncated":
        path = hostile.replace_part(ds, "mm_page_alloc", run_id, cols)
        path.write_bytes(path.read_bytes()[:200])
        return
    hostile.replace_part(ds, "mm_page_alloc", run_id, cols)


# Each kind runs the analyses over a damaged copy: one under `make check`, all under `make test`.
@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k != "list pfn" else k
                                  for k in ["char order", "list pfn", "run_id column", "truncated"]])
def test_a_run_that_does_not_fit_is_left_out_and_the_others_answer(ds, kind):
    ds, ids = ds
    honest, hostile_run = ids["honest"], ids["hostile"]
    _plant(ds, hostile_run, kind)
    for name in ANALYSES:
        proc = run("query", name, ds, "--format", "json")
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
        assert f"run {hostile_run} is left out" in proc.stderr, proc.stderr
        answered = {r["run_id"] for r in rows_of(proc)}
        assert answered == {honest}, (name, answered)
    proc = run("query", "summary", ds, "--format", "json")
    allocs = {r["run_id"]: r["allocs"] for r in rows_of(proc)}
    assert allocs[honest] == alloc_rows(ds, honest)
    proc = run("compare", ds, "--by", "side", "--metrics", "allocs")
    if proc.returncode:                  # one side is left: a clean refusal, not a crash
        one_error_line(proc)
    proc = run("sql", ds, "SELECT run_id, count(*) AS n FROM mm_page_alloc GROUP BY 1",
               "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert rows_of(proc) == [{"run_id": honest, "n": alloc_rows(ds, honest)}]
    assert f"run {hostile_run} is left out" in proc.stderr


def test_a_run_whose_format_lacks_a_field_an_analysis_reads_is_left_out_of_it(ds, v6_trace):
    """A trace whose mm_page_alloc field `order` is renamed parses; the analyses that read
    that field leave its run out with a note naming it, and answer for the other runs what
    they answered before the run came; SQL that reads no such field still sees the run."""
    ds, ids = ds
    before = {name: run("query", name, ds, "--format", "json") for name in ANALYSES}
    bad = ds.parent / "noorder.dat"
    bad.write_bytes(hostile.alter_field(v6_trace, "mm_page_alloc", "unsigned int order;",
                                        "unsigned int ordex;"))
    kmemscope("parse", "-q", bad, "-o", ds, "--label", "side=renamed")
    renamed = run_ids(ds)["renamed"]
    assert renamed not in ids.values()
    for name in ANALYSES:
        proc = run("query", name, ds, "--format", "json")
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        note = [line for line in proc.stderr.splitlines() if f"run {renamed} is left out" in line]
        assert note and "no field order" in note[0], proc.stderr
        assert rows_of(proc) == rows_of(before[name]), name
    proc = run("compare", ds, "--by", "side", "--metrics", "allocs")
    assert proc.returncode == 0, proc.stderr
    assert f"run {renamed} is left out" in proc.stdout + proc.stderr
    counts = next(line.split() for line in proc.stdout.splitlines() if line.startswith("N "))
    assert counts == ["N", "allocs", "1", "1", "0"], proc.stdout      # honest, hostile, renamed
    proc = run("sql", ds, "SELECT run_id FROM runs ORDER BY 1", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert {r["run_id"] for r in rows_of(proc)} == {*ids.values(), renamed}


def test_info_notes_a_run_with_an_unreadable_footer_and_shows_the_rest(ds):
    ds, ids = ds
    _plant(ds, ids["hostile"], "truncated")
    proc = run("info", ds, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    said = proc.stdout + proc.stderr
    assert f"run {ids['hostile']} is left out of the row counts: cannot read the footer" in said
    doc = json.loads(proc.stdout)
    tables = {t["table"]: t for t in doc["tables"]}
    assert tables["mm_page_alloc"]["rows"] == alloc_rows(ds, ids["honest"])


def test_a_format_file_that_is_a_link_is_refused_in_one_line(ds):
    ds, ids = ds
    outside = ds.parent / "elsewhere.json"
    outside.write_text((ds / "_kmemscope.json").read_text())
    (ds / "_kmemscope.json").unlink()
    (ds / "_kmemscope.json").symlink_to(outside)
    for args in (("info", ds), ("query", "summary", ds), ("parse", "-q", HONEST, "-o", ds)):
        line = one_error_line(run(*args))
        assert "_kmemscope.json is a symbolic link" in line, line


def _claim_rows(path, claim):
    """Rewrite the Parquet footer of `path` so that the file and each row group claim `claim`
    rows: their num_rows (thrift compact field 3, i64: header byte 0x16, then a zigzag
    varint) replaced, the footer's length rewritten. The data pages stay as they were."""
    import pyarrow.parquet as pq

    def varint(n):
        out = bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))

    meta = pq.ParquetFile(path).metadata
    counts = {meta.num_rows} | {meta.row_group(i).num_rows for i in range(meta.num_row_groups)}
    data = path.read_bytes()
    size = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - size:-8]
    for n in counts:
        footer = footer.replace(b"\x16" + varint(n << 1), b"\x16" + varint(claim << 1))
    path.write_bytes(data[:-8 - size] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    assert pq.ParquetFile(path).metadata.num_rows == claim


def _record_as_it_is(ds, run):
    """The run's digests rewritten to match its files as they are now (a forger's work)."""
    import hashlib

    record = Path(ds) / "runs" / f"run_id={run}" / "_files.json"
    doc = json.loads(record.read_text())
    for key, entry in doc["files"].items():
        table, name = key.split("/", 1)
        data = (Path(ds) / table / f"run_id={run}" / name).read_bytes()
        entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    record.write_text(json.dumps(doc))


def test_verify_deep_of_a_footer_claiming_a_trillion_rows_is_one_line(ds):
    ds, ids = ds
    run_id = ids["honest"]
    assert run("query", "hot_pfns", ds).returncode == 0         # its derived caches exist
    part = sorted((Path(ds) / "mm_page_alloc" / f"run_id={run_id}").glob("*.parquet"))[0]
    _claim_rows(part, 10 ** 12)
    _record_as_it_is(ds, run_id)
    proc = run("verify", ds, "--deep")
    line = one_error_line(proc)
    assert "not as it was committed" in line, line
    assert "cannot derive it again" in proc.stdout, proc.stdout


def test_when_every_chosen_run_does_not_fit_the_error_names_why(ds):
    ds, ids = ds
    _plant(ds, ids["hostile"], "char order")
    line = one_error_line(run("query", "summary", ds, "--run", ids["hostile"]))
    assert "order" in line and ids["hostile"] in line, line


# ---------------------------------------------------------------- derived caches

def _hot(ds):
    proc = run("query", "hot_pfns", ds, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return rows_of(proc)


@pytest.fixture(scope="module")
def hot_answer(two_runs, tmp_path_factory):
    src, _ids = two_runs
    clean = tmp_path_factory.mktemp("clean") / "ds"
    shutil.copytree(src, clean, symlinks=True)
    return _hot(clean)


@pytest.mark.parametrize("where", ["_derived", "_derived/page_pairs",
                                   "_derived/page_pairs/run_id={run}",
                                   "_derived/page_pairs/run_id={run}/part-0.parquet"])
def test_a_link_inside_derived_is_never_written_or_read_through(ds, hot_answer, where):
    ds, ids = ds
    outside = ds.parent / "outside"
    outside.mkdir()
    decoy = outside / "decoy.parquet"
    (outside / "note.txt").write_text("not the dataset's\n")
    link = ds / where.format(run=ids["honest"])
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"pfn": pa.array([1], pa.uint64())}), decoy)
        target = decoy
    else:
        target = outside
    link.symlink_to(target)
    before = hostile.tree_state(outside)
    assert _hot(ds) == hot_answer
    assert hostile.tree_state(outside) == before


def test_a_read_only_reader_builds_derived_tables_outside_the_dataset(ds):
    from kmemscope.queries import derived_tables

    ds, ids = ds
    before = hostile.tree_state(ds)
    out = derived_tables.derived_files(ds, "page_pairs", [ids["honest"]], read_only=True)
    assert not Path(out[ids["honest"]]).resolve().is_relative_to(ds.resolve())
    assert hostile.tree_state(ds) == before


def test_a_cache_write_that_fails_in_the_dataset_is_built_privately_with_the_same_rows(
        ds, monkeypatch):
    """The dataset's disk fills (or its _derived is moved away) while a cache is written:
    the table is built again outside the dataset, the dataset keeps no partial file, and the
    rows are the ones a clean build gives."""
    import errno

    import duckdb

    from kmemscope.dataset import derived, safefs
    from kmemscope.queries import derived_tables

    ds, ids = ds
    run = ids["honest"]
    clean = derived_tables.derived_files(ds, "page_pairs", [run], read_only=True)[run]
    expected = duckdb.sql(f"SELECT * FROM '{clean}' ORDER BY ALL").fetchall()
    shutil.rmtree(ds / "_derived", ignore_errors=True)
    before = hostile.tree_state(ds)
    real, failed, notes = safefs.Dir.write_atomic, [], []

    def full_in_the_dataset(self, name, write):
        if Path(f"/proc/self/fd/{self.fd}").resolve().is_relative_to(ds.resolve()):
            failed.append(name)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, name, write)

    monkeypatch.setattr(safefs.Dir, "write_atomic", full_in_the_dataset)
    monkeypatch.setattr(derived, "_BUILT", {})
    out = derived_tables.derived_files(ds, "page_pairs", [run], progress=notes.append)[run]
    assert failed, "the dataset's write was never tried"
    assert not Path(out).resolve().is_relative_to(ds.resolve())
    assert any("could not write its cache into the dataset (No space left on device)" in n
               for n in notes), notes
    assert duckdb.sql(f"SELECT * FROM '{out}' ORDER BY ALL").fetchall() == expected
    after = hostile.tree_state(ds)
    assert not [p for p in after if p not in before and ".tmp" in str(p)], after


@pytest.mark.spark
def test_a_failed_spark_parse_into_a_new_path_leaves_nothing_behind(tmp_path, request):
    from conftest import skip_without_spark

    skip_without_spark()
    from kmemscope.common.errors import KmemscopeError
    from kmemscope.parsers import spark_parse

    spark = request.getfixturevalue("spark_engine").spark
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"this is not a trace.dat\n" * 100)
    new = tmp_path / "new" / "deeper" / "ds"
    out = spark_parse.parse_on_spark([str(bad)], new, spark=spark)
    assert isinstance(out[0], KmemscopeError), out
    assert not (tmp_path / "new").exists(), sorted(map(str, (tmp_path / "new").rglob("*")))


# ---------------------------------------------------------------- integrity

def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def test_parse_writes_page_checksums_that_catch_a_flipped_byte(ds):
    import pyarrow.parquet as pq

    ds, ids = ds
    path = next((ds / "mm_page_alloc" / f"run_id={ids['honest']}").glob("*.parquet"))
    meta = pq.ParquetFile(path).metadata
    first = meta.row_group(0).column(0)
    page = first.data_page_offset
    pq.read_table(path, page_checksum_verification=True)       # intact: reads
    _flip(path, page + first.total_compressed_size // 2)
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(path, page_checksum_verification=True)


def test_verify_passes_a_dataset_as_committed_and_after_a_metrics_import(ds):
    ds, ids = ds
    proc = run("verify", ds)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    metrics = ds.parent / "m.csv"
    metrics.write_text(f"run,metric,value,unit,better\n{ids['honest']},tps,12.5,tps,higher\n")
    kmemscope("metrics", "import", ds, metrics, "-q")
    proc = run("verify", ds)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_verify_names_every_missing_changed_and_extra_file(ds):
    ds, ids = ds
    honest = ids["honest"]
    changed = next((ds / "mm_page_alloc" / f"run_id={honest}").glob("*.parquet"))
    _flip(changed, changed.stat().st_size // 2)
    missing = next((ds / "vmstat" / f"run_id={honest}").glob("*.parquet"))
    missing.unlink()
    extra = ds / "mm_page_free" / f"run_id={honest}" / "part-99.parquet"
    extra.write_bytes(b"PAR1")
    orphan = ds / "mm_page_free" / "run_id=00000000000000ff"
    orphan.mkdir()
    linked = next((ds / "buddyinfo" / f"run_id={honest}").glob("*.parquet"))
    linked.unlink()
    linked.symlink_to(changed)
    proc = run("verify", ds)
    one_error_line(proc)
    got = {tuple(line.split("\t", 1)) for line in proc.stdout.splitlines()}
    rel = lambda p: str(p.relative_to(ds))      # noqa: E731
    assert ("changed", rel(changed)) in got
    assert ("missing", rel(missing)) in got
    assert ("extra", rel(extra)) in got
    assert ("extra", rel(orphan)) in got
    assert ("changed", f"{rel(linked)} (a symbolic link)") in got
    assert len(got) == 5, got


def test_verify_says_of_each_temporary_name_what_the_next_write_does_with_it(ds, tmp_path):
    ds, ids = ds
    honest = ids["honest"]
    metrics = tmp_path / "m.csv"
    metrics.write_text(f"run,metric,value,unit,better\n{honest},tps,1,,higher\n")
    kmemscope("metrics", "import", ds, metrics)
    folder = ds / "run_metrics" / f"run_id={honest}"
    stale = folder / f".part-0.parquet.{'a' * 16}.tmp"        # a killed writer's
    stale.write_bytes(b"half")
    planted = folder / f".part-0.parquet.{'b' * 16}.tmp"      # no writer's: a link
    planted.symlink_to(tmp_path / "elsewhere")
    said = [line.split("\t", 1)[1] for line in run("verify", ds).stdout.splitlines()
            if ".tmp" in line]
    by_name = {text.split(" ", 1)[0].rsplit("/", 1)[-1]: text for text in said}
    assert "the next write into this folder removes it" in by_name[stale.name]
    assert "no write removes it" in by_name[planted.name]
    kmemscope("metrics", "import", ds, metrics)                # the next write
    assert not stale.exists() and planted.is_symlink()
