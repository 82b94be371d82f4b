-- highatomic: HighAtomic pageblocks over time per zone, and allocations served from the HIGHATOMIC list
--
-- How large is the high-atomic reserve, how does it grow during the capture,
-- and how many allocations does it actually serve? The high-atomic
-- reservation study measured the first (309-312 HighAtomic pageblocks per
-- host, all order-9 free blocks stuck there); the reserve is not traced, so it
-- is read from /proc/pagetypeinfo samples.
--
-- Caveats (KERNEL-ERAS.md sections 1, 3, 6): the HighAtomic column of
-- "Number of blocks type" is the reserve size; the cap is about 1% of the zone
-- (plus one pageblock up to 6.6, aligned down to whole pageblocks from 6.12, and
-- no reserve at all when 1% is below one pageblock from 6.8). Before 5.19 (and
-- 5.15.y before .171) mm_page_alloc_zone_locked reports the *requested* type and
-- has no percpu_refill field, so it cannot show HIGHATOMIC service: those runs
-- get one row with NULL counts. Since 6.12 (also 5.15.171, 6.6.63) order-0
-- ALLOC_NON_BLOCK/ALLOC_OOM requests may also take from the HIGHATOMIC list.

-- @section blocks: HighAtomic pageblocks per pagetypeinfo sample, node and zone
-- @requires pagetypeinfo_blocks
-- @columns
--   ts                      ns     sample time (CLOCK_MONOTONIC, same clock as the trace)
--   t_s                     s      since the run's first sample
--   node                    code   NUMA node
--   zone                    text   zone name (DMA, DMA32, Normal, Movable)
--   highatomic_pageblocks   count  pageblocks of type HighAtomic
--   total_pageblocks        count  pageblocks of all types in the zone
--   highatomic_pct          %      100 * highatomic / total
WITH
samples AS (
  SELECT run_id, ts, node, zone,
         CAST(sum(CASE WHEN lower(CAST(migratetype AS VARCHAR)) = 'highatomic' THEN blocks ELSE 0 END)
              AS BIGINT) AS highatomic_pageblocks,
         CAST(sum(blocks) AS BIGINT) AS total_pageblocks
  FROM pagetypeinfo_blocks
  GROUP BY run_id, ts, node, zone
),
first_sample AS (
  SELECT run_id, min(ts) AS t0 FROM pagetypeinfo_blocks GROUP BY run_id
)
SELECT
  f.run_id,
  f.labels,
  s.ts,
  (s.ts - fs.t0) / 1e9 AS t_s,
  s.node,
  s.zone,
  s.highatomic_pageblocks,
  s.total_pageblocks,
  100.0 * s.highatomic_pageblocks / nullif(s.total_pageblocks, 0) AS highatomic_pct
FROM samples AS s
JOIN first_sample AS fs ON fs.run_id = s.run_id
JOIN run_facts AS f ON f.run_id = s.run_id
ORDER BY f.run_id, s.ts, s.node, s.zone

-- @section served: allocations taken from the HIGHATOMIC free list, by order (kernels 5.19+ and 5.15.171+)
-- @requires mm_page_alloc_zone_locked
-- @columns
--   freelist_known          bool   true when the run's format has percpu_refill (5.19+,
--                                  5.15.171+): migratetype is then the list actually used
--   order                   order  order taken from the HIGHATOMIC list (NULL: not knowable)
--   events                  count  mm_page_alloc_zone_locked events from that list
--   percpu_refill_events    count  of them, refills of a per-CPU list (percpu_refill = 1)
--   events_per_s            /s     events per second of capture
--   pct_of_zone_locked      %      of the run's zone_locked events
WITH
highatomic_type AS (
  -- HIGHATOMIC is MIGRATE_PCPTYPES = 3 on every kernel (section 4); the run's
  -- migratetype names confirm it where the run has them.
  SELECT f.run_id, coalesce(min(m.migratetype), 3) AS migratetype
  FROM run_facts AS f
  LEFT JOIN migratetype_names AS m
    ON m.run_id = f.run_id AND lower(m.name) = 'highatomic'
  GROUP BY f.run_id
),
zone_locked_runs AS (
  SELECT run_id, count(*) AS events, count(percpu_refill) > 0 AS freelist_known
  FROM mm_page_alloc_zone_locked
  GROUP BY run_id
),
served AS (
  SELECT z.run_id, z."order",
         count(*) AS events,
         count(CASE WHEN z.percpu_refill = 1 THEN 1 END) AS percpu_refill_events
  FROM mm_page_alloc_zone_locked AS z
  JOIN highatomic_type AS h ON h.run_id = z.run_id AND z.migratetype = h.migratetype
  WHERE z.percpu_refill IS NOT NULL
  GROUP BY z.run_id, z."order"
)
SELECT
  f.run_id,
  f.labels,
  r.freelist_known,
  s."order",
  CASE WHEN r.freelist_known THEN coalesce(s.events, 0) END AS events,
  CASE WHEN r.freelist_known THEN coalesce(s.percpu_refill_events, 0) END AS percpu_refill_events,
  CASE WHEN r.freelist_known THEN coalesce(s.events, 0) / f.duration_s END AS events_per_s,
  CASE WHEN r.freelist_known THEN 100.0 * coalesce(s.events, 0) / r.events END AS pct_of_zone_locked
FROM zone_locked_runs AS r
JOIN run_facts AS f ON f.run_id = r.run_id
LEFT JOIN served AS s ON s.run_id = r.run_id
ORDER BY f.run_id, s."order"
