-- vmstat_trace: the vmstat counters of a kernel A/B table, counted from the trace
--
-- What would /proc/vmstat have said over the capture, for a run recorded
-- without procfs samples (a bare trace.dat from a fleet or a colleague)? Each
-- row is one vmstat counter under its own name, counted from the events that
-- the kernel emits where it counts that counter (Linux 6.18 source), inside the
-- run's vmstat sampling window when it has one (so that the two can be checked
-- against each other, section check), else over the whole capture. A counter
-- gets a row only when the run recorded every event it is counted from.
--
--   thp_fault_alloc, thp_fault_fallback  the THP fault model of lib/thp.sql
--       (thp_fault_success: faults that got a huge page, and those that did
--       not); fallback counts allocator failures only (vmstat's includes memcg
--       charge failures, thp_fault_fallback_charge). A model: a huge page its
--       task frees right away may be a lost race or a charge failure, which
--       vmstat does not count as thp_fault_alloc (thp_fault_unsure); each
--       lowers bound_low of alloc and raises bound_high of fallback by one.
--       Counted over the whole capture (no vmstat window), the capture's
--       edges widen both ways: a fault in flight when it began may be counted
--       by vmstat and not seen (bound_high of both, one per faulting task), a
--       fault its task's last event may be counted only after it ended
--       (bound_low). Exact where there is none of these (with mm_page_free
--       recorded).
--   compact_stall, compact_success, compact_fail  the direct compaction model
--       of lib/compaction.sql (compaction_success): an attempt is a stall
--       unless every zone was skipped, as vmstat counts compact_stall (exact).
--       success and fail are a model: an attempt the trace cannot classify
--       (direct_compactions.ambiguous) could be either, and widens both
--       bounds by one; exact where there is none.
--
-- exactness: 'exact' rows are counted where the kernel counts them and every
-- event was classified; 'model' rows lie in bound_low .. bound_high; 'lower
-- bound' rows are at most what the kernel counted.
--   compact_migrate_scanned, compact_daemon_migrate_scanned  nr_scanned of
--       mm_compaction_isolate_migratepages (all tasks; kcompactdN threads).
--       A lower bound: fast_find_migrateblock's scan of the free lists adds to
--       the counter and emits no event (3-8% of it on the 6.18 captures).
--   compact_free_scanned, compact_daemon_free_scanned  nr_scanned of
--       mm_compaction_isolate_freepages and mm_compaction_fast_isolate_freepages
--       (the latter from 6.6; without it, a lower bound).
--   allocstall  mm_vmscan_direct_reclaim_begin: one per direct reclaim, which
--       counts allocstall_<zone> (the sum of the per-zone counters) once per pass;
--       a lower bound: a reclaim that skipped deactivation or protected memcg
--       memory starts another pass and counts again (68 of 506 on one capture).
--   pgscan_kswapd, pgsteal_kswapd, pgscan_direct, pgsteal_direct
--       nr_scanned and nr_reclaimed of mm_vmscan_lru_shrink_inactive, kswapdN
--       threads for _kswapd, every other task but khugepaged for _direct,
--       leaving out the events inside a task's memcg-limit reclaim
--       (mm_vmscan_memcg_reclaim_begin .. end), which vmstat's counters leave
--       out too. pgsteal is exact; pgscan is a lower bound: a scan of an LRU
--       list that isolated no page returns before the event.
--   Swap out, swap in and file refaults have no tracepoint: only procfs
--   samples give them.
--
-- Caveats: counts near the window's edges can differ by the events of an
-- operation that straddles a sample; lost events (summary.lost_events) are
-- missing from the counts. The lru_shrink_inactive event is not emitted by
-- the multi-gen LRU (CONFIG_LRU_GEN enabled at run time): there the pgscan and
-- pgsteal rows come out 0 while vmstat counts.
--
-- @include compaction, pairing, thp, threads, vmstat
-- @any_of mm_compaction_try_to_compact_pages mm_compaction_isolate_migratepages mm_compaction_isolate_freepages mm_vmscan_direct_reclaim_begin mm_vmscan_lru_shrink_inactive mm_page_alloc
-- @optional mm_compaction_fast_isolate_freepages mm_vmscan_memcg_reclaim_begin mm_vmscan_memcg_reclaim_end
-- @optional mm_compaction_end mm_compaction_deferred mm_compaction_defer_reset event_tables
-- @optional mm_page_free
--
-- @prelude
CREATE TEMP TABLE _trace_recorded AS
SELECT run_id, list(event) AS events FROM event_tables GROUP BY run_id;

CREATE TEMP TABLE _trace_counters AS
WITH
recorded AS (
  SELECT r.run_id, w.lo, w.hi, w.trace_window,
         list_contains(r.events, 'mm_page_alloc') AS has_allocs,
         list_has_all(r.events, ['mm_compaction_try_to_compact_pages', 'mm_compaction_end',
                                 'mm_compaction_deferred', 'mm_compaction_defer_reset'])
           AS has_direct_compaction,
         list_contains(r.events, 'mm_compaction_isolate_migratepages') AS has_migrate_scan,
         list_contains(r.events, 'mm_compaction_isolate_freepages') AS has_free_scan,
         list_contains(r.events, 'mm_compaction_fast_isolate_freepages') AS has_fast_free_scan,
         list_contains(r.events, 'mm_vmscan_direct_reclaim_begin') AS has_reclaim_begin,
         list_contains(r.events, 'mm_vmscan_lru_shrink_inactive') AS has_shrink,
         list_contains(r.events, 'mm_vmscan_memcg_reclaim_begin') AS has_memcg_reclaim
  FROM _trace_recorded AS r
  JOIN trace_windows AS w ON w.run_id = r.run_id
),
in_window AS (
  SELECT run_id, lo, hi FROM recorded
),
-- model rows: value, then how much higher (up) and lower (down) the kernel's count could be
thp AS (
  SELECT t.run_id, 'thp_fault_alloc' AS name, CAST(t.trace_successes AS BIGINT) AS value,
         'model' AS exactness, CAST(u.start_edge AS BIGINT) AS up,
         CAST(u.unsure + u.end_edge_successes AS BIGINT) AS down,
         'mm_page_alloc, mm_page_free' AS events
  FROM thp_fault_success AS t JOIN recorded AS r ON r.run_id = t.run_id
  JOIN thp_fault_unsure AS u ON u.run_id = t.run_id WHERE r.has_allocs
  UNION ALL
  SELECT t.run_id, 'thp_fault_fallback', CAST(t.trace_faults - t.trace_successes AS BIGINT),
         'model', CAST(u.unsure + u.start_edge AS BIGINT), CAST(u.end_edge_failures AS BIGINT),
         'mm_page_alloc, mm_page_free'
  FROM thp_fault_success AS t JOIN recorded AS r ON r.run_id = t.run_id
  JOIN thp_fault_unsure AS u ON u.run_id = t.run_id WHERE r.has_allocs
),
direct_compaction AS (
  SELECT c.run_id, n.name,
         CAST(CASE n.name WHEN 'compact_stall' THEN c.trace_stalls
                          WHEN 'compact_success' THEN c.trace_successes
                          ELSE c.trace_stalls - c.trace_successes END AS BIGINT) AS value,
         CASE WHEN n.name = 'compact_stall' THEN 'exact' ELSE 'model' END AS exactness,
         CAST(CASE n.name WHEN 'compact_stall' THEN 0
                          WHEN 'compact_success' THEN c.trace_ambiguous - c.trace_ambiguous_successes
                          ELSE c.trace_ambiguous_successes END AS BIGINT) AS up,
         CAST(CASE n.name WHEN 'compact_stall' THEN 0
                          WHEN 'compact_success' THEN c.trace_ambiguous_successes
                          ELSE c.trace_ambiguous - c.trace_ambiguous_successes END AS BIGINT) AS down,
         'mm_compaction_try_to_compact_pages, mm_compaction_end, mm_compaction_deferred, '
           || 'mm_compaction_defer_reset' AS events
  FROM compaction_success AS c
  JOIN recorded AS r ON r.run_id = c.run_id
  CROSS JOIN (VALUES ('compact_stall'), ('compact_success'), ('compact_fail')) AS n(name)
  WHERE r.has_direct_compaction
),
migrate_scans AS (
  SELECT e.run_id, _compaction_kind(e.comm) = 'kcompactd' AS daemon, e.nr_scanned
  FROM mm_compaction_isolate_migratepages AS e
  JOIN in_window AS w ON w.run_id = e.run_id
  WHERE w.lo IS NULL OR e.ts BETWEEN w.lo AND w.hi
),
free_scans AS (
  SELECT e.run_id, _compaction_kind(e.comm) = 'kcompactd' AS daemon, e.nr_scanned
  FROM mm_compaction_isolate_freepages AS e
  JOIN in_window AS w ON w.run_id = e.run_id
  WHERE w.lo IS NULL OR e.ts BETWEEN w.lo AND w.hi
  UNION ALL
  SELECT e.run_id, _compaction_kind(e.comm) = 'kcompactd', e.nr_scanned
  FROM mm_compaction_fast_isolate_freepages AS e
  JOIN in_window AS w ON w.run_id = e.run_id
  WHERE w.lo IS NULL OR e.ts BETWEEN w.lo AND w.hi
),
compaction_scans AS (
  SELECT r.run_id, n.name,
         CAST(coalesce(CASE n.name
           WHEN 'compact_migrate_scanned' THEN (SELECT sum(nr_scanned) FROM migrate_scans AS m
                                                WHERE m.run_id = r.run_id)
           WHEN 'compact_daemon_migrate_scanned' THEN (SELECT sum(nr_scanned) FROM migrate_scans AS m
                                                       WHERE m.run_id = r.run_id AND m.daemon)
           WHEN 'compact_free_scanned' THEN (SELECT sum(nr_scanned) FROM free_scans AS s
                                             WHERE s.run_id = r.run_id)
           ELSE (SELECT sum(nr_scanned) FROM free_scans AS s WHERE s.run_id = r.run_id AND s.daemon)
         END, 0) AS BIGINT) AS value,
         CASE WHEN n.name NOT LIKE '%migrate%' AND r.has_fast_free_scan THEN 'exact'
              ELSE 'lower bound' END AS exactness,
         CAST(0 AS BIGINT) AS up, CAST(0 AS BIGINT) AS down,
         CASE WHEN n.name LIKE '%migrate%' THEN 'mm_compaction_isolate_migratepages'
              ELSE 'mm_compaction_isolate_freepages, mm_compaction_fast_isolate_freepages' END
           AS events
  FROM recorded AS r
  CROSS JOIN (VALUES ('compact_migrate_scanned'), ('compact_daemon_migrate_scanned'),
                     ('compact_free_scanned'), ('compact_daemon_free_scanned')) AS n(name)
  WHERE CASE WHEN n.name LIKE '%migrate%' THEN r.has_migrate_scan ELSE r.has_free_scan END
),
reclaim_stalls AS (
  SELECT r.run_id, 'allocstall' AS name,
         CAST((SELECT count(*) FROM mm_vmscan_direct_reclaim_begin AS b
               WHERE b.run_id = r.run_id AND (r.lo IS NULL OR b.ts BETWEEN r.lo AND r.hi)) AS BIGINT)
           AS value,
         'lower bound' AS exactness, CAST(0 AS BIGINT) AS up, CAST(0 AS BIGINT) AS down,
         'mm_vmscan_direct_reclaim_begin' AS events
  FROM recorded AS r
  WHERE r.has_reclaim_begin
),
-- memcg-limit reclaim of each task: its begin .. its next end
memcg_bounds AS (
  SELECT run_id, pid, ts, 1 AS is_begin FROM mm_vmscan_memcg_reclaim_begin
  UNION ALL
  SELECT run_id, pid, ts, 0 AS is_begin FROM mm_vmscan_memcg_reclaim_end
),
memcg_reclaims AS (
  SELECT run_id, pid, begin_row.ts AS begin_ts, end_row.ts AS end_ts
  FROM _begin_end_pairs(memcg_bounds)
  WHERE pairing = 'paired'
),
shrinks AS (
  SELECT e.run_id, _is_kswapd(e.comm) AS kswapd, e.nr_scanned, e.nr_reclaimed
  FROM mm_vmscan_lru_shrink_inactive AS e
  JOIN in_window AS w ON w.run_id = e.run_id
  WHERE (w.lo IS NULL OR e.ts BETWEEN w.lo AND w.hi)
    AND e.comm <> 'khugepaged'
    AND NOT EXISTS (SELECT 1 FROM memcg_reclaims AS m
                    WHERE m.run_id = e.run_id AND m.pid = e.pid AND e.ts BETWEEN m.begin_ts AND m.end_ts)
),
reclaim_pages AS (
  SELECT r.run_id, n.name,
         CAST(coalesce((SELECT sum(CASE WHEN n.name LIKE 'pgscan%' THEN s.nr_scanned
                                        ELSE s.nr_reclaimed END)
                        FROM shrinks AS s
                        WHERE s.run_id = r.run_id AND s.kswapd = (n.name LIKE '%kswapd')), 0)
              AS BIGINT) AS value,
         CASE WHEN n.name LIKE 'pgsteal%' THEN 'exact' ELSE 'lower bound' END AS exactness,
         CAST(0 AS BIGINT) AS up, CAST(0 AS BIGINT) AS down,
         'mm_vmscan_lru_shrink_inactive'
           || CASE WHEN r.has_memcg_reclaim THEN ', mm_vmscan_memcg_reclaim_begin/end' ELSE '' END
           AS events
  FROM recorded AS r
  CROSS JOIN (VALUES ('pgscan_kswapd'), ('pgsteal_kswapd'), ('pgscan_direct'), ('pgsteal_direct'))
    AS n(name)
  WHERE r.has_shrink
)
SELECT t.run_id, t.name, t.value,
       CASE WHEN t.exactness = 'model' AND t.up = 0 AND t.down = 0 THEN 'exact' ELSE t.exactness END
         AS exactness,
       t.value - t.down AS bound_low, t.value + t.up AS bound_high, t.events, r.trace_window
FROM (SELECT * FROM thp UNION ALL SELECT * FROM direct_compaction
      UNION ALL SELECT * FROM compaction_scans UNION ALL SELECT * FROM reclaim_stalls
      UNION ALL SELECT * FROM reclaim_pages) AS t
JOIN recorded AS r ON r.run_id = t.run_id;

-- @section counters: per run and vmstat counter: its increase counted from the trace
-- The values `kmemscope compare` shows in its vmstat block, marked [trace], for a run
-- without vmstat samples.
-- @columns
--   name          text     the vmstat counter (/proc/vmstat's name; allocstall: the sum of
--                          allocstall_<zone>)
--   value         count    its increase over the window, counted from the trace
--   window_s      s        the window counted over: the vmstat samples' when the run has
--                          them, else the capture's
--   trace_window  text     'vmstat' (between the first and last sample) or 'capture'
--   exact         bool     true: counted where the kernel counts it, every event classified
--                          (exactness 'exact'); false: a model or a lower bound
--   events        text     the events it is counted from
--   exactness     text     'exact'; 'model': a model of the kernel's count that met events it
--                          cannot classify, the count lies in bound_low .. bound_high; 'lower
--                          bound': the trace sees only part of what the kernel counts (header)
--   bound_low     count    the least the kernel's count can be (value for exact rows and lower
--                          bounds)
--   bound_high    count    the most it can be by the model (value for exact rows; a lower bound
--                          has no upper one: value)
SELECT f.run_id, f.labels, c.name, c.value,
       CASE WHEN w.lo IS NOT NULL THEN (w.hi - w.lo) / 1e9 ELSE f.duration_s END AS window_s,
       c.trace_window, c.exactness = 'exact' AS exact, c.events, c.exactness, c.bound_low,
       c.bound_high
FROM _trace_counters AS c
JOIN run_facts AS f ON f.run_id = c.run_id
JOIN trace_windows AS w ON w.run_id = c.run_id
ORDER BY f.run_id, c.name

-- @section check: per run and counter: the trace's count beside vmstat's delta over the same window
-- Runs with vmstat samples only: how far the trace's counts are from the kernel's.
-- @columns
--   name        text     the vmstat counter
--   trace       count    the trace's count (section counters)
--   vmstat      count    the counter's increase between the first and last sample
--   difference  count    trace - vmstat
--   exact       bool     whether the trace counts it where the kernel does, every event classified
--   exactness   text     'exact', 'model' (vmstat lies in bound_low .. bound_high by the model)
--                        or 'lower bound'
--   bound_low   count    the least the model allows
--   bound_high  count    the most it allows
WITH vm AS (
  SELECT run_id, name, delta FROM vmstat_deltas
  UNION ALL
  SELECT run_id, 'allocstall', sum(delta) FROM vmstat_deltas WHERE name LIKE 'allocstall\_%' ESCAPE '\'
  GROUP BY run_id
)
SELECT f.run_id, f.labels, c.name, c.value AS trace, v.delta AS vmstat,
       c.value - v.delta AS difference, c.exactness = 'exact' AS exact, c.exactness, c.bound_low,
       c.bound_high
FROM _trace_counters AS c
JOIN vm AS v ON v.run_id = c.run_id AND v.name = c.name
JOIN run_facts AS f ON f.run_id = c.run_id
WHERE c.trace_window = 'vmstat'
ORDER BY f.run_id, c.name
