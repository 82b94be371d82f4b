-- pfn_reuse.histogram: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH reuse_pairs AS (
  SELECT
    run_id,
    interval_ns,
    same_cpu
  FROM page_pairs
  WHERE
    reuse
), approx_buckets AS (
  SELECT
    run_id,
    same_cpu,
    interval_ns,
    CASE WHEN interval_ns <= 0 THEN -1 ELSE CAST(FLOOR(LOG2(interval_ns)) AS INT) END AS guess
  FROM reuse_pairs
), bucketed /* log2 in floating point can land one off near powers of two: settle exactly */ AS (
  SELECT
    run_id,
    same_cpu,
    CASE
      WHEN guess < 0
      THEN -1
      WHEN CAST(POWER(2, guess) AS BIGINT) > interval_ns
      THEN guess - 1
      WHEN CAST(POWER(2, guess + 1) AS BIGINT) <= interval_ns
      THEN guess + 1
      ELSE guess
    END AS bucket
  FROM approx_buckets
), counts AS (
  SELECT
    run_id,
    bucket,
    COUNT(*) AS reuse_pairs,
    COUNT(CASE WHEN same_cpu THEN 1 END) AS same_cpu,
    COUNT(CASE WHEN NOT same_cpu THEN 1 END) AS other_cpu
  FROM bucketed
  GROUP BY
    run_id,
    bucket
)
SELECT
  f.run_id,
  f.labels,
  c.bucket,
  CASE WHEN c.bucket < 0 THEN 0 ELSE CAST(POWER(2, c.bucket) AS BIGINT) END AS bucket_lo_ns,
  CASE WHEN c.bucket < 0 THEN 1 ELSE CAST(POWER(2, c.bucket + 1) AS BIGINT) END AS bucket_hi_ns,
  c.reuse_pairs,
  c.same_cpu,
  c.other_cpu,
  CAST(100.0 AS DOUBLE) * c.reuse_pairs / SUM(c.reuse_pairs) OVER (PARTITION BY c.run_id) AS pct,
  CAST(100.0 AS DOUBLE) * SUM(c.reuse_pairs) OVER (PARTITION BY c.run_id ORDER BY c.bucket NULLS LAST) / SUM(c.reuse_pairs) OVER (PARTITION BY c.run_id) AS cumulative_pct
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
ORDER BY
  f.run_id NULLS LAST,
  c.bucket NULLS LAST;
