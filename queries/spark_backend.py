"""A prototype executor of kmemscope's analyses on Apache Spark (pip install 'kmemscope[spark]').

It runs the same queries/*.sql as the DuckDB engine, translated by
queries/spark_sql.py, over the same Parquet dataset:

    spark = spark_backend.session()                 # local[*]; or master="spark://..."
    rs = spark_backend.SparkRunSet(spark, "ds")     # every table a temp view
    table = rs.query("pfn_reuse.cross_cpu")         # a pyarrow.Table

Each dataset table is read with basePath partition discovery and partition
type inference off, so run_id stays a string (an all-digit id would become a
number). Runs whose formats give a column different widths (gfp_flags is 32
bits on some kernels, 64 on others) are read in groups of equal schema and
widened before the union, because Spark's schema merging refuses that.
uint64 columns are DECIMAL(20,0) in Spark (exact; uint64="int64" reads them
as BIGINT holding the same bits, 2^64-1 as -1, for the comparison of speed).

Parameters are bound by spark.sql(query, args=...), never pasted into SQL
text; file parameters are read by the DataFrame reader from the bound path.
Prototype limits: no notes about missing tables (the DuckDB engine's
_check_tables), and the kernel-stack derived tables come from
queries/derive.py (DuckDB) files; page_pairs and pfn_allocs are computed here.
"""
from decimal import Decimal
from pathlib import Path

from kmemscope.errors import QueryError

from . import dataset as ds
from . import spark_sql

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    # run_id=0123 must stay the string '0123'
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    # DuckDB gives NULL for x / 0 and wraps nothing: ANSI mode would raise instead
    "spark.sql.ansi.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.log.level": "ERROR",
    "spark.ui.showConsoleProgress": "false",
}
_WIDER = ["TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL(20,0)"]


def session(master="local[*]", conf=None, app="kmemscope"):
    """A SparkSession with kmemscope's settings; conf: {key: value} or ["k=v", ...]."""
    from pyspark.sql import SparkSession

    settings = dict(DEFAULT_CONF)
    if conf:
        items = conf.items() if isinstance(conf, dict) else (c.split("=", 1) for c in conf)
        for k, v in items:
            settings[str(k)] = str(v)
    builder = SparkSession.builder.master(master).appName(app)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _q(name):
    """A Spark identifier, backquoted."""
    return "`" + str(name).replace("`", "``") + "`"


def _spark_type_name(dt):
    s = dt.simpleString().upper()
    return {"DECIMAL(20,0)": "DECIMAL(20,0)"}.get(s, s)


class SparkRunSet:
    """The selected runs of a dataset as Spark temp views, ready for analyses."""

    def __init__(self, spark, dataset, run_ids=None, labels=None, uint64="decimal"):
        from .selection import select_runs
        if uint64 not in spark_sql.UINT64_MODES:
            raise ValueError(f"uint64 must be one of {spark_sql.UINT64_MODES}")
        self.spark, self.dataset, self.uint64 = spark, str(dataset), uint64
        self.parts = ds.table_runs(dataset)
        self.chosen = select_runs(dataset, self.parts, run_ids, labels)
        self._registered = set()
        self._register_tables()
        self._register_facts()
        for st in spark_sql.translate(spark_sql.COMMON_SQL.read_text(), uint64):
            self._run_statement(st, {})
        self._base_views = set(self._registered)

    # ------------------------------------------------------------ tables

    def read_table(self, name, runs=None):
        """DataFrame of dataset table `name` over `runs` (default: the chosen runs), or None."""
        runs = self.chosen if runs is None else runs
        files = [str(f) for r in runs for f in self.parts.get(name, {}).get(r, [])]
        if not files:
            return None
        return self._read_files(str(Path(self.dataset) / name), files)

    def _read_files(self, base, files):
        import pyarrow.parquet as pq
        from pyspark.sql import functions as F

        # One read per distinct file schema (a kernel era), widened, then one union.
        groups = {}
        for f in files:
            groups.setdefault(str(pq.read_schema(f).remove_metadata()), []).append(f)
        frames = [self.spark.read.option("basePath", base).parquet(*fs) for fs in groups.values()]
        types = {}
        for df in frames:
            for fld in df.schema.fields:
                types.setdefault(fld.name, set()).add(_spark_type_name(fld.dataType))
        target = {}
        for col, seen in types.items():
            if len(seen) > 1:
                if not seen <= set(_WIDER):
                    raise QueryError(f"{base}: column {col} has types {', '.join(sorted(seen))} "
                                     "in different runs")
                target[col] = max(seen, key=_WIDER.index)
        out = None
        for df in frames:
            cols = [F.col(_q(c)).cast(target[c]).alias(c) if c in target else F.col(_q(c))
                    for c in df.columns]
            df = df.select(*cols)
            out = df if out is None else out.unionByName(df, allowMissingColumns=True)
        if self.uint64 == "int64":
            out = out.select(*[self._as_int64(c, _spark_type_name(t))
                               for c, t in ((f.name, f.dataType) for f in out.schema.fields)])
        return out

    @staticmethod
    def _as_int64(col, typ):
        from pyspark.sql import functions as F
        c = F.col(_q(col))
        if typ != "DECIMAL(20,0)":
            return c
        # the same 64 bits as a signed BIGINT: 2^64-1 -> -1
        wrapped = F.when(c >= F.lit(Decimal(2 ** 63)), c - F.lit(Decimal(2 ** 64))).otherwise(c)
        return wrapped.cast("bigint").alias(col)

    def _register_tables(self):
        from pyspark.sql import functions as F
        from .engine import TABLE_COLUMNS

        for name in sorted(set(self.parts) | set(TABLE_COLUMNS)):
            df = self.read_table(name) if name in self.parts else None
            need = TABLE_COLUMNS.get(name, {})
            if df is None:
                if not need:
                    continue
                ddl = ", ".join([f"`run_id` STRING"] + [
                    f"{_q(c)} {spark_sql.spark_type(t, self.uint64)}" for c, t in need.items()])
                df = self.spark.createDataFrame([], ddl)
            else:
                extra = [F.lit(None).cast(spark_sql.spark_type(t, self.uint64)).alias(c)
                         for c, t in need.items() if c not in df.columns]
                if extra:
                    df = df.select("*", *extra)
            self._view(name, df)

    def _view(self, name, df):
        df.createOrReplaceTempView(name)
        self._registered.add(name)

    def _register_facts(self):
        from . import eras

        cols = ["run_id", "kernel_release", "arch", "first_ts", "last_ts", "pageblock_order",
                "manifest", "migratetypes"]
        rows = [r.asDict(recursive=True) for r in
                self.spark.table("runs").select(*[_q(c) for c in cols]).collect()]
        facts, mts = eras.run_facts(rows)
        fact_cols = [("run_id", "STRING"), ("kernel_release", "STRING"),
                     ("highatomic_era", "STRING"), ("highatomic_era_note", "STRING"),
                     ("extfrag_era", "STRING"), ("pageblock_order", "INT"),
                     ("pageblock_order_source", "STRING"), ("first_ts", "BIGINT"),
                     ("last_ts", "BIGINT"), ("duration_s", "DOUBLE")]
        ddl = ", ".join(f"{_q(c)} {t}" for c, t in fact_cols)
        facts_df = self.spark.createDataFrame([tuple(f[c] for c, _ in fact_cols) for f in facts], ddl)
        runs = self.spark.table("runs").select("run_id", "labels")
        run_facts = facts_df.join(runs, "run_id").select(
            "run_id", "labels", *[c for c, _ in fact_cols[1:]])
        self._view("run_facts", run_facts.cache())
        mt_ddl = "`run_id` STRING, `migratetype` INT, `name` STRING, `source` STRING"
        self._view("migratetype_names", self.spark.createDataFrame(
            [(m["run_id"], m["migratetype"], m["name"], m["source"]) for m in mts], mt_ddl))
        self._view("extfrag_ownership", self.spark.createDataFrame(
            [(e, c, m) for (e, c), m in eras.OWNERSHIP_MEANING.items()],
            "`extfrag_era` STRING, `change_ownership` INT, `meaning` STRING"))

    # ------------------------------------------------------------ derived tables

    # derive.py's pairing, over every chosen run at once (partitioned by run_id).
    PAIRS_SQL = """
    SELECT run_id, pfn, is_alloc = 1 AS reuse, ts - prev_ts AS interval_ns,
           cpu = prev_cpu AS same_cpu,
           CAST(CASE WHEN is_alloc = 1 THEN "order" ELSE prev_order END AS UTINYINT) AS "order",
           CAST(prev_cpu AS INTEGER) AS cpu
    FROM (
      SELECT run_id, pfn, ts, cpu, "order", is_alloc,
             lag(is_alloc) OVER w AS prev_is_alloc, lag(ts) OVER w AS prev_ts,
             lag(cpu) OVER w AS prev_cpu, lag("order") OVER w AS prev_order
      FROM (
        SELECT run_id, pfn, ts, cpu, "order", 1 AS is_alloc FROM mm_page_alloc
        WHERE pfn NOT IN (18446744073709551615, 4294967295)
        UNION ALL
        SELECT run_id, pfn, ts, cpu, "order", 0 AS is_alloc FROM mm_page_free
      ) AS e
      WINDOW w AS (PARTITION BY run_id, pfn ORDER BY ts, is_alloc)
    ) AS t
    WHERE prev_is_alloc IS NOT NULL AND prev_is_alloc <> is_alloc
    """
    PFN_ALLOCS_SQL = """
    SELECT run_id, pfn, allocs,
           row_number() OVER (PARTITION BY run_id ORDER BY allocs DESC, pfn) AS rank
    FROM (SELECT run_id, pfn, count(*) AS allocs FROM mm_page_alloc
          WHERE pfn NOT IN (18446744073709551615, 4294967295) GROUP BY run_id, pfn) AS c
    """

    def derived(self, name):
        """Register derived table `name` (queries/derive.py's tables) as a view."""
        if name in self._registered:
            return
        if name in ("page_pairs", "pfn_allocs"):
            sql = self.PAIRS_SQL if name == "page_pairs" else self.PFN_ALLOCS_SQL
            (st,) = spark_sql.translate(sql, self.uint64)
            self._view(name, self.spark.sql(st.sql).cache())
            return
        from . import derive
        from .engine import DERIVED_COLUMNS
        if name not in DERIVED_COLUMNS:
            raise QueryError(f"unknown derived table {name}")
        # The kernel-stack pairing is not ported yet: read derive.py's files.
        files = derive.stack_files(self.dataset, name, self.chosen, self.parts)
        if files:
            df = self._read_files(str(Path(self.dataset) / derive.DERIVED_DIR / name),
                                  [str(f) for f in files.values()])
        else:
            ddl = ", ".join(["`run_id` STRING"] + [
                f"{_q(c)} {spark_sql.spark_type(t, self.uint64)}"
                for c, t in DERIVED_COLUMNS[name].items()])
            df = self.spark.createDataFrame([], ddl)
        self._view(name, df)

    # ------------------------------------------------------------ running

    def _run_statement(self, st, bound):
        args = {p: bound[p] for p in st.params}
        for fv in st.files:
            path = bound.get(fv.param)
            if path is None:
                raise QueryError(f"file parameter {fv.param} has no value")
            ddl = ", ".join(f"{_q(c)} {t}" for c, t in fv.columns.items())
            reader = self.spark.read.schema(ddl).option("header", fv.header)
            if fv.comment:
                reader = reader.option("comment", fv.comment)
            self._view(fv.view, reader.csv(str(path)))
        if st.kind == "view":
            if args:
                raise QueryError(f"view {st.name} holds a parameter")
            # sql-safe: the name comes from kmemscope's own .sql files, backquoted
            self.spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {_q(st.name)} AS {st.sql}")
            self._registered.add(st.name)
            return None
        df = self.spark.sql(st.sql, args=args) if args else self.spark.sql(st.sql)
        if st.kind == "table":
            # computed now, as DuckDB does: no lineage to views replaced later
            self._view(st.name, df.localCheckpoint(eager=True))
            return None
        return df

    def query(self, name, params=None):
        """Run analysis `name` (or `name.section`) -> pyarrow.Table."""
        from .catalog import convert_param, find_analysis
        a, section = find_analysis(name)
        qname = a.query_name(section) if hasattr(a, "query_name") else name
        params = dict(params or {})
        for key in params:
            if key not in a.params:
                raise QueryError(f"query {a.name} has no parameter {key!r}")
        bound = {p.name: convert_param(p, params[p.name], qname) if p.name in params else p.default
                 for p in a.params.values()}
        needs = a.needs(section)
        for d in needs.derived:
            self.derived(d)
        type_of = {"INTEGER": "INT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE", "VARCHAR": "STRING",
                   "BOOLEAN": "BOOLEAN", "FILE": "STRING"}
        if a.params:
            ddl = ", ".join(f"{_q(p.name)} {type_of[p.type]}" for p in a.params.values())
            qp = self.spark.createDataFrame([tuple(bound[p] for p in a.params)], ddl)
        else:
            qp = self.spark.createDataFrame([(1,)], "`none` INT")
        self._view("query_params", qp)
        plan = spark_sql.section_plan(a, section, self.uint64)
        try:
            for st in plan["prelude"]:
                self._run_statement(st, bound)
            df = self._run_statement(plan["section"], bound)
            return df.toArrow()
        except QueryError:
            raise
        except Exception as exc:  # py4j / pyspark analysis errors: first line only
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise QueryError(f"query {qname} failed on Spark: {first}") from exc
        finally:
            self._drop_prelude(plan)

    def _drop_prelude(self, plan):
        # Views a prelude replaced (thp's thp_orders) go back to their _common.sql form.
        replaced = {st.name for st in plan["prelude"] if st.name in self._base_views}
        if replaced:
            for st in spark_sql.translate(spark_sql.COMMON_SQL.read_text(), self.uint64):
                if st.kind == "view" and st.name in replaced:
                    self._run_statement(st, {})

    def sql(self, query, args=None):
        """Ad-hoc Spark SQL over the views -> pyarrow.Table (parameters bound via args)."""
        return self.spark.sql(query, args=args or None).toArrow()



# ---------------------------------------------------------------- uint64 benchmark

_BENCH_PAIRS = """
SELECT count(*) AS pairs, sum(interval_ns) AS total_ns FROM (
  SELECT ts - lag(ts) OVER w AS interval_ns, lag(is_alloc) OVER w AS prev, is_alloc
  FROM t WHERE pfn NOT IN (18446744073709551615, 4294967295)
  WINDOW w AS (PARTITION BY pfn ORDER BY ts, is_alloc)
) AS x WHERE prev IS NOT NULL AND prev <> is_alloc
"""
_BENCH_GFP = """
SELECT count(*) AS n FROM t
WHERE (gfp_flags & 1024) <> 0 AND (gfp_flags & 2048) = 0 AND pfn <> 18446744073709551615
"""


def bench_uint64(rows, workdir, spark=None, repeat=2):
    """Time the pairing window and a gfp bit filter on `rows` events stored as uint64 and
    as int64, on DuckDB and on Spark -> list of result dicts (best of `repeat`)."""
    import time

    import duckdb
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    pfn = rng.integers(0, 1 << 21, rows, dtype=np.uint64)
    is_alloc = rng.integers(0, 2, rows, dtype=np.int32)
    pfn[(rng.random(rows) < 0.01) & (is_alloc == 1)] = np.uint64((1 << 64) - 1)
    gfp = rng.choice(np.array([0xcc0, 0x140cca, 0x2800, 0x52dc0, 0x400], dtype=np.uint64), rows)
    cols = {"ts": np.arange(rows, dtype=np.int64) * 7, "cpu": rng.integers(0, 2, rows, dtype=np.int32),
            "is_alloc": is_alloc}
    paths = {}
    for kind in ("uint64", "int64"):
        conv = (lambda a: a) if kind == "uint64" else (lambda a: a.view(np.int64))
        table = pa.table({**cols, "pfn": conv(pfn), "gfp_flags": conv(gfp)})
        d = Path(workdir) / kind / "run_id=bench"
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, d / "part-0.parquet", row_group_size=1 << 20)
        paths[kind] = d.parent
    spark = spark or session()
    out = []
    # uint64 storage read as DECIMAL(20,0); int64 storage; uint64 storage turned into
    # BIGINT as it is read (SparkRunSet(uint64="int64")), Spark only
    for kind, mode, store in (("uint64", "decimal", "uint64"), ("int64", "int64", "int64"),
                              ("uint64 read as int64", "int64", "uint64")):
        con = duckdb.connect()
        con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{paths[store]}/*/*.parquet')")  # sql-safe: our temp dir
        df = spark.read.option("basePath", str(paths[store])).parquet(str(paths[store] / "run_id=bench"))
        if kind == "uint64 read as int64":
            df = df.select(*[SparkRunSet._as_int64(f.name, _spark_type_name(f.dataType))
                             for f in df.schema.fields])
        df.createOrReplaceTempView("t")
        for what, sql in (("pairing", _BENCH_PAIRS), ("gfp_filter", _BENCH_GFP)):
            duck_sql = sql if mode == "decimal" else sql.replace("18446744073709551615", "-1")
            (st,) = spark_sql.translate(sql, mode)
            engines = (("duckdb", lambda: con.sql(duck_sql).fetchall()),
                       ("spark", lambda: [tuple(r) for r in spark.sql(st.sql).collect()]))
            for engine_name, run in engines[1:] if store != kind else engines:
                best, result = None, None
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    result = run()
                    dt = time.perf_counter() - t0
                    best = dt if best is None else min(best, dt)
                out.append({"storage": kind, "spark_type": "DECIMAL(20,0)" if mode == "decimal"
                            else "BIGINT", "query": what, "engine": engine_name,
                            "seconds": round(best, 3), "result": [tuple(int(x) for x in r) for r in result]})
        con.close()
    return out


def main(argv=None):
    import argparse
    import json
    import sys
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m kmemscope.queries.spark_backend")
    ap.add_argument("--bench-uint64", type=int, metavar="ROWS",
                    help="time uint64 (DECIMAL(20,0)) vs int64 storage on DuckDB and Spark")
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)
    if not args.bench_uint64:
        ap.print_help()
        return 0
    with tempfile.TemporaryDirectory(prefix="kmemscope-bench-") as tmp:
        for row in bench_uint64(args.bench_uint64, tmp, session(args.master)):
            print(json.dumps(row))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main())
