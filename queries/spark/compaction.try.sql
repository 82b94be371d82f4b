-- compaction.try: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH counts AS (
  SELECT
    run_id,
    `order`,
    prio,
    COUNT(*) AS attempts
  FROM mm_compaction_try_to_compact_pages
  GROUP BY
    run_id,
    `order`,
    prio
)
SELECT
  f.run_id,
  f.labels,
  c.`order`,
  c.prio,
  CASE c.prio WHEN 0 THEN 'sync_full' WHEN 1 THEN 'sync_light' WHEN 2 THEN 'async' END AS prio_name,
  c.attempts,
  c.attempts / f.duration_s AS attempts_per_s
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
ORDER BY
  f.run_id NULLS LAST,
  c.`order` NULLS LAST,
  c.prio NULLS LAST;
