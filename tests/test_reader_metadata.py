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
from kmemscope.dataset.handle import DatasetRef

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

    return sorted(reader.table_runs(DatasetRef.of(ds))["runs"])


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

    parts = reader.table_runs(DatasetRef.of(ds))
    con = reader.connect(DatasetRef.of(ds), parts=parts)
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


def _cli_imports(args, module):
    """(stdout, whether `module` was imported) of `kmemscope ARGS` run in a fresh Python."""
    code = ("import sys\n"
            "from kmemscope.cli import main\n"
            f"sys.argv = ['kmemscope', *{json.dumps([str(a) for a in args])}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print({module!r} in sys.modules, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert last in ("True", "False"), proc.stderr
    return proc.stdout, last == "True"


@pytest.mark.parametrize("args", [["--help"], ["queries"], ["sql", "{ds}", "SELECT 1"]])
def test_the_quick_verbs_never_import_pandas(two_runs, args):
    """pandas costs a quarter of a second; pyarrow imports it when Arrow is built from lists."""
    _out, imported = _cli_imports([a.format(ds=two_runs) for a in args], "pandas")
    assert not imported


def test_a_sql_naming_no_table_imports_no_pyarrow(two_runs):
    """`sql DS "SELECT 1"` reads no run: it neither judges runs from their records (Arrow
    schemas) nor turns its one row into Arrow, and prints it from Python rows."""
    out, imported = _cli_imports(["sql", two_runs, "SELECT 1 AS one"], "pyarrow")
    assert not imported
    assert out.split() == ["one", "---", "1"]
    # the oracle that the probe can see pyarrow: a statement over a table imports it
    _out, imported = _cli_imports(["sql", two_runs, "SELECT labels FROM runs"], "pyarrow")
    assert imported


@pytest.mark.parametrize("module", ["pyarrow", "duckdb", "kmemscope.queries.runner"])
def test_parse_leaves_the_query_side_unloaded_in_its_parent(tmp_path, module):
    """The parse's parent lists, locks and commits; the decoder child loads pyarrow. Neither
    needs DuckDB nor the query side (the runner and what it loads), which would only
    lengthen every parse's start: kmemscope.api, which the parse goes through, loads them
    where used."""
    ds = tmp_path / "ds"
    _out, imported = _cli_imports(["parse", "-q", EXAMPLES / "kmem-compaction", "-o", ds],
                                  module)
    assert (ds / "runs").is_dir(), "the parse did not run"
    assert not imported


# Plain scalar columns of every kind the Python-rows path takes, with NULLs, pfns (hex),
# floats of several magnitudes, control characters and long text; and one it does not take.
PLAIN_SQL = [
    "SELECT run_id, count(*) AS n FROM mm_page_alloc GROUP BY ALL ORDER BY ALL",
    "SELECT pfn, \"order\", gfp_flags, 1.5::FLOAT AS f32, pfn / 7.0::DOUBLE AS ratio, "
    "NULL::BIGINT AS nothing, \"order\" > 0 AS high, printf('%s\\x1b[31m\\n', run_id) AS txt, "
    "repeat('x', 90) AS long_text, (-1)::TINYINT AS tiny, 255::UTINYINT AS utiny "
    "FROM mm_page_alloc ORDER BY ALL LIMIT 50",
    "SELECT 1e-7::DOUBLE AS small, 123456789.125::DOUBLE AS big, 'inf'::DOUBLE AS inf, "
    "NULL::VARCHAR AS s",
    "SELECT sum(lost_events) OVER () AS hugeint_sum, [1, 2] AS list, labels FROM runs",
]


@pytest.mark.parametrize("sql", PLAIN_SQL)
def test_python_rows_print_what_arrow_prints(two_runs, sql):
    """The oracle: the same statement fetched as Arrow and printed by format_table."""
    from kmemscope.api import run_sql
    from kmemscope.render.tables import Rows, format_table

    (rows,) = run_sql(two_runs, [sql], plain_rows=True)
    (arrow,) = run_sql(two_runs, [sql])
    assert isinstance(arrow, pa.Table)
    assert isinstance(rows, Rows) == ("hugeint_sum" not in sql)   # a HUGEINT stays Arrow
    for width in (None, 60):
        assert format_table(rows, width=width) == format_table(arrow, width=width)
