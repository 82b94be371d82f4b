-- cost: what the capture cost: memory pressure, system CPU, the allocator's kernel threads' CPU, mTHP counters per size
--
-- What did the allocator's work cost while the trace was recorded? Counts say
-- what happened; these samples say what it cost: how long tasks waited on
-- memory (PSI), how much CPU time the kernel spent (/proc/stat), how much CPU
-- the threads that do the background work used (kswapd*, kcompactd*,
-- khugepaged: /proc/PID/stat), and how the per-size mTHP counters moved
-- (/sys/kernel/mm/transparent_hugepage/hugepages-*/stats/). Each is the
-- increase between a run's first and last sample of it, on the trace's clock.
-- `kmemscope compare` shows them in its cost block (cost.*) and as mthp.* rows,
-- beside the time the trace itself gives for direct compaction and direct
-- reclaim (the stalls analysis pairs those begins and ends).
--
-- Caveats (kernel eras): PSI needs 4.20+ built with CONFIG_PSI (and not
-- psi=0); its totals are microseconds of wall-clock time during which some
-- (or all non-idle) tasks stalled on memory, summed over nothing: they are not
-- per CPU. /proc/stat and /proc/PID/stat count in clock ticks (USER_HZ,
-- ticks_per_s, 100 on most hosts): a value is good to one tick per thread
-- and sample (10 ms). A kernel thread's CPU time is taken in nanoseconds
-- from /proc/PID/schedstat instead (run_ns: its time on a CPU) where every
-- sample of it has that (kernels with CONFIG_SCHED_INFO,
-- bundles of a kmemscope that reads it); else from the ticks. A kernel
-- thread found only after the first sample counts from its first sample. The per-size mTHP stats exist from 6.10
-- (swpin and the *_charge, split and nr_anon* counters from later 6.1x
-- kernels); nr_anon and nr_anon_partially_mapped are gauges (folios now), so
-- their increase is a net change, not a flow. Runs without these samples (a
-- bare trace.dat, or a bundle of a kernel or kmemscope that has none) have no
-- row, or NULL where one source is missing.
--
-- A sample no kernel writes (a counter that went backwards, more time than
-- its window holds, a value beyond 64 bits: a damaged or forged bundle) makes
-- the values it feeds NULL, and per_run's `impossible` names them: the
-- arithmetic is done in HUGEINT and DOUBLE, so one such run never stops the
-- others' rows.
--
-- @optional psi_memory cpu_stat kthread_cpu mthp_stats
--
-- @prelude
-- Each kernel thread's first-to-last change (a pid and its name: a pid reused by another
-- thread is another thread): ticks, and schedstat's nanoseconds where every sample of it
-- has them (run_ns NULL otherwise).
CREATE TEMP VIEW _kthread_deltas AS
SELECT run_id, pid, comm, kind,
       max_by(utime::HUGEINT + stime, ts) - min_by(utime::HUGEINT + stime, ts) AS ticks,
       max_by(utime::HUGEINT, ts) - min_by(utime::HUGEINT, ts) AS uticks,
       max_by(stime::HUGEINT, ts) - min_by(stime::HUGEINT, ts) AS sticks,
       CASE WHEN bool_and(run_ns IS NOT NULL)
            THEN max_by(run_ns::HUGEINT, ts) - min_by(run_ns::HUGEINT, ts) END AS run_ns,
       nullif(max(ticks_per_s), 0) AS ticks_per_s,
       min(ts) AS first_ts,
       max(ts) AS last_ts
FROM kthread_cpu
GROUP BY run_id, pid, comm, kind;

-- @section per_run: per run: pressure, system CPU and the background threads' CPU over the capture
-- @columns
--   psi_some_ms        ms     /proc/pressure/memory `some` total's increase: time during which
--                             at least one task stalled on memory
--   psi_full_ms        ms     the `full` total's increase: time during which every non-idle
--                             task stalled on memory at once
--   psi_window_s       s      between the first and last PSI sample
--   system_cpu_s       s      CPU time in kernel mode, every CPU (/proc/stat `system`; irq and
--                             softirq time are counted apart by the kernel and not here)
--   softirq_cpu_s      s      CPU time in softirq, every CPU
--   iowait_s           s      idle CPU time while I/O was outstanding, every CPU
--   cpu_window_s       s      between the first and last /proc/stat sample
--   kswapd_cpu_s       s      CPU time of every kswapdN thread (schedstat's nanoseconds where
--                             sampled, else user plus system ticks)
--   kcompactd_cpu_s    s      CPU time of every kcompactdN thread (the same)
--   khugepaged_cpu_s   s      CPU time of khugepaged (the same)
--   kthreads           count  kernel threads sampled (a thread that appeared later counts too)
--   kthread_window_s   s      between the first and last kernel-thread sample
--   kthread_clock      text   'schedstat ns' when every thread's time came from schedstat,
--                             'ticks' when none did, 'mixed' otherwise
--   impossible         text   the columns above made NULL because their samples are impossible
--                             (comma-separated; NULL when none)
WITH psi AS (
  SELECT run_id, kind,
         max_by(total_us::HUGEINT, ts) - min_by(total_us::HUGEINT, ts) AS total_us,
         (max(ts) - min(ts)) / 1e9 AS window_s
  FROM psi_memory
  GROUP BY run_id, kind
),
-- a stall total grows by at most the wall-clock time between its samples (and never falls)
psi_checked AS (
  SELECT run_id, kind, window_s,
         total_us < 0 OR total_us > (window_s + 1.0) * 1e6 AS impossible,
         CASE WHEN total_us >= 0 AND total_us <= (window_s + 1.0) * 1e6
              THEN total_us::DOUBLE END AS total_us
  FROM psi
),
psi_per_run AS (
  SELECT run_id,
         max(CASE WHEN kind = 'some' THEN total_us END) / 1e3 AS psi_some_ms,
         max(CASE WHEN kind = 'full' THEN total_us END) / 1e3 AS psi_full_ms,
         max(window_s) AS psi_window_s,
         bool_or(impossible AND kind = 'some') AS psi_some_impossible,
         bool_or(impossible AND kind = 'full') AS psi_full_impossible
  FROM psi_checked
  GROUP BY run_id
),
-- each CPU's line (and the aggregate `cpu` line, cpu -1): first and last sample
cpu_deltas AS (
  SELECT run_id, cpu,
         max_by(system::HUGEINT, ts) - min_by(system::HUGEINT, ts) AS system_ticks,
         max_by(softirq::HUGEINT, ts) - min_by(softirq::HUGEINT, ts) AS softirq_ticks,
         max_by(iowait::HUGEINT, ts) - min_by(iowait::HUGEINT, ts) AS iowait_ticks,
         max(ticks_per_s) AS ticks_per_s,
         (max(ts) - min(ts)) / 1e9 AS window_s
  FROM cpu_stat
  GROUP BY run_id, cpu
),
-- what a line can hold: its window on one CPU (the aggregate line: on every CPU listed, or
-- on 4096 where the run lists none); more, or less than nothing, is impossible
cpu_bounds AS (
  SELECT d.*,
         (d.window_s + 1.0) * greatest(d.ticks_per_s, 1)
           * CASE WHEN d.cpu = -1 THEN coalesce(nullif(n.cpus, 0), 4096) ELSE 1 END AS most_ticks
  FROM cpu_deltas AS d
  LEFT JOIN (SELECT run_id, count(DISTINCT cpu) FILTER (WHERE cpu >= 0) AS cpus
             FROM cpu_stat GROUP BY run_id) AS n ON n.run_id = d.run_id
),
cpu_lines AS (
  SELECT run_id, cpu, ticks_per_s, window_s,
         CASE WHEN system_ticks BETWEEN 0 AND most_ticks THEN system_ticks::DOUBLE END
           AS system_ticks,
         CASE WHEN softirq_ticks BETWEEN 0 AND most_ticks THEN softirq_ticks::DOUBLE END
           AS softirq_ticks,
         CASE WHEN iowait_ticks BETWEEN 0 AND most_ticks THEN iowait_ticks::DOUBLE END
           AS iowait_ticks,
         NOT (system_ticks BETWEEN 0 AND most_ticks) AS system_impossible,
         NOT (softirq_ticks BETWEEN 0 AND most_ticks) AS softirq_impossible,
         NOT (iowait_ticks BETWEEN 0 AND most_ticks) AS iowait_impossible
  FROM cpu_bounds
),
-- the aggregate line where the run has one, else the sum of the CPUs' lines
cpu_per_run AS (
  SELECT run_id,
         coalesce(sum(CASE WHEN cpu = -1 THEN system_ticks END),
                  sum(CASE WHEN cpu >= 0 THEN system_ticks END))
           / max(nullif(ticks_per_s, 0)) AS system_cpu_s,
         coalesce(sum(CASE WHEN cpu = -1 THEN softirq_ticks END),
                  sum(CASE WHEN cpu >= 0 THEN softirq_ticks END))
           / max(nullif(ticks_per_s, 0)) AS softirq_cpu_s,
         coalesce(sum(CASE WHEN cpu = -1 THEN iowait_ticks END),
                  sum(CASE WHEN cpu >= 0 THEN iowait_ticks END))
           / max(nullif(ticks_per_s, 0)) AS iowait_s,
         max(window_s) AS cpu_window_s,
         bool_or(system_impossible) AS system_impossible,
         bool_or(softirq_impossible) AS softirq_impossible,
         bool_or(iowait_impossible) AS iowait_impossible
  FROM cpu_lines
  GROUP BY run_id
),
-- each kernel thread (a pid and its name: a pid reused by another thread is another thread)
thread_deltas AS (
  SELECT run_id, pid, comm, kind, first_ts, last_ts,
         CASE WHEN run_ns IS NOT NULL THEN run_ns / 1e9 ELSE ticks / ticks_per_s END AS cpu_s,
         run_ns IS NOT NULL AS from_schedstat
  FROM _kthread_deltas
),
-- a thread runs on one CPU at a time: its CPU time grows by at most its sampling window
threads AS (
  SELECT run_id, pid, comm, kind, first_ts, last_ts, from_schedstat,
         coalesce(cpu_s < 0 OR cpu_s > (last_ts - first_ts) / 1e9 + 1.0, false) AS impossible,
         CASE WHEN cpu_s >= 0 AND cpu_s <= (last_ts - first_ts) / 1e9 + 1.0 THEN cpu_s END
           AS cpu_s
  FROM thread_deltas
),
threads_per_run AS (
  SELECT run_id,
         CASE WHEN NOT bool_or(impossible AND kind = 'kswapd')
              THEN coalesce(sum(CASE WHEN kind = 'kswapd' THEN cpu_s END), 0.0) END
           AS kswapd_cpu_s,
         CASE WHEN NOT bool_or(impossible AND kind = 'kcompactd')
              THEN coalesce(sum(CASE WHEN kind = 'kcompactd' THEN cpu_s END), 0.0) END
           AS kcompactd_cpu_s,
         CASE WHEN NOT bool_or(impossible AND kind = 'khugepaged')
              THEN coalesce(sum(CASE WHEN kind = 'khugepaged' THEN cpu_s END), 0.0) END
           AS khugepaged_cpu_s,
         bool_or(impossible AND kind = 'kswapd') AS kswapd_impossible,
         bool_or(impossible AND kind = 'kcompactd') AS kcompactd_impossible,
         bool_or(impossible AND kind = 'khugepaged') AS khugepaged_impossible,
         count(*) AS kthreads,
         (max(last_ts) - min(first_ts)) / 1e9 AS kthread_window_s,
         CASE WHEN bool_and(from_schedstat) THEN 'schedstat ns'
              WHEN NOT bool_or(from_schedstat) THEN 'ticks' ELSE 'mixed' END AS kthread_clock
  FROM threads
  GROUP BY run_id
),
sampled AS (
  SELECT run_id FROM psi_per_run
  UNION
  SELECT run_id FROM cpu_per_run
  UNION
  SELECT run_id FROM threads_per_run
)
SELECT
  f.run_id,
  f.labels,
  p.psi_some_ms,
  p.psi_full_ms,
  p.psi_window_s,
  c.system_cpu_s,
  c.softirq_cpu_s,
  c.iowait_s,
  c.cpu_window_s,
  t.kswapd_cpu_s,
  t.kcompactd_cpu_s,
  t.khugepaged_cpu_s,
  t.kthreads,
  t.kthread_window_s,
  t.kthread_clock,
  nullif(concat_ws(', ',
    CASE WHEN p.psi_some_impossible THEN 'psi_some_ms' END,
    CASE WHEN p.psi_full_impossible THEN 'psi_full_ms' END,
    CASE WHEN c.system_impossible THEN 'system_cpu_s' END,
    CASE WHEN c.softirq_impossible THEN 'softirq_cpu_s' END,
    CASE WHEN c.iowait_impossible THEN 'iowait_s' END,
    CASE WHEN t.kswapd_impossible THEN 'kswapd_cpu_s' END,
    CASE WHEN t.kcompactd_impossible THEN 'kcompactd_cpu_s' END,
    CASE WHEN t.khugepaged_impossible THEN 'khugepaged_cpu_s' END), '') AS impossible
FROM sampled AS s
JOIN run_facts AS f ON f.run_id = s.run_id
LEFT JOIN psi_per_run AS p ON p.run_id = s.run_id
LEFT JOIN cpu_per_run AS c ON c.run_id = s.run_id
LEFT JOIN threads_per_run AS t ON t.run_id = s.run_id
ORDER BY f.run_id

-- @section kthreads: per run and kernel thread: its CPU time over the capture
-- @columns
--   pid        code   the thread's pid
--   comm       text   its name (kswapd0, kcompactd0, khugepaged)
--   kind       text   kswapd, kcompactd or khugepaged
--   cpu_s      s      its CPU time between its first and last sample: schedstat's
--                     nanoseconds where every sample has them, else user plus system ticks (NULL,
--                     and utime_s and stime_s too, where the samples are impossible: more
--                     time than the window holds, or less than nothing)
--   clock      text   'schedstat ns' or 'ticks': which cpu_s came from
--   utime_s    s      user-mode ticks (0 for a kernel thread but for accounting noise)
--   stime_s    s      kernel-mode ticks
--   first_ts   ns     its first sample
--   last_ts    ns     its last sample
WITH threads AS (
  SELECT *,
         CASE WHEN run_ns IS NOT NULL THEN run_ns / 1e9 ELSE ticks / ticks_per_s END AS time_s
  FROM _kthread_deltas
),
checked AS (
  SELECT *,
         uticks >= 0 AND sticks >= 0 AND time_s >= 0
           AND time_s <= (last_ts - first_ts) / 1e9 + 1.0 AS possible
  FROM threads
)
SELECT f.run_id, f.labels, t.pid, t.comm, t.kind,
       CASE WHEN t.possible THEN t.time_s END AS cpu_s,
       CASE WHEN t.run_ns IS NOT NULL THEN 'schedstat ns' ELSE 'ticks' END AS clock,
       CASE WHEN t.possible THEN t.uticks / t.ticks_per_s END AS utime_s,
       CASE WHEN t.possible THEN t.sticks / t.ticks_per_s END AS stime_s,
       t.first_ts, t.last_ts
FROM checked AS t
JOIN run_facts AS f ON f.run_id = t.run_id
ORDER BY f.run_id, t.kind, t.comm, t.pid, t.first_ts

-- @section mthp: per run, mTHP size and counter: its increase over the capture
-- @columns
--   size_kb       kB     the folio size of hugepages-<size>kB
--   counter       text   the stats file (anon_fault_alloc, anon_fault_fallback, swpout, split...)
--   first_value   count  the counter at the first sample
--   last_value    count  the counter at the last sample
--   delta         count  last_value - first_value (a net change for the nr_anon* gauges);
--                        NULL where that is impossible: a counter that fell, or a change
--                        beyond 64 bits
--   window_s      s      between the first and last sample
WITH counter_deltas AS (
  SELECT run_id, size_kb, counter,
         min_by(value, ts) AS first_value,
         max_by(value, ts) AS last_value,
         max_by(value::HUGEINT, ts) - min_by(value::HUGEINT, ts) AS delta,
         (max(ts) - min(ts)) / 1e9 AS window_s
  FROM mthp_stats
  GROUP BY run_id, size_kb, counter
),
counters AS (
  SELECT run_id, size_kb, counter, first_value, last_value, window_s,
         CASE WHEN delta BETWEEN -9223372036854775807 AND 9223372036854775807
                   AND (delta >= 0 OR counter IN ('nr_anon', 'nr_anon_partially_mapped'))
              THEN delta::BIGINT END AS delta
  FROM counter_deltas
)
SELECT f.run_id, f.labels, c.size_kb, c.counter, c.first_value, c.last_value, c.delta,
       c.window_s
FROM counters AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c.size_kb, c.counter
