-- _common: views that every analysis may use. Not an analysis itself.
--
-- The engine (queries/engine.py) runs these statements after it has made a view
-- of each dataset table over the selected runs and registered, per run:
--   run_facts(run_id, labels, kernel_release, highatomic_era, highatomic_era_note,
--             extfrag_era, pageblock_order, pageblock_order_source, first_ts,
--             last_ts, duration_s)                 -- queries/eras.py
--   migratetype_names(run_id, migratetype, name, source)
--   extfrag_ownership(extfrag_era, change_ownership, meaning)
--   query_params: one row, one column per parameter of the analysis being run.
-- Kernel-era rules: queries/KERNEL-ERAS.md, cited by section.

-- The gfp bits that decide an allocation's class, per run, read from the run's
-- own print_flags (the __print_flags table of mm_page_alloc's gfp_flags). Only
-- single-bit entries: composites such as GFP_KERNEL come first in that table.
-- A NULL column: the run's kernel has no such flag (__GFP_ATOMIC is gone in 6.6,
-- section 2).
CREATE TEMP VIEW gfp_bits AS
SELECT
  run_id,
  max(CASE WHEN name = '__GFP_HIGH' THEN value END) AS gfp_high,
  max(CASE WHEN name = '__GFP_ATOMIC' THEN value END) AS gfp_atomic,
  max(CASE WHEN name = '__GFP_DIRECT_RECLAIM' THEN value END) AS gfp_direct_reclaim,
  max(CASE WHEN name = '__GFP_KSWAPD_RECLAIM' THEN value END) AS gfp_kswapd_reclaim,
  max(CASE WHEN name = '__GFP_NOMEMALLOC' THEN value END) AS gfp_nomemalloc,
  max(CASE WHEN name = '__GFP_COMP' THEN value END) AS gfp_comp
FROM print_flags
WHERE event = 'mm_page_alloc'
  AND field = 'gfp_flags'
  AND kind = 'flags'
  AND value > 0
  AND (value & (value - 1)) = 0
GROUP BY run_id;

-- compact_result names (section 7), the fallback when a run's print_flags lack
-- the mm_compaction_end status table.
CREATE TEMP TABLE compact_result_enum AS
SELECT * FROM (VALUES
  (0, 'not_suitable_zone'), (1, 'skipped'), (2, 'deferred'), (3, 'no_suitable_page'),
  (4, 'continue'), (5, 'complete'), (6, 'partial_skipped'), (7, 'contended'),
  (8, 'success')) AS t(status, name);

-- Compaction status names per run: the run's own __print_symbolic table first.
CREATE TEMP VIEW compaction_status_names AS
SELECT f.run_id, e.status, coalesce(p.name, e.name) AS name,
       CASE WHEN p.name IS NULL THEN 'KERNEL-ERAS.md section 7' ELSE 'print_flags' END AS source
FROM run_facts AS f
CROSS JOIN compact_result_enum AS e
LEFT JOIN (
  SELECT run_id, CAST(value AS INTEGER) AS status, min(name) AS name
  FROM print_flags
  WHERE event = 'mm_compaction_end' AND field = 'status' AND kind = 'symbolic'
  GROUP BY run_id, CAST(value AS INTEGER)
) AS p ON p.run_id = f.run_id AND p.status = e.status;

-- Every mm_page_alloc with its outcome: a failed allocation records pfn = -1UL
-- (section 1), which is 2^64-1, or 2^32-1 on a kernel with 32-bit longs.
CREATE TEMP VIEW page_allocs AS
SELECT
  run_id, ts, cpu, pid, comm, pfn, "order", gfp_flags, migratetype,
  pfn IN (18446744073709551615, 4294967295) AS failed
FROM mm_page_alloc;

-- Every allocation with both high-atomic eligibility rules (KERNEL-ERAS.md
-- section 3) evaluated on the run's own gfp bits; analyses pick the run's era
-- (run_facts.highatomic_era) or the one the user forced:
--   era A: order > 0, __GFP_ATOMIC, no __GFP_NOMEMALLOC
--   era B: order > 0, __GFP_HIGH, no __GFP_DIRECT_RECLAIM, no __GFP_NOMEMALLOC
-- blocking = __GFP_DIRECT_RECLAIM set. has_gfp_table is false when the run's
-- print_flags carry no gfp table; the three flags are then meaningless.
CREATE TEMP VIEW page_alloc_classes AS
WITH gfp_rules AS (
  SELECT
    f.run_id,
    f.highatomic_era,
    g.gfp_direct_reclaim IS NOT NULL AS has_gfp_table,
    coalesce(g.gfp_high, 0) AS gfp_high,
    coalesce(g.gfp_atomic, 0) AS gfp_atomic,
    coalesce(g.gfp_direct_reclaim, 0) AS gfp_direct_reclaim,
    coalesce(g.gfp_nomemalloc, 0) AS gfp_nomemalloc
  FROM run_facts AS f
  LEFT JOIN gfp_bits AS g ON g.run_id = f.run_id
)
SELECT
  a.run_id, a.ts, a.comm, a.pfn, a."order", a.failed,
  r.highatomic_era AS run_era,
  r.has_gfp_table,
  a."order" > 0
    AND (a.gfp_flags & r.gfp_atomic) <> 0
    AND (a.gfp_flags & r.gfp_nomemalloc) = 0 AS eligible_era_a,
  a."order" > 0
    AND (a.gfp_flags & r.gfp_high) <> 0
    AND (a.gfp_flags & r.gfp_direct_reclaim) = 0
    AND (a.gfp_flags & r.gfp_nomemalloc) = 0 AS eligible_era_b,
  (a.gfp_flags & r.gfp_direct_reclaim) <> 0 AS blocking
FROM page_allocs AS a
JOIN gfp_rules AS r ON r.run_id = a.run_id;

-- vmstat counters over each run's capture window: first and last sample.
CREATE TEMP VIEW vmstat_deltas AS
SELECT
  run_id,
  name,
  min(ts) AS first_ts,
  max(ts) AS last_ts,
  min_by(value, ts) AS first_value,
  max_by(value, ts) AS last_value,
  max_by(value, ts) - min_by(value, ts) AS delta,
  (max(ts) - min(ts)) / 1e9 AS window_s
FROM vmstat
GROUP BY run_id, name;
