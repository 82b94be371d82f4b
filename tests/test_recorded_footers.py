"""A run's record of its files says what their footers say, and readers use it only while it fits.

Each committed run records in runs/run_id=<id>/_files.json, besides every
file's sha256 and size, each Parquet file's rows and Arrow schema, so that
`kmemscope sql`, `query` and `info` need not read every footer at start. The
oracle is pyarrow reading each footer itself. A record that no longer fits its
file (another size), that is damaged, or that an older kmemscope wrote without
schemas counts for nothing: the footer is read, and a run whose table does not
fit is still left out with a note.
"""
import base64
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import EXAMPLES
from kmrun import kmemscope, one_error_line

from kmemscope.dataset import reader
from kmemscope.dataset.handle import DatasetRef

@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    ds = tmp_path_factory.mktemp("recorded") / "ds"
    kmemscope("parse", EXAMPLES / "kmem-compaction", EXAMPLES / "memory-pressure", "-o", ds, "-q")
    return ds


def _copy(src, dst):
    """A copy of dataset `src` (files copied, not linked: the tests change them)."""
    import shutil
    shutil.copytree(src, dst)
    reader._SCHEMAS.clear()
    reader._ROWS.clear()
    reader._RECORDS.clear()
    return dst


def _records(ds):
    return {p.parent.name: json.loads(p.read_text())
            for p in Path(ds, "runs").glob("run_id=*/_files.json")}


def test_every_parquet_file_has_its_footer_recorded(parsed):
    parts = reader.table_runs(DatasetRef.of(parsed))
    files = [f for runs in parts.values() for fs in runs.values() for f in fs]
    recorded = reader.recorded_footers(parts)
    assert sorted(map(str, recorded)) == sorted(map(str, files))
    for f, (schema, rows) in recorded.items():
        footer = pq.ParquetFile(f)
        assert rows == footer.metadata.num_rows, f
        assert schema.equals(footer.schema_arrow.remove_metadata()), f


def test_every_recorded_digest_is_the_committed_files_own(parsed):
    """The decoder process hashes the files it staged and the commit records those sums: each
    must be the sha256 and size of the file as committed, recounted here from its bytes."""
    import hashlib

    checked = 0
    for run, doc in _records(parsed).items():
        for name, digest in doc["files"].items():
            table, file = name.split("/")
            data = Path(parsed, table, run, file).read_bytes()
            assert digest["sha256"] == hashlib.sha256(data).hexdigest(), (run, name)
            assert digest["bytes"] == len(data), (run, name)
            checked += 1
    assert checked > 20      # two runs, a dozen tables each


def test_info_counts_the_rows_the_footers_hold(parsed):
    out = kmemscope("info", parsed, "--format", "json").stdout
    doc = json.loads(out)
    tables = doc["tables"] if isinstance(doc, dict) else doc
    want = {}
    for table_dir in Path(parsed).iterdir():
        if table_dir.is_dir() and not table_dir.name.startswith(("_", ".")):
            want[table_dir.name] = sum(pq.ParquetFile(f).metadata.num_rows
                                       for f in table_dir.glob("run_id=*/*.parquet"))
    got = {t["table"]: t["rows"] for t in tables}
    assert got == {t: n for t, n in want.items() if t in got}
    assert set(got) == {t for t in want if Path(parsed, t).glob("run_id=*")}


def _column_as_text(ds, table, column):
    """Rewrite the first run's file of `table` with `column` as text; -> (run id, the file)."""
    part = sorted(Path(ds, table).glob("run_id=*/part-*.parquet"))[0]
    t = pq.read_table(part)
    i = t.schema.get_field_index(column)
    t = t.set_column(i, pa.field(column, pa.string()), pa.array(
        [str(v) for v in t.column(i).to_pylist()], pa.string()))
    pq.write_table(t, part)
    return part.parent.name.split("=", 1)[1], part


def _unfit_pfn(ds):
    """Replace one run's mm_page_alloc file by one whose pfn is text; -> that run id."""
    return _column_as_text(ds, "mm_page_alloc", "pfn")[0]


def test_a_file_rewritten_after_its_record_is_judged_by_its_footer(parsed, tmp_path):
    ds = _copy(parsed, tmp_path / "ds")
    run = _unfit_pfn(ds)
    bad = reader.unfit_runs(reader.table_runs(DatasetRef.of(ds)))
    assert list(bad) == [run] and "pfn" in bad[run]


def test_a_damaged_record_counts_for_nothing(parsed, tmp_path):
    ds = _copy(parsed, tmp_path / "ds")
    run = _unfit_pfn(ds)
    # the record now claims the rewritten file's size and a schema that is not one
    path = Path(ds, "runs", f"run_id={run}", "_files.json")
    doc = json.loads(path.read_text())
    for name, entry in doc["files"].items():
        if name.startswith("mm_page_alloc/"):
            entry["bytes"] = Path(ds, "mm_page_alloc", f"run_id={run}",
                                  name.split("/", 1)[1]).stat().st_size
            entry["schema"] = base64.b64encode(b"not a schema").decode()
    path.write_text(json.dumps(doc))
    parts = reader.table_runs(DatasetRef.of(ds))
    assert not [f for f in reader.recorded_footers(parts)
                if Path(f).parent == Path(ds, "mm_page_alloc", f"run_id={run}")]
    bad = reader.unfit_runs(parts)
    assert list(bad) == [run] and "pfn" in bad[run]


def test_records_without_footers_read_as_before(parsed, tmp_path):
    ds = _copy(parsed, tmp_path / "ds")
    run = _unfit_pfn(ds)
    for run_id, doc in _records(ds).items():
        for entry in doc["files"].values():
            entry.pop("rows", None)
            entry.pop("schema", None)
        Path(ds, "runs", run_id, "_files.json").write_text(json.dumps(doc))
    parts = reader.table_runs(DatasetRef.of(ds))
    assert reader.recorded_footers(parts) == {}
    bad = reader.unfit_runs(parts)
    assert list(bad) == [run]
    out = kmemscope("sql", ds, "SELECT count(*) AS n FROM runs", "--format", "csv")
    assert out.stdout.splitlines()[1] == "1"
    assert f"run {run} is left out" in out.stderr


def _lie_about_vmstat(ds):
    """Rewrite one run's vmstat file with `value` as text, and make the run's record state the
    new file's size with the schema it recorded for the original (one that fits): the record
    now lies about its file. -> that run id."""
    run, part = _column_as_text(ds, "vmstat", "value")
    path = Path(ds, "runs", f"run_id={run}", "_files.json")
    doc = json.loads(path.read_text())
    doc["files"][f"vmstat/{part.name}"]["bytes"] = part.stat().st_size
    path.write_text(json.dumps(doc))
    return run


def test_a_record_that_lies_about_its_file_does_not_let_its_rows_in(parsed, tmp_path):
    ds = _copy(parsed, tmp_path / "ds")
    run = _lie_about_vmstat(ds)
    parts = reader.table_runs(DatasetRef.of(ds))
    assert [f for f in reader.recorded_footers(parts)
            if Path(f).parent == Path(ds, "vmstat", f"run_id={run}")]   # believed, to plan
    # the oracle: pyarrow's count of the other runs' vmstat rows
    others = sum(pq.ParquetFile(f).metadata.num_rows
                 for f in Path(ds, "vmstat").glob("run_id=*/*.parquet")
                 if f.parent.name != f"run_id={run}")
    assert others > 0
    for args in (["sql", str(ds), "SELECT count(*) AS n FROM vmstat", "--format", "jsonl"],
                 ["sql", str(ds), "SELECT 1 AS one; SELECT count(*) AS n FROM vmstat",
                  "--format", "jsonl"],
                 ["sql", str(ds), "--read-only", "SELECT count(*) AS n FROM vmstat",
                  "--format", "jsonl"]):
        out = kmemscope(*args)
        assert json.loads(out.stdout.splitlines()[-1]) == {"n": others}, args
        assert f"run {run} is left out" in out.stderr and "value" in out.stderr
    out = kmemscope("query", "vmstat_rates", ds, "--format", "csv")
    assert f"run {run} is left out" in out.stderr
    assert run not in out.stdout


def test_a_lying_record_found_after_the_first_views_stops_the_sql(parsed, tmp_path):
    ds = _copy(parsed, tmp_path / "ds")
    run = _lie_about_vmstat(ds)
    # runs is opened from the text, vmstat with the rest once DuckDB misses a name
    out = kmemscope("sql", ds, "SELECT count(*) FROM runs; SELECT * FROM vmstat_typo",
                    check=False)
    assert one_error_line(out).startswith(f"kmemscope: error: run {run} cannot be read")
    assert out.stdout == ""


@pytest.mark.parametrize("text", [
    "SELECT 1", "SELECT ';'; SELECT 2;", "SELECT 1 -- a comment;\n; /* ; */ SELECT 2",
    "SELECT $$a;b$$ AS x; SELECT 2", "SELECT 1;;;SELECT 2", "SELECT \"a;b\" FROM t",
    "CREATE MACRO m(x) AS x + 1; SELECT m(1)",
])
def test_statements_are_cut_where_duckdb_cuts_them(text):
    import duckdb

    from kmemscope.api import sql_statements

    theirs = [str(s.query).strip().rstrip(";").strip() for s in duckdb.extract_statements(text)]
    assert [s.strip() for s in sql_statements(text)] == theirs
