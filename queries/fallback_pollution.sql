-- fallback_pollution: extfrag fallback matrix (alloc x fallback migratetype), fragmenting, change_ownership
--
-- When the allocator found no free page of the requested migratetype and took
-- one from another type's free list, which types polluted which, how often did
-- that split a pageblock (fragmenting), and did the requester claim the block?
-- Counted from mm_page_alloc_extfrag, per run, as events, per 1,000 successful
-- allocations and per second; migratetype names from the run's own list.
--
-- @param bucket_s DOUBLE 1.0 [0.001..86400] bucket width of the over_time section, seconds
-- @requires mm_page_alloc_extfrag
-- @optional mm_page_alloc
-- @include allocs
--
-- Caveats (KERNEL-ERAS.md section 1): fragmenting is not a field; it is
-- fallback_order < pageblock_order, with the run's pageblock order (runs table,
-- else manifest, else 9 and a note). change_ownership means, by era:
--   4.19-6.9   1 = block claimed; 0 = stolen, the remainder moved to the
--              requester's list, so later allocations from that polluted block
--              emit no event: pollution is undercounted
--   6.10-6.14  1 = claimed; 0 = stolen, the remainder stays on its block's list
--              and each further foreign allocation is another event
--   6.15+      1 = __rmqueue_claim (always); 0 = __rmqueue_steal, or a page that
--              compaction captured from a foreign block (new event in 6.15)
-- With vm.defrag_mode=1 (6.15+) steals happen only just before OOM. Names are
-- the run's pagetypeinfo order; mmtests and perf kmem use the pre-4.4 enum and
-- mislabel types 1-3 on every modern kernel.

-- @section matrix: alloc x fallback migratetype, fragmenting and change_ownership per run
-- @columns
--   extfrag_era              text   '4.19-6.9', '6.10-6.14' or '6.15+'
--   alloc_migratetype        code   requested type
--   alloc_type               text   its name in the run's kernel
--   fallback_migratetype     code   type of the free list the page came from (= block type)
--   fallback_type            text   its name
--   fragmenting              bool   fallback_order < pageblock_order (split a block)
--   change_ownership         code   1: the block now belongs to the requester
--   ownership_meaning        text   what change_ownership means in this era
--   events                   count  mm_page_alloc_extfrag events
--   events_per_1000_allocs   /1000  per 1,000 successful mm_page_alloc of the run
--   events_per_s             /s     per second of capture
--   pct_of_run               %      of the run's extfrag events
WITH
allocs AS (
  SELECT run_id, count(*) AS allocs FROM page_allocs WHERE NOT failed GROUP BY run_id
),
fallbacks AS (
  SELECT
    e.run_id,
    e.alloc_migratetype,
    e.fallback_migratetype,
    e.fallback_order < f.pageblock_order AS fragmenting,
    e.change_ownership,
    count(*) AS events
  FROM mm_page_alloc_extfrag AS e
  JOIN run_facts AS f ON f.run_id = e.run_id
  GROUP BY e.run_id, e.alloc_migratetype, e.fallback_migratetype,
           e.fallback_order < f.pageblock_order, e.change_ownership
)
SELECT
  f.run_id,
  f.labels,
  f.extfrag_era,
  x.alloc_migratetype,
  coalesce(am.name, 'type ' || CAST(x.alloc_migratetype AS VARCHAR)) AS alloc_type,
  x.fallback_migratetype,
  coalesce(fm.name, 'type ' || CAST(x.fallback_migratetype AS VARCHAR)) AS fallback_type,
  x.fragmenting,
  x.change_ownership,
  o.meaning AS ownership_meaning,
  x.events,
  1000.0 * x.events / nullif(a.allocs, 0) AS events_per_1000_allocs,
  x.events / f.duration_s AS events_per_s,
  100.0 * x.events / sum(x.events) OVER (PARTITION BY x.run_id) AS pct_of_run
FROM fallbacks AS x
JOIN run_facts AS f ON f.run_id = x.run_id
LEFT JOIN allocs AS a ON a.run_id = x.run_id
LEFT JOIN migratetype_names AS am ON am.run_id = x.run_id AND am.migratetype = x.alloc_migratetype
LEFT JOIN migratetype_names AS fm ON fm.run_id = x.run_id AND fm.migratetype = x.fallback_migratetype
LEFT JOIN extfrag_ownership AS o
  ON o.extfrag_era = f.extfrag_era AND o.change_ownership = (CASE WHEN x.change_ownership <> 0 THEN 1 ELSE 0 END)
ORDER BY f.run_id, x.events DESC, x.alloc_migratetype, x.fallback_migratetype, x.fragmenting,
         x.change_ownership

-- @section over_time: extfrag events per time bucket per run
-- @columns
--   bucket_start_s           s      bucket start, since the run's first event
--   events                   count  extfrag events in the bucket
--   fragmenting_events       count  of them, fallback_order < pageblock_order
--   claimed_events           count  of them, change_ownership = 1
--   allocs                   count  successful mm_page_alloc in the bucket
--   events_per_1000_allocs   /1000  events per 1,000 of those allocations
--   events_per_s             /s     events per second in the bucket
WITH
extfrag_buckets AS (
  SELECT
    e.run_id,
    CAST(floor((e.ts - f.first_ts) / 1e9 / $bucket_s) AS BIGINT) AS bucket,
    count(*) AS events,
    count(CASE WHEN e.fallback_order < f.pageblock_order THEN 1 END) AS fragmenting_events,
    count(CASE WHEN e.change_ownership <> 0 THEN 1 END) AS claimed_events
  FROM mm_page_alloc_extfrag AS e
  JOIN run_facts AS f ON f.run_id = e.run_id
  GROUP BY e.run_id, CAST(floor((e.ts - f.first_ts) / 1e9 / $bucket_s) AS BIGINT)
),
alloc_buckets AS (
  SELECT
    a.run_id,
    CAST(floor((a.ts - f.first_ts) / 1e9 / $bucket_s) AS BIGINT) AS bucket,
    count(*) AS allocs
  FROM page_allocs AS a
  JOIN run_facts AS f ON f.run_id = a.run_id
  WHERE NOT a.failed
  GROUP BY a.run_id, CAST(floor((a.ts - f.first_ts) / 1e9 / $bucket_s) AS BIGINT)
)
SELECT
  f.run_id,
  f.labels,
  e.bucket * $bucket_s AS bucket_start_s,
  e.events,
  e.fragmenting_events,
  e.claimed_events,
  coalesce(a.allocs, 0) AS allocs,
  1000.0 * e.events / nullif(a.allocs, 0) AS events_per_1000_allocs,
  e.events / $bucket_s AS events_per_s
FROM extfrag_buckets AS e
JOIN run_facts AS f ON f.run_id = e.run_id
LEFT JOIN alloc_buckets AS a ON a.run_id = e.run_id AND a.bucket = e.bucket
ORDER BY f.run_id, e.bucket
