-- thp.thp: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

-- TEMPORARY TABLE (a cached DataFrame) thp_run_orders
SELECT
  run_id,
  COALESCE(q.thp_order, o.thp_order) AS thp_order,
  CASE
    WHEN NOT q.thp_order IS NULL
    THEN 'parameter thp_order'
    ELSE o.thp_order_source
  END AS thp_order_source
FROM thp_orders AS o
CROSS JOIN query_params AS q;

-- TEMPORARY VIEW thp_orders
SELECT
  *
FROM thp_run_orders;

WITH vm AS (
  SELECT
    run_id,
    MAX(window_s) AS vmstat_window_s,
    MAX(CASE WHEN name = 'compact_migrate_scanned' THEN delta END) AS compact_migrate_scanned,
    MAX(CASE WHEN name = 'compact_free_scanned' THEN delta END) AS compact_free_scanned,
    MAX(CASE WHEN name = 'thp_collapse_alloc' THEN delta END) AS thp_collapse_alloc,
    MAX(CASE WHEN name = 'thp_collapse_alloc_failed' THEN delta END) AS thp_collapse_alloc_failed
  FROM vmstat_deltas
  GROUP BY
    run_id
), huge_allocs AS (
  SELECT
    a.run_id,
    COUNT(*) AS order_attempts,
    COUNT(CASE WHEN a.failed THEN 1 END) AS order_failures
  FROM page_allocs AS a
  JOIN thp_orders AS o
    ON o.run_id = a.run_id AND a.`order` = o.thp_order
  GROUP BY
    a.run_id
)
SELECT
  f.run_id,
  f.labels,
  o.thp_order,
  o.thp_order_source,
  v.vmstat_window_s,
  t.thp_fault_alloc,
  t.thp_fault_fallback,
  t.thp_fault_fallback_charge,
  t.vmstat_pct AS thp_fault_success_pct,
  t.vmstat_alloc_pct AS thp_fault_alloc_success_pct,
  c.compact_stall,
  c.compact_success,
  c.vmstat_pct AS compaction_success_pct,
  CAST(1.0 AS DOUBLE) * v.compact_migrate_scanned / NULLIF(v.compact_free_scanned, 0) AS compact_scan_ratio,
  CAST(100.0 AS DOUBLE) * v.thp_collapse_alloc / NULLIF(v.thp_collapse_alloc + v.thp_collapse_alloc_failed, 0) AS thp_collapse_success_pct,
  w.trace_window,
  t.trace_faults AS trace_thp_faults,
  t.trace_retries AS trace_thp_fault_retries,
  t.trace_successes AS trace_thp_fault_successes,
  t.trace_pct AS trace_thp_fault_success_pct,
  c.trace_tries AS trace_compact_tries,
  c.trace_stalls AS trace_compact_stalls,
  c.trace_successes AS trace_compact_successes,
  c.trace_pct AS trace_compaction_success_pct,
  COALESCE(h.order_attempts, 0) AS order_attempts,
  COALESCE(h.order_failures, 0) AS order_failures,
  CAST(100.0 AS DOUBLE) * (
    h.order_attempts - h.order_failures
  ) / NULLIF(h.order_attempts, 0) AS order_success_pct,
  COALESCE(h.order_attempts, 0) / f.duration_s AS order_attempts_per_s
FROM run_facts AS f
JOIN thp_orders AS o
  ON o.run_id = f.run_id
JOIN trace_windows AS w
  ON w.run_id = f.run_id
JOIN thp_fault_success AS t
  ON t.run_id = f.run_id
JOIN compaction_success AS c
  ON c.run_id = f.run_id
LEFT JOIN vm AS v
  ON v.run_id = f.run_id
LEFT JOIN huge_allocs AS h
  ON h.run_id = f.run_id
ORDER BY
  f.run_id NULLS LAST;
