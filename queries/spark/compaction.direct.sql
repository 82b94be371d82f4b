-- compaction.direct: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

SELECT
  f.run_id,
  f.labels,
  d.`order`,
  COUNT(*) AS tries,
  COUNT(CASE WHEN NOT d.stalled THEN 1 END) AS skipped,
  COUNT(CASE WHEN d.stalled THEN 1 END) AS stalls,
  COUNT(CASE WHEN d.succeeded THEN 1 END) AS successes,
  CAST(100.0 AS DOUBLE) * COUNT(CASE WHEN d.succeeded THEN 1 END) / NULLIF(COUNT(CASE WHEN d.stalled THEN 1 END), 0) AS success_pct,
  CAST(SUM(d.zones_deferred) AS BIGINT) AS zones_deferred,
  CAST(SUM(d.zones_compacted) AS BIGINT) AS zones_compacted,
  COUNT(CASE WHEN d.ended_by = 'alloc' AND d.alloc_ok THEN 1 END) AS ended_by_alloc_ok,
  COUNT(CASE WHEN d.ended_by = 'alloc' AND NOT d.alloc_ok THEN 1 END) AS ended_by_alloc_fail,
  COUNT(CASE WHEN d.ended_by = 'reclaim' THEN 1 END) AS ended_by_reclaim,
  COUNT(CASE WHEN d.ended_by = 'next try' THEN 1 END) AS ended_by_next_try,
  COUNT(CASE WHEN d.stalled AND d.zone_ready AND NOT d.succeeded THEN 1 END) AS failed_when_ready
FROM direct_compactions AS d
JOIN run_facts AS f
  ON f.run_id = d.run_id
GROUP BY
  f.run_id,
  f.labels,
  d.`order`
ORDER BY
  f.run_id NULLS LAST,
  d.`order` NULLS LAST;
