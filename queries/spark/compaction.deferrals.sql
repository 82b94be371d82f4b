-- compaction.deferrals: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH events AS (
  SELECT
    run_id,
    `order`,
    1 AS deferred,
    0 AS armed,
    0 AS reset,
    defer_shift
  FROM mm_compaction_deferred
  UNION ALL
  SELECT
    run_id,
    `order`,
    0,
    1,
    0,
    defer_shift
  FROM mm_compaction_defer_compaction
  UNION ALL
  SELECT
    run_id,
    `order`,
    0,
    0,
    1,
    defer_shift
  FROM mm_compaction_defer_reset
), counts AS (
  SELECT
    run_id,
    `order`,
    CAST(SUM(deferred) AS BIGINT) AS deferred,
    CAST(SUM(armed) AS BIGINT) AS defer_armed,
    CAST(SUM(reset) AS BIGINT) AS defer_reset,
    MAX(defer_shift) AS max_defer_shift
  FROM events
  GROUP BY
    run_id,
    `order`
)
SELECT
  f.run_id,
  f.labels,
  c.`order`,
  c.deferred,
  c.defer_armed,
  c.defer_reset,
  c.max_defer_shift
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
ORDER BY
  f.run_id NULLS LAST,
  c.`order` NULLS LAST;
