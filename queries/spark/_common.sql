-- _common: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

-- TEMPORARY VIEW gfp_bits
SELECT
  run_id,
  MAX(CASE WHEN name = '__GFP_HIGH' THEN value END) AS gfp_high,
  MAX(CASE WHEN name = '__GFP_ATOMIC' THEN value END) AS gfp_atomic,
  MAX(CASE WHEN name = '__GFP_DIRECT_RECLAIM' THEN value END) AS gfp_direct_reclaim,
  MAX(CASE WHEN name = '__GFP_KSWAPD_RECLAIM' THEN value END) AS gfp_kswapd_reclaim,
  MAX(CASE WHEN name = '__GFP_NOMEMALLOC' THEN value END) AS gfp_nomemalloc,
  MAX(CASE WHEN name = '__GFP_COMP' THEN value END) AS gfp_comp
FROM print_flags
WHERE
  event = 'mm_page_alloc'
  AND field = 'gfp_flags'
  AND kind = 'flags'
  AND value > 0
  AND (
    (
      CAST(CAST((
        value
      ) DIV 4294967296 AS BIGINT) & CAST((
        (
          value - 1
        )
      ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
        CAST((
          value
        ) % 4294967296 AS BIGINT) & CAST((
          (
            value - 1
          )
        ) % 4294967296 AS BIGINT)
      )
    )
  ) = 0
GROUP BY
  run_id;

-- TEMPORARY TABLE (a cached DataFrame) compact_result_enum
SELECT
  *
FROM VALUES
  (0, 'not_suitable_zone'),
  (1, 'skipped'),
  (2, 'deferred'),
  (3, 'no_suitable_page'),
  (4, 'continue'),
  (5, 'complete'),
  (6, 'partial_skipped'),
  (7, 'contended'),
  (8, 'success') AS t(status, name);

-- TEMPORARY VIEW compaction_status_names
SELECT
  f.run_id,
  e.status,
  COALESCE(p.name, e.name) AS name,
  CASE WHEN p.name IS NULL THEN 'KERNEL-ERAS.md section 7' ELSE 'print_flags' END AS source
FROM run_facts AS f
CROSS JOIN compact_result_enum AS e
LEFT JOIN (
  SELECT
    run_id,
    CAST(value AS INT) AS status,
    MIN(name) AS name
  FROM print_flags
  WHERE
    event = 'mm_compaction_end' AND field = 'status' AND kind = 'symbolic'
  GROUP BY
    run_id,
    CAST(value AS INT)
) AS p
  ON p.run_id = f.run_id AND p.status = e.status;

-- TEMPORARY VIEW page_allocs
SELECT
  run_id,
  ts,
  cpu,
  pid,
  comm,
  pfn,
  `order`,
  gfp_flags,
  migratetype,
  pfn IN (18446744073709551615, 4294967295) AS failed
FROM mm_page_alloc;

-- TEMPORARY VIEW page_alloc_classes
WITH gfp_rules AS (
  SELECT
    f.run_id,
    f.highatomic_era,
    NOT g.gfp_direct_reclaim IS NULL AS has_gfp_table,
    COALESCE(g.gfp_high, 0) AS gfp_high,
    COALESCE(g.gfp_atomic, 0) AS gfp_atomic,
    COALESCE(g.gfp_direct_reclaim, 0) AS gfp_direct_reclaim,
    COALESCE(g.gfp_nomemalloc, 0) AS gfp_nomemalloc
  FROM run_facts AS f
  LEFT JOIN gfp_bits AS g
    ON g.run_id = f.run_id
)
SELECT
  a.run_id,
  a.ts,
  a.comm,
  a.pfn,
  a.`order`,
  a.failed,
  r.highatomic_era AS run_era,
  r.has_gfp_table,
  a.`order` > 0
  AND (
    (
      CAST(CAST((
        a.gfp_flags
      ) DIV 4294967296 AS BIGINT) & CAST((
        r.gfp_atomic
      ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
        CAST((
          a.gfp_flags
        ) % 4294967296 AS BIGINT) & CAST((
          r.gfp_atomic
        ) % 4294967296 AS BIGINT)
      )
    )
  ) <> 0
  AND (
    (
      CAST(CAST((
        a.gfp_flags
      ) DIV 4294967296 AS BIGINT) & CAST((
        r.gfp_nomemalloc
      ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
        CAST((
          a.gfp_flags
        ) % 4294967296 AS BIGINT) & CAST((
          r.gfp_nomemalloc
        ) % 4294967296 AS BIGINT)
      )
    )
  ) = 0 AS eligible_era_a,
  a.`order` > 0
  AND (
    (
      CAST(CAST((
        a.gfp_flags
      ) DIV 4294967296 AS BIGINT) & CAST((
        r.gfp_high
      ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
        CAST((
          a.gfp_flags
        ) % 4294967296 AS BIGINT) & CAST((
          r.gfp_high
        ) % 4294967296 AS BIGINT)
      )
    )
  ) <> 0
  AND (
    (
      CAST(CAST((
        a.gfp_flags
      ) DIV 4294967296 AS BIGINT) & CAST((
        r.gfp_direct_reclaim
      ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
        CAST((
          a.gfp_flags
        ) % 4294967296 AS BIGINT) & CAST((
          r.gfp_direct_reclaim
        ) % 4294967296 AS BIGINT)
      )
    )
  ) = 0
  AND (
    (
      CAST(CAST((
        a.gfp_flags
      ) DIV 4294967296 AS BIGINT) & CAST((
        r.gfp_nomemalloc
      ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
        CAST((
          a.gfp_flags
        ) % 4294967296 AS BIGINT) & CAST((
          r.gfp_nomemalloc
        ) % 4294967296 AS BIGINT)
      )
    )
  ) = 0 AS eligible_era_b,
  (
    (
      CAST(CAST((
        a.gfp_flags
      ) DIV 4294967296 AS BIGINT) & CAST((
        r.gfp_direct_reclaim
      ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
        CAST((
          a.gfp_flags
        ) % 4294967296 AS BIGINT) & CAST((
          r.gfp_direct_reclaim
        ) % 4294967296 AS BIGINT)
      )
    )
  ) <> 0 AS blocking
FROM page_allocs AS a
JOIN gfp_rules AS r
  ON r.run_id = a.run_id;

-- TEMPORARY VIEW vmstat_deltas
SELECT
  run_id,
  name,
  MIN(ts) AS first_ts,
  MAX(ts) AS last_ts,
  MIN_BY(value, ts) AS first_value,
  MAX_BY(value, ts) AS last_value,
  MAX_BY(value, ts) - MIN_BY(value, ts) AS delta,
  (
    MAX(ts) - MIN(ts)
  ) / CAST(1e9 AS DOUBLE) AS window_s
FROM vmstat
GROUP BY
  run_id,
  name;

-- TEMPORARY VIEW thp_gfp
SELECT
  run_id,
  MAX(CASE WHEN name = 'GFP_TRANSHUGE_LIGHT' THEN value END) AS transhuge_light,
  MAX(
    CASE
      WHEN name = '__GFP_THISNODE'
      AND (
        (
          CAST(CAST((
            value
          ) DIV 4294967296 AS BIGINT) & CAST((
            (
              value - 1
            )
          ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
            CAST((
              value
            ) % 4294967296 AS BIGINT) & CAST((
              (
                value - 1
              )
            ) % 4294967296 AS BIGINT)
          )
        )
      ) = 0
      THEN value
    END
  ) AS gfp_thisnode,
  MAX(
    CASE
      WHEN name = '__GFP_DIRECT_RECLAIM'
      AND (
        (
          CAST(CAST((
            value
          ) DIV 4294967296 AS BIGINT) & CAST((
            (
              value - 1
            )
          ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
            CAST((
              value
            ) % 4294967296 AS BIGINT) & CAST((
              (
                value - 1
              )
            ) % 4294967296 AS BIGINT)
          )
        )
      ) = 0
      THEN value
    END
  ) AS gfp_direct_reclaim
FROM print_flags
WHERE
  event = 'mm_page_alloc' AND field = 'gfp_flags' AND kind = 'flags' AND value > 0
GROUP BY
  run_id;

-- TEMPORARY VIEW thp_orders
WITH seen AS (
  SELECT
    a.run_id,
    a.`order`,
    COUNT(*) AS n
  FROM mm_page_alloc AS a
  JOIN thp_gfp AS g
    ON g.run_id = a.run_id
  WHERE
    NOT g.transhuge_light IS NULL
    AND NOT g.gfp_thisnode IS NULL
    AND a.`order` > 0
    AND (
      (
        CAST(CAST((
          a.gfp_flags
        ) DIV 4294967296 AS BIGINT) & CAST((
          g.transhuge_light
        ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
          CAST((
            a.gfp_flags
          ) % 4294967296 AS BIGINT) & CAST((
            g.transhuge_light
          ) % 4294967296 AS BIGINT)
        )
      )
    ) = g.transhuge_light
    AND (
      (
        CAST(CAST((
          a.gfp_flags
        ) DIV 4294967296 AS BIGINT) & CAST((
          g.gfp_thisnode
        ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
          CAST((
            a.gfp_flags
          ) % 4294967296 AS BIGINT) & CAST((
            g.gfp_thisnode
          ) % 4294967296 AS BIGINT)
        )
      )
    ) <> 0
  GROUP BY
    a.run_id,
    a.`order`
), best AS (
  SELECT
    run_id,
    MAX_BY(`order`, n) AS `order`
  FROM seen
  GROUP BY
    run_id
)
SELECT
  f.run_id,
  CAST(COALESCE(b.`order`, f.pageblock_order) AS INT) AS thp_order,
  CASE
    WHEN NOT b.`order` IS NULL
    THEN 'trace: order of __GFP_THISNODE THP attempts'
    ELSE 'pageblock_order (' || f.pageblock_order_source || ')'
  END AS thp_order_source
FROM run_facts AS f
LEFT JOIN best AS b
  ON b.run_id = f.run_id;

-- TEMPORARY VIEW thp_order_allocs
SELECT
  a.run_id,
  a.ts,
  a.pid,
  a.comm,
  a.gfp_flags,
  a.failed,
  o.thp_order,
  CASE
    WHEN g.transhuge_light IS NULL
    THEN 'unknown'
    WHEN (
      (
        CAST(CAST((
          a.gfp_flags
        ) DIV 4294967296 AS BIGINT) & CAST((
          g.transhuge_light
        ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
          CAST((
            a.gfp_flags
          ) % 4294967296 AS BIGINT) & CAST((
            g.transhuge_light
          ) % 4294967296 AS BIGINT)
        )
      )
    ) <> g.transhuge_light
    THEN 'other'
    WHEN a.comm = 'khugepaged'
    THEN 'khugepaged'
    ELSE 'fault'
  END AS kind,
  COALESCE(
    (
      (
        CAST(CAST((
          a.gfp_flags
        ) DIV 4294967296 AS BIGINT) & CAST((
          g.gfp_thisnode
        ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
          CAST((
            a.gfp_flags
          ) % 4294967296 AS BIGINT) & CAST((
            g.gfp_thisnode
          ) % 4294967296 AS BIGINT)
        )
      )
    ) <> 0,
    FALSE
  ) AS thisnode_try,
  COALESCE(
    (
      (
        CAST(CAST((
          a.gfp_flags
        ) DIV 4294967296 AS BIGINT) & CAST((
          g.gfp_direct_reclaim
        ) DIV 4294967296 AS BIGINT) AS DECIMAL(20, 0)) * 4294967296 + (
          CAST((
            a.gfp_flags
          ) % 4294967296 AS BIGINT) & CAST((
            g.gfp_direct_reclaim
          ) % 4294967296 AS BIGINT)
        )
      )
    ) <> 0,
    FALSE
  ) AS may_reclaim
FROM page_allocs AS a
JOIN thp_orders AS o
  ON o.run_id = a.run_id AND a.`order` = o.thp_order
LEFT JOIN thp_gfp AS g
  ON g.run_id = a.run_id;

-- TEMPORARY VIEW thp_fault_attempts
SELECT
  *,
  COALESCE(
    NOT thisnode_try
    AND LAG(thisnode_try) OVER w
    AND LAG(failed) OVER w
    AND LAG(may_reclaim) OVER w,
    FALSE
  ) AS is_retry
FROM thp_order_allocs
WHERE
  kind = 'fault'
WINDOW w AS (PARTITION BY run_id, pid ORDER BY ts NULLS LAST);

-- TEMPORARY VIEW direct_compactions
WITH tries AS (
  SELECT
    run_id,
    pid,
    comm,
    ts,
    `order`,
    prio
  FROM mm_compaction_try_to_compact_pages
), tasks AS (
  SELECT DISTINCT
    run_id,
    pid
  FROM tries
), alloc_runs AS (
  SELECT DISTINCT
    run_id
  FROM mm_page_alloc
), end_statuses AS (
  SELECT
    run_id,
    status,
    name
  FROM compaction_status_names
  WHERE
    name IN ('success', 'contended')
), ev AS (
  SELECT
    run_id,
    pid,
    ts,
    0 AS rank,
    'try' AS kind,
    `order`,
    CAST(NULL AS INT) AS nid,
    CAST(NULL AS BIGINT) AS idx,
    CAST(NULL AS BIGINT) AS considered,
    CAST(NULL AS BIGINT) AS defer_shift,
    FALSE AS end_success,
    FALSE AS end_contended,
    CAST(NULL AS BOOLEAN) AS ok
  FROM tries
  UNION ALL
  SELECT
    d.run_id,
    d.pid,
    d.ts,
    1,
    'deferred',
    d.`order`,
    d.nid,
    CAST(d.idx AS BIGINT),
    NULL,
    NULL,
    FALSE,
    FALSE,
    NULL
  FROM mm_compaction_deferred AS d
  JOIN tasks AS t
    ON t.run_id = d.run_id AND t.pid = d.pid
  UNION ALL
  SELECT
    s.run_id,
    s.pid,
    s.ts,
    1,
    'suitable',
    s.`order`,
    s.nid,
    CAST(s.idx AS BIGINT),
    NULL,
    NULL,
    FALSE,
    FALSE,
    NULL
  FROM mm_compaction_suitable AS s
  JOIN tasks AS t
    ON t.run_id = s.run_id AND t.pid = s.pid
  UNION ALL
  SELECT
    f.run_id,
    f.pid,
    f.ts,
    1,
    'finished',
    f.`order`,
    f.nid,
    CAST(f.idx AS BIGINT),
    NULL,
    NULL,
    FALSE,
    FALSE,
    NULL
  FROM mm_compaction_finished AS f
  JOIN tasks AS t
    ON t.run_id = f.run_id AND t.pid = f.pid
  UNION ALL
  SELECT
    e.run_id,
    e.pid,
    e.ts,
    2,
    'end',
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    COALESCE(s.name = 'success', FALSE),
    COALESCE(s.name = 'contended', FALSE),
    NULL
  FROM mm_compaction_end AS e
  JOIN tasks AS t
    ON t.run_id = e.run_id AND t.pid = e.pid
  LEFT JOIN end_statuses AS s
    ON s.run_id = e.run_id AND s.status = e.status
  UNION ALL
  SELECT
    r.run_id,
    r.pid,
    r.ts,
    3,
    'reset',
    r.`order`,
    r.nid,
    CAST(r.idx AS BIGINT),
    CAST(r.considered AS BIGINT),
    CAST(r.defer_shift AS BIGINT),
    FALSE,
    FALSE,
    NULL
  FROM mm_compaction_defer_reset AS r
  JOIN tasks AS t
    ON t.run_id = r.run_id AND t.pid = r.pid
  UNION ALL
  SELECT
    b.run_id,
    b.pid,
    b.ts,
    4,
    'reclaim',
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    FALSE,
    FALSE,
    NULL
  FROM mm_vmscan_direct_reclaim_begin AS b
  JOIN tasks AS t
    ON t.run_id = b.run_id AND t.pid = b.pid
  UNION ALL
  SELECT
    a.run_id,
    a.pid,
    a.ts,
    4,
    'alloc',
    CAST(a.`order` AS INT),
    NULL,
    NULL,
    NULL,
    NULL,
    FALSE,
    FALSE,
    NOT a.failed
  FROM page_allocs AS a
  JOIN tasks AS t
    ON t.run_id = a.run_id AND t.pid = a.pid
  WHERE
    a.`order` > 0
), numbered AS (
  SELECT
    *,
    SUM(CASE WHEN kind = 'try' THEN 1 ELSE 0 END) OVER (
      PARTITION BY run_id, pid
      ORDER BY ts NULLS LAST, rank NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS try_no,
    ROW_NUMBER() OVER (PARTITION BY run_id, pid ORDER BY ts NULLS LAST, rank NULLS LAST) AS rn
  FROM ev
), marked AS (
  SELECT
    n.*,
    FIRST_VALUE(n.`order`) OVER (PARTITION BY n.run_id, n.pid, n.try_no ORDER BY n.rn NULLS LAST) AS try_order
  FROM numbered AS n
  WHERE
    n.try_no > 0
), bounded AS (
  SELECT
    *,
    kind = 'reclaim'
    OR (
      kind = 'alloc' AND `order` = try_order
    )
    OR (
      kind IN ('deferred', 'suitable', 'finished', 'reset') AND `order` <> try_order
    ) AS is_end
  FROM marked
), windows AS (
  SELECT
    run_id,
    pid,
    try_no,
    MIN(CASE WHEN is_end THEN rn END) AS end_rn
  FROM bounded
  GROUP BY
    run_id,
    pid,
    try_no
), inside /* The events of each try, up to its end, with the run endings that came before each. */ AS (
  SELECT
    b.*,
    MAX(CASE WHEN b.end_success THEN 1 ELSE 0 END) OVER (
      PARTITION BY b.run_id, b.pid, b.try_no
      ORDER BY b.rn NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS success_before,
    MAX(CASE WHEN b.end_contended THEN 1 ELSE 0 END) OVER (
      PARTITION BY b.run_id, b.pid, b.try_no
      ORDER BY b.rn NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS contended_before,
    SUM(CASE WHEN b.kind = 'reset' THEN 1 ELSE 0 END) OVER (
      PARTITION BY b.run_id, b.pid, b.try_no
      ORDER BY b.rn NULLS LAST
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS reset_no
  FROM bounded AS b
  JOIN windows AS w
    ON w.run_id = b.run_id AND w.pid = b.pid AND w.try_no = b.try_no
  WHERE
    b.kind <> 'try' AND (
      w.end_rn IS NULL OR b.rn < w.end_rn
    )
), zones_reached /* Zones the loop has reached: the first deferred, suitable or finished event of each. */ AS (
  SELECT
    run_id,
    pid,
    try_no,
    nid,
    idx,
    MIN(rn) AS first_rn
  FROM inside
  WHERE
    kind IN ('deferred', 'suitable', 'finished')
  GROUP BY
    run_id,
    pid,
    try_no,
    nid,
    idx
), first_resets /* Each try's first defer_reset, and whether the loop logged it (zone_ready above). */ AS (
  SELECT
    r.run_id,
    r.pid,
    r.try_no,
    MAX(
      CASE
        WHEN r.considered > 0 OR r.defer_shift > 0 OR r.success_before = 1
        THEN 1
        ELSE 0
      END
    ) = 1
    OR (
      MAX(COALESCE(r.contended_before, 0)) = 0 AND COUNT(z.first_rn) = 0
    ) AS by_loop
  FROM inside AS r
  LEFT JOIN zones_reached AS z
    ON z.run_id = r.run_id
    AND z.pid = r.pid
    AND z.try_no = r.try_no
    AND z.nid = r.nid
    AND z.idx <= r.idx
    AND z.first_rn < r.rn
  WHERE
    r.kind = 'reset' AND r.reset_no = 1
  GROUP BY
    r.run_id,
    r.pid,
    r.try_no
), per_try AS (
  SELECT
    run_id,
    pid,
    try_no,
    COUNT(CASE WHEN kind = 'deferred' THEN 1 END) AS zones_deferred,
    COUNT(CASE WHEN kind = 'end' THEN 1 END) AS zones_compacted,
    COUNT(CASE WHEN kind = 'end' AND end_success THEN 1 END) AS zones_success,
    COUNT(CASE WHEN kind = 'reset' THEN 1 END) AS resets
  FROM inside
  GROUP BY
    run_id,
    pid,
    try_no
), ends AS (
  SELECT
    b.run_id,
    b.pid,
    b.try_no,
    b.kind AS ended_by,
    b.ok AS alloc_ok
  FROM bounded AS b
  JOIN windows AS w
    ON w.run_id = b.run_id AND w.pid = b.pid AND w.try_no = b.try_no AND b.rn = w.end_rn
), try_rows AS (
  SELECT
    run_id,
    pid,
    ts,
    `order`,
    try_no,
    NOT LEAD(try_no) OVER (PARTITION BY run_id, pid ORDER BY try_no NULLS LAST) IS NULL AS has_next
  FROM marked
  WHERE
    kind = 'try'
)
SELECT
  t.run_id,
  t.pid,
  tr.comm,
  t.ts,
  t.`order`,
  tr.prio,
  COALESCE(p.zones_deferred, 0) AS zones_deferred,
  COALESCE(p.zones_compacted, 0) AS zones_compacted,
  COALESCE(p.zones_success, 0) AS zones_success,
  COALESCE(p.resets, 0) AS resets,
  COALESCE(fr.by_loop, FALSE) AS zone_ready,
  COALESCE(e.ended_by, CASE WHEN t.has_next THEN 'next try' ELSE 'capture end' END) AS ended_by,
  e.alloc_ok,
  COALESCE(p.zones_deferred + p.zones_compacted + p.resets, 0) > 0 AS stalled,
  COALESCE(p.resets, 0) > CASE WHEN COALESCE(fr.by_loop, FALSE) THEN 1 ELSE 0 END
  AND (
    ar.run_id IS NULL OR COALESCE(e.ended_by = 'alloc' AND e.alloc_ok, FALSE)
  ) AS succeeded
FROM try_rows AS t
JOIN tries AS tr
  ON tr.run_id = t.run_id AND tr.pid = t.pid AND tr.ts = t.ts
LEFT JOIN per_try AS p
  ON p.run_id = t.run_id AND p.pid = t.pid AND p.try_no = t.try_no
LEFT JOIN first_resets AS fr
  ON fr.run_id = t.run_id AND fr.pid = t.pid AND fr.try_no = t.try_no
LEFT JOIN ends AS e
  ON e.run_id = t.run_id AND e.pid = t.pid AND e.try_no = t.try_no
LEFT JOIN alloc_runs AS ar
  ON ar.run_id = t.run_id;

-- TEMPORARY VIEW trace_windows
WITH vm AS (
  SELECT
    run_id,
    MIN(first_ts) AS lo,
    MAX(last_ts) AS hi
  FROM vmstat_deltas
  GROUP BY
    run_id
)
SELECT
  f.run_id,
  CASE WHEN v.hi > v.lo THEN 'vmstat' ELSE 'capture' END AS trace_window,
  CASE WHEN v.hi > v.lo THEN v.lo END AS lo,
  CASE WHEN v.hi > v.lo THEN v.hi END AS hi
FROM run_facts AS f
LEFT JOIN vm AS v
  ON v.run_id = f.run_id;

-- TEMPORARY VIEW thp_fault_success
WITH vm AS (
  SELECT
    run_id,
    MAX(CASE WHEN name = 'thp_fault_alloc' THEN delta END) AS thp_fault_alloc,
    MAX(CASE WHEN name = 'thp_fault_fallback' THEN delta END) AS thp_fault_fallback,
    MAX(CASE WHEN name = 'thp_fault_fallback_charge' THEN delta END) AS thp_fault_fallback_charge
  FROM vmstat_deltas
  GROUP BY
    run_id
), tr AS (
  SELECT
    a.run_id,
    COUNT(CASE WHEN NOT a.is_retry THEN 1 END) AS faults,
    COUNT(CASE WHEN a.is_retry THEN 1 END) AS retries,
    COUNT(CASE WHEN NOT a.failed THEN 1 END) AS successes
  FROM thp_fault_attempts AS a
  JOIN trace_windows AS w
    ON w.run_id = a.run_id
  WHERE
    w.lo IS NULL OR a.ts BETWEEN w.lo AND w.hi
  GROUP BY
    a.run_id
), rates AS (
  SELECT
    f.run_id,
    v.thp_fault_alloc,
    v.thp_fault_fallback,
    v.thp_fault_fallback_charge,
    CAST(100.0 AS DOUBLE) * v.thp_fault_alloc / NULLIF(v.thp_fault_alloc + v.thp_fault_fallback, 0) AS vmstat_pct,
    CAST(100.0 AS DOUBLE) * v.thp_fault_alloc / NULLIF(
      v.thp_fault_alloc + v.thp_fault_fallback - COALESCE(v.thp_fault_fallback_charge, 0),
      0
    ) AS vmstat_alloc_pct,
    COALESCE(t.faults, 0) AS trace_faults,
    COALESCE(t.retries, 0) AS trace_retries,
    COALESCE(t.successes, 0) AS trace_successes,
    CAST(100.0 AS DOUBLE) * t.successes / NULLIF(t.faults, 0) AS trace_pct
  FROM run_facts AS f
  LEFT JOIN vm AS v
    ON v.run_id = f.run_id
  LEFT JOIN tr AS t
    ON t.run_id = f.run_id
)
SELECT
  *,
  COALESCE(vmstat_pct, trace_pct) AS success_pct,
  CASE
    WHEN NOT vmstat_pct IS NULL
    THEN 'vmstat'
    WHEN NOT trace_pct IS NULL
    THEN 'trace'
  END AS source
FROM rates;

-- TEMPORARY VIEW compaction_success
WITH vm AS (
  SELECT
    run_id,
    MAX(CASE WHEN name = 'compact_stall' THEN delta END) AS compact_stall,
    MAX(CASE WHEN name = 'compact_success' THEN delta END) AS compact_success
  FROM vmstat_deltas
  GROUP BY
    run_id
), tr AS (
  SELECT
    d.run_id,
    COUNT(*) AS tries,
    COUNT(CASE WHEN d.stalled THEN 1 END) AS stalls,
    COUNT(CASE WHEN d.succeeded THEN 1 END) AS successes
  FROM direct_compactions AS d
  JOIN trace_windows AS w
    ON w.run_id = d.run_id
  WHERE
    w.lo IS NULL OR d.ts BETWEEN w.lo AND w.hi
  GROUP BY
    d.run_id
), rates AS (
  SELECT
    f.run_id,
    v.compact_stall,
    v.compact_success,
    CAST(100.0 AS DOUBLE) * v.compact_success / NULLIF(v.compact_stall, 0) AS vmstat_pct,
    COALESCE(t.tries, 0) AS trace_tries,
    COALESCE(t.stalls, 0) AS trace_stalls,
    COALESCE(t.successes, 0) AS trace_successes,
    CAST(100.0 AS DOUBLE) * t.successes / NULLIF(t.stalls, 0) AS trace_pct
  FROM run_facts AS f
  LEFT JOIN vm AS v
    ON v.run_id = f.run_id
  LEFT JOIN tr AS t
    ON t.run_id = f.run_id
)
SELECT
  *,
  COALESCE(vmstat_pct, trace_pct) AS success_pct,
  CASE
    WHEN NOT vmstat_pct IS NULL
    THEN 'vmstat'
    WHEN NOT trace_pct IS NULL
    THEN 'trace'
  END AS source
FROM rates;

-- TEMPORARY VIEW compaction_runs
WITH bounds AS (
  SELECT
    run_id,
    pid,
    comm,
    ts,
    1 AS is_begin,
    CAST(NULL AS INT) AS status
  FROM mm_compaction_begin
  UNION ALL
  SELECT
    run_id,
    pid,
    comm,
    ts,
    0 AS is_begin,
    status
  FROM mm_compaction_end
), ordered AS (
  SELECT
    run_id,
    pid,
    comm,
    ts,
    is_begin,
    status,
    LAG(is_begin) OVER w AS prev_is_begin,
    LAG(ts) OVER w AS prev_ts
  FROM bounds
  WINDOW w AS (PARTITION BY run_id, pid ORDER BY ts NULLS LAST, is_begin DESC)
)
SELECT
  run_id,
  pid,
  comm,
  CASE WHEN comm LIKE 'kcompactd%' THEN 'kcompactd' ELSE 'direct' END AS kind,
  ts AS end_ts,
  status,
  CASE WHEN prev_is_begin = 1 THEN ts - prev_ts END AS duration_ns
FROM ordered
WHERE
  is_begin = 0;
