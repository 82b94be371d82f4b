-- fallback_pollution.over_time: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH extfrag_buckets AS (
  SELECT
    e.run_id,
    CAST(FLOOR((
      e.ts - f.first_ts
    ) / CAST(1e9 AS DOUBLE) / :bucket_s) AS BIGINT) AS bucket,
    COUNT(*) AS events,
    COUNT(CASE WHEN e.fallback_order < f.pageblock_order THEN 1 END) AS fragmenting_events,
    COUNT(CASE WHEN e.change_ownership <> 0 THEN 1 END) AS claimed_events
  FROM mm_page_alloc_extfrag AS e
  JOIN run_facts AS f
    ON f.run_id = e.run_id
  GROUP BY
    e.run_id,
    CAST(FLOOR((
      e.ts - f.first_ts
    ) / CAST(1e9 AS DOUBLE) / :bucket_s) AS BIGINT)
), alloc_buckets AS (
  SELECT
    a.run_id,
    CAST(FLOOR((
      a.ts - f.first_ts
    ) / CAST(1e9 AS DOUBLE) / :bucket_s) AS BIGINT) AS bucket,
    COUNT(*) AS allocs
  FROM page_allocs AS a
  JOIN run_facts AS f
    ON f.run_id = a.run_id
  WHERE
    NOT a.failed
  GROUP BY
    a.run_id,
    CAST(FLOOR((
      a.ts - f.first_ts
    ) / CAST(1e9 AS DOUBLE) / :bucket_s) AS BIGINT)
)
SELECT
  f.run_id,
  f.labels,
  e.bucket * :bucket_s AS bucket_start_s,
  e.events,
  e.fragmenting_events,
  e.claimed_events,
  COALESCE(a.allocs, 0) AS allocs,
  CAST(1000.0 AS DOUBLE) * e.events / NULLIF(a.allocs, 0) AS events_per_1000_allocs,
  e.events / :bucket_s AS events_per_s
FROM extfrag_buckets AS e
JOIN run_facts AS f
  ON f.run_id = e.run_id
LEFT JOIN alloc_buckets AS a
  ON a.run_id = e.run_id AND a.bucket = e.bucket
ORDER BY
  f.run_id NULLS LAST,
  e.bucket NULLS LAST;
