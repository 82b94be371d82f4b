-- atomic_orders: order histogram of non-blocking allocations, split by high-atomic reserve eligibility
--
-- Which allocations could make the kernel reserve a whole pageblock as
-- HighAtomic, at which orders, and from which tasks? The high-atomic
-- reservation study found order 1-3 atomic allocations reserving 2 MiB blocks
-- and starving THP; this analysis counts the allocations that are eligible for
-- that reserve under the rule of each run's kernel era, next to other
-- non-blocking and blocking allocations.
--
-- Classes (KERNEL-ERAS.md section 3; bits read from the run's print_flags):
--   highatomic_eligible  era A (before 6.3, 5.15 < .171, 6.1 <= .72):
--                          order > 0, __GFP_ATOMIC, no __GFP_NOMEMALLOC
--                        era B (6.3+, 5.15.171+, 6.1.116+; 6.1.73-.115 assumed B):
--                          order > 0, __GFP_HIGH, no __GFP_DIRECT_RECLAIM, no __GFP_NOMEMALLOC
--   other_nonblocking    not eligible, no __GFP_DIRECT_RECLAIM (cannot sleep)
--   blocking             not eligible, __GFP_DIRECT_RECLAIM set
--   unknown              the run's print_flags carry no gfp table
--
-- @param era VARCHAR auto [auto|A|B] force an era instead of the one from kernel_release
-- @param top_comms INTEGER 10 [1..100000] comms per class in the comms section
-- @requires mm_page_alloc
-- @include allocs
--
-- Caveats: eligible is not reserved. reserve_highatomic_pageblock() runs only
-- after a successful slowpath allocation and stops at a cap of about 1% of the
-- zone; reservations themselves are not traced (highatomic shows the blocks).
-- RT tasks also got ALLOC_HARDER in era A, which no event shows. In 5.15.171+
-- and late 6.1.y __GFP_ATOMIC still exists but no longer decides; the era comes
-- from kernel_release for that reason. Failed attempts (pfn = -1UL) are counted
-- as allocations and separately as failed. Rates use the run's capture window.

-- @prelude
-- Each allocation's class (lib/allocs.sql page_alloc_classes) under the run's
-- era, or under the era the user forced.
CREATE TEMP VIEW alloc_classes AS
SELECT c.run_id, c.ts, c.comm, c."order", c.failed, c.highatomic_era, c.alloc_class
FROM _alloc_classes_in_era((SELECT era FROM query_params)) AS c;

-- @section orders: per run, class and order: allocations, failures, rate
-- @columns
--   highatomic_era   text   'A' or 'B': the eligibility rule applied
--   alloc_class      text   highatomic_eligible | other_nonblocking | blocking | unknown
--   order            order  allocation order
--   above_costly     bool   order > PAGE_ALLOC_COSTLY_ORDER (3)
--   allocs           count  mm_page_alloc events (attempts)
--   failed           count  of them, failed (pfn = -1UL)
--   allocs_per_s     /s     allocs per second of capture
WITH
counts AS (
  SELECT run_id, highatomic_era, alloc_class, "order",
         count(*) AS allocs,
         count(CASE WHEN failed THEN 1 END) AS failed
  FROM alloc_classes
  GROUP BY run_id, highatomic_era, alloc_class, "order"
)
SELECT
  f.run_id,
  f.labels,
  c.highatomic_era,
  c.alloc_class,
  c."order",
  c."order" > 3 AS above_costly,
  c.allocs,
  c.failed,
  c.allocs / f.duration_s AS allocs_per_s
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c.alloc_class, c."order", c.highatomic_era

-- @section costly: per run and class: order 0, orders 1-3 (<= PAGE_ALLOC_COSTLY_ORDER) and orders 4+
-- @columns
--   highatomic_era   text   'A' or 'B'
--   alloc_class      text   as in atomic_orders
--   order_band       text   '0', '1-3' (at or below PAGE_ALLOC_COSTLY_ORDER) or '4+'
--   allocs           count  attempts in the band
--   failed           count  failed attempts
--   allocs_per_s     /s     attempts per second of capture
--   pct_of_class     %      of the class's attempts in the run
WITH
counts AS (
  SELECT run_id, highatomic_era, alloc_class,
         CASE WHEN "order" = 0 THEN '0' WHEN "order" <= 3 THEN '1-3' ELSE '4+' END AS order_band,
         count(*) AS allocs,
         count(CASE WHEN failed THEN 1 END) AS failed
  FROM alloc_classes
  GROUP BY run_id, highatomic_era, alloc_class,
           CASE WHEN "order" = 0 THEN '0' WHEN "order" <= 3 THEN '1-3' ELSE '4+' END
)
SELECT
  f.run_id,
  f.labels,
  c.highatomic_era,
  c.alloc_class,
  c.order_band,
  c.allocs,
  c.failed,
  c.allocs / f.duration_s AS allocs_per_s,
  100.0 * c.allocs / sum(c.allocs) OVER (PARTITION BY c.run_id, c.alloc_class) AS pct_of_class
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c.alloc_class, c.order_band, c.highatomic_era

-- @section comms: the tasks with the most allocations per run and class
-- @columns
--   highatomic_era   text   'A' or 'B'
--   alloc_class      text   as in atomic_orders
--   rank             rank   1 = most allocations in the class
--   comm             text   task name at the time of the allocation
--   allocs           count  attempts by this comm in the class
--   orders_1_3       count  of them, at orders 1-3
--   orders_4_plus    count  of them, at orders 4 and above
--   pct_of_class     %      of the class's attempts in the run
WITH
counts AS (
  SELECT run_id, highatomic_era, alloc_class, comm,
         count(*) AS allocs,
         count(CASE WHEN "order" BETWEEN 1 AND 3 THEN 1 END) AS orders_1_3,
         count(CASE WHEN "order" > 3 THEN 1 END) AS orders_4_plus
  FROM alloc_classes
  GROUP BY run_id, highatomic_era, alloc_class, comm
),
ranked AS (
  SELECT *,
         row_number() OVER (PARTITION BY run_id, alloc_class ORDER BY allocs DESC, comm) AS rank,
         100.0 * allocs / sum(allocs) OVER (PARTITION BY run_id, alloc_class) AS pct_of_class
  FROM counts
)
SELECT
  f.run_id,
  f.labels,
  r.highatomic_era,
  r.alloc_class,
  r.rank,
  r.comm,
  r.allocs,
  r.orders_1_3,
  r.orders_4_plus,
  r.pct_of_class
FROM ranked AS r
JOIN run_facts AS f ON f.run_id = r.run_id
WHERE r.rank <= $top_comms
ORDER BY f.run_id, r.alloc_class, r.rank, r.highatomic_era
