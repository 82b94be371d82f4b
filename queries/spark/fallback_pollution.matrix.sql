-- fallback_pollution.matrix: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH allocs AS (
  SELECT
    run_id,
    COUNT(*) AS allocs
  FROM page_allocs
  WHERE
    NOT failed
  GROUP BY
    run_id
), fallbacks AS (
  SELECT
    e.run_id,
    e.alloc_migratetype,
    e.fallback_migratetype,
    e.fallback_order < f.pageblock_order AS fragmenting,
    e.change_ownership,
    COUNT(*) AS events
  FROM mm_page_alloc_extfrag AS e
  JOIN run_facts AS f
    ON f.run_id = e.run_id
  GROUP BY
    e.run_id,
    e.alloc_migratetype,
    e.fallback_migratetype,
    e.fallback_order < f.pageblock_order,
    e.change_ownership
)
SELECT
  f.run_id,
  f.labels,
  f.extfrag_era,
  x.alloc_migratetype,
  COALESCE(am.name, 'type ' || CAST(x.alloc_migratetype AS STRING)) AS alloc_type,
  x.fallback_migratetype,
  COALESCE(fm.name, 'type ' || CAST(x.fallback_migratetype AS STRING)) AS fallback_type,
  x.fragmenting,
  x.change_ownership,
  o.meaning AS ownership_meaning,
  x.events,
  CAST(1000.0 AS DOUBLE) * x.events / NULLIF(a.allocs, 0) AS events_per_1000_allocs,
  x.events / f.duration_s AS events_per_s,
  CAST(100.0 AS DOUBLE) * x.events / SUM(x.events) OVER (PARTITION BY x.run_id) AS pct_of_run
FROM fallbacks AS x
JOIN run_facts AS f
  ON f.run_id = x.run_id
LEFT JOIN allocs AS a
  ON a.run_id = x.run_id
LEFT JOIN migratetype_names AS am
  ON am.run_id = x.run_id AND am.migratetype = x.alloc_migratetype
LEFT JOIN migratetype_names AS fm
  ON fm.run_id = x.run_id AND fm.migratetype = x.fallback_migratetype
LEFT JOIN extfrag_ownership AS o
  ON o.extfrag_era = f.extfrag_era
  AND o.change_ownership = (
    CASE WHEN x.change_ownership <> 0 THEN 1 ELSE 0 END
  )
ORDER BY
  f.run_id NULLS LAST,
  x.events DESC,
  x.alloc_migratetype NULLS LAST,
  x.fallback_migratetype NULLS LAST;
