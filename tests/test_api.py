"""The Python API gives what the command line gives: same runs, same analyses, same comparison.

The oracle for each call is the `kmemscope` command itself (its --format json output) and,
for counts, a plain recount over the Parquet files with pyarrow.
"""
from collections import Counter

import pyarrow.parquet as pq
import pytest

import kmemscope
from conftest import EXAMPLES
from kmemscope.common.errors import DatasetError, QueryError, TraceFileError
from kmrun import kmemscope as cli, rows_of


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "ds"
    got = kmemscope.parse([EXAMPLES / "kmem-compaction"], path, labels={"kernel": "a"})
    kmemscope.parse(EXAMPLES / "thp-faults", path, labels={"kernel": "b"})
    assert [s.run_id for s in got] and got[0].events > 0
    return path


def cli_json(*args):
    """The rows of a query's or sql's --format json."""
    return rows_of(cli(*args, "--format", "json"))


def test_runs_has_one_row_per_run_with_labels_that_group(ds):
    runs = kmemscope.open(ds).runs
    frame = runs.df()
    assert sorted(frame["run_id"]) == sorted(r["run_id"] for r in cli_json("sql", ds, "SELECT run_id FROM runs"))
    sizes = frame.groupby("labels").size()
    assert {tuple(k.items()): v for k, v in sizes.items()} == {(("kernel", "a"),): 1,
                                                                (("kernel", "b"),): 1}
    assert frame.loc[frame["labels"].map(lambda d: d["kernel"] == "b"), "run_id"].size == 1


def test_query_equals_the_command_line_and_binds_parameters(ds):
    res = kmemscope.open(ds).query("hot_pfns", top_n=4, label={"kernel": "a"})
    rows = res.rows()
    expected = cli_json("query", "hot_pfns", ds, "--param", "top_n=4", "--label", "kernel=a")
    assert [(r["pfn"], r["allocs"]) for r in rows] == [(r["pfn"], r["allocs"]) for r in expected]
    assert len(rows) == 4
    # A recount of the top pfn's allocations from the Parquet files of run a.
    run_a = rows[0]["run_id"]
    pfns = Counter()
    for f in (ds / "mm_page_alloc" / f"run_id={run_a}").glob("*.parquet"):
        pfns.update(pq.read_table(f, columns=["pfn"]).column("pfn").to_pylist())
    pfns.pop(2**64 - 1, None)
    assert rows[0]["allocs"] == max(pfns.values())


def test_results_convert_to_arrow_pandas_and_say_their_notes(ds):
    res = kmemscope.open(ds).query("pfn_reuse.cross_cpu")
    assert res.arrow().num_rows == len(res) == len(res.df())
    assert res.columns[:2] == ["run_id", "labels"]
    assert isinstance(res.notes, list)
    assert "run_id" in repr(res)


def test_polars_is_optional(ds):
    res = kmemscope.open(ds).sql("SELECT 1 AS one")
    try:
        import polars  # noqa: F401
    except ImportError:
        with pytest.raises(kmemscope.common.errors.KmemscopeError, match="needs polars"):
            res.pl()
    else:
        assert res.pl().to_dicts() == [{"one": 1}]


def test_sql_binds_values_and_sees_the_helper_views(ds):
    d = kmemscope.open(ds)
    n = d.sql("SELECT count(*) AS n FROM page_allocs WHERE \"order\" = ? AND NOT failed", [9]).rows()
    assert n == cli_json("sql", ds, 'SELECT count(*) AS n FROM page_allocs WHERE "order" = 9 AND NOT failed')
    only_b = d.sql("SELECT DISTINCT run_id FROM mm_page_alloc", label="kernel=b").rows()
    assert len(only_b) == 1


def test_compare_equals_the_command_line(ds):
    cmp = kmemscope.open(ds).compare(by="kernel", baseline="a", metrics=["cross_cpu_free_pct"])
    assert cmp.text() == cli("compare", ds, "--by", "kernel", "--baseline", "a", "--metrics",
                             "cross_cpu_free_pct").stdout
    assert cmp.df().shape[0] > 0 and "|" in cmp.markdown()


def test_errors_are_the_command_line_s_one_liners(ds, tmp_path):
    with pytest.raises(QueryError, match="did you mean hot_pfns"):
        kmemscope.open(ds).query("hot_pfn")
    with pytest.raises(QueryError, match="from 1 to 1000000"):
        kmemscope.open(ds).query("hot_pfns", top_n=0)
    with pytest.raises(DatasetError, match="does not exist"):
        kmemscope.open(tmp_path / "nothing")
    with pytest.raises(QueryError, match="Did you mean"):
        kmemscope.open(ds).sql("SELECT * FROM mm_page_allc")
    with pytest.raises(TraceFileError, match="no such file"):
        kmemscope.parse(tmp_path / "missing.dat", tmp_path / "ds2")
    skipped = kmemscope.parse([tmp_path / "missing.dat"], tmp_path / "ds2", on_error="skip")
    assert isinstance(skipped[0], TraceFileError)


def test_the_package_root_stays_import_light():
    import subprocess
    import sys

    code = "import sys, kmemscope; print(sorted(m for m in ('pyarrow', 'duckdb', 'pandas', 'click') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert {r["name"] for r in kmemscope.analyses().rows()} >= {"hot_pfns", "summary"}


# ---------------------------------------------------------------- one API, the command line its client

def test_parse_takes_a_flight_directory_as_the_command_line_does(tmp_path):
    """kmemscope.parse is what `kmemscope parse` calls: a flight directory is one run per
    bundle. The oracle: each bundle parsed alone (a bundle is a plain input)."""
    from test_flight_parse import flight_dir

    flight = flight_dir(tmp_path)
    got = kmemscope.parse(flight, tmp_path / "ds")
    bundles = sorted(p for p in flight.iterdir() if p.is_dir() and not p.is_symlink()
                     and not p.name.startswith("."))
    alone = [kmemscope.parse(b, tmp_path / f"alone-{b.name}")[0] for b in bundles]
    assert sorted((s.run_id, s.events) for s in got) == sorted((s.run_id, s.events)
                                                              for s in alone)


def test_dataset_import_metrics_refuses_the_comparisons_own_names(ds, tmp_path):
    """Dataset.import_metrics is what `kmemscope metrics import` calls: a metric named like
    one of compare's own (queries/metrics.py SUMMARY) is refused and nothing imported."""
    from kmemscope.queries.metrics import SUMMARY

    name = sorted(SUMMARY)[0]
    run = kmemscope.open(ds).run_ids()[0]
    rows = tmp_path / "m.csv"
    rows.write_text(f"run,metric,value,unit,better\n{run},{name},1.5,x,higher\n")
    with pytest.raises(kmemscope.KmemscopeError, match="kmemscope's own metrics"):
        kmemscope.open(ds).import_metrics(rows)
    assert "run_metrics" not in kmemscope.open(ds).tables
    proc = cli("metrics", "import", ds, rows, check=False)
    assert proc.returncode == 1 and "kmemscope's own metrics" in proc.stderr


@pytest.mark.parametrize("text", ["", "  -- a comment only\n", "/* ; */ ;;"])
def test_sql_without_a_statement_is_one_error_both_ways(ds, text):
    with pytest.raises(QueryError, match="holds no statement"):
        kmemscope.open(ds).sql(text)
    proc = cli("sql", ds, text, check=False)
    assert proc.returncode != 0 and "holds no statement" in proc.stderr


def test_sql_of_several_statements_answers_with_the_last_params_bound_to_it(ds):
    """The oracle: DuckDB itself, the statements run one by one on a plain connection."""
    import duckdb

    text = "CREATE TEMP MACRO plus(a, b) AS a + b; SELECT plus(40, ?) AS answer"
    got = kmemscope.open(ds).sql(text, [2]).rows()
    con = duckdb.connect()
    con.execute("CREATE TEMP MACRO plus(a, b) AS a + b")
    assert got == [{"answer": con.execute("SELECT plus(40, ?) AS answer", [2]).fetchone()[0]}]
