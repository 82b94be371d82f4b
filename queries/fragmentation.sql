-- fragmentation: free blocks per order, the kernel's unusable free space and fragmentation indices, and free pageblocks per migratetype
--
-- How fragmented is free memory, order by order, as the kernel itself
-- measures it? For every /proc/buddyinfo sample, node, zone and order this
-- computes the two indices of mm/vmstat.c (shown in debugfs as
-- extfrag/unusable_index and extfrag/extfrag_index) with the kernel's own
-- integer arithmetic, so that a value here equals the debugfs reading of the
-- same free lists (tests/test_fragmentation_real.py checks it on a real
-- recording). With n_k free blocks of order k in the zone:
--
--   free_pages        F    = sum n_k * 2^k
--   free_blocks_total T    = sum n_k
--   suitable_blocks   S(j) = sum over k >= j of n_k * 2^(k-j)
--                            (blocks of order j that the free blocks could be split into)
--   unusable free space index (unusable_free_index), thousandths:
--       F = 0 -> 1000 (no free memory: all of it is unusable)
--       else  -> (F - S(j) * 2^j) * 1000 / F                     (integer division)
--   fragmentation index (__fragmentation_index), thousandths:
--       T = 0 -> 0;  S(j) > 0 -> -1000 ("an allocation of order j would succeed")
--       else  -> 1000 - (1000 + F * 1000 / 2^j) / T             (integer divisions)
--       towards 1000: the allocation would fail because free memory is fragmented;
--       towards 0: because there is too little free memory. With very few free
--       blocks the formula goes below 0 (e.g. -500 with one free block of
--       order j-1); the kernel keeps such a value, and so does this analysis.
--
-- The sections over time and per run follow order 9 (a THP or hugetlb page
-- and a pageblock on x86-64 with 4 KiB pages) and order 3
-- (PAGE_ALLOC_COSTLY_ORDER: above it the allocator gives up sooner). The
-- per-run metrics that `kmemscope compare` uses (frag.*) come from the
-- metrics section.
--
-- Caveats: a zone's free lists change between reading /proc/buddyinfo and
-- /proc/pagetypeinfo, which are separate samples (ts differs). buddyinfo
-- counts every free block in the zone's buddy lists, not pages on the per-CPU
-- lists, and neither do the kernel's indices. /proc/pagetypeinfo prints free
-- counts of 100000 or more as ">100000" (5.4+): such a count is a lower bound
-- (counts_capped). Runs without procfs samples (a bare trace.dat) are left
-- out, with a note; so is a zone's buddyinfo sample with an order outside
-- 0-20 or a count beyond 2^44 pages, which no kernel prints (a damaged or
-- forged dataset), whose sums would overflow.

-- @prelude
-- A zone's sample with an order outside 0-20 or a count beyond 2^44 pages
-- (no kernel prints either) is left out whole: its sums would overflow.
CREATE TEMP VIEW _frag_buddyinfo AS
SELECT b.*
FROM buddyinfo AS b
SEMI JOIN (
  SELECT run_id, ts, node, zone
  FROM buddyinfo
  GROUP BY run_id, ts, node, zone
  HAVING bool_and(CASE WHEN "order" BETWEEN 0 AND 20
                       THEN count BETWEEN 0 AND (CAST(17592186044416 AS BIGINT) >> "order")
                       ELSE false END)
) AS ok
  ON ok.run_id = b.run_id AND ok.ts = b.ts AND ok.node = b.node AND ok.zone = b.zone;
CREATE TEMP VIEW _frag_zone_samples AS
SELECT run_id, ts, node, zone,
       CAST(sum(count * (CAST(1 AS BIGINT) << "order")) AS BIGINT) AS free_pages,
       CAST(sum(count) AS BIGINT) AS free_blocks_total
FROM _frag_buddyinfo
GROUP BY run_id, ts, node, zone;
CREATE TEMP VIEW _frag_indices AS
WITH
suitable AS (
  -- S(j): the blocks of order >= j, each split into 2^(k-j) blocks of order j
  SELECT j.run_id, j.ts, j.node, j.zone, j."order", j.count AS free_blocks,
         CAST(sum(k.count * (CAST(1 AS BIGINT) << (k."order" - j."order"))) AS BIGINT)
           AS suitable_blocks
  FROM _frag_buddyinfo AS j
  JOIN _frag_buddyinfo AS k
    ON k.run_id = j.run_id AND k.ts = j.ts AND k.node = j.node AND k.zone = j.zone
   AND k."order" >= j."order"
  GROUP BY j.run_id, j.ts, j.node, j.zone, j."order", j.count
)
SELECT s.run_id, s.ts, s.node, s.zone, s."order", s.free_blocks,
       z.free_pages, z.free_blocks_total, s.suitable_blocks,
       CAST(CASE WHEN z.free_pages = 0 THEN 1000
                 ELSE ((z.free_pages - (s.suitable_blocks << s."order")) * 1000) // z.free_pages
            END AS INTEGER) AS unusable_index_permille,
       CAST(CASE WHEN z.free_blocks_total = 0 THEN 0
                 WHEN s.suitable_blocks > 0 THEN -1000
                 ELSE 1000 - (1000 + (z.free_pages * 1000) // (CAST(1 AS BIGINT) << s."order"))
                             // z.free_blocks_total
            END AS INTEGER) AS fragmentation_index_permille
FROM suitable AS s
JOIN _frag_zone_samples AS z
  ON z.run_id = s.run_id AND z.ts = s.ts AND z.node = s.node AND z.zone = s.zone;
-- The zone the per-run metrics follow: each node's highest zone, the one an
-- allocation without zone limits (THP, user pages) tries first.
CREATE TEMP VIEW _frag_metric_zones AS
SELECT run_id, node, arg_max(zone, rank) AS zone
FROM (
  SELECT DISTINCT run_id, node, zone,
         CASE zone WHEN 'DMA' THEN 0 WHEN 'DMA32' THEN 1 WHEN 'Normal' THEN 2
                   WHEN 'HighMem' THEN 3 WHEN 'Movable' THEN 4 WHEN 'Device' THEN 5
                   ELSE -1 END AS rank
  FROM _frag_buddyinfo
) AS zones
GROUP BY run_id, node;
-- Orders 3 and 9, which the sections over runs follow, per sample, node and zone: the
-- unusable index, and the fragmentation index where an allocation would fail (NULL where
-- it would succeed, so that counts and means take only the failing samples).
CREATE TEMP VIEW _frag_orders_3_9 AS
SELECT run_id, ts, node, zone, "order", free_pages, unusable_index_permille AS unusable,
       CASE WHEN fragmentation_index_permille <> -1000 THEN fragmentation_index_permille END
         AS failing_fragmentation
FROM _frag_indices
WHERE "order" IN (3, 9);
-- The indices at orders 3 and 9 summarised over the samples of each run and `grp` of
-- `rows` (a CTE of _frag_orders_3_9's columns and a column grp to group by): the one
-- aggregation of the per_run (grp: node and zone) and metrics (grp: NULL) sections.
CREATE TEMP MACRO _frag_index_stats(rows) AS TABLE
SELECT run_id, grp,
         count(DISTINCT ts) AS samples,
         avg(CASE WHEN "order" = 3 THEN free_pages END) AS free_pages_mean,
         avg(CASE WHEN "order" = 3 THEN unusable END) AS unusable_index_order3_mean,
         max(CASE WHEN "order" = 3 THEN unusable END) AS unusable_index_order3_max,
         avg(CASE WHEN "order" = 9 THEN unusable END) AS unusable_index_order9_mean,
         max(CASE WHEN "order" = 9 THEN unusable END) AS unusable_index_order9_max,
         100.0 * count(CASE WHEN "order" = 3 THEN failing_fragmentation END)
           / nullif(count(CASE WHEN "order" = 3 THEN 1 END), 0) AS order3_fail_pct,
         100.0 * count(CASE WHEN "order" = 9 THEN failing_fragmentation END)
           / nullif(count(CASE WHEN "order" = 9 THEN 1 END), 0) AS order9_fail_pct,
         avg(CASE WHEN "order" = 3 THEN failing_fragmentation END) AS fragmentation_index_order3_mean,
         max(CASE WHEN "order" = 3 THEN failing_fragmentation END) AS fragmentation_index_order3_max,
         avg(CASE WHEN "order" = 9 THEN failing_fragmentation END) AS fragmentation_index_order9_mean,
         max(CASE WHEN "order" = 9 THEN failing_fragmentation END) AS fragmentation_index_order9_max
FROM query_table(rows)
GROUP BY run_id, grp;

-- @section orders: per buddyinfo sample, node, zone and order: free blocks and the kernel's two indices
-- @requires buddyinfo
-- @columns
--   ts                            ns     sample time (CLOCK_MONOTONIC, same clock as the trace)
--   t_s                           s      since the run's first buddyinfo sample
--   node                          code   NUMA node
--   zone                          text   zone name (DMA, DMA32, Normal, Movable)
--   order                         order  the allocation order the indices are for
--   free_blocks                   count  free blocks of this order (the buddyinfo column)
--   free_pages                    pages  the zone's free pages (F)
--   free_blocks_total             count  the zone's free blocks of every order (T)
--   suitable_blocks               count  blocks of this order the free blocks could be split
--                                        into (S; 0: an allocation of this order would fail)
--   unusable_index_permille       /1000  unusable free space index, thousandths (the kernel's
--                                        integer; debugfs prints it / 1000)
--   fragmentation_index_permille  /1000  fragmentation index, thousandths; -1000 when an
--                                        allocation of this order would succeed
SELECT
  f.run_id,
  f.labels,
  i.ts,
  (i.ts - min(i.ts) OVER (PARTITION BY i.run_id)) / 1e9 AS t_s,
  i.node,
  i.zone,
  i."order",
  i.free_blocks,
  i.free_pages,
  i.free_blocks_total,
  i.suitable_blocks,
  i.unusable_index_permille,
  i.fragmentation_index_permille
FROM _frag_indices AS i
JOIN run_facts AS f ON f.run_id = i.run_id
ORDER BY f.run_id, i.ts, i.node, i.zone, i."order"

-- @section pageblocks: per pagetypeinfo sample, node, zone and migratetype: pageblocks owned and free
-- @requires pagetypeinfo_blocks pagetypeinfo_free
-- @columns
--   ts                  ns     sample time (CLOCK_MONOTONIC)
--   t_s                 s      since the run's first pagetypeinfo sample
--   node                code   NUMA node
--   zone                text   zone name
--   migratetype         text   migratetype as /proc/pagetypeinfo names it
--   pageblocks          count  pageblocks of this type ("Number of blocks type")
--   free_pages          pages  free pages on this type's free lists (all orders)
--   free_pageblocks     count  whole free pageblocks on this type's lists: free blocks of
--                              order >= pageblock_order, in pageblocks
--   free_pageblocks_pct %      100 * free_pageblocks / pageblocks
--   pageblock_order     order  the run's pageblock order (manifest, else the arch's default)
--   counts_capped       bool   some free count was printed as ">100000": free_pages and
--                              free_pageblocks are lower bounds
WITH
free_by_type AS (
  SELECT p.run_id, p.ts, p.node, p.zone, p.migratetype,
         CAST(sum(p.count * (CAST(1 AS BIGINT) << p."order")) AS BIGINT) AS free_pages,
         CAST(sum(CASE WHEN p."order" >= f.pageblock_order
                       THEN p.count * (CAST(1 AS BIGINT) << (p."order" - f.pageblock_order))
                       ELSE 0 END) AS BIGINT) AS free_pageblocks,
         bool_or(p.count >= 100000) AS counts_capped
  FROM pagetypeinfo_free AS p
  JOIN run_facts AS f ON f.run_id = p.run_id
  GROUP BY p.run_id, p.ts, p.node, p.zone, p.migratetype
),
first_sample AS (
  SELECT run_id, min(ts) AS t0 FROM pagetypeinfo_blocks GROUP BY run_id
)
SELECT
  f.run_id,
  f.labels,
  b.ts,
  (b.ts - fs.t0) / 1e9 AS t_s,
  b.node,
  b.zone,
  b.migratetype,
  b.blocks AS pageblocks,
  t.free_pages,
  t.free_pageblocks,
  100.0 * t.free_pageblocks / nullif(b.blocks, 0) AS free_pageblocks_pct,
  f.pageblock_order,
  t.counts_capped
FROM pagetypeinfo_blocks AS b
JOIN first_sample AS fs ON fs.run_id = b.run_id
JOIN run_facts AS f ON f.run_id = b.run_id
LEFT JOIN free_by_type AS t
  ON t.run_id = b.run_id AND t.ts = b.ts AND t.node = b.node AND t.zone = b.zone
 AND t.migratetype = b.migratetype
ORDER BY f.run_id, b.ts, b.node, b.zone, b.migratetype

-- @section over_time: per buddyinfo sample, node and zone: the indices at order 3 and order 9
-- @requires buddyinfo
-- @columns
--   ts                                   ns     sample time (CLOCK_MONOTONIC)
--   t_s                                  s      since the run's first buddyinfo sample
--   node                                 code   NUMA node
--   zone                                 text   zone name
--   free_pages                           pages  the zone's free pages
--   unusable_index_order3_permille       /1000  unusable free space index at order 3
--   unusable_index_order9_permille       /1000  unusable free space index at order 9
--   fragmentation_index_order3_permille  /1000  fragmentation index at order 3 (-1000: would succeed)
--   fragmentation_index_order9_permille  /1000  fragmentation index at order 9 (-1000: would succeed)
SELECT
  f.run_id,
  f.labels,
  i.ts,
  (i.ts - min(i.ts) OVER (PARTITION BY i.run_id)) / 1e9 AS t_s,
  i.node,
  i.zone,
  max(i.free_pages) AS free_pages,
  max(CASE WHEN i."order" = 3 THEN i.unusable_index_permille END) AS unusable_index_order3_permille,
  max(CASE WHEN i."order" = 9 THEN i.unusable_index_permille END) AS unusable_index_order9_permille,
  max(CASE WHEN i."order" = 3 THEN i.fragmentation_index_permille END)
    AS fragmentation_index_order3_permille,
  max(CASE WHEN i."order" = 9 THEN i.fragmentation_index_permille END)
    AS fragmentation_index_order9_permille
FROM _frag_indices AS i
JOIN run_facts AS f ON f.run_id = i.run_id
GROUP BY f.run_id, f.labels, i.run_id, i.ts, i.node, i.zone
ORDER BY f.run_id, i.ts, i.node, i.zone

-- @section per_run: per run, node and zone: mean and max of the indices at order 3 and 9 over the samples
-- @requires buddyinfo
-- @columns
--   node                          code   NUMA node
--   zone                          text   zone name
--   samples                       count  buddyinfo samples
--   free_pages_mean               pages  mean of the zone's free pages
--   unusable_index_order3_mean    /1000  mean unusable free space index at order 3
--   unusable_index_order3_max     /1000  its largest value
--   unusable_index_order9_mean    /1000  mean unusable free space index at order 9
--   unusable_index_order9_max     /1000  its largest value
--   order3_fail_pct               %      of the samples, those where no free block of order >= 3
--                                        was left (fragmentation index not -1000)
--   order9_fail_pct               %      the same at order 9
--   fragmentation_index_order3_mean  /1000  mean fragmentation index at order 3 over the samples
--                                           where the allocation would fail (NULL: none)
--   fragmentation_index_order3_max   /1000  its largest value over those samples
--   fragmentation_index_order9_mean  /1000  the same at order 9
--   fragmentation_index_order9_max   /1000  its largest value over those samples
WITH
zone_samples AS (
  SELECT *, struct_pack(node := node, zone := zone) AS grp FROM _frag_orders_3_9
),
per_zone AS (
  SELECT run_id, grp.node AS node, grp.zone AS zone, * EXCLUDE (run_id, grp)
  FROM _frag_index_stats(zone_samples)
)
SELECT
  f.run_id,
  f.labels,
  z.node,
  z.zone,
  z.samples,
  z.free_pages_mean,
  z.unusable_index_order3_mean,
  z.unusable_index_order3_max,
  z.unusable_index_order9_mean,
  z.unusable_index_order9_max,
  z.order3_fail_pct,
  z.order9_fail_pct,
  z.fragmentation_index_order3_mean,
  z.fragmentation_index_order3_max,
  z.fragmentation_index_order9_mean,
  z.fragmentation_index_order9_max
FROM per_zone AS z
JOIN run_facts AS f ON f.run_id = z.run_id
ORDER BY f.run_id, z.node, z.zone

-- @section metrics: per run: the frag.* metrics of `kmemscope compare`, over each node's highest zone
-- @requires buddyinfo
-- @columns
--   zones                            list   the zone of each node the metrics follow ("0:Normal"):
--                                           the highest, which allocations without zone limits try first
--   samples                          count  buddyinfo samples
--   unusable_index_order3_mean       /1000  mean unusable free space index at order 3 (samples, nodes)
--   unusable_index_order3_max        /1000  its largest value
--   unusable_index_order9_mean       /1000  mean unusable free space index at order 9
--   unusable_index_order9_max        /1000  its largest value
--   order3_fail_pct                  %      of the samples (and nodes), those where an order-3
--                                           allocation would fail (no free block of order >= 3)
--   order9_fail_pct                  %      the same at order 9
--   fragmentation_index_order3_mean  /1000  mean fragmentation index at order 3 where it would fail
--   fragmentation_index_order3_max   /1000  its largest value
--   fragmentation_index_order9_mean  /1000  mean fragmentation index at order 9 where it would fail
--   fragmentation_index_order9_max   /1000  its largest value
WITH
metric_zone_samples AS (
  -- the samples of the zone that each node's metrics follow
  SELECT o.run_id, o.ts, o.node, o."order", o.free_pages, o.unusable, o.failing_fragmentation
  FROM _frag_orders_3_9 AS o
  JOIN _frag_metric_zones AS m ON m.run_id = o.run_id AND m.node = o.node AND m.zone = o.zone
),
zone_names AS (
  SELECT run_id, list(CAST(node AS VARCHAR) || ':' || zone ORDER BY node) AS zones
  FROM _frag_metric_zones
  GROUP BY run_id
),
run_samples AS (
  SELECT *, NULL AS grp FROM metric_zone_samples
),
per_run AS (
  SELECT * EXCLUDE (grp, free_pages_mean) FROM _frag_index_stats(run_samples)
)
SELECT
  f.run_id,
  f.labels,
  n.zones,
  r.samples,
  r.unusable_index_order3_mean,
  r.unusable_index_order3_max,
  r.unusable_index_order9_mean,
  r.unusable_index_order9_max,
  r.order3_fail_pct,
  r.order9_fail_pct,
  r.fragmentation_index_order3_mean,
  r.fragmentation_index_order3_max,
  r.fragmentation_index_order9_mean,
  r.fragmentation_index_order9_max
FROM per_run AS r
JOIN zone_names AS n ON n.run_id = r.run_id
JOIN run_facts AS f ON f.run_id = r.run_id
ORDER BY f.run_id
