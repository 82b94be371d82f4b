"""The DuckDB -> Spark SQL translation of ad-hoc SQL (queries/engines/spark_sql.py): its rules,
each checked against DuckDB where it can be, and the shared views of queries/lib/ that ad-hoc SQL
on Spark gets. (Named analyses run on Spark as DuckDB itself, one task per run: no translation.)"""
import pytest

from conftest import skip_spark_test

try:
    import sqlglot
except ImportError:
    skip_spark_test("sqlglot is not installed (make setup-spark, or pip install 'kmemscope[spark]')",
                    allow_module_level=True)

from kmemscope.queries.engines import spark_sql  # noqa: E402

if sqlglot.__version__ != spark_sql.SQLGLOT_VERSION:
    skip_spark_test(f"sqlglot {sqlglot.__version__} is not the pinned {spark_sql.SQLGLOT_VERSION}",
                    allow_module_level=True)


def test_the_shared_views_translate_with_their_macros_written_out():
    """Ad-hoc Spark SQL gets every module of queries/lib/ that ad-hoc SQL gets: the kernel
    rules' macros are written out where they are called (test_spark_parity.py runs each view
    on Spark against DuckDB)."""
    from kmemscope.queries import sql_lib

    script = sql_lib.script(sql_lib.adhoc_modules())
    assert "MACRO" in script
    assert spark_sql.lint(script) == []
    statements = spark_sql.translate(script)
    text = "\n".join(st.sql for st in statements)
    assert "MACRO" not in text.upper() and "query_table" not in text.lower()
    assert {st.name for st in statements} >= {"page_allocs", "compaction_runs", "thp_fault_success"}


def test_a_macro_is_written_out_where_it_is_called():
    """A scalar macro becomes its expression with the arguments in place; a table macro a
    subquery over the named table, its CTEs renamed per call so that two calls do not collide,
    a whole row of its FROM item struct(b.*)."""
    sql = ("CREATE TEMP MACRO _big(x, n) AS x > n;\n"
           "CREATE TEMP MACRO _rows(t) AS TABLE WITH o AS (SELECT b.k, b AS whole FROM "
           "query_table(t) AS b) SELECT k, whole FROM o WHERE _big(k, 1);\n"
           "SELECT a.k, c.whole.k AS k2, _big(a.k, 2) AS big FROM _rows(t1) AS a "
           "JOIN _rows(t2) AS c ON a.k = c.k")
    (st,) = spark_sql.translate(sql, pretty=False)
    assert st.kind == "select"
    text = st.sql
    assert "(a.k > 2) AS big" in text and "(k > 1)" in text
    assert "FROM t1 AS b" in text and "FROM t2 AS b" in text
    assert "STRUCT(b.*) AS whole" in text
    assert "o__rows1" in text and "o__rows2" in text


def test_a_macro_called_with_the_wrong_arguments_is_refused():
    with pytest.raises(spark_sql.TranslationError, match="takes 2 argument"):
        spark_sql.translate("CREATE TEMP MACRO _big(x, n) AS x > n;\nSELECT _big(1) AS b")


def _one(sql, **kw):
    (st,) = spark_sql.translate(sql, **kw)
    return " ".join(st.sql.split())


def test_percentiles_are_exact_not_approx():
    out = _one("SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY x) AS p, median(x) AS m, "
               "quantile_cont(x, [0.5, 0.99]) AS q FROM t")
    assert "APPROX" not in out.upper()
    assert "PERCENTILE(x, 0.9) AS p" in out
    assert "PERCENTILE(x, CAST(0.5 AS DOUBLE)) AS m" in out
    assert "PERCENTILE(x, ARRAY(0.5, 0.99)) AS q" in out


def test_ordered_aggregates_keep_order():
    out = _one("SELECT list(a ORDER BY r DESC) AS l, string_agg(s, ',' ORDER BY r) AS g FROM t")
    assert "SORT_ARRAY(COLLECT_LIST(NAMED_STRUCT('k0', r, 'v', a)), FALSE)" in out
    assert "LISTAGG(s, ',') WITHIN GROUP (ORDER BY r NULLS LAST)" in out


def test_log_base_and_decimal_literals():
    out = _one("SELECT log(x) AS a, ln(x) AS b, log2(x) AS c, 100.0 * n / d AS e FROM t")
    assert "LOG10(x)" in out and "LN(x)" in out and "LOG2(x)" in out
    assert "CAST(100.0 AS DOUBLE)" in out


def test_bit_operations_by_uint64_mode():
    dec = _one("SELECT a & b AS x FROM t")
    assert "DIV 4294967296" in dec and "DECIMAL(20, 0)" in dec
    assert _one("SELECT a & b AS x FROM t", uint64="int64") == "SELECT ( a & b ) AS x FROM t"
    assert "-1" in _one("SELECT pfn = 18446744073709551615 AS f FROM t", uint64="int64")


def test_parameters_become_markers():
    (st,) = spark_sql.translate("SELECT * FROM t WHERE name LIKE $name_like AND n <= $top_n")
    assert st.params == ("name_like", "top_n")
    assert ":name_like" in st.sql and ":top_n" in st.sql


@pytest.mark.parametrize("op", ["<=", "<", ">=", ">"])
@pytest.mark.parametrize("side", ["LEFT ", ""])
def test_asof_rewrite_equals_duckdb_asof(op, side):
    """The ASOF rewrite (windows + equi-joins) run on DuckDB itself gives DuckDB's ASOF
    answer, on random keys and times with NULLs and ties."""
    import random

    import duckdb
    rng = random.Random(7)
    con = duckdb.connect()

    def values(n, keys):
        return ", ".join(f"({rng.choice(keys)}, {rng.choice([str(rng.randint(0, 40)), 'NULL'])}, {i})"
                         for i in range(n))
    con.execute(f"CREATE TABLE x AS SELECT * FROM (VALUES {values(300, ['1', '2', 'NULL'])}) "
                "AS v(k, ts, id)")
    con.execute(f"CREATE TABLE t AS SELECT * FROM (VALUES {values(200, ['1', '2', '3', 'NULL'])}) "
                "AS v(k, ts, n)")
    q = (f"SELECT c.id, c.k, c.ts, f.ts AS fts FROM x AS c ASOF {side}JOIN t AS f "
         f"ON f.k = c.k AND f.ts {op} c.ts ORDER BY c.id")
    want = con.sql(q).fetchall()
    assert want and any(r[3] is not None for r in want)
    assert con.sql(spark_sql.asof_to_windows(q)).fetchall() == want
    out = _one(q)
    assert "ASOF JOIN" not in out.upper() and "LAST_VALUE" in out.upper()


def test_glob_literal_becomes_anchored_regex():
    out = _one("SELECT fn GLOB 'kmalloc*.?' AS g FROM t")
    assert "RLIKE '(?s)^kmalloc.*\\\\..$'" in out


@pytest.mark.parametrize("sql,why", [
    ("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM t", "percentile_cont"),
    ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x DESC) FROM t", "ascending"),
    ("SELECT regexp_replace(s, 'a', 'b') FROM t", "first match"),
    ("SELECT regexp_replace(s, 'a', 'b', 'i') FROM t", "flags"),
    ("SELECT my_udf(x) FROM t", "my_udf"),
    ("SELECT list(a ORDER BY r, q DESC) FROM t", "mixed"),
    ("SELECT ~x FROM t", "~"),
    ("CREATE TEMP VIEW v AS SELECT * FROM t WHERE n = $n", "parameter"),
    ("SELECT * FROM a ASOF JOIN b ON a.k = b.k", "inequality"),
    ("SELECT * FROM a ASOF JOIN (SELECT * FROM b) AS f ON a.k = f.k AND f.t <= a.t", "named table"),
])
def test_lint_rejects_constructs_without_exact_translation(sql, why):
    problems = spark_sql.lint(sql)
    assert problems and any(why in p for p in problems), problems
    with pytest.raises(spark_sql.TranslationError):
        spark_sql.translate(sql)
