-- run_metrics: benchmark results imported for each run, and the runs a comparison draws from
--
-- What did the workload itself measure while the trace was recorded? The
-- per-run results that `kmemscope metrics import` (or a bundle's metrics.json,
-- written by `kmemscope record --metrics FILE`) attached to a run: netperf
-- throughput, pgbench TPS, kbuild times, fault latency. `kmemscope compare`
-- puts them beside the allocator metrics of the same runs.
--
-- Caveats: a run re-parsed from its bundle keeps its imported values; its
-- bundle values are replaced by the bundle's. Names, units and directions are
-- the importer's: `compare` refuses a metric whose runs disagree on `better`.
--
-- @optional run_metrics

-- @section metrics: per run and imported metric: its value, unit and direction
-- @columns
--   metric        text   the metric's name as imported (e.g. netperf_tcp_64)
--   value         ratio  the run's value, in `unit`
--   unit          text   what value counts (ms, MB/s, tps...; empty when not given)
--   better        text   'higher' or 'lower': the direction that is better
--   source        text   'bundle' (the bundle's metrics.json, loaded at parse) or
--                        'import' (kmemscope metrics import)
SELECT
  f.run_id,
  f.labels,
  m.metric,
  m.value,
  m.unit,
  m.better,
  m.source
FROM run_metrics AS m
JOIN run_facts AS f ON f.run_id = m.run_id
ORDER BY f.run_id, m.metric, m.source, m.value, m.unit, m.better

-- @section runs: one row per selected run: host, kernel and start time (the sides of a comparison)
-- @columns
--   host            text   the host the run was recorded on (NULL for a bare trace.dat)
--   kernel_release  text   uname -r
--   started_ns      text   wall-clock start of the capture in CLOCK_REALTIME ns, as the
--                          manifest wrote it (text: the manifest is not trusted to hold
--                          a number); NULL for a bare trace.dat
--   first_ts        ns     first event (the trace clock)
--   duration_s      s      capture window
--   last_ts         ns     last event (the trace clock)
--   lost_events     count  events the ring buffer dropped, as the run's record counts them
--   pageblock_order order  its pageblock order (run_facts: recorded, or assumed)
--   workload_rusage text   what `kmemscope record -- COMMAND` recorded its command used (the
--                          manifest's command.rusage as JSON text; NULL: no command, or a
--                          bundle from before kmemscope kept it)
SELECT
  f.run_id,
  f.labels,
  r.host,
  f.kernel_release,
  json_extract_string(r.manifest, '$.start.realtime_ns') AS started_ns,
  f.first_ts,
  f.duration_s,
  f.last_ts,
  r.lost_events,
  f.pageblock_order,
  json_extract_string(r.manifest, '$.command.rusage') AS workload_rusage
FROM run_facts AS f
LEFT JOIN runs AS r ON r.run_id = f.run_id
ORDER BY f.run_id
