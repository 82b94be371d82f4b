-- pfn_reuse: how soon freed page frames are allocated again, on which CPU, and cross-CPU frees
--
-- When a page frame is freed and then allocated again, how long was it free and
-- was it reused on the CPU that freed it? And how many allocations are freed on
-- a different CPU from the one that allocated them (the alloc-on-one-CPU,
-- free-on-another pattern behind the per-CPU list study, where high-order pages sat cold on
-- the freeing CPU's pcp list)?
--
-- Events of one pfn are put in time order (a free sorts before an allocation at
-- the same ns). A reuse pair is a free whose next event on the pfn is an
-- allocation; an alloc-free pair is an allocation whose next event is a free.
-- The pairs are computed once per run into the derived table page_pairs
-- (queries/derived_tables.py documents it); this file only summarises them.
--
-- @requires mm_page_alloc mm_page_free
-- @derived page_pairs
--
-- Caveats (KERNEL-ERAS.md section 1): matched by head pfn. mm_page_free fires
-- for every free (mm_page_free_batched is not counted again); pages from the bulk
-- allocator, compaction isolation and alloc_contig_range have no mm_page_alloc,
-- so their frees pair only with an earlier traced allocation of the same pfn, if
-- any. Failed allocations (pfn = -1UL) are left out. A pfn's first event in the
-- capture has no predecessor and pairs with nothing.

-- @section summary: one row per run: reuse interval percentiles, reuse within 1/10/100 ms, same vs other CPU
-- @columns
--   frees                     count  mm_page_free events
--   reuse_pairs               count  frees followed by an allocation of the same pfn
--   reuse_p50_ns              ns     median free -> allocation interval
--   reuse_p90_ns              ns     90th percentile of that interval
--   reuse_p99_ns              ns     99th percentile
--   reused_within_1ms_pct     %      of reuse pairs with interval <= 1 ms
--   reused_within_10ms_pct    %      with interval <= 10 ms
--   reused_within_100ms_pct   %      with interval <= 100 ms
--   reuse_same_cpu_pct        %      of reuse pairs allocated on the CPU that freed
--   reuse_other_cpu_pct       %      allocated on another CPU
--   alloc_free_pairs          count  allocations followed by a free of the same pfn
--   freed_other_cpu_pct       %      of those freed on another CPU than allocated
WITH
-- One pass over the pairs. quantile_cont with a list of fractions is DuckDB's
-- form of three percentile_cont(...) WITHIN GROUP aggregates computed from one
-- sort (three separate ones take three times as long at 50 M rows).
pair_stats AS (
  SELECT
    run_id,
    count(CASE WHEN reuse THEN 1 END) AS reuse_pairs,
    quantile_cont(CASE WHEN reuse THEN interval_ns END, [0.5, 0.9, 0.99]) AS reuse_quantiles_ns,
    count(CASE WHEN reuse AND interval_ns <= 1000000 THEN 1 END) AS within_1ms,
    count(CASE WHEN reuse AND interval_ns <= 10000000 THEN 1 END) AS within_10ms,
    count(CASE WHEN reuse AND interval_ns <= 100000000 THEN 1 END) AS within_100ms,
    count(CASE WHEN reuse AND same_cpu THEN 1 END) AS reuse_same_cpu,
    count(CASE WHEN NOT reuse THEN 1 END) AS alloc_free_pairs,
    count(CASE WHEN NOT reuse AND NOT same_cpu THEN 1 END) AS freed_other_cpu
  FROM page_pairs
  GROUP BY run_id
),
free_counts AS (
  SELECT run_id, count(*) AS frees FROM mm_page_free GROUP BY run_id
)
SELECT
  f.run_id,
  f.labels,
  coalesce(fc.frees, 0) AS frees,
  coalesce(p.reuse_pairs, 0) AS reuse_pairs,
  p.reuse_quantiles_ns[1] AS reuse_p50_ns,
  p.reuse_quantiles_ns[2] AS reuse_p90_ns,
  p.reuse_quantiles_ns[3] AS reuse_p99_ns,
  100.0 * p.within_1ms / nullif(p.reuse_pairs, 0) AS reused_within_1ms_pct,
  100.0 * p.within_10ms / nullif(p.reuse_pairs, 0) AS reused_within_10ms_pct,
  100.0 * p.within_100ms / nullif(p.reuse_pairs, 0) AS reused_within_100ms_pct,
  100.0 * p.reuse_same_cpu / nullif(p.reuse_pairs, 0) AS reuse_same_cpu_pct,
  100.0 * (p.reuse_pairs - p.reuse_same_cpu) / nullif(p.reuse_pairs, 0) AS reuse_other_cpu_pct,
  coalesce(p.alloc_free_pairs, 0) AS alloc_free_pairs,
  100.0 * p.freed_other_cpu / nullif(p.alloc_free_pairs, 0) AS freed_other_cpu_pct
FROM run_facts AS f
LEFT JOIN pair_stats AS p ON p.run_id = f.run_id
LEFT JOIN free_counts AS fc ON fc.run_id = f.run_id
ORDER BY f.run_id

-- @section histogram: log2 histogram of free -> reallocation intervals per run
-- @columns
--   bucket           code   k: intervals in [2^k, 2^(k+1)) ns; bucket -1 holds interval 0
--   bucket_lo_ns     ns     lower bound of the bucket (inclusive)
--   bucket_hi_ns     ns     upper bound (exclusive)
--   reuse_pairs      count  reuse pairs in the bucket
--   same_cpu         count  of them, reallocated on the CPU that freed the page
--   other_cpu        count  reallocated on another CPU
--   pct              %      of the run's reuse pairs
--   cumulative_pct   %      of the run's reuse pairs at or below this bucket
WITH
reuse_pairs AS (
  SELECT run_id, interval_ns, same_cpu FROM page_pairs WHERE reuse
),
approx_buckets AS (
  SELECT run_id, same_cpu, interval_ns,
         CASE WHEN interval_ns <= 0 THEN -1
              ELSE CAST(floor(log2(interval_ns)) AS INTEGER) END AS guess
  FROM reuse_pairs
),
-- log2 in floating point can land one off near powers of two: settle exactly
bucketed AS (
  SELECT run_id, same_cpu,
         CASE
           WHEN guess < 0 THEN -1
           WHEN CAST(power(2, guess) AS BIGINT) > interval_ns THEN guess - 1
           WHEN CAST(power(2, guess + 1) AS BIGINT) <= interval_ns THEN guess + 1
           ELSE guess
         END AS bucket
  FROM approx_buckets
),
counts AS (
  SELECT run_id, bucket,
         count(*) AS reuse_pairs,
         count(CASE WHEN same_cpu THEN 1 END) AS same_cpu,
         count(CASE WHEN NOT same_cpu THEN 1 END) AS other_cpu
  FROM bucketed
  GROUP BY run_id, bucket
)
SELECT
  f.run_id,
  f.labels,
  c.bucket,
  CASE WHEN c.bucket < 0 THEN 0 ELSE CAST(power(2, c.bucket) AS BIGINT) END AS bucket_lo_ns,
  CASE WHEN c.bucket < 0 THEN 1 ELSE CAST(power(2, c.bucket + 1) AS BIGINT) END AS bucket_hi_ns,
  c.reuse_pairs,
  c.same_cpu,
  c.other_cpu,
  100.0 * c.reuse_pairs / sum(c.reuse_pairs) OVER (PARTITION BY c.run_id) AS pct,
  100.0 * sum(c.reuse_pairs) OVER (PARTITION BY c.run_id ORDER BY c.bucket)
        / sum(c.reuse_pairs) OVER (PARTITION BY c.run_id) AS cumulative_pct
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c.bucket

-- @section cross_cpu: allocations freed on a different CPU than allocated them, by order
-- @columns
--   order                 order  allocation order
--   alloc_free_pairs      count  allocations of this order followed by a free of the same pfn
--   freed_same_cpu        count  freed on the allocating CPU
--   freed_other_cpu       count  freed on another CPU
--   freed_other_cpu_pct   %      freed on another CPU
--   lifetime_p50_ns       ns     median allocation -> free interval
WITH
alloc_free_pairs AS (
  SELECT run_id, "order" AS alloc_order, NOT same_cpu AS other_cpu, interval_ns AS lifetime_ns
  FROM page_pairs
  WHERE NOT reuse
),
by_order AS (
  SELECT
    run_id,
    alloc_order,
    count(*) AS alloc_free_pairs,
    count(CASE WHEN NOT other_cpu THEN 1 END) AS freed_same_cpu,
    count(CASE WHEN other_cpu THEN 1 END) AS freed_other_cpu,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY lifetime_ns) AS lifetime_p50_ns
  FROM alloc_free_pairs
  GROUP BY run_id, alloc_order
)
SELECT
  f.run_id,
  f.labels,
  o.alloc_order AS "order",
  o.alloc_free_pairs,
  o.freed_same_cpu,
  o.freed_other_cpu,
  100.0 * o.freed_other_cpu / o.alloc_free_pairs AS freed_other_cpu_pct,
  o.lifetime_p50_ns
FROM by_order AS o
JOIN run_facts AS f ON f.run_id = o.run_id
ORDER BY f.run_id, o.alloc_order
