-- atomic_orders.comms: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
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
    comm,
    COUNT(*) AS allocs,
    COUNT(CASE WHEN `order` BETWEEN 1 AND 3 THEN 1 END) AS orders_1_3,
    COUNT(CASE WHEN `order` > 3 THEN 1 END) AS orders_4_plus
  FROM alloc_classes
  GROUP BY
    run_id,
    highatomic_era,
    alloc_class,
    comm
), ranked AS (
  SELECT
    *,
    ROW_NUMBER() OVER (PARTITION BY run_id, alloc_class ORDER BY allocs DESC, comm NULLS LAST) AS rank,
    CAST(100.0 AS DOUBLE) * allocs / SUM(allocs) OVER (PARTITION BY run_id, alloc_class) AS pct_of_class
  FROM counts
)
SELECT
  f.run_id,
  f.labels,
  r.highatomic_era,
  r.alloc_class,
  r.rank,
  r.comm,
  r.allocs,
  r.orders_1_3,
  r.orders_4_plus,
  r.pct_of_class
FROM ranked AS r
JOIN run_facts AS f
  ON f.run_id = r.run_id
WHERE
  r.rank <= :top_comms
ORDER BY
  f.run_id NULLS LAST,
  r.alloc_class NULLS LAST,
  r.rank NULLS LAST;
