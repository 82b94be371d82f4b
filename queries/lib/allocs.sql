-- lib/allocs: allocations: every mm_page_alloc with its outcome and class.
-- requires: (none)
-- views: gfp_bits, page_allocs, page_alloc_classes

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
