-- compaction.outcomes: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

WITH ordered AS (
  SELECT
    c.*,
    f.`order` AS f_order,
    f.ts AS f_ts
  FROM compaction_runs AS c
  LEFT JOIN (
    SELECT
      k0,
      k1,
      _pos,
      _match
    FROM (
      SELECT
        k0,
        k1,
        _pos,
        _side,
        LAST_VALUE(_t) IGNORE NULLS OVER (
          PARTITION BY k0, k1
          ORDER BY _pos ASC NULLS LAST, _side NULLS LAST
          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS _match
      FROM (
        SELECT DISTINCT
          c.run_id AS k0,
          c.pid AS k1,
          c.end_ts AS _pos,
          NULL AS _t,
          1 AS _side
        FROM compaction_runs AS c
        UNION ALL
        SELECT
          f.run_id AS k0,
          f.pid AS k1,
          f.ts AS _pos,
          f.ts AS _t,
          0 AS _side
        FROM mm_compaction_finished AS f
        WHERE
          NOT f.run_id IS NULL AND NOT f.pid IS NULL AND NOT f.ts IS NULL
      ) AS _u
    ) AS _w
    WHERE
      _side = 1
  ) AS _asof1
    ON _asof1.k0 = c.run_id AND _asof1.k1 = c.pid AND _asof1._pos = c.end_ts
  LEFT JOIN (
    SELECT
      *
      EXCEPT (_asof_rn)
    FROM (
      SELECT
        *,
        ROW_NUMBER() OVER (PARTITION BY f.run_id, f.pid, f.ts ORDER BY f.ts NULLS LAST) AS _asof_rn
      FROM mm_compaction_finished AS f
    ) AS f
    WHERE
      _asof_rn = 1
  ) AS f
    ON f.run_id = c.run_id AND f.pid = c.pid AND f.ts = _asof1._match
), runs_ AS (
  SELECT
    run_id,
    kind,
    status,
    duration_ns,
    CASE WHEN NOT duration_ns IS NULL AND f_ts >= end_ts - duration_ns THEN f_order END AS `order`
  FROM ordered
), counts AS (
  SELECT
    run_id,
    kind,
    `order`,
    status,
    COUNT(*) AS runs,
    PERCENTILE(duration_ns, 0.5) AS duration_p50_ns
  FROM runs_
  GROUP BY
    run_id,
    kind,
    `order`,
    status
)
SELECT
  f.run_id,
  f.labels,
  c.kind,
  c.`order`,
  c.status,
  n.name AS status_name,
  c.runs,
  CAST(100.0 AS DOUBLE) * c.runs / SUM(c.runs) OVER (PARTITION BY c.run_id, c.kind, c.`order`) AS pct_of_order,
  c.duration_p50_ns
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
LEFT JOIN compaction_status_names AS n
  ON n.run_id = c.run_id AND n.status = c.status
ORDER BY
  f.run_id NULLS LAST,
  c.kind NULLS LAST,
  c.`order` NULLS LAST,
  c.runs DESC;
