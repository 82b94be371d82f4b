-- pfn_reuse.summary: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH pair_stats /* One pass over the pairs. quantile_cont with a list of fractions is DuckDB's */ /* form of three percentile_cont(...) WITHIN GROUP aggregates computed from one */ /* sort (three separate ones take three times as long at 50 M rows). */ AS (
  SELECT
    run_id,
    COUNT(CASE WHEN reuse THEN 1 END) AS reuse_pairs,
    PERCENTILE(CASE WHEN reuse THEN interval_ns END, ARRAY(0.5, 0.9, 0.99)) AS reuse_quantiles_ns,
    COUNT(CASE WHEN reuse AND interval_ns <= 1000000 THEN 1 END) AS within_1ms,
    COUNT(CASE WHEN reuse AND interval_ns <= 10000000 THEN 1 END) AS within_10ms,
    COUNT(CASE WHEN reuse AND interval_ns <= 100000000 THEN 1 END) AS within_100ms,
    COUNT(CASE WHEN reuse AND same_cpu THEN 1 END) AS reuse_same_cpu,
    COUNT(CASE WHEN NOT reuse THEN 1 END) AS alloc_free_pairs,
    COUNT(CASE WHEN NOT reuse AND NOT same_cpu THEN 1 END) AS freed_other_cpu
  FROM page_pairs
  GROUP BY
    run_id
), free_counts AS (
  SELECT
    run_id,
    COUNT(*) AS frees
  FROM mm_page_free
  GROUP BY
    run_id
)
SELECT
  f.run_id,
  f.labels,
  COALESCE(fc.frees, 0) AS frees,
  COALESCE(p.reuse_pairs, 0) AS reuse_pairs,
  p.reuse_quantiles_ns[0] AS reuse_p50_ns,
  p.reuse_quantiles_ns[1] AS reuse_p90_ns,
  p.reuse_quantiles_ns[2] AS reuse_p99_ns,
  CAST(100.0 AS DOUBLE) * p.within_1ms / NULLIF(p.reuse_pairs, 0) AS reused_within_1ms_pct,
  CAST(100.0 AS DOUBLE) * p.within_10ms / NULLIF(p.reuse_pairs, 0) AS reused_within_10ms_pct,
  CAST(100.0 AS DOUBLE) * p.within_100ms / NULLIF(p.reuse_pairs, 0) AS reused_within_100ms_pct,
  CAST(100.0 AS DOUBLE) * p.reuse_same_cpu / NULLIF(p.reuse_pairs, 0) AS reuse_same_cpu_pct,
  CAST(100.0 AS DOUBLE) * (
    p.reuse_pairs - p.reuse_same_cpu
  ) / NULLIF(p.reuse_pairs, 0) AS reuse_other_cpu_pct,
  COALESCE(p.alloc_free_pairs, 0) AS alloc_free_pairs,
  CAST(100.0 AS DOUBLE) * p.freed_other_cpu / NULLIF(p.alloc_free_pairs, 0) AS freed_other_cpu_pct
FROM run_facts AS f
LEFT JOIN pair_stats AS p
  ON p.run_id = f.run_id
LEFT JOIN free_counts AS fc
  ON fc.run_id = f.run_id
ORDER BY
  f.run_id NULLS LAST;
