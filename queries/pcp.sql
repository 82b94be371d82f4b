-- pcp: per-CPU page list drains (mm_page_pcpu_drain) by order and migratetype
--
-- How many pages did the per-CPU lists give back to the buddy allocator, at
-- which orders and from which pageblock types? High-order pages held on the
-- pcp lists of a CPU that only frees are the per-CPU list study's problem;
-- drains show when and how much those lists were emptied.
--
-- @requires mm_page_pcpu_drain
--
-- @columns
--   order              order  order of the drained page
--   migratetype        code   pageblock type of the page
--   migratetype_name   text   its name in the run's kernel
--   drains             count  mm_page_pcpu_drain events
--   pages              pages  base pages returned (drains * 2^order)
--   drains_per_s       /s     events per second of capture
--   pct_of_pages       %      of the run's drained base pages
--
-- Caveats (KERNEL-ERAS.md sections 1, 4): migratetype here is the block's
-- type, not the requested one. Up to 5.10 every drain reports order 0 (pcp
-- lists held only order-0 pages). Pages freed straight to the buddy (e.g. the
-- free_high path of the per-CPU list study) do not pass through a drain.
WITH
counts AS (
  SELECT run_id, "order", migratetype,
         count(*) AS drains,
         CAST(sum(CAST(power(2, "order") AS BIGINT)) AS BIGINT) AS pages
  FROM mm_page_pcpu_drain
  GROUP BY run_id, "order", migratetype
)
SELECT
  f.run_id,
  f.labels,
  c."order",
  c.migratetype,
  coalesce(m.name, 'type ' || CAST(c.migratetype AS VARCHAR)) AS migratetype_name,
  c.drains,
  c.pages,
  c.drains / f.duration_s AS drains_per_s,
  100.0 * c.pages / sum(c.pages) OVER (PARTITION BY c.run_id) AS pct_of_pages
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
LEFT JOIN migratetype_names AS m ON m.run_id = c.run_id AND m.migratetype = c.migratetype
ORDER BY f.run_id, c."order", c.migratetype
