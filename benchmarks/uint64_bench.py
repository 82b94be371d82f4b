"""uint64 columns on Spark: DECIMAL(20,0) (exact) against BIGINT holding the same bits.

Times the pairing window and a gfp bit filter over synthetic events stored as
uint64 and as int64, on DuckDB and on Spark, best of `repeat`:

    .venv/bin/python benchmarks/uint64_bench.py --rows 10000000 --master 'local[2]'

Prints one JSON object per measurement with the machine's load average.
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from kmemscope.queries.engines import spark_sql
from kmemscope.queries.engines.spark_engine import _as_int64, _spark_type_name, session

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
    # BIGINT as it is read (SparkEngine(uint64="int64")), Spark only
    for kind, mode, store in (("uint64", "decimal", "uint64"), ("int64", "int64", "int64"),
                              ("uint64 read as int64", "int64", "uint64")):
        con = duckdb.connect()
        glob = str(paths[store] / "*" / "*.parquet").replace("'", "''")
        con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{glob}')")  # sql-safe: quoted literal
        df = spark.read.option("basePath", str(paths[store])).parquet(str(paths[store] / "run_id=bench"))
        if kind == "uint64 read as int64":
            df = df.select(*[_as_int64(f.name, _spark_type_name(f.dataType))
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
    ap = argparse.ArgumentParser(prog="benchmarks/uint64_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000, help="events to generate")
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kmemscope-bench-") as tmp:
        for row in bench_uint64(args.rows, tmp, session(args.master)):
            row["load_avg"] = [round(x, 2) for x in os.getloadavg()]
            print(json.dumps(row))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
