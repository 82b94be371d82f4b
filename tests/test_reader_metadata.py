"""What readers remember of a dataset's files, and what the quick verbs import.

A reader reads each Parquet footer once per process (reader._file_schema, keyed by the
file's identity), judges each distinct schema of a table once, and makes a view read its
files by position when every file has one schema (by name otherwise). These tests prove
that what is remembered never outlives the file it describes, that the views equal
DuckDB's own union by name over the same files, and that the run facts registered in
DuckDB equal the Arrow tables Spark gets. The oracles are DuckDB's read_parquet with
union_by_name over the file list, and pyarrow.
"""
import json
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import EXAMPLES
from kmrun import kmemscope

SMALL = EXAMPLES / "memory-pressure"
OTHER = EXAMPLES / "thp-faults"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    ds = tmp_path_factory.mktemp("meta") / "ds"
    kmemscope("parse", "-q", SMALL, OTHER, "-o", ds)
    return ds


@pytest.fixture
def ds(two_runs, tmp_path):
    dest = tmp_path / "ds"
    shutil.copytree(two_runs, dest, symlinks=True)
    return dest


def _runs(ds):
    from kmemscope.dataset import reader

    return sorted(reader.table_runs(ds)["runs"])


def test_a_part_file_replaced_after_a_query_is_judged_again(ds):
    from kmemscope.queries import runner

    first = runner.run_query("summary", ds)
    assert first.num_rows == 2 and not any("left out" in n for n in runner.notes_of(first))
    # The same process again, after one run's vmstat file became one of another kind.
    victim = _runs(ds)[0]
    part = next((ds / "vmstat" / f"run_id={victim}").glob("*.parquet"))
    part.unlink()
    pq.write_table(pa.table({"ts": [1], "name": ["nr_free_pages"], "value": ["many"]}), part)
    again = runner.run_query("summary", ds)
    notes = runner.notes_of(again)
    assert again.column("run_id").to_pylist() == [r for r in _runs(ds) if r != victim]
    assert any(n.startswith(f"run {victim} is left out: its table vmstat does not fit")
               for n in notes), notes


def test_views_equal_duckdbs_union_by_name_with_one_schema_or_several(ds):
    import duckdb

    from kmemscope.dataset import reader

    # One run's vmstat gains a column: that table's files no longer share one schema.
    run = _runs(ds)[1]
    part = next((ds / "vmstat" / f"run_id={run}").glob("*.parquet"))
    table = pq.read_table(part)
    part.unlink()
    pq.write_table(table.append_column("extra_note", pa.array(["x"] * table.num_rows)), part)

    parts = reader.table_runs(ds)
    con = reader.connect(ds, parts=parts)
    oracle = duckdb.connect()
    for name, runs in parts.items():
        files = ", ".join("'" + str(f) + "'" for fs in runs.values() for f in fs)
        scan = (f"read_parquet([{files}], hive_partitioning = true, "
                "hive_types = {'run_id': VARCHAR}, union_by_name = true)")
        got = con.execute(f'SELECT * FROM "{name}" ORDER BY ALL')
        want = oracle.execute(f"SELECT * FROM {scan} ORDER BY ALL")
        assert [d[:2] for d in got.description] == [d[:2] for d in want.description], name
        assert got.fetchall() == want.fetchall(), name
    extra = con.execute("SELECT run_id, count(extra_note) FROM vmstat GROUP BY 1 ORDER BY 1")
    assert dict(extra.fetchall())[run] > 0


def test_the_run_facts_in_duckdb_equal_the_arrow_tables_spark_gets(ds):
    import duckdb

    from kmemscope.queries import runner

    backend = runner.open_runs(ds)[0]
    try:
        cols = ["run_id", "kernel_release", "arch", "first_ts", "last_ts", "pageblock_order",
                "manifest", "migratetypes"]
        rows = backend.query_arrow("SELECT " + ", ".join(cols) + " FROM runs", None).to_pylist()
        _facts, _mts, arrow = runner._facts_tables(rows)
        oracle = duckdb.connect()
        for name, table in arrow.items():
            oracle.register("t", table)
            want = oracle.execute("SELECT * FROM t ORDER BY ALL")
            got = backend.con.execute(f'SELECT * FROM "{name}" ORDER BY ALL')
            assert [d[:2] for d in got.description] == [d[:2] for d in want.description], name
            assert got.fetchall() == want.fetchall() and table.num_rows, name
            oracle.unregister("t")
    finally:
        backend.close()


@pytest.mark.parametrize("args", [["--help"], ["queries"], ["sql", "{ds}", "SELECT 1"]])
def test_the_quick_verbs_never_import_pandas(two_runs, args):
    """pandas costs a quarter of a second; pyarrow imports it when Arrow is built from lists."""
    code = ("import sys\n"
            "from kmemscope.cli import main\n"
            f"sys.argv = ['kmemscope', *{json.dumps([a.format(ds=two_runs) for a in args])}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('PANDAS' if 'pandas' in sys.modules else 'NO-PANDAS', file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "NO-PANDAS", proc.stderr
