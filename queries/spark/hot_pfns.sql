-- hot_pfns: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH allocs_ok AS (
  SELECT
    run_id,
    ts,
    cpu,
    pfn,
    `order`
  FROM page_allocs
  WHERE
    NOT failed
), top_pfns /* per-run allocation counts per pfn, ranked (derived table pfn_allocs) */ AS (
  SELECT
    run_id,
    pfn,
    allocs,
    rank
  FROM pfn_allocs
  WHERE
    rank <= :top_n
), top_allocs AS (
  SELECT
    a.run_id,
    a.ts,
    a.cpu,
    a.pfn,
    a.`order`
  FROM allocs_ok AS a
  JOIN top_pfns AS t
    ON t.run_id = a.run_id AND t.pfn = a.pfn
), top_orders AS (
  SELECT
    run_id,
    pfn,
    LISTAGG(CAST(`order` AS STRING), ',') WITHIN GROUP (ORDER BY
      `order` NULLS LAST) AS orders
  FROM (
    SELECT DISTINCT
      run_id,
      pfn,
      `order`
    FROM top_allocs
  ) AS d
  GROUP BY
    run_id,
    pfn
), top_cpus AS (
  SELECT
    run_id,
    pfn,
    COUNT(DISTINCT cpu) AS cpus
  FROM top_allocs
  GROUP BY
    run_id,
    pfn
), reuse_intervals /* free -> allocation intervals of the top pfns (derived table page_pairs) */ AS (
  SELECT
    p.run_id,
    p.pfn,
    COUNT(*) AS reuses,
    AVG(p.interval_ns) AS reuse_mean_ns,
    PERCENTILE(p.interval_ns, 0.5) AS reuse_median_ns
  FROM page_pairs AS p
  JOIN top_pfns AS t
    ON t.run_id = p.run_id AND t.pfn = p.pfn
  WHERE
    p.reuse
  GROUP BY
    p.run_id,
    p.pfn
)
SELECT
  f.run_id,
  f.labels,
  t.rank,
  t.pfn,
  t.allocs,
  o.orders,
  c.cpus,
  COALESCE(r.reuses, 0) AS reuses,
  r.reuse_mean_ns,
  r.reuse_median_ns
FROM top_pfns AS t
JOIN run_facts AS f
  ON f.run_id = t.run_id
JOIN top_orders AS o
  ON o.run_id = t.run_id AND o.pfn = t.pfn
JOIN top_cpus AS c
  ON c.run_id = t.run_id AND c.pfn = t.pfn
LEFT JOIN reuse_intervals AS r
  ON r.run_id = t.run_id AND r.pfn = t.pfn
ORDER BY
  f.run_id NULLS LAST,
  t.rank NULLS LAST;
