-- thp: THP fault and compaction success rates from vmstat, and order-9 attempts and failures from the trace
--
-- How often did a THP fault get a huge page, how often did compaction succeed,
-- and how many huge-page-order allocations did the allocator attempt and fail
-- during the capture? The rates are vmstat deltas over the capture window (the
-- the high-atomic and defrag_mode studies' headline metrics); the trace adds what vmstat cannot:
-- attempts at the huge page order by any caller, with failures (pfn = -1UL).
--
-- @param thp_order INTEGER 9 [1..30] the huge page order (9 = 2 MiB on x86-64 with 4 KiB pages)
-- @requires mm_page_alloc
-- @procfs_optional vmstat
--
-- Output columns:
--   run_id, labels                 the run
--   vmstat_window_s                seconds between first and last vmstat sample (NULL: no procfs)
--   thp_fault_alloc                delta of thp_fault_alloc
--   thp_fault_fallback             delta of thp_fault_fallback
--   thp_fault_fallback_charge      delta of thp_fault_fallback_charge (memcg charge failures)
--   thp_fault_success_pct          100 * alloc / (alloc + fallback)
--   thp_fault_alloc_success_pct    same with memcg-charge fallbacks removed (allocator only)
--   compact_stall                  delta of compact_stall (direct compactions)
--   compact_success                delta of compact_success
--   compaction_success_pct         100 * compact_success / compact_stall
--   compact_scan_ratio             compact_migrate_scanned / compact_free_scanned
--   thp_collapse_success_pct       khugepaged: 100 * collapse_alloc / (collapse_alloc + collapse_alloc_failed)
--   order_attempts                 mm_page_alloc events at thp_order
--   order_failures                 of them, failed (pfn = -1UL)
--   order_success_pct              100 * (attempts - failures) / attempts
--   order_attempts_per_s           attempts per second of capture
--
-- Caveats (KERNEL-ERAS.md section 6): compact_stall = compact_success +
-- compact_fail, and a skipped compaction counts in neither (6.18).
-- thp_fault_fallback includes memcg charge failures; thp_fault_fallback_charge
-- exists from 5.10 (NULL before). The order_* columns count every allocation at
-- that order (THP faults, khugepaged, hugetlb surplus, slab), not THP faults
-- only; there is no THP-fault tracepoint (section 1). A run without vmstat
-- samples (a bare trace.dat) has NULL vmstat columns.
WITH
vm AS (
  SELECT
    run_id,
    max(window_s) AS vmstat_window_s,
    max(CASE WHEN name = 'thp_fault_alloc' THEN delta END) AS thp_fault_alloc,
    max(CASE WHEN name = 'thp_fault_fallback' THEN delta END) AS thp_fault_fallback,
    max(CASE WHEN name = 'thp_fault_fallback_charge' THEN delta END) AS thp_fault_fallback_charge,
    max(CASE WHEN name = 'compact_stall' THEN delta END) AS compact_stall,
    max(CASE WHEN name = 'compact_success' THEN delta END) AS compact_success,
    max(CASE WHEN name = 'compact_migrate_scanned' THEN delta END) AS compact_migrate_scanned,
    max(CASE WHEN name = 'compact_free_scanned' THEN delta END) AS compact_free_scanned,
    max(CASE WHEN name = 'thp_collapse_alloc' THEN delta END) AS thp_collapse_alloc,
    max(CASE WHEN name = 'thp_collapse_alloc_failed' THEN delta END) AS thp_collapse_alloc_failed
  FROM vmstat_deltas
  GROUP BY run_id
),
huge_allocs AS (
  SELECT run_id,
         count(*) AS order_attempts,
         count(CASE WHEN failed THEN 1 END) AS order_failures
  FROM page_allocs
  WHERE "order" = $thp_order
  GROUP BY run_id
)
SELECT
  f.run_id,
  f.labels,
  v.vmstat_window_s,
  v.thp_fault_alloc,
  v.thp_fault_fallback,
  v.thp_fault_fallback_charge,
  100.0 * v.thp_fault_alloc / nullif(v.thp_fault_alloc + v.thp_fault_fallback, 0) AS thp_fault_success_pct,
  100.0 * v.thp_fault_alloc
    / nullif(v.thp_fault_alloc + v.thp_fault_fallback - coalesce(v.thp_fault_fallback_charge, 0), 0)
    AS thp_fault_alloc_success_pct,
  v.compact_stall,
  v.compact_success,
  100.0 * v.compact_success / nullif(v.compact_stall, 0) AS compaction_success_pct,
  1.0 * v.compact_migrate_scanned / nullif(v.compact_free_scanned, 0) AS compact_scan_ratio,
  100.0 * v.thp_collapse_alloc / nullif(v.thp_collapse_alloc + v.thp_collapse_alloc_failed, 0)
    AS thp_collapse_success_pct,
  coalesce(h.order_attempts, 0) AS order_attempts,
  coalesce(h.order_failures, 0) AS order_failures,
  100.0 * (h.order_attempts - h.order_failures) / nullif(h.order_attempts, 0) AS order_success_pct,
  coalesce(h.order_attempts, 0) / f.duration_s AS order_attempts_per_s
FROM run_facts AS f
LEFT JOIN vm AS v ON v.run_id = f.run_id
LEFT JOIN huge_allocs AS h ON h.run_id = f.run_id
ORDER BY f.run_id
