-- thp: THP fault and compaction success from vmstat and from the trace, and what the allocator did at the huge page order
--
-- How often did a THP fault get a huge page, how often did direct compaction
-- succeed, and what else allocated at the huge page order during the capture?
-- vmstat gives the rates as counter deltas over its sampling window (the
-- high-atomic and defrag_mode studies' headline metrics). The trace gives the
-- same two rates by a model of the kernel's code paths (below), so a bare
-- trace.dat without /proc samples has them too, and beside vmstat they check
-- each other: the trace_* columns count only events inside the vmstat window
-- when the run has one.
--
-- THP fault model (lib/thp.sql thp_fault_attempts): a fault is one or two
-- mm_page_alloc attempts at the PMD huge page order (thp_order: the order the
-- trace's __GFP_THISNODE THP attempts use, else pageblock_order) whose gfp_flags
-- hold every bit of GFP_TRANSHUGE_LIGHT, read from the run's print_flags. On
-- NUMA kernels the first attempt adds __GFP_THISNODE | __GFP_NORETRY; a failed
-- first attempt that allowed direct reclaim is retried at once by the same task
-- without them. Faults = attempts - retries; a fault succeeded when one of its
-- attempts got a page. khugepaged's collapses are kept apart (kind
-- 'khugepaged'), as are page-cache large folios and hugetlb pages (kind
-- 'other': their masks lack __GFP_NOMEMALLOC). Measured on Linux 6.18 (2 CPUs,
-- one node, THP madvise; 44 captures of examples/ab-defrag-mode.sh, 22 with
-- vm.defrag_mode=0 and 22 with 1, 16 of them with the 64 KiB and 256 KiB mTHP
-- sizes on, and examples/thp-faults: 15,620 faults, 72-100% success): the
-- trace's failed faults equal thp_fault_fallback on every capture; its
-- successes equal thp_fault_alloc on 22 and exceed it by 1 to 5 on the others,
-- at most 0.29 percentage points of success rate. Every surplus found on the captures that record order-0 pages
-- is a lost race (below), from multi-threaded processes beside the
-- single-threaded workload. Where they differ:
-- two threads faulting the same 2 MiB at once both allocate a huge page, and
-- the one that takes the page-table lock second frees its page unmapped
-- (thp_fault_alloc is counted at mapping: one fault in vmstat, two successes
-- in the trace; the trace cannot tell this from a map and unmap, see
-- lib/thp.sql thp_fault_attempts); a memcg charge failure after a successful
-- allocation (vmstat fallback, trace success; thp_fault_fallback_charge counts
-- them); MADV_COLLAPSE and huge shmem pages (the THP mask from a user task:
-- trace faults, vmstat collapse or file counters); faults at the window's
-- edges.
--
-- Direct compaction model (lib/compaction.sql direct_compactions): one direct
-- compaction per mm_compaction_try_to_compact_pages; it is a stall (vmstat
-- compact_stall) unless every zone was skipped, i.e. unless no
-- mm_compaction_deferred, mm_compaction_end or mm_compaction_defer_reset of the
-- same task follows before the allocation ends. It succeeded (compact_success)
-- when a defer_reset follows that the allocation logged for its page's zone,
-- and, if the run records mm_page_alloc, the allocation got its page right
-- there. The other defer_reset a try can show is try_to_compact_pages' own,
-- for the zone that reported success (watermark already met, or a run that
-- ended with status success) before any page was taken: it is the try's first
-- when the zone's deferral state is not cleared (consider above 0 or limit
-- above 1), when an end with status success precedes it, or when the loop had
-- not reached its zone before. Under vm.defrag_mode=1 that zone success is
-- often followed by no page (the watermark counts every migratetype's free
-- pages, the freelist refuses another type's pageblock: compaction.direct's
-- failed_when_ready), and the allocation may get one later without
-- compaction. Measured on the same captures and examples/memory-pressure
-- (19,566 stalls, 1-99% success; orders 4, 6 and 9): stalls and successes
-- equal to compact_stall and compact_success on every capture. Where it can differ: a true success whose
-- zone the loop passed without an event (an async run that stopped to
-- reschedule without status contended, or a zone skipped by the free-page
-- check that precedes mm_compaction_suitable) is taken for the zone's own
-- reset, unless a second defer_reset follows; a run recorded without
-- mm_compaction_suitable or mm_compaction_finished sees fewer zones reached;
-- try_to_compact_pages is not traced without __GFP_IO, but such a compaction
-- returns COMPACT_SKIPPED and is no stall.
--
-- The rates themselves are computed once, in lib/thp.sql and lib/compaction.sql (thp_fault_success,
-- compaction_success), for this analysis and summary alike.
--
-- @param thp_order INTEGER NULL [0..20] the huge page order of the trace columns and allocs (default: the run's, see thp_order_source)
-- @any_of mm_page_alloc mm_compaction_try_to_compact_pages
-- @optional vmstat
-- @include allocs, compaction, thp, vmstat
--
-- Caveats (KERNEL-ERAS.md section 6): compact_stall = compact_success +
-- compact_fail, and a skipped compaction counts in neither (6.18).
-- thp_fault_fallback includes memcg charge failures; thp_fault_fallback_charge
-- exists from 5.10 (NULL before). The order_* columns count every allocation at
-- that order (THP faults, khugepaged, hugetlb, page cache), not THP faults only.
-- A run without vmstat samples has NULL vmstat columns; the trace_* columns
-- need mm_page_alloc at the huge page order (a filter dropping order 9 or
-- blocking allocations leaves them empty) and, for compaction, the compaction
-- events. The model is read from 6.18's allocator; it holds wherever the
-- THP first try adds __GFP_THISNODE (NUMA kernels since 4.20 or so).

-- @prelude
-- thp_order replaces the run's order for every THP view of lib/thp.sql.
CREATE TEMP TABLE thp_run_orders AS
SELECT run_id, coalesce(q.thp_order, o.thp_order) AS thp_order,
       CASE WHEN q.thp_order IS NOT NULL THEN 'parameter thp_order' ELSE o.thp_order_source END
         AS thp_order_source
FROM _thp_orders AS o CROSS JOIN query_params AS q;
CREATE OR REPLACE TEMP VIEW _thp_orders AS SELECT * FROM thp_run_orders;

-- @section thp: per run: vmstat and trace THP fault and compaction success, order attempts
-- @columns
--   thp_order                      order  the huge page order used for the trace columns
--   thp_order_source               text   where it came from
--   vmstat_window_s                s      between first and last vmstat sample (NULL: no procfs)
--   thp_fault_alloc                count  delta of thp_fault_alloc
--   thp_fault_fallback             count  delta of thp_fault_fallback
--   thp_fault_fallback_charge      count  delta of thp_fault_fallback_charge (memcg charge failures)
--   thp_fault_success_pct          %      100 * alloc / (alloc + fallback)
--   thp_fault_alloc_success_pct    %      same with memcg-charge fallbacks removed (allocator only)
--   compact_stall                  count  delta of compact_stall (direct compactions)
--   compact_success                count  delta of compact_success
--   compaction_success_pct         %      100 * compact_success / compact_stall
--   compact_scan_ratio             ratio  compact_migrate_scanned / compact_free_scanned
--   thp_collapse_success_pct       %      khugepaged: 100 * collapse_alloc / (collapse_alloc +
--                                         collapse_alloc_failed)
--   trace_window                   text   'vmstat' (trace_* count events inside the vmstat window)
--                                         or 'capture'
--   trace_thp_faults               count  THP faults in the trace (attempts - retries)
--   trace_thp_fault_retries        count  second attempts after a failed local-node try
--   trace_thp_fault_successes      count  faults that got a huge page
--   trace_thp_fault_success_pct    %      100 * successes / faults
--   trace_compact_tries            count  mm_compaction_try_to_compact_pages events
--   trace_compact_stalls           count  of them, stalls by the model
--   trace_compact_successes        count  of them, successes by the model
--   trace_compaction_success_pct   %      100 * successes / stalls
--   order_attempts                 count  mm_page_alloc events at thp_order, any caller
--   order_failures                 count  of them, failed (pfn = -1UL)
--   order_success_pct              %      100 * (attempts - failures) / attempts
--   order_attempts_per_s           /s     attempts per second of capture
WITH
vm AS (
  SELECT
    run_id,
    max(window_s) AS vmstat_window_s,
    _vmstat_delta('compact_migrate_scanned', name, delta) AS compact_migrate_scanned,
    _vmstat_delta('compact_free_scanned', name, delta) AS compact_free_scanned,
    _vmstat_delta('thp_collapse_alloc', name, delta) AS thp_collapse_alloc,
    _vmstat_delta('thp_collapse_alloc_failed', name, delta) AS thp_collapse_alloc_failed
  FROM vmstat_deltas
  GROUP BY run_id
),
huge_allocs AS (
  SELECT a.run_id,
         count(*) AS order_attempts,
         count(CASE WHEN a.failed THEN 1 END) AS order_failures
  FROM page_allocs AS a
  JOIN _thp_orders AS o ON o.run_id = a.run_id AND a."order" = o.thp_order
  GROUP BY a.run_id
)
SELECT
  f.run_id,
  f.labels,
  o.thp_order,
  o.thp_order_source,
  v.vmstat_window_s,
  t.thp_fault_alloc,
  t.thp_fault_fallback,
  t.thp_fault_fallback_charge,
  t.vmstat_pct AS thp_fault_success_pct,
  t.vmstat_alloc_pct AS thp_fault_alloc_success_pct,
  c.compact_stall,
  c.compact_success,
  c.vmstat_pct AS compaction_success_pct,
  1.0 * v.compact_migrate_scanned / nullif(v.compact_free_scanned, 0) AS compact_scan_ratio,
  100.0 * v.thp_collapse_alloc / nullif(v.thp_collapse_alloc + v.thp_collapse_alloc_failed, 0)
    AS thp_collapse_success_pct,
  w.trace_window,
  t.trace_faults AS trace_thp_faults,
  t.trace_retries AS trace_thp_fault_retries,
  t.trace_successes AS trace_thp_fault_successes,
  t.trace_pct AS trace_thp_fault_success_pct,
  c.trace_tries AS trace_compact_tries,
  c.trace_stalls AS trace_compact_stalls,
  c.trace_successes AS trace_compact_successes,
  c.trace_pct AS trace_compaction_success_pct,
  coalesce(h.order_attempts, 0) AS order_attempts,
  coalesce(h.order_failures, 0) AS order_failures,
  100.0 * (h.order_attempts - h.order_failures) / nullif(h.order_attempts, 0) AS order_success_pct,
  coalesce(h.order_attempts, 0) / f.duration_s AS order_attempts_per_s
FROM run_facts AS f
JOIN _thp_orders AS o ON o.run_id = f.run_id
JOIN trace_windows AS w ON w.run_id = f.run_id
JOIN thp_fault_success AS t ON t.run_id = f.run_id
JOIN compaction_success AS c ON c.run_id = f.run_id
LEFT JOIN vm AS v ON v.run_id = f.run_id
LEFT JOIN huge_allocs AS h ON h.run_id = f.run_id
ORDER BY f.run_id

-- @section allocs: per run: every allocation at the huge page order by kind, attempt and gfp mask
-- @columns
--   thp_order     order  the huge page order
--   kind          text   'fault' (THP mask, not khugepaged), 'khugepaged', 'other' (page-cache
--                        large folios, hugetlb, ...: no THP mask), 'unknown' (no gfp table)
--   attempt       text   faults only: 'local-node try' (__GFP_THISNODE), 'retry' (after a
--                        failed local-node try), 'single try' (no local-node try before)
--   gfp_flags     flags  the mask
--   gfp_names     text   its single-bit flag names from the run's print_flags, '|'-separated
--   attempts      count  mm_page_alloc events
--   failures      count  of them, failed (pfn = -1UL)
--   success_pct   %      100 * (attempts - failures) / attempts
WITH
rows_ AS (
  SELECT run_id, thp_order, kind,
         CASE WHEN is_retry THEN 'retry' WHEN thisnode_try THEN 'local-node try' ELSE 'single try' END
           AS attempt,
         gfp_flags, failed
  FROM thp_fault_attempts
  UNION ALL
  SELECT run_id, thp_order, kind, NULL, gfp_flags, failed
  FROM _thp_order_allocs
  WHERE kind <> 'fault'
),
counts AS (
  SELECT r.run_id, r.thp_order, r.kind, r.attempt, r.gfp_flags,
         count(*) AS attempts, count(CASE WHEN r.failed THEN 1 END) AS failures
  FROM rows_ AS r
  GROUP BY ALL
),
names AS (
  SELECT c.run_id, c.gfp_flags, string_agg(p.name, '|' ORDER BY p.value) AS gfp_names
  FROM (SELECT DISTINCT run_id, gfp_flags FROM counts) AS c
  JOIN print_flags AS p
    ON p.run_id = c.run_id AND p.event = 'mm_page_alloc' AND p.field = 'gfp_flags'
   AND p.kind = 'flags' AND p.value > 0 AND (p.value & (p.value - 1)) = 0
   AND (c.gfp_flags & p.value) <> 0
  GROUP BY c.run_id, c.gfp_flags
)
SELECT
  f.run_id,
  f.labels,
  c.thp_order,
  c.kind,
  c.attempt,
  c.gfp_flags,
  n.gfp_names,
  c.attempts,
  c.failures,
  100.0 * (c.attempts - c.failures) / c.attempts AS success_pct
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
LEFT JOIN names AS n ON n.run_id = c.run_id AND n.gfp_flags = c.gfp_flags
ORDER BY f.run_id, c.kind, c.attempt, c.attempts DESC, c.thp_order, c.gfp_flags
