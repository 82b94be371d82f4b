-- run_metrics.metrics: Spark SQL written by kmemscope.queries.spark_sql (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python -m kmemscope.queries.spark_sql --write-golden

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
