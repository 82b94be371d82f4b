-- vmstat_rates.per_minute: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH samples AS (
  SELECT
    run_id,
    name,
    ts,
    value,
    CAST(FLOOR((
      ts - MIN(ts) OVER (PARTITION BY run_id)
    ) / CAST(60e9 AS DOUBLE)) AS BIGINT) AS minute
  FROM vmstat
  WHERE
    name LIKE :name_like
), minute_last AS (
  SELECT
    run_id,
    name,
    minute,
    MAX_BY(value, ts) AS last_value,
    COUNT(*) AS samples
  FROM samples
  GROUP BY
    run_id,
    name,
    minute
), run_first AS (
  SELECT
    run_id,
    name,
    MIN_BY(value, ts) AS first_value
  FROM samples
  GROUP BY
    run_id,
    name
)
SELECT
  f.run_id,
  f.labels,
  m.name,
  m.minute,
  m.last_value - COALESCE(
    LAG(m.last_value) OVER (PARTITION BY m.run_id, m.name ORDER BY m.minute NULLS LAST),
    r.first_value
  ) AS delta,
  m.samples
FROM minute_last AS m
JOIN run_first AS r
  ON r.run_id = m.run_id AND r.name = m.name
JOIN run_facts AS f
  ON f.run_id = m.run_id
ORDER BY
  f.run_id NULLS LAST,
  m.name NULLS LAST,
  m.minute NULLS LAST;
