-- run_metrics.runs: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

SELECT
  f.run_id,
  f.labels,
  r.host,
  f.kernel_release,
  GET_JSON_OBJECT(r.manifest, '$.start.realtime_ns') AS started_ns,
  f.first_ts,
  f.duration_s
FROM run_facts AS f
LEFT JOIN runs AS r
  ON r.run_id = f.run_id
ORDER BY
  f.run_id NULLS LAST;
