-- vmstat_rates.vmstat_rates: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

SELECT
  f.run_id,
  f.labels,
  d.name,
  d.first_value,
  d.last_value,
  d.delta,
  d.window_s,
  CAST(60.0 AS DOUBLE) * d.delta / NULLIF(d.window_s, 0) AS per_min
FROM vmstat_deltas AS d
JOIN run_facts AS f
  ON f.run_id = d.run_id
WHERE
  d.name LIKE :name_like
ORDER BY
  f.run_id NULLS LAST,
  d.name NULLS LAST;
