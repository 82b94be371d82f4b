-- atomic_orders.costly: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

-- TEMPORARY VIEW alloc_classes
SELECT
  c.run_id,
  c.ts,
  c.comm,
  c.`order`,
  c.failed,
  CASE WHEN p.era = 'auto' THEN c.run_era ELSE p.era END AS highatomic_era,
  CASE
    WHEN NOT c.has_gfp_table
    THEN 'unknown'
    WHEN (
      CASE
        WHEN COALESCE(NULLIF(p.era, 'auto'), c.run_era) = 'A'
        THEN c.eligible_era_a
        ELSE c.eligible_era_b
      END
    )
    THEN 'highatomic_eligible'
    WHEN NOT c.blocking
    THEN 'other_nonblocking'
    ELSE 'blocking'
  END AS alloc_class
FROM page_alloc_classes AS c
CROSS JOIN query_params AS p;

WITH counts AS (
  SELECT
    run_id,
    highatomic_era,
    alloc_class,
    CASE WHEN `order` = 0 THEN '0' WHEN `order` <= 3 THEN '1-3' ELSE '4+' END AS order_band,
    COUNT(*) AS allocs,
    COUNT(CASE WHEN failed THEN 1 END) AS failed
  FROM alloc_classes
  GROUP BY
    run_id,
    highatomic_era,
    alloc_class,
    CASE WHEN `order` = 0 THEN '0' WHEN `order` <= 3 THEN '1-3' ELSE '4+' END
)
SELECT
  f.run_id,
  f.labels,
  c.highatomic_era,
  c.alloc_class,
  c.order_band,
  c.allocs,
  c.failed,
  c.allocs / f.duration_s AS allocs_per_s,
  CAST(100.0 AS DOUBLE) * c.allocs / SUM(c.allocs) OVER (PARTITION BY c.run_id, c.alloc_class) AS pct_of_class
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
ORDER BY
  f.run_id NULLS LAST,
  c.alloc_class NULLS LAST,
  c.order_band NULLS LAST;
