-- vmstat_rates: per-minute rate of every vmstat counter over each run's capture window
--
-- How fast did each /proc/vmstat counter move during the capture? The delta
-- between the first and last sample of each counter, per minute of window.
-- This is the per-run figure that mmtests compare-kernels reports as one
-- delta per kernel; kmemscope's compare adds the statistics across runs.
--
-- @param name_like VARCHAR % only counters whose name matches this LIKE pattern
-- @requires vmstat
-- @include vmstat
--
-- Caveats (KERNEL-ERAS.md section 6): gauges (nr_free_pages, nr_*) are
-- included; their "rate" is the net change, not a flow. Counters present only
-- on some kernels (e.g. *_proactive in 6.15+, thp_fault_fallback_charge from
-- 5.10, per-order mTHP stats from 6.10) appear only for the runs that have them.
-- Runs without procfs samples (bare trace.dat) are left out, with a note.

-- @section vmstat_rates: per run and counter: delta and rate over the capture window
-- @columns
--   name          text   vmstat counter name
--   first_value   count  value in the first sample (pages for the nr_* gauges)
--   last_value    count  value in the last sample
--   delta         count  last - first
--   window_s      s      between the two samples
--   per_min       /min   delta per minute of window (NULL when the window is 0)
--   first_ts      ns     when the first sample was taken (the trace clock)
--   last_ts       ns     when the last sample was taken
SELECT
  f.run_id,
  f.labels,
  d.name,
  d.first_value,
  d.last_value,
  d.delta,
  d.window_s,
  60.0 * d.delta / nullif(d.window_s, 0) AS per_min,
  d.first_ts,
  d.last_ts
FROM vmstat_deltas AS d
JOIN run_facts AS f ON f.run_id = d.run_id
WHERE d.name LIKE $name_like
ORDER BY f.run_id, d.name

-- @section per_minute: per run, counter and minute of the capture: how much the counter moved
-- @columns
--   name     text   vmstat counter name
--   minute   count  minutes since the run's first sample (0 = the first minute)
--   delta    count  the counter's last value in this minute minus its last value in the
--                   minute before (the first sample's value for minute 0)
--   samples  count  samples taken in this minute
WITH samples AS (
  SELECT
    run_id,
    name,
    ts,
    value,
    CAST(floor((ts - min(ts) OVER (PARTITION BY run_id)) / 60e9) AS BIGINT) AS minute
  FROM vmstat
  WHERE name LIKE $name_like
),
minute_last AS (
  SELECT run_id, name, minute, max_by(value, ts) AS last_value, count(*) AS samples
  FROM samples
  GROUP BY run_id, name, minute
),
run_first AS (
  SELECT run_id, name, min_by(value, ts) AS first_value
  FROM samples
  GROUP BY run_id, name
)
SELECT
  f.run_id,
  f.labels,
  m.name,
  m.minute,
  m.last_value - coalesce(lag(m.last_value) OVER (PARTITION BY m.run_id, m.name ORDER BY m.minute),
                          r.first_value) AS delta,
  m.samples
FROM minute_last AS m
JOIN run_first AS r ON r.run_id = m.run_id AND r.name = m.name
JOIN run_facts AS f ON f.run_id = m.run_id
ORDER BY f.run_id, m.name, m.minute
