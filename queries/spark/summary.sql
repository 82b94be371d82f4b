-- summary: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH alloc_counts AS (
  SELECT
    c.run_id,
    COUNT(*) AS allocs,
    COUNT(CASE WHEN NOT c.failed THEN 1 END) AS allocs_ok,
    COUNT(
      CASE
        WHEN c.has_gfp_table
        AND c.`order` BETWEEN 1 AND 3
        AND (
          CASE
            WHEN COALESCE(NULLIF(:era, 'auto'), c.run_era) = 'A'
            THEN c.eligible_era_a
            ELSE c.eligible_era_b
          END
        )
        THEN 1
      END
    ) AS eligible_allocs_order_1_3,
    COUNT(
      CASE
        WHEN c.has_gfp_table
        AND c.`order` >= 4
        AND (
          CASE
            WHEN COALESCE(NULLIF(:era, 'auto'), c.run_era) = 'A'
            THEN c.eligible_era_a
            ELSE c.eligible_era_b
          END
        )
        THEN 1
      END
    ) AS eligible_allocs_order_4_plus,
    BOOL_OR(c.has_gfp_table) AS has_gfp_table
  FROM page_alloc_classes AS c
  GROUP BY
    c.run_id
), vm AS (
  SELECT
    run_id,
    CAST(60.0 AS DOUBLE) * MAX(CASE WHEN name = 'pgscan_kswapd' THEN delta END) / NULLIF(MAX(window_s), 0) AS pgscan_kswapd_per_min
  FROM vmstat_deltas
  GROUP BY
    run_id
), highatomic_samples AS (
  SELECT
    run_id,
    ts,
    CAST(SUM(
      CASE WHEN LOWER(CAST(migratetype AS STRING)) = 'highatomic' THEN blocks ELSE 0 END
    ) AS BIGINT) AS pageblocks
  FROM pagetypeinfo_blocks
  GROUP BY
    run_id,
    ts
), highatomic AS (
  SELECT
    run_id,
    MAX(pageblocks) AS highatomic_pageblocks_max
  FROM highatomic_samples
  GROUP BY
    run_id
), pollution AS (
  SELECT
    run_id,
    COUNT(*) AS events
  FROM mm_page_alloc_extfrag
  GROUP BY
    run_id
), top5 AS (
  SELECT
    run_id,
    TRANSFORM(SORT_ARRAY(COLLECT_LIST(NAMED_STRUCT('k0', rank, 'v', allocs)), TRUE), e -> e.v) AS top5_pfn_allocs
  FROM pfn_allocs
  WHERE
    rank <= 5
  GROUP BY
    run_id
), cross_cpu AS (
  SELECT
    run_id,
    CAST(100.0 AS DOUBLE) * COUNT(CASE WHEN NOT same_cpu THEN 1 END) / COUNT(*) AS cross_cpu_free_pct
  FROM page_pairs
  WHERE
    NOT reuse
  GROUP BY
    run_id
), lost AS (
  SELECT
    run_id,
    CAST(SUM(missed) AS BIGINT) AS missed
  FROM lost_events
  GROUP BY
    run_id
), run_lost AS (
  SELECT
    run_id,
    lost_events
  FROM runs
)
SELECT
  f.run_id,
  f.labels,
  f.kernel_release,
  COALESCE(NULLIF(:era, 'auto'), f.highatomic_era) AS highatomic_era,
  f.duration_s,
  a.allocs,
  tt.success_pct AS thp_fault_success_pct,
  tt.source AS thp_fault_success_source,
  ct.success_pct AS compaction_success_pct,
  ct.source AS compaction_success_source,
  v.pgscan_kswapd_per_min,
  h.highatomic_pageblocks_max,
  CASE WHEN a.has_gfp_table THEN a.eligible_allocs_order_1_3 END AS eligible_allocs_order_1_3,
  CASE WHEN a.has_gfp_table THEN a.eligible_allocs_order_4_plus END AS eligible_allocs_order_4_plus,
  CAST(1000.0 AS DOUBLE) * COALESCE(p.events, 0) / NULLIF(a.allocs_ok, 0) AS pollution_per_1000_allocs,
  t.top5_pfn_allocs,
  c.cross_cpu_free_pct,
  COALESCE(r.lost_events, l.missed, 0) AS lost_events
FROM run_facts AS f
LEFT JOIN alloc_counts AS a
  ON a.run_id = f.run_id
LEFT JOIN vm AS v
  ON v.run_id = f.run_id
LEFT JOIN highatomic AS h
  ON h.run_id = f.run_id
LEFT JOIN pollution AS p
  ON p.run_id = f.run_id
LEFT JOIN top5 AS t
  ON t.run_id = f.run_id
LEFT JOIN cross_cpu AS c
  ON c.run_id = f.run_id
LEFT JOIN lost AS l
  ON l.run_id = f.run_id
LEFT JOIN run_lost AS r
  ON r.run_id = f.run_id
LEFT JOIN thp_fault_success AS tt
  ON tt.run_id = f.run_id
LEFT JOIN compaction_success AS ct
  ON ct.run_id = f.run_id
ORDER BY
  f.run_id NULLS LAST;
