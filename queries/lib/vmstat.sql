-- lib/vmstat: the vmstat counters over the capture, and the window trace-derived rates count in.
-- requires: (none)
-- views: vmstat_deltas, trace_windows

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

-- The window that rates from the trace count events in, per run: vmstat's
-- sampling window when the run has one, so that they compare with vmstat's
-- rates, else the whole capture.
-- @columns
--   run_id         text   the run
--   trace_window   text   'vmstat' (the samples' window) or 'capture' (no vmstat window)
--   lo             ns     the window's start (NULL: the whole capture)
--   hi             ns     the window's end (NULL: the whole capture)
CREATE TEMP VIEW trace_windows AS
WITH vm AS (
  SELECT run_id, min(first_ts) AS lo, max(last_ts) AS hi FROM vmstat_deltas GROUP BY run_id
)
SELECT f.run_id,
       CASE WHEN v.hi > v.lo THEN 'vmstat' ELSE 'capture' END AS trace_window,
       CASE WHEN v.hi > v.lo THEN v.lo END AS lo,
       CASE WHEN v.hi > v.lo THEN v.hi END AS hi
FROM run_facts AS f
LEFT JOIN vm AS v ON v.run_id = f.run_id;
