-- stalls: time stalled in direct compaction and direct reclaim, and kcompactd and kswapd runs, by kind, order, task and callsite
--
-- How long do allocating tasks stall in direct compaction and in direct
-- reclaim, at which orders, in which tasks and for which callers, and how
-- long do the background threads run? Together with alloc_origins, on a
-- recording of the costly-stalls preset: which callers take direct compaction
-- at costly orders, and what it costs them. Every stall is a begin and an end
-- of one task (pid) in the trace:
--
--   direct_compaction  one mm_compaction_try_to_compact_pages of a task that is
--                      not a kcompactdN thread, with the compaction runs
--                      (mm_compaction_begin .. the task's next mm_compaction_end,
--                      one compact_zone() each, one per zone compacted) that the
--                      task makes after it and before its next try, its next
--                      mm_vmscan_direct_reclaim_begin or the allocation's own
--                      mm_page_alloc (same order). The stall is the try: the sum
--                      of its runs. A try with no run (every zone skipped,
--                      deferred or already above its watermark) is no stall.
--                      order: the try's.
--   direct_reclaim     mm_vmscan_direct_reclaim_begin .. the task's next
--                      mm_vmscan_direct_reclaim_end. order: the begin's.
--   kcompactd          one compaction run of a kcompactdN thread. order: that of
--                      the run's mm_compaction_finished events when the recording
--                      has them (-1: proactive or whole-node compaction), else of
--                      the thread's last mm_compaction_kcompactd_wake before the run.
--   kswapd             a kswapdN thread awake: its first mm_vmscan_kswapd_wake
--                      after an mm_vmscan_kswapd_sleep (or the first of the
--                      capture) .. its next sleep. order: the first wake's.
--
-- A direct compaction stall excludes the time try_to_compact_pages spends
-- outside compact_zone() (choosing zones, deferral and suitability checks:
-- microseconds) and everything after its last run: the allocation attempt
-- that follows, and the rest of the allocator's slow path, whose further
-- tries and reclaims are stalls of their own.
--
-- callsite (direct kinds): the callsite that alloc_origins gives the kernel
-- stack of the allocation the stall belongs to, i.e. the task's first
-- mm_page_alloc at the stall's order after the stall. The try, the reclaim
-- and that allocation share the call chain above __alloc_pages, so the
-- allocation's stack names their caller (a stack of the try itself would name
-- try_to_compact_pages). Stacks are paired with allocations once per run
-- (derived tables alloc_stacks and alloc_stack_ids, queries/derived_tables.py) and
-- named by alloc_origins' rule (lib/callsites.sql), the first frame outside
-- tracing, allocator, slab and vmalloc. '(no stack)': that allocation has no stack
-- or was not recorded (the costly-stalls preset records order > 3 only); NULL
-- for kcompactd and kswapd, and in runs recorded without kernel stacks.
--
-- Latencies are per stall in milliseconds, from nanosecond timestamps: total
-- and mean divide the nanosecond sum, so they are exact up to the last digit
-- of a double. p50, p90 and p99 are percentile_cont (DuckDB's quantile_cont,
-- Spark's percentile: linear interpolation between the two nearest stalls;
-- deterministic) of the nanosecond durations, divided by 10^6.
--
-- Caveats: a stall that began before the capture (an end without its begin)
-- or had not ended when it stopped (a begin without its end) is left out and
-- counted in stalls.pairing, and so are the compaction runs of direct
-- compaction outside any try: of tries the recording left out (the
-- costly-stalls preset keeps order > 3; try_to_compact_pages is not emitted
-- without __GFP_IO, KERNEL-ERAS.md section 1) and of writes to
-- /proc/sys/vm/compact_memory. Events lost to ring-buffer overruns
-- (summary.lost_events) can pair a begin with the wrong end. kswapd naps for
-- up to HZ/10 (100 ms) before it goes fully to sleep, and between balancing
-- passes: the nap is inside its run, which is kswapd's time awake, not its
-- work; a run whose first wake is the thread's first event of the capture may
-- have begun before it. Reclaim for memcg limits (mm_vmscan_memcg_reclaim_*)
-- and node reclaim are not direct reclaim here. A run without
-- mm_vmscan_kswapd_sleep events has no kswapd rows, and one of the selected
-- runs at least must have some (the default and high-order presets do not record
-- the event; light, costly-stalls and compaction do).
--
-- @any_of mm_compaction_end mm_vmscan_direct_reclaim_end mm_vmscan_kswapd_wake
-- @optional mm_compaction_begin mm_compaction_try_to_compact_pages mm_vmscan_direct_reclaim_begin
-- @optional mm_vmscan_kswapd_sleep event_tables
-- @derived alloc_stacks alloc_stack_ids stack_pairing
-- @include callsites, compaction, pairing, threads
-- @timed_by direct_compaction mm_compaction_try_to_compact_pages mm_compaction_begin mm_compaction_end
-- @timed_by direct_reclaim mm_vmscan_direct_reclaim_begin mm_vmscan_direct_reclaim_end
-- @timed_by kcompactd mm_compaction_begin mm_compaction_end
-- @timed_by kswapd mm_vmscan_kswapd_wake mm_vmscan_kswapd_sleep
--
-- Sections:
--   stalls            per run, kind, order, task and callsite (the default section)
--   stalls.per_run    per run and kind, over every order, task and callsite
--   stalls.pairing    per run and kind: stalls, and the begins and ends left out

-- @prelude
-- Compaction runs and their halves (lib/compaction.sql compaction_run_pairing),
-- kept as a table: the stalls below read them twice. status: paired, no_begin
-- (an end whose begin is not in the capture) or no_end (a begin whose end is not).
CREATE TEMP TABLE _stall_compaction_runs AS
SELECT run_id, pid, comm, kind, begin_ts, end_ts, pairing AS status
FROM compaction_run_pairing;

-- Direct compaction: each compaction run of a task other than kcompactd with
-- the task's last try before it (anchor: the run's begin, or its end when it
-- has none), and the task's last direct reclaim begin and last allocation at
-- the try's order before it: a run belongs to the try when neither came
-- between them.
CREATE TEMP TABLE _stall_direct_runs AS
WITH
tries AS (
  SELECT run_id, pid, ts AS try_ts, "order"
  FROM mm_compaction_try_to_compact_pages
  WHERE _compaction_kind(comm) = 'direct'
),
runs_ AS (
  SELECT run_id, pid, comm, begin_ts, end_ts, status, coalesce(begin_ts, end_ts) AS anchor_ts
  FROM _stall_compaction_runs
  WHERE kind = 'direct'
),
with_try AS (
  SELECT r.*, t.try_ts, t."order"
  FROM runs_ AS r
  ASOF LEFT JOIN tries AS t ON t.run_id = r.run_id AND t.pid = r.pid AND t.try_ts <= r.anchor_ts
),
reclaims AS (
  SELECT run_id, pid, ts AS reclaim_ts FROM mm_vmscan_direct_reclaim_begin
),
with_reclaim AS (
  SELECT w.*, c.reclaim_ts
  FROM with_try AS w
  ASOF LEFT JOIN reclaims AS c ON c.run_id = w.run_id AND c.pid = w.pid AND c.reclaim_ts <= w.anchor_ts
),
tasks AS (SELECT DISTINCT run_id, pid FROM tries),
allocs AS (
  SELECT a.run_id, a.pid, CAST(a."order" AS INTEGER) AS "order", a.ts AS alloc_ts
  FROM mm_page_alloc AS a
  JOIN tasks AS t ON t.run_id = a.run_id AND t.pid = a.pid
  WHERE a."order" > 0
),
with_alloc AS (
  SELECT w.*, a.alloc_ts
  FROM with_reclaim AS w
  ASOF LEFT JOIN allocs AS a
    ON a.run_id = w.run_id AND a.pid = w.pid AND a."order" = w."order" AND a.alloc_ts <= w.anchor_ts
)
SELECT run_id, pid, comm, begin_ts, end_ts, status,
       CASE WHEN try_ts IS NOT NULL
                 AND (reclaim_ts IS NULL OR reclaim_ts < try_ts)
                 AND (alloc_ts IS NULL OR alloc_ts < try_ts)
            THEN try_ts END AS try_ts
FROM with_alloc;

-- Every stall and every begin or end left out, one row each:
--   status  paired       a stall (duration_ns is its length)
--           no_begin     an end whose begin is not in the capture
--           no_end       a begin whose end is not in the capture
--           no_run       (direct_compaction) a try without compaction runs: no stall
--           outside_try  (direct_compaction) a paired compaction run of no try
-- end_ts: when the stall ended (a direct compaction: its last run's end).
CREATE TEMP TABLE _stalls AS
WITH
tries AS (
  SELECT run_id, pid, comm, ts AS try_ts, "order"
  FROM mm_compaction_try_to_compact_pages
  WHERE _compaction_kind(comm) = 'direct'
),
per_try AS (
  SELECT run_id, pid, try_ts,
         count(*) AS runs,
         count(CASE WHEN status = 'no_end' THEN 1 END) AS no_end,
         count(CASE WHEN status = 'no_begin' THEN 1 END) AS no_begin,
         CAST(sum(end_ts - begin_ts) AS BIGINT) AS duration_ns,
         max(end_ts) AS end_ts
  FROM _stall_direct_runs
  WHERE try_ts IS NOT NULL
  GROUP BY run_id, pid, try_ts
),
direct_compaction AS (
  SELECT t.run_id, 'direct_compaction' AS kind, t.pid, t.comm, t."order",
         CASE WHEN p.runs IS NULL THEN 'no_run'
              WHEN p.no_end > 0 THEN 'no_end'
              WHEN p.no_begin > 0 THEN 'no_begin'
              ELSE 'paired' END AS status,
         t.try_ts AS begin_ts,
         p.end_ts,
         CASE WHEN p.runs IS NOT NULL AND p.no_end = 0 AND p.no_begin = 0 THEN p.duration_ns END
           AS duration_ns
  FROM tries AS t
  LEFT JOIN per_try AS p ON p.run_id = t.run_id AND p.pid = t.pid AND p.try_ts = t.try_ts
  UNION ALL
  SELECT run_id, 'direct_compaction', pid, comm, CAST(NULL AS INTEGER),
         CASE WHEN status = 'paired' THEN 'outside_try' ELSE status END,
         begin_ts, end_ts, CAST(NULL AS BIGINT)
  FROM _stall_direct_runs
  WHERE try_ts IS NULL
),
reclaim_bounds AS (
  SELECT run_id, pid, comm, ts, 1 AS is_begin, "order" FROM mm_vmscan_direct_reclaim_begin
  UNION ALL
  SELECT run_id, pid, comm, ts, 0 AS is_begin, CAST(NULL AS INTEGER) FROM mm_vmscan_direct_reclaim_end
),
direct_reclaim AS (
  SELECT run_id, 'direct_reclaim' AS kind, pid,
         CASE WHEN begin_row IS NULL THEN end_row.comm ELSE begin_row.comm END AS comm,
         begin_row."order" AS "order", pairing AS status,
         begin_row.ts AS begin_ts, end_row.ts AS end_ts, end_row.ts - begin_row.ts AS duration_ns
  FROM _begin_end_pairs(reclaim_bounds)
),
kcompactd_runs AS (
  SELECT run_id, pid, comm, begin_ts, end_ts, status, coalesce(begin_ts, end_ts) AS anchor_ts
  FROM _stall_compaction_runs
  WHERE kind = 'kcompactd'
),
kcompactd_finished AS (
  SELECT r.*, f.ts AS finished_ts, f."order" AS finished_order
  FROM kcompactd_runs AS r
  ASOF LEFT JOIN mm_compaction_finished AS f
    ON f.run_id = r.run_id AND f.pid = r.pid AND f.ts <= r.end_ts
),
kcompactd_woken AS (
  SELECT r.*, w."order" AS wake_order
  FROM kcompactd_finished AS r
  ASOF LEFT JOIN mm_compaction_kcompactd_wake AS w
    ON w.run_id = r.run_id AND w.pid = r.pid AND w.ts <= r.anchor_ts
),
kcompactd AS (
  SELECT run_id, 'kcompactd' AS kind, pid, comm,
         CASE WHEN begin_ts IS NOT NULL AND finished_ts >= begin_ts THEN finished_order
              ELSE wake_order END AS "order",
         status, begin_ts, end_ts,
         CASE WHEN status = 'paired' THEN end_ts - begin_ts END AS duration_ns
  FROM kcompactd_woken
),
kswapd_events AS (
  SELECT run_id, pid, comm, ts, 0 AS is_sleep, "order"
  FROM mm_vmscan_kswapd_wake
  WHERE _is_kswapd(comm)
  UNION ALL
  SELECT run_id, pid, comm, ts, 1 AS is_sleep, CAST(NULL AS INTEGER)
  FROM mm_vmscan_kswapd_sleep
  WHERE _is_kswapd(comm)
),
kswapd_numbered AS (
  SELECT *,
         coalesce(sum(is_sleep) OVER (PARTITION BY run_id, pid ORDER BY ts, is_sleep
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
           AS sleeps_before
  FROM kswapd_events
),
kswapd_awake AS (
  SELECT run_id, pid, any_value(comm) AS comm, sleeps_before,
         min(CASE WHEN is_sleep = 0 THEN ts END) AS begin_ts,
         max(CASE WHEN is_sleep = 1 THEN ts END) AS end_ts,
         arg_min(CASE WHEN is_sleep = 0 THEN "order" END, CASE WHEN is_sleep = 0 THEN ts END)
           AS "order"
  FROM kswapd_numbered
  GROUP BY run_id, pid, sleeps_before
),
kswapd AS (
  SELECT run_id, 'kswapd' AS kind, pid, comm, "order",
         CASE WHEN begin_ts IS NULL THEN 'no_begin'
              WHEN end_ts IS NULL THEN 'no_end'
              ELSE 'paired' END AS status,
         begin_ts, end_ts,
         CASE WHEN begin_ts IS NOT NULL AND end_ts IS NOT NULL THEN end_ts - begin_ts END
           AS duration_ns
  FROM kswapd_awake
)
SELECT * FROM direct_compaction
UNION ALL SELECT * FROM direct_reclaim
UNION ALL SELECT * FROM kcompactd
UNION ALL SELECT * FROM kswapd;

-- Each stall with its callsite (see the header).
CREATE TEMP TABLE _stall_callsites AS
WITH
direct AS (
  SELECT s.run_id, s.kind, s.pid, s."order", s.begin_ts, s.end_ts
  FROM _stalls AS s
  JOIN stack_pairing AS p ON p.run_id = s.run_id
  WHERE s.status = 'paired' AND s.kind IN ('direct_compaction', 'direct_reclaim')
),
tasks AS (SELECT DISTINCT run_id, pid FROM direct),
allocs AS (
  SELECT a.run_id, a.pid, CAST(a."order" AS INTEGER) AS "order", a.ts AS alloc_ts, a.pfn
  FROM mm_page_alloc AS a
  JOIN tasks AS t ON t.run_id = a.run_id AND t.pid = a.pid
),
with_alloc AS (
  SELECT d.*, a.alloc_ts, a.pfn
  FROM direct AS d
  ASOF LEFT JOIN allocs AS a
    ON a.run_id = d.run_id AND a.pid = d.pid AND a."order" = d."order" AND a.alloc_ts >= d.end_ts
),
ids AS (
  SELECT run_id, ts, pfn, CAST("order" AS INTEGER) AS "order", min(stack_id) AS stack_id
  FROM alloc_stack_ids
  GROUP BY run_id, ts, pfn, "order"
)
SELECT w.run_id, w.kind, w.pid, w.begin_ts, coalesce(c.callsite, '(no stack)') AS callsite
FROM with_alloc AS w
LEFT JOIN ids AS i ON i.run_id = w.run_id AND i.ts = w.alloc_ts AND i.pfn = w.pfn AND i."order" = w."order"
LEFT JOIN stack_callsites AS c ON c.run_id = w.run_id AND c.stack_id = i.stack_id;

-- @section stalls: per run, kind, order, task and callsite: stalls and their latency percentiles
-- @columns
--   kind        text   direct_compaction, direct_reclaim, kcompactd or kswapd (see the header)
--   order       order  the order stalled for (NULL: kcompactd or kswapd without a wake in
--                      the capture)
--   comm        text   the task's command name (kcompactdN, kswapdN for their kinds)
--   callsite    text   the caller of the allocation that stalled (direct kinds; '(no stack)':
--                      its allocation has none); NULL: kcompactd, kswapd, or no stacks in the run
--   timed       count  stalls timed here, begin and end both in the capture (direct
--                      compaction: the attempts that ran compaction; per_run's `stalls` are
--                      all of vmstat's compact_stall); kcompactd, kswapd: the threads' runs
--   total_ms    ms      time stalled, summed, in milliseconds
--   mean_ms     ms      total_ms / timed, in milliseconds
--   p50_ms      ms      median stall (percentile_cont), in milliseconds
--   p90_ms      ms      90th percentile, in milliseconds
--   p99_ms      ms      99th percentile, in milliseconds
--   max_ms      ms      longest stall, in milliseconds
WITH
named AS (
  SELECT s.run_id, s.kind, s."order", s.comm, c.callsite, s.duration_ns
  FROM _stalls AS s
  LEFT JOIN _stall_callsites AS c
    ON c.run_id = s.run_id AND c.kind = s.kind AND c.pid = s.pid AND c.begin_ts = s.begin_ts
  WHERE s.status = 'paired'
),
per_key AS (
  SELECT run_id, kind, "order", comm, callsite,
         count(*) AS stalls,
         CAST(sum(duration_ns) AS BIGINT) AS total_ns,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ns) AS p50_ns,
         percentile_cont(0.9) WITHIN GROUP (ORDER BY duration_ns) AS p90_ns,
         percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ns) AS p99_ns,
         max(duration_ns) AS max_ns
  FROM named
  GROUP BY run_id, kind, "order", comm, callsite
)
SELECT
  f.run_id,
  f.labels,
  k.kind,
  k."order",
  k.comm,
  k.callsite,
  k.stalls AS timed,
  k.total_ns / 1e6 AS total_ms,
  k.total_ns / 1e6 / k.stalls AS mean_ms,
  k.p50_ns / 1e6 AS p50_ms,
  k.p90_ns / 1e6 AS p90_ms,
  k.p99_ns / 1e6 AS p99_ms,
  k.max_ns / 1e6 AS max_ms
FROM per_key AS k
JOIN run_facts AS f ON f.run_id = k.run_id
ORDER BY f.run_id, k.kind, k.total_ns DESC, k."order", k.comm, k.callsite

-- @section per_run: per run and kind: stalls and their latency percentiles over every order, task and callsite
-- The values `kmemscope compare` reads as stalls.KIND.STAT. stalls counts what the
-- kernel counts: for direct compaction, vmstat's compact_stall (every attempt that was
-- not skipped in every zone, lib/compaction.sql direct_compactions: also those that
-- were only deferred or found a zone already above its watermark, which run no
-- compaction and take no measurable time); timed counts the stalls the latencies are
-- taken over (direct compaction: the attempts that ran compaction).
-- @columns
--   kind             text   direct_compaction, direct_reclaim, kcompactd or kswapd
--   stalls           count  stalls (direct compaction: as vmstat's compact_stall counts them,
--                           NULL when the run lacks the events that tell; the others: begin
--                           and end both in the capture)
--   timed            count  stalls whose begin and end are both in the capture, which the
--                           latencies below are taken over (direct compaction: attempts that
--                           ran compaction)
--   compaction_runs  count  direct compaction: compaction runs (one compact_zone() each) of
--                           the timed stalls; NULL for the other kinds
--   total_ms         ms     time stalled, summed, in milliseconds
--   mean_ms          ms     total_ms / timed, in milliseconds
--   p50_ms           ms     median stall (percentile_cont), in milliseconds
--   p90_ms           ms     90th percentile, in milliseconds
--   p99_ms           ms     99th percentile, in milliseconds
--   max_ms           ms     longest stall, in milliseconds
WITH
per_kind AS (
  SELECT run_id, kind,
         count(*) AS timed,
         CAST(sum(duration_ns) AS BIGINT) AS total_ns,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ns) AS p50_ns,
         percentile_cont(0.9) WITHIN GROUP (ORDER BY duration_ns) AS p90_ns,
         percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ns) AS p99_ns,
         max(duration_ns) AS max_ns
  FROM _stalls
  WHERE status = 'paired'
  GROUP BY run_id, kind
),
runs_in_stalls AS (
  SELECT r.run_id, count(*) AS compaction_runs
  FROM _stall_direct_runs AS r
  JOIN _stalls AS s ON s.run_id = r.run_id AND s.pid = r.pid AND s.begin_ts = r.try_ts
  WHERE s.kind = 'direct_compaction' AND s.status = 'paired'
  GROUP BY r.run_id
),
-- vmstat's count: the direct compaction model tells a stall only where the run recorded the
-- deferral and defer_reset events it reads (the costly-stalls preset does not)
attempts AS (
  SELECT d.run_id, count(CASE WHEN d.stalled THEN 1 END) AS stalls
  FROM direct_compactions AS d
  JOIN event_tables AS e ON e.run_id = d.run_id AND e.event = 'mm_compaction_defer_reset'
  JOIN event_tables AS e2 ON e2.run_id = d.run_id AND e2.event = 'mm_compaction_deferred'
  WHERE _compaction_kind(d.comm) = 'direct'
  GROUP BY d.run_id
),
-- a run whose attempts all ran no compaction still stalled, untimed
kinds AS (
  SELECT run_id, kind FROM per_kind
  UNION
  SELECT run_id, 'direct_compaction' FROM attempts WHERE stalls > 0
)
SELECT
  f.run_id,
  f.labels,
  x.kind,
  CASE WHEN x.kind = 'direct_compaction' THEN a.stalls ELSE k.timed END AS stalls,
  coalesce(k.timed, 0) AS timed,
  CASE WHEN x.kind = 'direct_compaction' THEN coalesce(r.compaction_runs, 0) END AS compaction_runs,
  coalesce(k.total_ns, 0) / 1e6 AS total_ms,
  k.total_ns / 1e6 / k.timed AS mean_ms,
  k.p50_ns / 1e6 AS p50_ms,
  k.p90_ns / 1e6 AS p90_ms,
  k.p99_ns / 1e6 AS p99_ms,
  k.max_ns / 1e6 AS max_ms
FROM kinds AS x
JOIN run_facts AS f ON f.run_id = x.run_id
LEFT JOIN per_kind AS k ON k.run_id = x.run_id AND k.kind = x.kind
LEFT JOIN attempts AS a ON a.run_id = x.run_id
LEFT JOIN runs_in_stalls AS r ON r.run_id = x.run_id
ORDER BY f.run_id, x.kind

-- @section pairing: per run and kind: stalls, and the begins and ends that were left out
-- @columns
--   kind                 text   direct_compaction, direct_reclaim, kcompactd or kswapd
--   timed                count  stalls (runs, for kcompactd and kswapd) timed in the other
--                               sections
--   ends_without_begin   count  ends whose begin came before the capture (left out)
--   begins_without_end   count  begins whose end came after the capture (left out)
--   tries_without_runs   count  direct_compaction: tries that compacted no zone (no stall);
--                               0 for the other kinds
--   runs_outside_tries   count  direct_compaction: compaction runs of no recorded try (left
--                               out); 0 for the other kinds
--   timed_pct            %      100 * stalls / (stalls + ends_without_begin + begins_without_end)
WITH
counts AS (
  SELECT run_id, kind,
         count(CASE WHEN status = 'paired' THEN 1 END) AS stalls,
         count(CASE WHEN status = 'no_begin' THEN 1 END) AS ends_without_begin,
         count(CASE WHEN status = 'no_end' THEN 1 END) AS begins_without_end,
         count(CASE WHEN status = 'no_run' THEN 1 END) AS tries_without_runs,
         count(CASE WHEN status = 'outside_try' THEN 1 END) AS runs_outside_tries
  FROM _stalls
  GROUP BY run_id, kind
)
SELECT
  f.run_id,
  f.labels,
  c.kind,
  c.stalls AS timed,
  c.ends_without_begin,
  c.begins_without_end,
  c.tries_without_runs,
  c.runs_outside_tries,
  100.0 * c.stalls / nullif(c.stalls + c.ends_without_begin + c.begins_without_end, 0) AS timed_pct
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c.kind
-- @section each: every stall, one row each, in time order (what timelines and latency CDFs draw)
-- @columns
--   kind          text   direct_compaction, direct_reclaim, kcompactd or kswapd
--   pid           code   the task that stalled (kcompactdN, kswapdN for their kinds)
--   comm          text   the task's command name
--   order         order  the order stalled for (NULL: kcompactd or kswapd without a wake)
--   begin_ts      ns     when the stall began (direct compaction: its try)
--   end_ts        ns     when it ended (direct compaction: its last run's end)
--   t_s           s      begin_ts in seconds since the run's first event
--   duration_ms   ms     the stall's length (direct compaction: the sum of its runs, which
--                        may be less than end_ts - begin_ts), in milliseconds
SELECT
  f.run_id,
  f.labels,
  s.kind,
  s.pid,
  s.comm,
  s."order",
  s.begin_ts,
  s.end_ts,
  (s.begin_ts - f.first_ts) / 1e9 AS t_s,
  s.duration_ns / 1e6 AS duration_ms
FROM _stalls AS s
JOIN run_facts AS f ON f.run_id = s.run_id
WHERE s.status = 'paired'
ORDER BY f.run_id, s.begin_ts, s.kind, s.pid, s.end_ts
