-- pfn_reuse.cross_cpu: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH alloc_free_pairs AS (
  SELECT
    run_id,
    `order` AS alloc_order,
    NOT same_cpu AS other_cpu,
    interval_ns AS lifetime_ns
  FROM page_pairs
  WHERE
    NOT reuse
), by_order AS (
  SELECT
    run_id,
    alloc_order,
    COUNT(*) AS alloc_free_pairs,
    COUNT(CASE WHEN NOT other_cpu THEN 1 END) AS freed_same_cpu,
    COUNT(CASE WHEN other_cpu THEN 1 END) AS freed_other_cpu,
    PERCENTILE(lifetime_ns, 0.5) AS lifetime_p50_ns
  FROM alloc_free_pairs
  GROUP BY
    run_id,
    alloc_order
)
SELECT
  f.run_id,
  f.labels,
  o.alloc_order AS `order`,
  o.alloc_free_pairs,
  o.freed_same_cpu,
  o.freed_other_cpu,
  CAST(100.0 AS DOUBLE) * o.freed_other_cpu / o.alloc_free_pairs AS freed_other_cpu_pct,
  o.lifetime_p50_ns
FROM by_order AS o
JOIN run_facts AS f
  ON f.run_id = o.run_id
ORDER BY
  f.run_id NULLS LAST,
  o.alloc_order NULLS LAST;
