-- compaction.status: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH counts AS (
  SELECT
    run_id,
    kind,
    status,
    COUNT(*) AS runs
  FROM compaction_runs
  GROUP BY
    run_id,
    kind,
    status
)
SELECT
  f.run_id,
  f.labels,
  c.kind,
  c.status,
  n.name AS status_name,
  c.runs,
  CAST(100.0 AS DOUBLE) * c.runs / SUM(c.runs) OVER (PARTITION BY c.run_id, c.kind) AS pct_of_kind
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
LEFT JOIN compaction_status_names AS n
  ON n.run_id = c.run_id AND n.status = c.status
ORDER BY
  f.run_id NULLS LAST,
  c.kind NULLS LAST,
  c.runs DESC;
