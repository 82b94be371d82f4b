-- highatomic.blocks: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH samples AS (
  SELECT
    run_id,
    ts,
    node,
    zone,
    CAST(SUM(
      CASE WHEN LOWER(CAST(migratetype AS STRING)) = 'highatomic' THEN blocks ELSE 0 END
    ) AS BIGINT) AS highatomic_pageblocks,
    CAST(SUM(blocks) AS BIGINT) AS total_pageblocks
  FROM pagetypeinfo_blocks
  GROUP BY
    run_id,
    ts,
    node,
    zone
), first_sample AS (
  SELECT
    run_id,
    MIN(ts) AS t0
  FROM pagetypeinfo_blocks
  GROUP BY
    run_id
)
SELECT
  f.run_id,
  f.labels,
  s.ts,
  (
    s.ts - fs.t0
  ) / CAST(1e9 AS DOUBLE) AS t_s,
  s.node,
  s.zone,
  s.highatomic_pageblocks,
  s.total_pageblocks,
  CAST(100.0 AS DOUBLE) * s.highatomic_pageblocks / NULLIF(s.total_pageblocks, 0) AS highatomic_pct
FROM samples AS s
JOIN first_sample AS fs
  ON fs.run_id = s.run_id
JOIN run_facts AS f
  ON f.run_id = s.run_id
ORDER BY
  f.run_id NULLS LAST,
  s.ts NULLS LAST,
  s.node NULLS LAST,
  s.zone NULLS LAST;
