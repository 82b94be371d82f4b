-- thp.allocs: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

-- TEMPORARY TABLE (a cached DataFrame) thp_run_orders
SELECT
  run_id,
  COALESCE(q.thp_order, o.thp_order) AS thp_order,
  CASE
    WHEN NOT q.thp_order IS NULL
    THEN 'parameter thp_order'
    ELSE o.thp_order_source
  END AS thp_order_source
FROM thp_orders AS o
CROSS JOIN query_params AS q;

-- TEMPORARY VIEW thp_orders
SELECT
  *
FROM thp_run_orders;

WITH rows_ AS (
  SELECT
    run_id,
    thp_order,
    kind,
    CASE
      WHEN is_retry
      THEN 'retry'
      WHEN thisnode_try
      THEN 'local-node try'
      ELSE 'single try'
    END AS attempt,
    gfp_flags,
    failed
  FROM thp_fault_attempts
  UNION ALL
  SELECT
    run_id,
    thp_order,
    kind,
    NULL,
    gfp_flags,
    failed
  FROM thp_order_allocs
  WHERE
    kind <> 'fault'
), counts AS (
  SELECT
    r.run_id,
    r.thp_order,
    r.kind,
    r.attempt,
    r.gfp_flags,
    COUNT(*) AS attempts,
    COUNT(CASE WHEN r.failed THEN 1 END) AS failures
  FROM rows_ AS r
  GROUP BY ALL
), names AS (
  SELECT
    c.run_id,
    c.gfp_flags,
    LISTAGG(p.name, '|') WITHIN GROUP (ORDER BY
      p.value NULLS LAST) AS gfp_names
  FROM (
    SELECT DISTINCT
      run_id,
      gfp_flags
    FROM counts
  ) AS c
  JOIN print_flags AS p
    ON p.run_id = c.run_id
    AND p.event = 'mm_page_alloc'
    AND p.field = 'gfp_flags'
    AND p.kind = 'flags'
    AND p.value > 0
    AND (
      (
        CAST(CAST((
          p.value
        ) DIV 4294967296 AS BIGINT) & CAST((
          (
            p.value - 1
          )
        ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
          CAST((
            p.value
          ) % 4294967296 AS BIGINT) & CAST((
            (
              p.value - 1
            )
          ) % 4294967296 AS BIGINT)
        )
      )
    ) = 0
    AND (
      (
        CAST(CAST((
          c.gfp_flags
        ) DIV 4294967296 AS BIGINT) & CAST((
          p.value
        ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
          CAST((
            c.gfp_flags
          ) % 4294967296 AS BIGINT) & CAST((
            p.value
          ) % 4294967296 AS BIGINT)
        )
      )
    ) <> 0
  GROUP BY
    c.run_id,
    c.gfp_flags
)
SELECT
  f.run_id,
  f.labels,
  c.thp_order,
  c.kind,
  c.attempt,
  c.gfp_flags,
  n.gfp_names,
  c.attempts,
  c.failures,
  CAST(100.0 AS DOUBLE) * (
    c.attempts - c.failures
  ) / c.attempts AS success_pct
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
LEFT JOIN names AS n
  ON n.run_id = c.run_id AND n.gfp_flags = c.gfp_flags
ORDER BY
  f.run_id NULLS LAST,
  c.kind NULLS LAST,
  c.attempt NULLS LAST,
  c.attempts DESC;
