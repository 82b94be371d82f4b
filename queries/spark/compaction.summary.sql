-- compaction.summary: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH named AS (
  SELECT
    c.*,
    n.name AS status_name
  FROM compaction_runs AS c
  LEFT JOIN compaction_status_names AS n
    ON n.run_id = c.run_id AND n.status = c.status
), per_kind AS (
  SELECT
    run_id,
    kind,
    COUNT(*) AS runs,
    COUNT(duration_ns) AS timed_runs,
    COUNT(CASE WHEN status_name = 'success' THEN 1 END) AS successes,
    PERCENTILE(duration_ns, 0.5) AS duration_p50_ns,
    PERCENTILE(duration_ns, 0.9) AS duration_p90_ns,
    PERCENTILE(duration_ns, 0.99) AS duration_p99_ns,
    MAX(duration_ns) AS duration_max_ns,
    CAST(SUM(duration_ns) AS BIGINT) AS total_duration_ns
  FROM named
  GROUP BY
    run_id,
    kind
)
SELECT
  f.run_id,
  f.labels,
  k.kind,
  k.runs,
  k.timed_runs,
  k.successes,
  CAST(100.0 AS DOUBLE) * k.successes / k.runs AS success_pct,
  k.duration_p50_ns,
  k.duration_p90_ns,
  k.duration_p99_ns,
  k.duration_max_ns,
  k.total_duration_ns,
  k.runs / f.duration_s AS runs_per_s
FROM per_kind AS k
JOIN run_facts AS f
  ON f.run_id = k.run_id
ORDER BY
  f.run_id NULLS LAST,
  k.kind NULLS LAST;
