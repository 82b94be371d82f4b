-- compaction: direct vs kcompactd compaction runs, durations, end status, try_to_compact_pages, deferrals
--
-- How often does the kernel compact memory, who pays for it (an allocating task
-- in direct compaction, or kcompactd in the background), how long does each run
-- take and how does it end? A run is one compact_zone() body: an
-- mm_compaction_begin paired with the next mm_compaction_end of the same task
-- (lib/compaction.sql compaction_runs).
--
-- Caveats (KERNEL-ERAS.md sections 1, 7): kind is 'kcompactd' for the
-- kcompactdN threads (their proactive runs included) and 'direct' for every
-- other task. Early returns (watermark already met, zone unsuitable) precede
-- begin, so end.status is success, complete, partial_skipped or contended on
-- 6.18; status names come from the run's print_flags, else the section 7 enum.
-- success means compaction produced a free page of the order; whether the
-- allocation then got it shows only in its mm_page_alloc. try_to_compact_pages
-- is not emitted without __GFP_IO. defer_reset fires both on compaction success
-- and when the allocation really succeeded. A begin without an end (capture
-- stopped mid-run) or an end without a begin (started before capture) is
-- counted in the status section but has no duration.
-- @include compaction

-- @section summary: per run and kind: compaction runs, success rate, duration percentiles
-- @requires mm_compaction_end
-- @optional mm_compaction_begin
-- @columns
--   kind                text   'direct' or 'kcompactd'
--   runs                count  compaction runs (mm_compaction_end events)
--   timed_runs          count  of them, paired with their begin (have a duration)
--   successes           count  runs that ended with status success
--   success_pct         %      100 * successes / runs
--   duration_p50_ns     ns     median duration
--   duration_p90_ns     ns     90th percentile of the duration
--   duration_p99_ns     ns     99th percentile of the duration
--   duration_max_ns     ns     longest run
--   total_duration_ns   ns     sum of durations
--   runs_per_s          /s     runs per second of capture
WITH
named AS (
  SELECT c.*, n.name AS status_name
  FROM compaction_runs AS c
  LEFT JOIN compaction_status_names AS n ON n.run_id = c.run_id AND n.status = c.status
),
per_kind AS (
  SELECT
    run_id,
    kind,
    count(*) AS runs,
    count(duration_ns) AS timed_runs,
    count(CASE WHEN status_name = 'success' THEN 1 END) AS successes,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ns) AS duration_p50_ns,
    percentile_cont(0.9) WITHIN GROUP (ORDER BY duration_ns) AS duration_p90_ns,
    percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ns) AS duration_p99_ns,
    max(duration_ns) AS duration_max_ns,
    CAST(sum(duration_ns) AS BIGINT) AS total_duration_ns
  FROM named
  GROUP BY run_id, kind
)
SELECT
  f.run_id,
  f.labels,
  k.kind,
  k.runs,
  k.timed_runs,
  k.successes,
  100.0 * k.successes / k.runs AS success_pct,
  k.duration_p50_ns,
  k.duration_p90_ns,
  k.duration_p99_ns,
  k.duration_max_ns,
  k.total_duration_ns,
  k.runs / f.duration_s AS runs_per_s
FROM per_kind AS k
JOIN run_facts AS f ON f.run_id = k.run_id
ORDER BY f.run_id, k.kind

-- @section status: per run and kind: how compaction runs ended, by status name
-- @requires mm_compaction_end
-- @optional mm_compaction_begin
-- @columns
--   kind                text   'direct' or 'kcompactd'
--   status              code   compact_result value
--   status_name         text   its name (run's print_flags, else KERNEL-ERAS.md section 7)
--   runs                count  runs that ended so
--   pct_of_kind         %      of the kind's runs in the run
WITH
counts AS (
  SELECT run_id, kind, status, count(*) AS runs
  FROM compaction_runs
  GROUP BY run_id, kind, status
)
SELECT
  f.run_id,
  f.labels,
  c.kind,
  c.status,
  n.name AS status_name,
  c.runs,
  100.0 * c.runs / sum(c.runs) OVER (PARTITION BY c.run_id, c.kind) AS pct_of_kind
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
LEFT JOIN compaction_status_names AS n ON n.run_id = c.run_id AND n.status = c.status
ORDER BY f.run_id, c.kind, c.runs DESC, c.status

-- @section try: direct compaction attempts (mm_compaction_try_to_compact_pages) by order and priority
-- @requires mm_compaction_try_to_compact_pages
-- @columns
--   order               order  requested order
--   prio                code   compact_priority: 0 sync_full, 1 sync_light, 2 async
--   prio_name           text   its name
--   attempts            count  events
--   attempts_per_s      /s     per second of capture
WITH
counts AS (
  SELECT run_id, "order", prio, count(*) AS attempts
  FROM mm_compaction_try_to_compact_pages
  GROUP BY run_id, "order", prio
)
SELECT
  f.run_id,
  f.labels,
  c."order",
  c.prio,
  CASE c.prio WHEN 0 THEN 'sync_full' WHEN 1 THEN 'sync_light' WHEN 2 THEN 'async' END AS prio_name,
  c.attempts,
  c.attempts / f.duration_s AS attempts_per_s
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c."order", c.prio

-- @section deferrals: compaction deferrals by order
-- @any_of mm_compaction_deferred mm_compaction_defer_compaction mm_compaction_defer_reset
-- @columns
--   order               order  order of the request
--   deferred            count  compaction skipped because the zone is deferred (mm_compaction_deferred)
--   defer_armed         count  compaction failed and deferral was armed or lengthened (defer_compaction)
--   defer_reset         count  deferral cleared after success (defer_reset)
--   max_defer_shift     count  largest defer_shift seen (skip up to 2^shift attempts)
WITH
events AS (
  SELECT run_id, "order", 1 AS deferred, 0 AS armed, 0 AS reset, defer_shift FROM mm_compaction_deferred
  UNION ALL
  SELECT run_id, "order", 0, 1, 0, defer_shift FROM mm_compaction_defer_compaction
  UNION ALL
  SELECT run_id, "order", 0, 0, 1, defer_shift FROM mm_compaction_defer_reset
),
counts AS (
  SELECT run_id, "order",
         CAST(sum(deferred) AS BIGINT) AS deferred,
         CAST(sum(armed) AS BIGINT) AS defer_armed,
         CAST(sum(reset) AS BIGINT) AS defer_reset,
         max(defer_shift) AS max_defer_shift
  FROM events
  GROUP BY run_id, "order"
)
SELECT
  f.run_id,
  f.labels,
  c."order",
  c.deferred,
  c.defer_armed,
  c.defer_reset,
  c.max_defer_shift
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c."order"

-- @section outcomes: per run, kind and order: how compaction runs ended (end status by requested order)
-- @requires mm_compaction_end mm_compaction_finished
-- @optional mm_compaction_begin
-- @columns
--   kind                text   'direct' or 'kcompactd'
--   order               order  the order the run compacted for (its mm_compaction_finished
--                              events); -1: whole-zone compaction (compact_memory, proactive);
--                              NULL: the run began before the capture (no begin) or shows no finished
--   status              code   compact_result at mm_compaction_end
--   status_name         text   its name (run's print_flags, else KERNEL-ERAS.md section 7)
--   runs                count  compaction runs that ended so
--   pct_of_order        %      of the kind's runs at that order
--   duration_p50_ns     ns     median duration of those runs with a begin
-- The order comes from the last mm_compaction_finished of the same task inside
-- the run (compact_finished() traces cc->order on every pass).
WITH
ordered AS (
  SELECT c.*, f."order" AS f_order, f.ts AS f_ts
  FROM compaction_runs AS c
  ASOF LEFT JOIN mm_compaction_finished AS f
    ON f.run_id = c.run_id AND f.pid = c.pid AND f.ts <= c.end_ts
),
runs_ AS (
  SELECT run_id, kind, status, duration_ns,
         CASE WHEN duration_ns IS NOT NULL AND f_ts >= end_ts - duration_ns THEN f_order END AS "order"
  FROM ordered
),
counts AS (
  SELECT run_id, kind, "order", status, count(*) AS runs,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ns) AS duration_p50_ns
  FROM runs_
  GROUP BY run_id, kind, "order", status
)
SELECT
  f.run_id,
  f.labels,
  c.kind,
  c."order",
  c.status,
  n.name AS status_name,
  c.runs,
  100.0 * c.runs / sum(c.runs) OVER (PARTITION BY c.run_id, c.kind, c."order") AS pct_of_order,
  c.duration_p50_ns
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
LEFT JOIN compaction_status_names AS n ON n.run_id = c.run_id AND n.status = c.status
ORDER BY f.run_id, c.kind, c."order", c.runs DESC, c.status

-- @section direct: per run and order: direct compactions, stalls and successes (trace model)
-- @requires mm_compaction_try_to_compact_pages
-- @columns
--   order               order  requested order
--   tries               count  mm_compaction_try_to_compact_pages events
--   skipped             count  of them, every zone skipped (no stall: vmstat counts none)
--   stalls              count  the rest (vmstat compact_stall)
--   successes           count  stalls whose allocation got its page (vmstat compact_success)
--   success_pct         %      100 * successes / stalls
--   zones_deferred      count  zones passed over as deferred, over all tries
--   zones_compacted     count  zones compacted (mm_compaction_end), over all tries
--   ended_by_alloc_ok   count  tries followed by the allocation's success (mm_page_alloc)
--   ended_by_alloc_fail count  tries followed by the allocation's failure
--   ended_by_reclaim    count  tries followed by direct reclaim
--   ended_by_next_try   count  tries followed by another try of the same task
--   failed_when_ready   count  stalls in which a zone reported success (its watermark already
--                              met, or a run ended with status success) and the allocation
--                              still got no page right after (vmstat compact_fail); under
--                              vm.defrag_mode=1 the freelist will not take another
--                              migratetype's free pages that the watermark counted
-- The model (thp's header, lib/compaction.sql direct_compactions): a try is a stall
-- unless no deferred, end or defer_reset event of the task follows it before
-- the allocation ends; it succeeded when a defer_reset follows that is the
-- allocation's own, not the one try_to_compact_pages logs for a zone that
-- reported success.
SELECT
  f.run_id,
  f.labels,
  d."order",
  count(*) AS tries,
  count(CASE WHEN NOT d.stalled THEN 1 END) AS skipped,
  count(CASE WHEN d.stalled THEN 1 END) AS stalls,
  count(CASE WHEN d.succeeded THEN 1 END) AS successes,
  100.0 * count(CASE WHEN d.succeeded THEN 1 END) / nullif(count(CASE WHEN d.stalled THEN 1 END), 0)
    AS success_pct,
  CAST(sum(d.zones_deferred) AS BIGINT) AS zones_deferred,
  CAST(sum(d.zones_compacted) AS BIGINT) AS zones_compacted,
  count(CASE WHEN d.ended_by = 'alloc' AND d.alloc_ok THEN 1 END) AS ended_by_alloc_ok,
  count(CASE WHEN d.ended_by = 'alloc' AND NOT d.alloc_ok THEN 1 END) AS ended_by_alloc_fail,
  count(CASE WHEN d.ended_by = 'reclaim' THEN 1 END) AS ended_by_reclaim,
  count(CASE WHEN d.ended_by = 'next try' THEN 1 END) AS ended_by_next_try,
  count(CASE WHEN d.stalled AND d.zone_ready AND NOT d.succeeded THEN 1 END) AS failed_when_ready
FROM direct_compactions AS d
JOIN run_facts AS f ON f.run_id = d.run_id
GROUP BY f.run_id, f.labels, d."order"
ORDER BY f.run_id, d."order"
