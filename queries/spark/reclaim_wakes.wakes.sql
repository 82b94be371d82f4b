-- reclaim_wakes.wakes: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH wakes AS (
  SELECT
    run_id,
    'wakeup_kswapd' AS source,
    `order`,
    CASE WHEN gfp_flags = 0 AND `order` = 0 THEN 1 ELSE 0 END AS boost
  FROM mm_vmscan_wakeup_kswapd
  UNION ALL
  SELECT
    run_id,
    'kswapd_wake',
    `order`,
    NULL
  FROM mm_vmscan_kswapd_wake
  UNION ALL
  SELECT
    run_id,
    'wakeup_kcompactd',
    `order`,
    NULL
  FROM mm_compaction_wakeup_kcompactd
  UNION ALL
  SELECT
    run_id,
    'kcompactd_wake',
    `order`,
    NULL
  FROM mm_compaction_kcompactd_wake
), counts AS (
  SELECT
    run_id,
    source,
    `order`,
    COUNT(*) AS wakes,
    CAST(SUM(boost) AS BIGINT) AS boost_wakes
  FROM wakes
  GROUP BY
    run_id,
    source,
    `order`
)
SELECT
  f.run_id,
  f.labels,
  c.source,
  c.`order`,
  c.wakes,
  c.boost_wakes,
  c.wakes / f.duration_s AS wakes_per_s
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
ORDER BY
  f.run_id NULLS LAST,
  c.source NULLS LAST,
  c.`order` NULLS LAST;
