-- lib/allocs: allocations: every mm_page_alloc with its outcome and class.
-- include: (none)
-- views: gfp_bits, page_allocs, page_alloc_classes
-- internal: _failed_pfn, _applied_era, _alloc_classes_in_era

-- The gfp bits that decide an allocation's class, per run, read from the run's
-- own print_flags (the __print_flags table of mm_page_alloc's gfp_flags). Only
-- single-bit entries: composites such as GFP_KERNEL come first in that table.
-- A NULL column: the run's kernel has no such flag (__GFP_ATOMIC is gone in 6.6,
-- section 2).
-- @columns
--   run_id               text   the run
--   gfp_high             flags  __GFP_HIGH's bit in the run's kernel (NULL: no such flag)
--   gfp_atomic           flags  __GFP_ATOMIC's bit (NULL from 6.6 on: the flag is gone)
--   gfp_direct_reclaim   flags  __GFP_DIRECT_RECLAIM's bit
--   gfp_kswapd_reclaim   flags  __GFP_KSWAPD_RECLAIM's bit
--   gfp_nomemalloc       flags  __GFP_NOMEMALLOC's bit
--   gfp_comp             flags  __GFP_COMP's bit
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

-- A failed allocation records pfn = -1UL (section 1), which is 2^64-1, or 2^32-1 on a
-- kernel with 32-bit longs (the dataset widens it, value kept): the one place the rule
-- is written. page_allocs.failed applies it; so do the derived page tables, which pair
-- page frames (queries/derived_tables.py).
CREATE TEMP MACRO _failed_pfn(pfn) AS pfn IN (18446744073709551615, 4294967295);

-- Every mm_page_alloc with its outcome: failed where the allocation recorded pfn =
-- -1UL, 2^64-1 or, on a kernel with 32-bit longs, 2^32-1 (_failed_pfn).
-- @columns
--   run_id        text   the run
--   ts            ns     when the allocation was traced
--   cpu           code   the CPU it ran on
--   pid           code   the allocating task
--   comm          text   the task's command name
--   pfn           pfn    the first page frame (2^64-1 or 2^32-1: failed)
--   order         order  allocation order
--   gfp_flags     flags  the gfp mask (bits: gfp_bits, print_flags)
--   migratetype   code   the migratetype asked for (names: migratetype_names)
--   failed        bool   no page was handed out (pfn = -1UL)
CREATE TEMP VIEW page_allocs AS
SELECT
  run_id, ts, cpu, pid, comm, pfn, "order", gfp_flags, migratetype,
  _failed_pfn(pfn) AS failed
FROM mm_page_alloc;

-- Every allocation with both high-atomic eligibility rules (KERNEL-ERAS.md
-- section 3) evaluated on the run's own gfp bits, and its class under each era,
-- the one place the rule is written. Analyses take the run's era
-- (run_facts.highatomic_era: alloc_class) or the one the user forced
-- (alloc_class_era_a, alloc_class_era_b):
--   era A: order > 0, __GFP_ATOMIC, no __GFP_NOMEMALLOC
--   era B: order > 0, __GFP_HIGH, no __GFP_DIRECT_RECLAIM, no __GFP_NOMEMALLOC
-- blocking = __GFP_DIRECT_RECLAIM set. has_gfp_table is false when the run's
-- print_flags carry no gfp table; the three flags are then meaningless.
-- Classes: highatomic_eligible (eligible under the era), other_nonblocking (not
-- eligible, no __GFP_DIRECT_RECLAIM: cannot sleep), blocking (not eligible,
-- __GFP_DIRECT_RECLAIM set), unknown (the run has no gfp table).
-- @columns
--   run_id              text   the run
--   ts                  ns     when the allocation was traced
--   comm                text   the task's command name
--   pfn                 pfn    the first page frame (as page_allocs)
--   order               order  allocation order
--   failed              bool   no page was handed out
--   run_era             text   'A' or 'B': the run's high-atomic era (run_facts.highatomic_era)
--   has_gfp_table       bool   the run's print_flags carry a gfp table (else the rules cannot tell)
--   eligible_era_a      bool   eligible for the high-atomic reserve under era A's rule
--   eligible_era_b      bool   eligible under era B's rule
--   blocking            bool   __GFP_DIRECT_RECLAIM set: the allocation may sleep
--   alloc_class_era_a   text   the class under era A: highatomic_eligible, other_nonblocking,
--                                blocking or unknown
--   alloc_class_era_b   text   the class under era B
--   alloc_class         text   the class under the run's era (run_era)
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
),
rules AS (
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
  JOIN gfp_rules AS r ON r.run_id = a.run_id
),
classes AS (
  SELECT
    *,
    CASE WHEN NOT has_gfp_table THEN 'unknown'
         WHEN eligible_era_a THEN 'highatomic_eligible'
         WHEN NOT blocking THEN 'other_nonblocking'
         ELSE 'blocking' END AS alloc_class_era_a,
    CASE WHEN NOT has_gfp_table THEN 'unknown'
         WHEN eligible_era_b THEN 'highatomic_eligible'
         WHEN NOT blocking THEN 'other_nonblocking'
         ELSE 'blocking' END AS alloc_class_era_b
  FROM rules
)
SELECT
  *,
  CASE WHEN run_era = 'A' THEN alloc_class_era_a ELSE alloc_class_era_b END AS alloc_class
FROM classes;

-- The high-atomic era an analysis applies, the one place the choice is written: the
-- era its `era` parameter forces ('A' or 'B'), else ('auto') the run's own (run_era,
-- run_facts.highatomic_era).
CREATE TEMP MACRO _applied_era(forced, run_era) AS coalesce(nullif(forced, 'auto'), run_era);

-- page_alloc_classes under the era `forced` (an analysis' `era` parameter:
-- _applied_era): each allocation's highatomic_era and its alloc_class under it.
CREATE TEMP MACRO _alloc_classes_in_era(forced) AS TABLE
SELECT run_id, ts, comm, pfn, "order", failed, has_gfp_table,
       _applied_era(forced, run_era) AS highatomic_era,
       CASE _applied_era(forced, run_era) WHEN 'A' THEN alloc_class_era_a
            ELSE alloc_class_era_b END AS alloc_class
FROM page_alloc_classes;
