-- lib/compaction: compaction: status names, direct compaction outcomes and their success, compaction runs.
-- include: allocs, pairing, threads, vmstat
-- views: compaction_status_names, direct_compactions, compaction_success, compaction_run_pairing, compaction_runs
-- internal: _compact_result_enum

-- compact_result names (section 7), the fallback when a run's print_flags lack
-- the mm_compaction_end status table.
CREATE TEMP TABLE _compact_result_enum AS
SELECT * FROM (VALUES
  (0, 'not_suitable_zone'), (1, 'skipped'), (2, 'deferred'), (3, 'no_suitable_page'),
  (4, 'continue'), (5, 'complete'), (6, 'partial_skipped'), (7, 'contended'),
  (8, 'success')) AS t(status, name);

-- Compaction status names per run: the run's own __print_symbolic table first.
-- @columns
--   run_id   text   the run
--   status   code   a compact_result value of mm_compaction_end's status
--   name     text   its name
--   source   text   'print_flags' (the run's own table) or 'KERNEL-ERAS.md section 7'
CREATE TEMP VIEW compaction_status_names AS
SELECT f.run_id, e.status, coalesce(p.name, e.name) AS name,
       CASE WHEN p.name IS NULL THEN 'KERNEL-ERAS.md section 7' ELSE 'print_flags' END AS source
FROM run_facts AS f
CROSS JOIN _compact_result_enum AS e
LEFT JOIN (
  SELECT run_id, CAST(value AS INTEGER) AS status, min(name) AS name
  FROM print_flags
  WHERE event = 'mm_compaction_end' AND field = 'status' AND kind = 'symbolic'
  GROUP BY run_id, CAST(value AS INTEGER)
) AS p ON p.run_id = f.run_id AND p.status = e.status;

-- Direct compaction outcomes from the trace, one row per
-- mm_compaction_try_to_compact_pages (KERNEL-ERAS.md sections 1, 6, 7), read
-- from 6.18's try_to_compact_pages and __alloc_pages_direct_compact.
-- try_to_compact_pages visits the zones in zonelist order (on one node Normal,
-- DMA32, DMA). A zone is deferred (mm_compaction_deferred), or already meets
-- its watermark at the order (nothing logged), or gets mm_compaction_suitable
-- and, if that says continue, a compaction run (mm_compaction_finished on each
-- pass, mm_compaction_end). The first zone that reports COMPACT_SUCCESS, by its
-- watermark or by a run that ended with status success, gets a
-- mm_compaction_defer_reset and ends the loop ("expected to succeed": its
-- deferral state is kept); an async run that must reschedule (status contended)
-- ends it too. Unless every zone was skipped, vmstat then counts compact_stall
-- and the allocation takes the page compaction captured or tries the freelist:
-- with a page, it logs a defer_reset for the page's zone that clears its
-- deferral state (considered = 0, defer_shift = 0) and counts compact_success;
-- without, compact_fail. Under vm.defrag_mode=1 a zone's success is often
-- followed by no page: the watermark counts free pages of every migratetype,
-- the freelist will not take them from another type's pageblock.
-- From the events of the same task up to the try's end (the allocation's
-- mm_page_alloc at that order, a direct-reclaim start, the next try, or a
-- compaction event of another order):
--   stalled     a zone was deferred, compacted or already fine: a deferred, end
--               or defer_reset event follows
--   zone_ready  the loop logged its defer_reset: the try's first defer_reset is
--               the loop's when its zone's deferral state is not cleared
--               (considered or defer_shift above 0), when an end with status
--               success came before it, or when the loop had not reached its zone
--               before (no deferred, suitable or finished event of that zone or
--               of a lower zone of its node, and no run ended contended): there
--               the watermark check, which precedes both events, was met
--   succeeded   a defer_reset that is not the loop's follows (the allocation's
--               own) and, when the run records mm_page_alloc, the allocation got
--               its page right there
--   ambiguous   the trace cannot tell whether the try succeeded: its one
--               defer_reset has the zone's deferral state cleared, no end with
--               status success came before it, the loop had logged events of
--               other zones but none of its zone or a lower one of its node, and
--               the allocation got its page right after (or mm_page_alloc is not
--               recorded). Either the loop moved on to that zone, found its
--               watermark met and logged the reset (then the freelist refused the
--               page: compact_fail), or the loop stopped early (an async try that
--               must reschedule, a fatal signal; a run that ended contended need
--               not stop it) and the page came from that zone's freelist, whose
--               defer_reset is the allocation's (compact_success). zone_ready
--               takes the first unless a run ended contended before it.
-- @columns
--   run_id            text   the run
--   pid               code   the task that compacted
--   comm              text   its command name
--   ts                ns     the mm_compaction_try_to_compact_pages event
--   order             order  the order compacted for
--   prio              code   the compaction priority of the try
--   zones_deferred    count  zones skipped as deferred (mm_compaction_deferred) in the try
--   zones_compacted   count  zones compacted (mm_compaction_end) in the try
--   zones_success     count  of them, ended with status success
--   resets            count  mm_compaction_defer_reset events in the try
--   zone_ready        bool   the try's first defer_reset is the loop's own (see above)
--   ended_by          text   what ended the try: 'alloc', 'reclaim', 'deferred', 'suitable',
--                              'finished', 'reset' (an event of another order), 'next try' or
--                              'capture end'
--   alloc_ok          bool   ended by the allocation: it got its page (NULL: not ended by one)
--   stalled           bool   a zone was deferred, compacted or already fine (vmstat compact_stall)
--   succeeded         bool   the allocation got its page from compaction (compact_success)
--   ambiguous         bool   the trace cannot tell whether it succeeded (see above; succeeded
--                              is the model's pick)
CREATE TEMP VIEW direct_compactions AS
WITH
tries AS (
  SELECT run_id, pid, comm, ts, "order", prio FROM mm_compaction_try_to_compact_pages
),
tasks AS (SELECT DISTINCT run_id, pid FROM tries),
alloc_runs AS (SELECT DISTINCT run_id FROM mm_page_alloc),
end_statuses AS (
  SELECT run_id, status, name FROM compaction_status_names WHERE name IN ('success', 'contended')
),
ev AS (
  SELECT run_id, pid, ts, 0 AS rank, 'try' AS kind, "order",
         CAST(NULL AS INTEGER) AS nid, CAST(NULL AS BIGINT) AS idx,
         CAST(NULL AS BIGINT) AS considered, CAST(NULL AS BIGINT) AS defer_shift,
         false AS end_success, false AS end_contended, CAST(NULL AS BOOLEAN) AS ok
  FROM tries
  UNION ALL
  SELECT d.run_id, d.pid, d.ts, 1, 'deferred', d."order", d.nid, CAST(d.idx AS BIGINT),
         NULL, NULL, false, false, NULL
  FROM mm_compaction_deferred AS d JOIN tasks AS t ON t.run_id = d.run_id AND t.pid = d.pid
  UNION ALL
  SELECT s.run_id, s.pid, s.ts, 1, 'suitable', s."order", s.nid, CAST(s.idx AS BIGINT),
         NULL, NULL, false, false, NULL
  FROM mm_compaction_suitable AS s JOIN tasks AS t ON t.run_id = s.run_id AND t.pid = s.pid
  UNION ALL
  SELECT f.run_id, f.pid, f.ts, 1, 'finished', f."order", f.nid, CAST(f.idx AS BIGINT),
         NULL, NULL, false, false, NULL
  FROM mm_compaction_finished AS f JOIN tasks AS t ON t.run_id = f.run_id AND t.pid = f.pid
  UNION ALL
  SELECT e.run_id, e.pid, e.ts, 2, 'end', NULL, NULL, NULL, NULL, NULL,
         coalesce(s.name = 'success', false), coalesce(s.name = 'contended', false), NULL
  FROM mm_compaction_end AS e JOIN tasks AS t ON t.run_id = e.run_id AND t.pid = e.pid
  LEFT JOIN end_statuses AS s ON s.run_id = e.run_id AND s.status = e.status
  UNION ALL
  SELECT r.run_id, r.pid, r.ts, 3, 'reset', r."order", r.nid, CAST(r.idx AS BIGINT),
         CAST(r.considered AS BIGINT), CAST(r.defer_shift AS BIGINT), false, false, NULL
  FROM mm_compaction_defer_reset AS r JOIN tasks AS t ON t.run_id = r.run_id AND t.pid = r.pid
  UNION ALL
  SELECT b.run_id, b.pid, b.ts, 4, 'reclaim', NULL, NULL, NULL, NULL, NULL, false, false, NULL
  FROM mm_vmscan_direct_reclaim_begin AS b JOIN tasks AS t ON t.run_id = b.run_id AND t.pid = b.pid
  UNION ALL
  SELECT a.run_id, a.pid, a.ts, 4, 'alloc', CAST(a."order" AS INTEGER), NULL, NULL, NULL, NULL,
         false, false, NOT a.failed
  FROM page_allocs AS a JOIN tasks AS t ON t.run_id = a.run_id AND t.pid = a.pid
  WHERE a."order" > 0
),
numbered AS (
  SELECT *,
         sum(CASE WHEN kind = 'try' THEN 1 ELSE 0 END)
           OVER (PARTITION BY run_id, pid ORDER BY ts, rank ROWS UNBOUNDED PRECEDING) AS try_no,
         row_number() OVER (PARTITION BY run_id, pid ORDER BY ts, rank) AS rn
  FROM ev
),
marked AS (
  SELECT n.*,
         first_value(n."order") OVER (PARTITION BY n.run_id, n.pid, n.try_no ORDER BY n.rn) AS try_order
  FROM numbered AS n
  WHERE n.try_no > 0
),
bounded AS (
  SELECT *,
         kind = 'reclaim'
           OR (kind = 'alloc' AND "order" = try_order)
           OR (kind IN ('deferred', 'suitable', 'finished', 'reset') AND "order" <> try_order) AS is_end
  FROM marked
),
windows AS (
  SELECT run_id, pid, try_no,
         min(CASE WHEN is_end THEN rn END) AS end_rn
  FROM bounded
  GROUP BY run_id, pid, try_no
),
-- The events of each try, up to its end, with the run endings that came before each.
inside AS (
  SELECT
    b.*,
    max(CASE WHEN b.end_success THEN 1 ELSE 0 END)
      OVER (PARTITION BY b.run_id, b.pid, b.try_no ORDER BY b.rn
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS success_before,
    max(CASE WHEN b.end_contended THEN 1 ELSE 0 END)
      OVER (PARTITION BY b.run_id, b.pid, b.try_no ORDER BY b.rn
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS contended_before,
    sum(CASE WHEN b.kind = 'reset' THEN 1 ELSE 0 END)
      OVER (PARTITION BY b.run_id, b.pid, b.try_no ORDER BY b.rn ROWS UNBOUNDED PRECEDING) AS reset_no,
    sum(CASE WHEN b.kind IN ('deferred', 'suitable', 'finished') THEN 1 ELSE 0 END)
      OVER (PARTITION BY b.run_id, b.pid, b.try_no ORDER BY b.rn
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS zone_events_before
  FROM bounded AS b
  JOIN windows AS w ON w.run_id = b.run_id AND w.pid = b.pid AND w.try_no = b.try_no
  WHERE b.kind <> 'try' AND (w.end_rn IS NULL OR b.rn < w.end_rn)
),
-- Zones the loop has reached: the first deferred, suitable or finished event of each.
zones_reached AS (
  SELECT run_id, pid, try_no, nid, idx, min(rn) AS first_rn
  FROM inside
  WHERE kind IN ('deferred', 'suitable', 'finished')
  GROUP BY run_id, pid, try_no, nid, idx
),
-- Each try's first defer_reset, whether the loop logged it (zone_ready above), and
-- whether the trace cannot tell (ambiguous above).
first_resets AS (
  SELECT
    r.run_id, r.pid, r.try_no,
    max(CASE WHEN r.considered > 0 OR r.defer_shift > 0 OR r.success_before = 1 THEN 1 ELSE 0 END) = 1
      OR (max(coalesce(r.contended_before, 0)) = 0 AND count(z.first_rn) = 0) AS by_loop,
    max(CASE WHEN r.considered > 0 OR r.defer_shift > 0 OR r.success_before = 1 THEN 1 ELSE 0 END) = 0
      AND count(z.first_rn) = 0 AND max(coalesce(r.zone_events_before, 0)) > 0 AS unsure
  FROM inside AS r
  LEFT JOIN zones_reached AS z
    ON z.run_id = r.run_id AND z.pid = r.pid AND z.try_no = r.try_no
   AND z.nid = r.nid AND z.idx <= r.idx AND z.first_rn < r.rn
  WHERE r.kind = 'reset' AND r.reset_no = 1
  GROUP BY r.run_id, r.pid, r.try_no
),
per_try AS (
  SELECT
    run_id, pid, try_no,
    count(CASE WHEN kind = 'deferred' THEN 1 END) AS zones_deferred,
    count(CASE WHEN kind = 'end' THEN 1 END) AS zones_compacted,
    count(CASE WHEN kind = 'end' AND end_success THEN 1 END) AS zones_success,
    count(CASE WHEN kind = 'reset' THEN 1 END) AS resets
  FROM inside
  GROUP BY run_id, pid, try_no
),
ends AS (
  SELECT b.run_id, b.pid, b.try_no, b.kind AS ended_by, b.ok AS alloc_ok
  FROM bounded AS b
  JOIN windows AS w ON w.run_id = b.run_id AND w.pid = b.pid AND w.try_no = b.try_no AND b.rn = w.end_rn
),
try_rows AS (
  SELECT run_id, pid, ts, "order", try_no,
         lead(try_no) OVER (PARTITION BY run_id, pid ORDER BY try_no) IS NOT NULL AS has_next
  FROM marked WHERE kind = 'try'
)
SELECT
  t.run_id, t.pid, tr.comm, t.ts, t."order", tr.prio,
  coalesce(p.zones_deferred, 0) AS zones_deferred,
  coalesce(p.zones_compacted, 0) AS zones_compacted,
  coalesce(p.zones_success, 0) AS zones_success,
  coalesce(p.resets, 0) AS resets,
  coalesce(fr.by_loop, false) AS zone_ready,
  coalesce(e.ended_by, CASE WHEN t.has_next THEN 'next try' ELSE 'capture end' END) AS ended_by,
  e.alloc_ok,
  coalesce(p.zones_deferred + p.zones_compacted + p.resets, 0) > 0 AS stalled,
  coalesce(p.resets, 0) > CASE WHEN coalesce(fr.by_loop, false) THEN 1 ELSE 0 END
    AND (ar.run_id IS NULL OR coalesce(e.ended_by = 'alloc' AND e.alloc_ok, false)) AS succeeded,
  coalesce(p.resets, 0) = 1 AND coalesce(fr.unsure, false)
    AND (ar.run_id IS NULL OR coalesce(e.ended_by = 'alloc' AND e.alloc_ok, false)) AS ambiguous
FROM try_rows AS t
JOIN tries AS tr ON tr.run_id = t.run_id AND tr.pid = t.pid AND tr.ts = t.ts
LEFT JOIN per_try AS p ON p.run_id = t.run_id AND p.pid = t.pid AND p.try_no = t.try_no
LEFT JOIN first_resets AS fr ON fr.run_id = t.run_id AND fr.pid = t.pid AND fr.try_no = t.try_no
LEFT JOIN ends AS e ON e.run_id = t.run_id AND e.pid = t.pid AND e.try_no = t.try_no
LEFT JOIN alloc_runs AS ar ON ar.run_id = t.run_id;

-- Direct compaction success per run (section 6), the one place it is computed:
-- vmstat_pct = compact_success / compact_stall; trace_pct = successes / stalls
-- of direct_compactions inside trace_windows. success_pct and source as in
-- thp_fault_success.
-- @columns
--   run_id            text   the run
--   compact_stall     count  vmstat compact_stall over the capture (NULL: no samples)
--   compact_success   count  vmstat compact_success over the capture
--   vmstat_pct        %      100 * compact_success / compact_stall
--   trace_tries       count  direct_compactions inside trace_windows
--   trace_stalls      count  of them, stalled
--   trace_successes   count  of them, succeeded
--   trace_pct         %      100 * trace_successes / trace_stalls
--   trace_ambiguous   count  stalls whose outcome the trace cannot tell (direct_compactions.ambiguous)
--   trace_ambiguous_successes  count  of them, counted as successes (the rest as failures)
--   success_pct       %      vmstat_pct when the run's samples give it, else trace_pct
--   source            text   'vmstat', 'trace' or NULL (neither gives a value)
CREATE TEMP VIEW compaction_success AS
WITH
vm AS (
  SELECT
    run_id,
    _vmstat_delta('compact_stall', name, delta) AS compact_stall,
    _vmstat_delta('compact_success', name, delta) AS compact_success
  FROM vmstat_deltas
  GROUP BY run_id
),
tr AS (
  SELECT d.run_id,
         count(*) AS tries,
         count(CASE WHEN d.stalled THEN 1 END) AS stalls,
         count(CASE WHEN d.succeeded THEN 1 END) AS successes,
         count(CASE WHEN d.stalled AND d.ambiguous THEN 1 END) AS ambiguous,
         count(CASE WHEN d.stalled AND d.ambiguous AND d.succeeded THEN 1 END) AS ambiguous_successes
  FROM direct_compactions AS d
  JOIN trace_windows AS w ON w.run_id = d.run_id
  WHERE w.lo IS NULL OR d.ts BETWEEN w.lo AND w.hi
  GROUP BY d.run_id
),
rates AS (
  SELECT
    f.run_id,
    v.compact_stall,
    v.compact_success,
    100.0 * v.compact_success / nullif(v.compact_stall, 0) AS vmstat_pct,
    coalesce(t.tries, 0) AS trace_tries,
    coalesce(t.stalls, 0) AS trace_stalls,
    coalesce(t.successes, 0) AS trace_successes,
    100.0 * t.successes / nullif(t.stalls, 0) AS trace_pct,
    coalesce(t.ambiguous, 0) AS trace_ambiguous,
    coalesce(t.ambiguous_successes, 0) AS trace_ambiguous_successes
  FROM run_facts AS f
  LEFT JOIN vm AS v ON v.run_id = f.run_id
  LEFT JOIN tr AS t ON t.run_id = f.run_id
)
SELECT * FROM _prefer_vmstat(rates);

-- Compaction runs (section 1): a compaction run is one compact_zone() body, an
-- mm_compaction_begin paired with the next mm_compaction_end of the same task
-- (lib/pairing.sql). One row per run and per
-- half of one whose other half is not in the capture.
-- kind: 'kcompactd' for the kcompactdN threads, 'direct' for every other task
-- (_compaction_kind).
-- pairing: 'paired'; 'no_begin', an end whose begin came before the capture;
-- 'no_end', a begin whose end came after it.
-- @columns
--   run_id        text   the run
--   pid           code   the compacting task
--   comm          text   its command name
--   kind          text   'kcompactd' or 'direct'
--   begin_ts      ns     the mm_compaction_begin (NULL: no_begin)
--   end_ts        ns     the mm_compaction_end (NULL: no_end)
--   status        code   the end's compact_result (names: compaction_status_names; NULL: no_end)
--   pairing       text   'paired', 'no_begin' or 'no_end'
--   duration_ns   ns     end_ts - begin_ts (NULL unless paired)
CREATE TEMP VIEW compaction_run_pairing AS
WITH
bounds AS (
  SELECT run_id, pid, comm, ts, 1 AS is_begin, CAST(NULL AS INTEGER) AS status FROM mm_compaction_begin
  UNION ALL
  SELECT run_id, pid, comm, ts, 0 AS is_begin, status FROM mm_compaction_end
),
halves AS (
  SELECT run_id, pid,
         CASE WHEN end_row IS NULL THEN begin_row.comm ELSE end_row.comm END AS comm,
         begin_row.ts AS begin_ts, end_row.ts AS end_ts, end_row.status AS status, pairing
  FROM _begin_end_pairs(bounds)
)
SELECT run_id, pid, comm, _compaction_kind(comm) AS kind,
       begin_ts, end_ts, status, pairing,
       end_ts - begin_ts AS duration_ns
FROM halves;

-- Compaction runs that ended in the capture (compaction_run_pairing without
-- its 'no_end' rows). duration_ns is NULL for an end without its begin (begun
-- before the capture).
-- @columns
--   run_id        text   the run
--   pid           code   the compacting task
--   comm          text   its command name
--   kind          text   'kcompactd' or 'direct'
--   end_ts        ns     the mm_compaction_end
--   status        code   its compact_result (names: compaction_status_names)
--   duration_ns   ns     from the begin to the end (NULL: begun before the capture)
CREATE TEMP VIEW compaction_runs AS
SELECT run_id, pid, comm, kind, end_ts, status, duration_ns
FROM compaction_run_pairing
WHERE pairing <> 'no_end';
