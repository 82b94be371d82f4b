-- run_metrics.metrics: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

SELECT
  f.run_id,
  f.labels,
  m.metric,
  m.value,
  m.unit,
  m.better,
  m.source
FROM run_metrics AS m
JOIN run_facts AS f
  ON f.run_id = m.run_id
ORDER BY
  f.run_id NULLS LAST,
  m.metric NULLS LAST,
  m.source NULLS LAST,
  m.value NULLS LAST;
