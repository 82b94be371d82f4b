-- summary: one row per run with the headline metrics that kernel comparisons use
--
-- The numbers a kernel A/B comparison puts side by side, one row per run (the
-- high-atomic reservation study's table: THP success, compaction success,
-- pgscan_kswapd per minute, HighAtomic pageblocks, atomic allocations by
-- order; the per-CPU list study's top pfn counts; plus pollution, cross-CPU
-- frees and lost events). Each comes from its own analysis, whose header says
-- more: thp, vmstat_rates, highatomic, atomic_orders, fallback_pollution,
-- hot_pfns, pfn_reuse.
--
-- @param era VARCHAR auto [auto|A|B] force the high-atomic eligibility era instead of the run's
-- @requires mm_page_alloc
-- @optional mm_page_free mm_page_alloc_extfrag lost_events vmstat pagetypeinfo_blocks
-- @derived page_pairs pfn_allocs
-- @include allocs, compaction, thp, vmstat
--
-- @columns
--   kernel_release                 text   uname -r
--   highatomic_era                 text   'A' or 'B', the eligibility rule applied
--   duration_s                     s      capture window
--   allocs                         count  mm_page_alloc events (attempts)
--   thp_fault_success_pct          %      100 * THP faults that got a huge page / THP faults:
--                                         vmstat thp_fault_alloc / (alloc + fallback), else the
--                                         trace model (lib/thp.sql thp_fault_success)
--   thp_fault_success_source       text   'vmstat' or 'trace' (NULL: no value)
--   compaction_success_pct         %      100 * direct compactions that gave the page / stalls:
--                                         vmstat compact_success / compact_stall, else the trace
--                                         model (lib/compaction.sql compaction_success)
--   compaction_success_source      text   'vmstat' or 'trace' (NULL: no value)
--   pgscan_kswapd_per_min          /min   vmstat: pgscan_kswapd delta per minute
--   highatomic_pageblocks_max      count  pagetypeinfo: largest HighAtomic total over all zones
--                                         in one sample
--   eligible_allocs_order_1_3      count  high-atomic-eligible allocations at orders 1-3
--   eligible_allocs_order_4_plus   count  eligible allocations at orders 4 and above
--   pollution_per_1000_allocs      /1000  fragmenting fallbacks (mm_page_alloc_extfrag with
--                                         fallback_order < pageblock order: the page split a
--                                         foreign pageblock) per 1,000 successful allocations;
--                                         whole-pageblock claims do not pollute and are not
--                                         counted
--   top5_pfn_allocs                list   allocation counts of the 5 most-allocated pfns,
--                                         descending
--   cross_cpu_free_pct             %      of alloc-free pairs freed on another CPU than allocated
--   lost_events                    count  events the ring buffer dropped (runs table, else
--                                         lost_events)
--
-- Caveats: the two success rates come from vmstat when the run's samples give
-- them and from the trace otherwise (a bare trace.dat; the trace's events
-- inside vmstat's window when there is one), as thp's trace_* columns: the
-- models, how they were checked against vmstat and where they can differ are
-- in thp's header.
-- pgscan_kswapd and pagetypeinfo columns are NULL for runs without procfs
-- samples. pollution_per_1000_allocs is 0 for a run without
-- extfrag events, which may mean the event was not recorded (a note says so).
-- Era rules and their limits: atomic_orders. Matching by head pfn: pfn_reuse.
WITH
-- each allocation's class (lib/allocs.sql) under the run's era or the one forced
classed AS (
  SELECT c.run_id, c."order", c.failed, c.has_gfp_table, c.alloc_class
  FROM _alloc_classes_in_era($era) AS c
),
alloc_counts AS (
  SELECT
    c.run_id,
    count(*) AS allocs,
    count(CASE WHEN NOT c.failed THEN 1 END) AS allocs_ok,
    count(CASE WHEN c."order" BETWEEN 1 AND 3 AND c.alloc_class = 'highatomic_eligible' THEN 1 END)
      AS eligible_allocs_order_1_3,
    count(CASE WHEN c."order" >= 4 AND c.alloc_class = 'highatomic_eligible' THEN 1 END)
      AS eligible_allocs_order_4_plus,
    bool_or(c.has_gfp_table) AS has_gfp_table
  FROM classed AS c
  GROUP BY c.run_id
),
vm AS (
  SELECT
    run_id,
    60.0 * _vmstat_delta('pgscan_kswapd', name, delta)
      / nullif(max(window_s), 0) AS pgscan_kswapd_per_min
  FROM vmstat_deltas
  GROUP BY run_id
),
highatomic_samples AS (
  SELECT run_id, ts,
         CAST(sum(CASE WHEN lower(CAST(migratetype AS VARCHAR)) = 'highatomic' THEN blocks ELSE 0 END)
              AS BIGINT) AS pageblocks
  FROM pagetypeinfo_blocks
  GROUP BY run_id, ts
),
highatomic AS (
  SELECT run_id, max(pageblocks) AS highatomic_pageblocks_max
  FROM highatomic_samples
  GROUP BY run_id
),
pollution AS (
  SELECT e.run_id, count(*) AS events
  FROM mm_page_alloc_extfrag AS e
  JOIN run_facts AS rf ON rf.run_id = e.run_id
  WHERE e.fallback_order < rf.pageblock_order
  GROUP BY e.run_id
),
top5 AS (
  SELECT run_id, list(allocs ORDER BY rank) AS top5_pfn_allocs
  FROM pfn_allocs
  WHERE rank <= 5
  GROUP BY run_id
),
cross_cpu AS (
  SELECT run_id,
         100.0 * count(CASE WHEN NOT same_cpu THEN 1 END) / count(*) AS cross_cpu_free_pct
  FROM page_pairs
  WHERE NOT reuse
  GROUP BY run_id
),
lost AS (
  SELECT run_id, CAST(sum(missed) AS BIGINT) AS missed FROM lost_events GROUP BY run_id
),
run_lost AS (
  SELECT run_id, lost_events FROM runs
)
SELECT
  f.run_id,
  f.labels,
  f.kernel_release,
  _applied_era($era, f.highatomic_era) AS highatomic_era,
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
  1000.0 * coalesce(p.events, 0) / nullif(a.allocs_ok, 0) AS pollution_per_1000_allocs,
  t.top5_pfn_allocs,
  c.cross_cpu_free_pct,
  coalesce(r.lost_events, l.missed, 0) AS lost_events
FROM run_facts AS f
LEFT JOIN alloc_counts AS a ON a.run_id = f.run_id
LEFT JOIN vm AS v ON v.run_id = f.run_id
LEFT JOIN highatomic AS h ON h.run_id = f.run_id
LEFT JOIN pollution AS p ON p.run_id = f.run_id
LEFT JOIN top5 AS t ON t.run_id = f.run_id
LEFT JOIN cross_cpu AS c ON c.run_id = f.run_id
LEFT JOIN lost AS l ON l.run_id = f.run_id
LEFT JOIN run_lost AS r ON r.run_id = f.run_id
LEFT JOIN thp_fault_success AS tt ON tt.run_id = f.run_id
LEFT JOIN compaction_success AS ct ON ct.run_id = f.run_id
ORDER BY f.run_id
