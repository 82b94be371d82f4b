-- pcp: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH counts AS (
  SELECT
    run_id,
    `order`,
    migratetype,
    COUNT(*) AS drains,
    CAST(SUM(CAST(POWER(2, `order`) AS BIGINT)) AS BIGINT) AS pages
  FROM mm_page_pcpu_drain
  GROUP BY
    run_id,
    `order`,
    migratetype
)
SELECT
  f.run_id,
  f.labels,
  c.`order`,
  c.migratetype,
  COALESCE(m.name, 'type ' || CAST(c.migratetype AS STRING)) AS migratetype_name,
  c.drains,
  c.pages,
  c.drains / f.duration_s AS drains_per_s,
  CAST(100.0 AS DOUBLE) * c.pages / SUM(c.pages) OVER (PARTITION BY c.run_id) AS pct_of_pages
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
LEFT JOIN migratetype_names AS m
  ON m.run_id = c.run_id AND m.migratetype = c.migratetype
ORDER BY
  f.run_id NULLS LAST,
  c.`order` NULLS LAST,
  c.migratetype NULLS LAST;
