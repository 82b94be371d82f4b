-- compaction.outcomes: Spark SQL written by kmemscope.queries.spark_sql (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python -m kmemscope.queries.spark_sql --write-golden

WITH ordered AS (
  SELECT
    c.*,
    f.`order` AS f_order,
    f.ts AS f_ts
  FROM compaction_runs AS c
  LEFT JOIN LATERAL (
    SELECT
      *
    FROM mm_compaction_finished AS f
    WHERE
      f.run_id = c.run_id AND f.pid = c.pid AND f.ts <= c.end_ts
    ORDER BY
      f.ts DESC
    LIMIT 1
  ) AS f
    ON TRUE
), runs_ AS (
  SELECT
    run_id,
    kind,
    status,
    duration_ns,
    CASE WHEN NOT duration_ns IS NULL AND f_ts >= end_ts - duration_ns THEN f_order END AS `order`
  FROM ordered
), counts AS (
  SELECT
    run_id,
    kind,
    `order`,
    status,
    COUNT(*) AS runs,
    PERCENTILE(duration_ns, 0.5) AS duration_p50_ns
  FROM runs_
  GROUP BY
    run_id,
    kind,
    `order`,
    status
)
SELECT
  f.run_id,
  f.labels,
  c.kind,
  c.`order`,
  c.status,
  n.name AS status_name,
  c.runs,
  CAST(100.0 AS DOUBLE) * c.runs / SUM(c.runs) OVER (PARTITION BY c.run_id, c.kind, c.`order`) AS pct_of_order,
  c.duration_p50_ns
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
LEFT JOIN compaction_status_names AS n
  ON n.run_id = c.run_id AND n.status = c.status
ORDER BY
  f.run_id NULLS LAST,
  c.kind NULLS LAST,
  c.`order` NULLS LAST,
  c.runs DESC;
