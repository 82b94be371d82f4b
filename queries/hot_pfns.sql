-- hot_pfns: the most-allocated page frames per run (perf kmem --page stat --alloc -s hit)
--
-- Which page frames does the allocator hand out most often, and how soon does
-- each come back after it is freed? The top N pfns of successful mm_page_alloc
-- events per run, ranked by allocations, as `perf kmem --page stat --alloc -s hit`
-- ranks them (the per-CPU list study used exactly this list to show pages
-- going cold on pcp lists).
--
-- @param top_n INTEGER 20 [1..1000000] page frames per run
-- @requires mm_page_alloc
-- @optional mm_page_free
-- @derived page_pairs pfn_allocs
-- @include allocs
--
-- @columns
--   rank              rank   1 = most allocated in the run (ties broken by lower pfn)
--   pfn               pfn    head page of the allocation
--   allocs            count  successful allocations of this pfn
--   orders            text   distinct orders it was allocated at, ascending, e.g. '0,3'
--   cpus              count  distinct CPUs that allocated it
--   reuses            count  frees of this pfn whose next event on the pfn is an allocation
--   reuse_mean_ns     ns     mean interval from such a free to the allocation
--   reuse_median_ns   ns     median of that interval
--
-- Caveats (KERNEL-ERAS.md section 1): matching is by head pfn, like perf kmem:
-- a free of an order-3 block then an order-0 allocation at the same pfn is a
-- reuse; allocations at other pfns inside the block are not. Failed allocations
-- (pfn = -1UL) are not page frames and are left out. Pages taken by the bulk
-- allocator, compaction isolation or alloc_contig_range have no mm_page_alloc,
-- so some frees never pair. pfn is printed %lu up to 5.10 and 0x%lx from 5.15;
-- the column here is the number either way.

WITH
allocs_ok AS (
  SELECT run_id, ts, cpu, pfn, "order"
  FROM page_allocs
  WHERE NOT failed
),
-- per-run allocation counts per pfn, ranked (derived table pfn_allocs)
top_pfns AS (
  SELECT run_id, pfn, allocs, rank FROM pfn_allocs WHERE rank <= $top_n
),
top_allocs AS (
  SELECT a.run_id, a.ts, a.cpu, a.pfn, a."order"
  FROM allocs_ok AS a
  JOIN top_pfns AS t ON t.run_id = a.run_id AND t.pfn = a.pfn
),
top_orders AS (
  SELECT run_id, pfn,
         string_agg(CAST("order" AS VARCHAR), ',' ORDER BY "order") AS orders
  FROM (SELECT DISTINCT run_id, pfn, "order" FROM top_allocs) AS d
  GROUP BY run_id, pfn
),
top_cpus AS (
  SELECT run_id, pfn, count(DISTINCT cpu) AS cpus
  FROM top_allocs
  GROUP BY run_id, pfn
),
-- free -> allocation intervals of the top pfns (derived table page_pairs)
reuse_intervals AS (
  SELECT p.run_id, p.pfn,
         count(*) AS reuses,
         avg(p.interval_ns) AS reuse_mean_ns,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY p.interval_ns) AS reuse_median_ns
  FROM page_pairs AS p
  JOIN top_pfns AS t ON t.run_id = p.run_id AND t.pfn = p.pfn
  WHERE p.reuse
  GROUP BY p.run_id, p.pfn
)
SELECT
  f.run_id,
  f.labels,
  t.rank,
  t.pfn,
  t.allocs,
  o.orders,
  c.cpus,
  coalesce(r.reuses, 0) AS reuses,
  r.reuse_mean_ns,
  r.reuse_median_ns
FROM top_pfns AS t
JOIN run_facts AS f ON f.run_id = t.run_id
JOIN top_orders AS o ON o.run_id = t.run_id AND o.pfn = t.pfn
JOIN top_cpus AS c ON c.run_id = t.run_id AND c.pfn = t.pfn
LEFT JOIN reuse_intervals AS r ON r.run_id = t.run_id AND r.pfn = t.pfn
ORDER BY f.run_id, t.rank
