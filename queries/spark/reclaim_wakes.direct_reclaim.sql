-- reclaim_wakes.direct_reclaim: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH bounds AS (
  SELECT
    run_id,
    pid,
    ts,
    1 AS is_begin,
    `order`,
    CAST(NULL AS DECIMAL(20, 0)) AS nr_reclaimed
  FROM mm_vmscan_direct_reclaim_begin
  UNION ALL
  SELECT
    run_id,
    pid,
    ts,
    0 AS is_begin,
    NULL,
    nr_reclaimed
  FROM mm_vmscan_direct_reclaim_end
), ordered AS (
  SELECT
    run_id,
    pid,
    ts,
    is_begin,
    `order`,
    nr_reclaimed,
    LEAD(is_begin) OVER w AS next_is_begin,
    LEAD(ts) OVER w AS next_ts,
    LEAD(nr_reclaimed) OVER w AS next_nr_reclaimed
  FROM bounds
  WINDOW w AS (PARTITION BY run_id, pid ORDER BY ts NULLS LAST, is_begin DESC)
), stalls AS (
  SELECT
    run_id,
    `order`,
    CASE WHEN next_is_begin = 0 THEN next_ts - ts END AS duration_ns,
    CASE WHEN next_is_begin = 0 THEN next_nr_reclaimed END AS nr_reclaimed
  FROM ordered
  WHERE
    is_begin = 1
), per_order AS (
  SELECT
    run_id,
    `order`,
    COUNT(*) AS stalls,
    COUNT(duration_ns) AS timed_stalls,
    PERCENTILE(duration_ns, 0.5) AS duration_p50_ns,
    PERCENTILE(duration_ns, 0.9) AS duration_p90_ns,
    PERCENTILE(duration_ns, 0.99) AS duration_p99_ns,
    MAX(duration_ns) AS duration_max_ns,
    CAST(SUM(duration_ns) AS BIGINT) AS total_duration_ns,
    CAST(SUM(nr_reclaimed) AS BIGINT) AS nr_reclaimed
  FROM stalls
  GROUP BY
    run_id,
    `order`
)
SELECT
  f.run_id,
  f.labels,
  p.`order`,
  p.stalls,
  p.timed_stalls,
  p.duration_p50_ns,
  p.duration_p90_ns,
  p.duration_p99_ns,
  p.duration_max_ns,
  p.total_duration_ns,
  p.nr_reclaimed,
  p.stalls / f.duration_s AS stalls_per_s
FROM per_order AS p
JOIN run_facts AS f
  ON f.run_id = p.run_id
ORDER BY
  f.run_id NULLS LAST,
  p.`order` NULLS LAST;
