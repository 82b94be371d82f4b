-- lib/vmstat: the vmstat counters over the capture, and the window trace-derived rates count in.
-- include: (none)
-- views: vmstat_deltas, vmstat_intervals, trace_windows
-- internal: _prefer_vmstat, _vmstat_delta

-- vmstat counters over each run's capture window: first and last sample.
-- @columns
--   run_id        text   the run
--   name          text   the vmstat counter
--   first_ts      ns     the first sample's time
--   last_ts       ns     the last sample's time
--   first_value   count  the counter at the first sample
--   last_value    count  the counter at the last sample
--   delta         count  last_value - first_value
--   window_s      s      last_ts - first_ts, in seconds
CREATE TEMP VIEW vmstat_deltas AS
SELECT
  run_id,
  name,
  min(ts) AS first_ts,
  max(ts) AS last_ts,
  min_by(value, ts) AS first_value,
  max_by(value, ts) AS last_value,
  max_by(value, ts) - min_by(value, ts) AS delta,
  (max(ts) - min(ts)) / 1e9 AS window_s
FROM vmstat
GROUP BY run_id, name;

-- vmstat counters sample by sample: each sample's increase since the run's previous sample
-- of the counter (the first sample of each has none and is left out), for figures and
-- rates over time.
-- @columns
--   run_id        text   the run
--   name          text   the vmstat counter
--   ts            ns     the sample's time
--   t_s           s      the sample's time since the run's first event
--   delta         count  the counter's increase since the previous sample
--   dt_s          s      the time since the previous sample
CREATE TEMP VIEW vmstat_intervals AS
SELECT run_id, name, ts, t_s, delta, dt_s
FROM (
  SELECT v.run_id, v.name, v.ts, (v.ts - f.first_ts) / 1e9 AS t_s,
         v.value - lag(v.value) OVER w AS delta, (v.ts - lag(v.ts) OVER w) / 1e9 AS dt_s
  FROM vmstat AS v JOIN run_facts AS f ON f.run_id = v.run_id
  WINDOW w AS (PARTITION BY v.run_id, v.name ORDER BY v.ts)
)
WHERE delta IS NOT NULL;

-- The window that rates from the trace count events in, per run: vmstat's
-- sampling window when the run has one that overlaps the trace, so that they
-- compare with vmstat's rates, else the whole capture ('capture': samples that
-- lie wholly outside the trace cannot be compared with it, and parse says so).
-- @columns
--   run_id         text   the run
--   trace_window   text   'vmstat' (the samples' window) or 'capture' (no vmstat window that overlaps the trace)
--   lo             ns     the window's start (NULL: the whole capture)
--   hi             ns     the window's end (NULL: the whole capture)
CREATE TEMP VIEW trace_windows AS
WITH vm AS (
  SELECT run_id, min(first_ts) AS lo, max(last_ts) AS hi FROM vmstat_deltas GROUP BY run_id
),
overlap AS (
  SELECT v.run_id, v.lo, v.hi,
         v.hi > v.lo AND v.lo <= f.last_ts AND v.hi >= f.first_ts AS usable
  FROM vm AS v JOIN run_facts AS f ON f.run_id = v.run_id
)
SELECT f.run_id,
       CASE WHEN o.usable THEN 'vmstat' ELSE 'capture' END AS trace_window,
       CASE WHEN o.usable THEN o.lo END AS lo,
       CASE WHEN o.usable THEN o.hi END AS hi
FROM run_facts AS f
LEFT JOIN overlap AS o ON o.run_id = f.run_id;

-- A rate from vmstat where the run's samples give it, else from the trace: the one
-- place the choice is made (compaction_success, thp_fault_success). `rates` names a
-- table or CTE with vmstat_pct and trace_pct; each row comes back with
--   success_pct  vmstat_pct when it is not NULL, else trace_pct
--   source       'vmstat', 'trace' or NULL (neither gives a value)
CREATE TEMP MACRO _prefer_vmstat(rates) AS TABLE
SELECT *,
       coalesce(vmstat_pct, trace_pct) AS success_pct,
       CASE WHEN vmstat_pct IS NOT NULL THEN 'vmstat'
            WHEN trace_pct IS NOT NULL THEN 'trace' END AS source
FROM query_table(rates);

-- One counter's increase over the capture, in a query over vmstat_deltas grouped by run
-- (NULL: the run has no samples of it): the one way a counter becomes a column. The
-- columns name and delta are passed in (a macro binds no column of its own).
CREATE TEMP MACRO _vmstat_delta(counter, name, delta) AS
  max(CASE WHEN name = counter THEN delta END);
