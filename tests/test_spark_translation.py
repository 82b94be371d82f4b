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


def test_the_shared_views_spark_gets_translate_and_only_macros_keep_the_rest_out():
    """Ad-hoc Spark SQL gets the modules of queries/lib/ that define no DuckDB macro (nor
    include one): those translate without a lint; each module left out is left out for a
    macro, which spark_sql.py does not translate (analyses on Spark run DuckDB per task)."""
    from kmemscope.queries import sql_lib

    every = sql_lib.adhoc_modules()
    kept = sql_lib.macro_free(every)
    if kept:
        script = sql_lib.script(kept)
        assert spark_sql.lint(script) == []
        assert spark_sql.translate(script)
    for name in set(every) - set(kept):
        assert any(sql_lib._MACRO.search(m.sql) for m in sql_lib.closure([name])), name
        assert spark_sql.lint(sql_lib.script([name])), name      # and Spark would refuse it


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
