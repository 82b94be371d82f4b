-- reclaim_wakes: kswapd and kcompactd wake-ups by order, and direct reclaim stall durations
--
-- How often, and for which orders, did allocations wake the background
-- reclaim and compaction threads, and how long did tasks stall in direct
-- reclaim? The defrag_mode study: defrag_mode wakes kswapd at pageblock order for every
-- fallback; the high-atomic reservation study watched pgscan_kswapd.
--
-- Caveats (KERNEL-ERAS.md section 1): mm_vmscan_wakeup_kswapd fires only
-- when kswapd is actually woken; gfp 0 at order 0 is a watermark-boost wake;
-- with defrag_mode=1 (6.15+) the wake order is raised to at least
-- pageblock_order. mm_vmscan_kswapd_wake is kswapd starting to balance.
-- kcompactd_wake order -1 is a proactive-compaction wake. A direct reclaim
-- stall is a direct_reclaim_begin paired with the next _end of the same task;
-- the 4.19 begin also carries may_writepage and classzone_idx (not used).

-- @section wakes: kswapd and kcompactd wake-ups per run, source and order
-- @any_of mm_vmscan_wakeup_kswapd mm_vmscan_kswapd_wake mm_compaction_wakeup_kcompactd mm_compaction_kcompactd_wake
-- @columns
--   source        text   wakeup_kswapd (an allocation woke kswapd), kswapd_wake (kswapd
--                        starts balancing), wakeup_kcompactd (kswapd/allocator woke
--                        kcompactd), kcompactd_wake (kcompactd starts)
--   order         order  order of the wake (-1: proactive compaction)
--   wakes         count  events
--   boost_wakes   count  wakeup_kswapd with gfp 0 at order 0 (watermark boost); NULL elsewhere
--   wakes_per_s   /s     per second of capture
WITH
wakes AS (
  SELECT run_id, 'wakeup_kswapd' AS source, "order",
         CASE WHEN gfp_flags = 0 AND "order" = 0 THEN 1 ELSE 0 END AS boost
  FROM mm_vmscan_wakeup_kswapd
  UNION ALL
  SELECT run_id, 'kswapd_wake', "order", NULL FROM mm_vmscan_kswapd_wake
  UNION ALL
  SELECT run_id, 'wakeup_kcompactd', "order", NULL FROM mm_compaction_wakeup_kcompactd
  UNION ALL
  SELECT run_id, 'kcompactd_wake', "order", NULL FROM mm_compaction_kcompactd_wake
),
counts AS (
  SELECT run_id, source, "order", count(*) AS wakes, CAST(sum(boost) AS BIGINT) AS boost_wakes
  FROM wakes
  GROUP BY run_id, source, "order"
)
SELECT
  f.run_id,
  f.labels,
  c.source,
  c."order",
  c.wakes,
  c.boost_wakes,
  c.wakes / f.duration_s AS wakes_per_s
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c.source, c."order"

-- @section direct_reclaim: direct reclaim stalls per run and order, with durations
-- @include pairing
-- @requires mm_vmscan_direct_reclaim_begin
-- @optional mm_vmscan_direct_reclaim_end
-- @columns
--   order               order  order of the allocation that stalled
--   stalls              count  direct_reclaim_begin events
--   timed_stalls        count  of them, paired with their end
--   duration_p50_ns     ns     median stall
--   duration_p90_ns     ns     90th percentile of the stalls
--   duration_p99_ns     ns     99th percentile
--   duration_max_ns     ns     longest stall
--   total_duration_ns   ns     sum of stalls
--   nr_reclaimed        pages  pages reclaimed by the timed stalls
--   stalls_per_s        /s     stalls per second of capture
WITH
bounds AS (
  SELECT run_id, pid, ts, 1 AS is_begin, "order", CAST(NULL AS UBIGINT) AS nr_reclaimed
  FROM mm_vmscan_direct_reclaim_begin
  UNION ALL
  SELECT run_id, pid, ts, 0 AS is_begin, NULL, nr_reclaimed
  FROM mm_vmscan_direct_reclaim_end
),
-- every begin, with its end when the task's next event is one (lib/pairing.sql)
stalls AS (
  SELECT run_id, begin_row."order" AS "order",
         end_row.ts - begin_row.ts AS duration_ns,
         end_row.nr_reclaimed AS nr_reclaimed
  FROM _begin_end_pairs(bounds)
  WHERE begin_row IS NOT NULL
),
per_order AS (
  SELECT run_id, "order",
         count(*) AS stalls,
         count(duration_ns) AS timed_stalls,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ns) AS duration_p50_ns,
         percentile_cont(0.9) WITHIN GROUP (ORDER BY duration_ns) AS duration_p90_ns,
         percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ns) AS duration_p99_ns,
         max(duration_ns) AS duration_max_ns,
         CAST(sum(duration_ns) AS BIGINT) AS total_duration_ns,
         CAST(sum(nr_reclaimed) AS BIGINT) AS nr_reclaimed
  FROM stalls
  GROUP BY run_id, "order"
)
SELECT
  f.run_id,
  f.labels,
  p."order",
  p.stalls,
  p.timed_stalls,
  p.duration_p50_ns,
  p.duration_p90_ns,
  p.duration_p99_ns,
  p.duration_max_ns,
  p.total_duration_ns,
  p.nr_reclaimed,
  p.stalls / f.duration_s AS stalls_per_s
FROM per_order AS p
JOIN run_facts AS f ON f.run_id = p.run_id
ORDER BY f.run_id, p."order"
