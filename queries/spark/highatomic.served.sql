-- highatomic.served: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH highatomic_type AS (
  /* HIGHATOMIC is MIGRATE_PCPTYPES = 3 on every kernel (section 4); the run's */
  /* migratetype names confirm it where the run has them. */
  SELECT
    f.run_id,
    COALESCE(MIN(m.migratetype), 3) AS migratetype
  FROM run_facts AS f
  LEFT JOIN migratetype_names AS m
    ON m.run_id = f.run_id AND LOWER(m.name) = 'highatomic'
  GROUP BY
    f.run_id
), zone_locked_runs AS (
  SELECT
    run_id,
    COUNT(*) AS events,
    COUNT(percpu_refill) > 0 AS freelist_known
  FROM mm_page_alloc_zone_locked
  GROUP BY
    run_id
), served AS (
  SELECT
    z.run_id,
    z.`order`,
    COUNT(*) AS events,
    COUNT(CASE WHEN z.percpu_refill = 1 THEN 1 END) AS percpu_refill_events
  FROM mm_page_alloc_zone_locked AS z
  JOIN highatomic_type AS h
    ON h.run_id = z.run_id AND z.migratetype = h.migratetype
  WHERE
    NOT z.percpu_refill IS NULL
  GROUP BY
    z.run_id,
    z.`order`
)
SELECT
  f.run_id,
  f.labels,
  r.freelist_known,
  s.`order`,
  CASE WHEN r.freelist_known THEN COALESCE(s.events, 0) END AS events,
  CASE WHEN r.freelist_known THEN COALESCE(s.percpu_refill_events, 0) END AS percpu_refill_events,
  CASE WHEN r.freelist_known THEN COALESCE(s.events, 0) / f.duration_s END AS events_per_s,
  CASE
    WHEN r.freelist_known
    THEN CAST(100.0 AS DOUBLE) * COALESCE(s.events, 0) / r.events
  END AS pct_of_zone_locked
FROM zone_locked_runs AS r
JOIN run_facts AS f
  ON f.run_id = r.run_id
LEFT JOIN served AS s
  ON s.run_id = r.run_id
ORDER BY
  f.run_id NULLS LAST,
  s.`order` NULLS LAST;
