"""Every analysis section, `kmemscope compare` and the CLI on Spark against DuckDB.

The dataset mixes kernel eras and field widths (parity_data.py, built once per
pytest run). Each section runs through runner.run_query() on DuckDB and on one
Spark engine shared by the whole pytest run (conftest.py); on Spark that is one
task per run running the same DuckDB SQL. Rows must be equal in value and in
order: every section's ORDER BY is total (test_determinism.py), and numbers
equal to a relative 1e-9 (sums of floats may be added in another order).

Time: about two minutes on two cores (`make test` only: marked spark).
"""
import csv
import io
import math
import os
from decimal import Decimal

import pytest

from conftest import SPARK_MASTER, SPARK_TEST_CONF, skip_without_spark

skip_without_spark(allow_module_level=True)
pytestmark = pytest.mark.spark

from kmemscope.queries import runner  # noqa: E402
from parity_data import every_section  # noqa: E402

REL = 1e-9

SECTIONS = every_section()


@pytest.fixture(scope="module")
def dataset(mixed_dataset):
    return mixed_dataset


@pytest.fixture
def spark(spark_engine):
    """The Spark engine shared by the whole run (conftest.py)."""
    return spark_engine


def _rows(table):
    return [{k: _norm(v) for k, v in r.items()} for r in table.to_pylist()]


def _norm(v):
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, list):
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return {k: _norm(x) for k, x in v}      # a MAP as Arrow gives it
        return [_norm(x) for x in v]
    return v


def _same(a, b):
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b or math.isclose(a, b, rel_tol=REL, abs_tol=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _rows_match(duck, spark):
    """(ok, message): the same rows in the same order."""
    if len(duck) != len(spark):
        return False, f"{len(duck)} rows on DuckDB, {len(spark)} on Spark"
    bad = [i for i, (x, y) in enumerate(zip(duck, spark)) if not all(
        _same(x[c], y[c]) for c in x)]
    if not bad:
        return True, ""
    i = bad[0]
    diff = {c: (duck[i][c], spark[i][c]) for c in duck[i] if not _same(duck[i][c], spark[i][c])}
    return False, f"{len(bad)} rows differ; first, row {i}: {diff}"


def test_the_engine_leaves_the_callers_environment_as_it_was(dataset, spark):
    # PYTHONSAFEPATH set for the local workers once leaked into this process: every later
    # test file started as a script lost its own folder from sys.path.
    import conftest

    assert runner.run_query("hot_pfns", dataset, engine=spark)
    for name in ("PYTHONSAFEPATH", "PYSPARK_PYTHON"):
        assert os.environ.get(name) == conftest.ENVIRONMENT_AT_START.get(name), name


def test_compare_sides_on_spark_equal_duckdb(dataset, spark):
    """load_sides + compare_table (what `kmemscope compare --by kernel` prints) on both engines."""
    from kmemscope.render import comparison as co
    from kmemscope.queries import sides as sd
    from kmemscope.queries.comparison_model import compare_table

    duck = sd.load_sides(dataset, by="kernel")
    on_spark = sd.load_sides(dataset, by="kernel", engine=spark)
    assert len(duck.sides) >= 5, duck.sides        # the runs of the dataset, one side each
    assert (on_spark.label, on_spark.sides, on_spark.runs) == (duck.label, duck.sides, duck.runs)
    assert on_spark.notes == duck.notes
    norm = [[{k: _norm(v) for k, v in r.items()} for r in x.summary] for x in (duck, on_spark)]
    ok, msg = _rows_match(*norm)
    assert ok, f"summary rows of the sides: {msg}"
    records = [co.records(x, compare_table(x)) for x in (duck, on_spark)]
    assert records[0], "compare gave no rows"
    ok, msg = _rows_match(*records)
    assert ok, f"compare_table: {msg}"


def test_spark_sql_error_is_one_line(dataset, spark, capfd):
    """A Spark SQL error reaches the user as one line, without pyspark's page of JSON."""
    from kmemscope.common.errors import QueryError
    from kmemscope.queries.runner import backend_errors, open_runs

    backend = open_runs(dataset, tables=["runs"], engine=spark)[0]
    try:
        with pytest.raises(QueryError) as info:
            with backend_errors(backend, "SQL"):
                backend.query_arrow("SELECT no_such_column FROM runs", None)
    finally:
        backend.close()
    message = str(info.value)
    assert message.startswith("SQL failed on Spark: ") and "no_such_column" in message
    assert "\n" not in message
    err = capfd.readouterr().err
    assert "QueryContextLogger" not in err and "Py4JJavaError" not in err, err[:500]


def _csv_rows(text):
    return list(csv.reader(io.StringIO(text)))


def _cell_same(a, b):
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=REL, abs_tol=0.0) or (math.isnan(x) and math.isnan(y))


def _notes(stderr):
    return [line for line in stderr.splitlines() if line.startswith("kmemscope: note:")]


SPARK_CLI = ["--engine", "spark", "--spark-master", SPARK_MASTER,
             *[a for k, v in SPARK_TEST_CONF.items() for a in ("--spark-conf", f"{k}={v}")]]


@pytest.mark.parametrize("args", [["query", "hot_pfns"], ["compare", "--by", "kernel"]],
                         ids=["query-hot_pfns", "compare-by-kernel"])
def test_cli_on_spark_equals_duckdb(args, dataset, spark):
    """The command line with --engine spark (its own JVM) prints DuckDB's CSV."""
    from kmrun import kmemscope

    cmd, rest = args[0], args[1:]
    pre = [cmd, *rest[:1], dataset, *rest[1:]] if cmd == "query" else [cmd, dataset, *rest]
    duck = kmemscope(*pre, "--format", "csv")
    on_spark = kmemscope(*pre, *SPARK_CLI, "--format", "csv")
    d, s = _csv_rows(duck.stdout), _csv_rows(on_spark.stdout)
    assert len(d) > 1, duck.stdout
    assert s[0] == d[0]
    assert len(s) == len(d), f"{len(d) - 1} rows on DuckDB, {len(s) - 1} on Spark"
    bad = [(i, c, x, y) for i, (rd, rs) in enumerate(zip(d[1:], s[1:]), 1)
           for c, x, y in zip(d[0], rd, rs) if not _cell_same(x, y)]
    assert not bad, f"{len(bad)} cells differ; first (row, column, DuckDB, Spark): {bad[0]}"
    assert _notes(on_spark.stderr) == _notes(duck.stderr)


@pytest.mark.parametrize("qname,a,section", SECTIONS, ids=[s[0] for s in SECTIONS])
def test_section_on_spark_equals_duckdb(qname, a, section, dataset, spark):
    duck = runner.run_query(qname, dataset)        # every section runs on this dataset
    on_spark = runner.run_query(qname, dataset, engine=spark)
    assert on_spark.schema.remove_metadata() == duck.schema.remove_metadata()
    assert runner.notes_of(on_spark) == runner.notes_of(duck)
    d_rows, s_rows = _rows(duck), _rows(on_spark)
    if not d_rows:      # no rows on either engine is an answer too, and the same one
        assert not s_rows, f"{qname}: no rows on DuckDB, {len(s_rows)} on Spark"
        return
    ok, msg = _rows_match(d_rows, s_rows)
    assert ok, f"{qname}: {msg}"


def _sorted_rows(table):
    """Rows in an order both engines agree on (a view has no ORDER BY): by their values, floats
    to 9 digits (sums may be added in another order)."""
    def key(row):
        return [format(v, ".9g") if isinstance(v, float) else repr(v) for v in row.values()]
    return sorted(_rows(table), key=key)


def _adhoc_views():
    from kmemscope.queries import sql_lib

    owners = sql_lib.owners()
    adhoc = set(sql_lib.adhoc_modules())
    return sorted(v for v in sql_lib.public_views() if owners[v] in adhoc)


@pytest.mark.parametrize("view", _adhoc_views())
def test_adhoc_sql_on_spark_reads_each_shared_view_as_duckdb(view, dataset, spark):
    """Ad-hoc SQL on Spark gets the shared views of queries/lib/ with their kernel rules'
    macros written out (spark_sql.inline_macros): each view gives DuckDB's rows."""
    from kmemscope.common.text import quote_ident
    from kmemscope.queries.runner import open_runs

    got = {}
    for name, engine in (("duckdb", None), ("spark", spark)):
        backend = open_runs(dataset, engine=engine)[0]
        try:
            got[name] = _sorted_rows(backend.query_arrow(f"SELECT * FROM {quote_ident(view)}", None))
        finally:
            backend.close()
    assert got["duckdb"], f"{view} has no rows in the test dataset: equal rows would prove nothing"
    ok, msg = _rows_match(got["duckdb"], got["spark"])
    assert ok, f"{view}: {msg}"
