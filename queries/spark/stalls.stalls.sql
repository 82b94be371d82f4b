-- stalls.stalls: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

-- TEMPORARY TABLE (a cached DataFrame) _stall_frame_skip
SELECT
  *
FROM VALUES
  ('trace_event_raw_event_*', 'tracing'),
  ('ftrace_raw_event_*', 'tracing'),
  ('perf_trace_*', 'tracing'),
  ('trace_event_buffer_*', 'tracing'),
  ('trace_buffer_unlock_commit*', 'tracing'),
  ('__ftrace_trace_stack', 'tracing'),
  ('ftrace_*', 'tracing'),
  ('__trace_stack', 'tracing'),
  ('stack_trace_save*', 'tracing'),
  ('arch_stack_walk', 'tracing'),
  ('__alloc_pages*', 'allocator'),
  ('alloc_pages*', 'allocator'),
  ('__alloc_frozen_pages*', 'allocator'),
  ('alloc_frozen_pages*', 'allocator'),
  ('get_page_from_freelist', 'allocator'),
  ('rmqueue*', 'allocator'),
  ('__rmqueue*', 'allocator'),
  ('__get_free_pages*', 'allocator'),
  ('get_zeroed_page*', 'allocator'),
  ('__folio_alloc*', 'allocator'),
  ('folio_alloc*', 'allocator'),
  ('alloc_pages_exact*', 'allocator'),
  ('__alloc_pages_bulk*', 'allocator'),
  ('alloc_page_interleave', 'allocator'),
  ('alloc_pages_preferred_many', 'allocator'),
  ('vma_alloc_folio*', 'allocator'),
  ('kmalloc*', 'slab'),
  ('__kmalloc*', 'slab'),
  ('___kmalloc*', 'slab'),
  ('kmem_cache_alloc*', 'slab'),
  ('__kmem_cache_alloc*', 'slab'),
  ('allocate_slab', 'slab'),
  ('new_slab', 'slab'),
  ('___slab_alloc', 'slab'),
  ('__slab_alloc*', 'slab'),
  ('slab_alloc*', 'slab'),
  ('alloc_slab_page', 'slab'),
  ('alloc_slab_obj_exts', 'slab'),
  ('__memcg_slab_post_alloc_hook', 'slab'),
  ('memcg_slab_post_alloc_hook', 'slab'),
  ('kvmalloc*', 'slab'),
  ('__kvmalloc*', 'slab'),
  ('kvzalloc*', 'slab'),
  ('kzalloc*', 'slab'),
  ('krealloc*', 'slab'),
  ('__krealloc*', 'slab'),
  ('kvrealloc*', 'slab'),
  ('kmemdup*', 'slab'),
  ('__vmalloc*', 'vmalloc'),
  ('vmalloc*', 'vmalloc'),
  ('vzalloc*', 'vmalloc'),
  ('vm_area_alloc_pages', 'vmalloc') AS t(pattern, kind);

-- TEMPORARY TABLE (a cached DataFrame) _stall_stack_callsites
WITH frames AS (
  SELECT
    run_id,
    stack_id,
    INLINE(
      ARRAYS_ZIP(
        IF((
          SIZE(frames) + 1 - 1
        ) < 1, ARRAY(), SEQUENCE(1, (
          SIZE(frames) + 1 - 1
        ))),
        frames
      )
    ) AS (pos, frame)
  FROM alloc_stacks
), named AS (
  SELECT
    run_id,
    stack_id,
    pos,
    REGEXP_REPLACE(
      REGEXP_REPLACE(frame, '[+]0x[0-9a-f]+$', ''),
      '([.](isra|part|constprop|cold|llvm|lto_priv)([.][0-9]+)?)+$',
      ''
    ) AS fn
  FROM frames
), marked AS (
  SELECT
    n.run_id,
    n.stack_id,
    n.pos,
    n.fn,
    COUNT(k.pattern) > 0 AS skipped
  FROM named AS n
  LEFT JOIN _stall_frame_skip AS k
    ON n.fn RLIKE CONCAT(
      '(?s)^',
      REPLACE(
        REPLACE(
          REPLACE(REGEXP_REPLACE(k.pattern, '([.+^$(){}|\\\\])', '\\\\$1'), '*', '.*'),
          '?',
          '.'
        ),
        '[!',
        '[^'
      ),
      '$'
    )
  GROUP BY
    n.run_id,
    n.stack_id,
    n.pos,
    n.fn
), first_kept AS (
  SELECT
    run_id,
    stack_id,
    MIN(CASE WHEN NOT skipped THEN pos END) AS pos
  FROM marked
  GROUP BY
    run_id,
    stack_id
)
SELECT
  k.run_id,
  k.stack_id,
  COALESCE(m.fn, '(allocator)') AS callsite
FROM first_kept AS k
LEFT JOIN marked AS m
  ON m.run_id = k.run_id AND m.stack_id = k.stack_id AND m.pos = k.pos;

-- TEMPORARY TABLE (a cached DataFrame) _stall_compaction_runs
WITH bounds AS (
  SELECT
    run_id,
    pid,
    comm,
    ts,
    1 AS is_begin
  FROM mm_compaction_begin
  UNION ALL
  SELECT
    run_id,
    pid,
    comm,
    ts,
    0 AS is_begin
  FROM mm_compaction_end
), ordered AS (
  SELECT
    run_id,
    pid,
    comm,
    ts,
    is_begin,
    LAG(is_begin) OVER w AS prev_is_begin,
    LAG(ts) OVER w AS prev_ts,
    LEAD(is_begin) OVER w AS next_is_begin
  FROM bounds
  WINDOW w AS (PARTITION BY run_id, pid ORDER BY ts NULLS LAST, is_begin DESC)
)
SELECT
  run_id,
  pid,
  comm,
  CASE WHEN prev_is_begin = 1 THEN prev_ts END AS begin_ts,
  ts AS end_ts,
  CASE WHEN prev_is_begin = 1 THEN 'paired' ELSE 'no_begin' END AS status
FROM ordered
WHERE
  is_begin = 0
UNION ALL
SELECT
  run_id,
  pid,
  comm,
  ts AS begin_ts,
  CAST(NULL AS BIGINT) AS end_ts,
  'no_end' AS status
FROM ordered
WHERE
  is_begin = 1 AND COALESCE(next_is_begin, 1) = 1;

-- TEMPORARY TABLE (a cached DataFrame) _stall_direct_runs
WITH tries AS (
  SELECT
    run_id,
    pid,
    ts AS try_ts,
    `order`
  FROM mm_compaction_try_to_compact_pages
  WHERE
    comm NOT LIKE 'kcompactd%'
), runs_ AS (
  SELECT
    run_id,
    pid,
    comm,
    begin_ts,
    end_ts,
    status,
    COALESCE(begin_ts, end_ts) AS anchor_ts
  FROM _stall_compaction_runs
  WHERE
    comm NOT LIKE 'kcompactd%'
), with_try AS (
  SELECT
    r.*,
    t.try_ts,
    t.`order`
  FROM runs_ AS r
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
          r.run_id AS k0,
          r.pid AS k1,
          r.anchor_ts AS _pos,
          NULL AS _t,
          1 AS _side
        FROM runs_ AS r
        UNION ALL
        SELECT
          t.run_id AS k0,
          t.pid AS k1,
          t.try_ts AS _pos,
          t.try_ts AS _t,
          0 AS _side
        FROM tries AS t
        WHERE
          NOT t.run_id IS NULL AND NOT t.pid IS NULL AND NOT t.try_ts IS NULL
      ) AS _u
    ) AS _w
    WHERE
      _side = 1
  ) AS _asof1
    ON _asof1.k0 = r.run_id AND _asof1.k1 = r.pid AND _asof1._pos = r.anchor_ts
  LEFT JOIN (
    SELECT
      *
      EXCEPT (_asof_rn)
    FROM (
      SELECT
        *,
        ROW_NUMBER() OVER (PARTITION BY t.run_id, t.pid, t.try_ts ORDER BY t.try_ts NULLS LAST) AS _asof_rn
      FROM tries AS t
    ) AS t
    WHERE
      _asof_rn = 1
  ) AS t
    ON t.run_id = r.run_id AND t.pid = r.pid AND t.try_ts = _asof1._match
), reclaims AS (
  SELECT
    run_id,
    pid,
    ts AS reclaim_ts
  FROM mm_vmscan_direct_reclaim_begin
), with_reclaim AS (
  SELECT
    w.*,
    c.reclaim_ts
  FROM with_try AS w
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
          w.run_id AS k0,
          w.pid AS k1,
          w.anchor_ts AS _pos,
          NULL AS _t,
          1 AS _side
        FROM with_try AS w
        UNION ALL
        SELECT
          c.run_id AS k0,
          c.pid AS k1,
          c.reclaim_ts AS _pos,
          c.reclaim_ts AS _t,
          0 AS _side
        FROM reclaims AS c
        WHERE
          NOT c.run_id IS NULL AND NOT c.pid IS NULL AND NOT c.reclaim_ts IS NULL
      ) AS _u
    ) AS _w
    WHERE
      _side = 1
  ) AS _asof2
    ON _asof2.k0 = w.run_id AND _asof2.k1 = w.pid AND _asof2._pos = w.anchor_ts
  LEFT JOIN (
    SELECT
      *
      EXCEPT (_asof_rn)
    FROM (
      SELECT
        *,
        ROW_NUMBER() OVER (PARTITION BY c.run_id, c.pid, c.reclaim_ts ORDER BY c.reclaim_ts NULLS LAST) AS _asof_rn
      FROM reclaims AS c
    ) AS c
    WHERE
      _asof_rn = 1
  ) AS c
    ON c.run_id = w.run_id AND c.pid = w.pid AND c.reclaim_ts = _asof2._match
), tasks AS (
  SELECT DISTINCT
    run_id,
    pid
  FROM tries
), allocs AS (
  SELECT
    a.run_id,
    a.pid,
    CAST(a.`order` AS INT) AS `order`,
    a.ts AS alloc_ts
  FROM mm_page_alloc AS a
  JOIN tasks AS t
    ON t.run_id = a.run_id AND t.pid = a.pid
  WHERE
    a.`order` > 0
), with_alloc AS (
  SELECT
    w.*,
    a.alloc_ts
  FROM with_reclaim AS w
  LEFT JOIN (
    SELECT
      k0,
      k1,
      k2,
      _pos,
      _match
    FROM (
      SELECT
        k0,
        k1,
        k2,
        _pos,
        _side,
        LAST_VALUE(_t) IGNORE NULLS OVER (
          PARTITION BY k0, k1, k2
          ORDER BY _pos ASC NULLS LAST, _side NULLS LAST
          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS _match
      FROM (
        SELECT DISTINCT
          w.run_id AS k0,
          w.pid AS k1,
          w.`order` AS k2,
          w.anchor_ts AS _pos,
          NULL AS _t,
          1 AS _side
        FROM with_reclaim AS w
        UNION ALL
        SELECT
          a.run_id AS k0,
          a.pid AS k1,
          a.`order` AS k2,
          a.alloc_ts AS _pos,
          a.alloc_ts AS _t,
          0 AS _side
        FROM allocs AS a
        WHERE
          NOT a.run_id IS NULL
          AND NOT a.pid IS NULL
          AND NOT a.`order` IS NULL
          AND NOT a.alloc_ts IS NULL
      ) AS _u
    ) AS _w
    WHERE
      _side = 1
  ) AS _asof3
    ON _asof3.k0 = w.run_id
    AND _asof3.k1 = w.pid
    AND _asof3.k2 = w.`order`
    AND _asof3._pos = w.anchor_ts
  LEFT JOIN (
    SELECT
      *
      EXCEPT (_asof_rn)
    FROM (
      SELECT
        *,
        ROW_NUMBER() OVER (
          PARTITION BY a.run_id, a.pid, a.`order`, a.alloc_ts
          ORDER BY a.alloc_ts NULLS LAST
        ) AS _asof_rn
      FROM allocs AS a
    ) AS a
    WHERE
      _asof_rn = 1
  ) AS a
    ON a.run_id = w.run_id
    AND a.pid = w.pid
    AND a.`order` = w.`order`
    AND a.alloc_ts = _asof3._match
)
SELECT
  run_id,
  pid,
  comm,
  begin_ts,
  end_ts,
  status,
  CASE
    WHEN NOT try_ts IS NULL
    AND (
      reclaim_ts IS NULL OR reclaim_ts < try_ts
    )
    AND (
      alloc_ts IS NULL OR alloc_ts < try_ts
    )
    THEN try_ts
  END AS try_ts
FROM with_alloc;

-- TEMPORARY TABLE (a cached DataFrame) _stalls
WITH tries AS (
  SELECT
    run_id,
    pid,
    comm,
    ts AS try_ts,
    `order`
  FROM mm_compaction_try_to_compact_pages
  WHERE
    comm NOT LIKE 'kcompactd%'
), per_try AS (
  SELECT
    run_id,
    pid,
    try_ts,
    COUNT(*) AS runs,
    COUNT(CASE WHEN status = 'no_end' THEN 1 END) AS no_end,
    COUNT(CASE WHEN status = 'no_begin' THEN 1 END) AS no_begin,
    CAST(SUM(end_ts - begin_ts) AS BIGINT) AS duration_ns,
    MAX(end_ts) AS end_ts
  FROM _stall_direct_runs
  WHERE
    NOT try_ts IS NULL
  GROUP BY
    run_id,
    pid,
    try_ts
), direct_compaction AS (
  SELECT
    t.run_id,
    'direct_compaction' AS kind,
    t.pid,
    t.comm,
    t.`order`,
    CASE
      WHEN p.runs IS NULL
      THEN 'no_run'
      WHEN p.no_end > 0
      THEN 'no_end'
      WHEN p.no_begin > 0
      THEN 'no_begin'
      ELSE 'paired'
    END AS status,
    t.try_ts AS begin_ts,
    p.end_ts,
    CASE
      WHEN NOT p.runs IS NULL AND p.no_end = 0 AND p.no_begin = 0
      THEN p.duration_ns
    END AS duration_ns
  FROM tries AS t
  LEFT JOIN per_try AS p
    ON p.run_id = t.run_id AND p.pid = t.pid AND p.try_ts = t.try_ts
  UNION ALL
  SELECT
    run_id,
    'direct_compaction',
    pid,
    comm,
    CAST(NULL AS INT),
    CASE WHEN status = 'paired' THEN 'outside_try' ELSE status END,
    begin_ts,
    end_ts,
    CAST(NULL AS BIGINT)
  FROM _stall_direct_runs
  WHERE
    try_ts IS NULL
), reclaim_bounds AS (
  SELECT
    run_id,
    pid,
    comm,
    ts,
    1 AS is_begin,
    `order`
  FROM mm_vmscan_direct_reclaim_begin
  UNION ALL
  SELECT
    run_id,
    pid,
    comm,
    ts,
    0 AS is_begin,
    CAST(NULL AS INT)
  FROM mm_vmscan_direct_reclaim_end
), reclaim_ordered AS (
  SELECT
    run_id,
    pid,
    comm,
    ts,
    is_begin,
    `order`,
    LEAD(is_begin) OVER w AS next_is_begin,
    LEAD(ts) OVER w AS next_ts,
    LAG(is_begin) OVER w AS prev_is_begin
  FROM reclaim_bounds
  WINDOW w AS (PARTITION BY run_id, pid ORDER BY ts NULLS LAST, is_begin DESC)
), direct_reclaim AS (
  SELECT
    run_id,
    'direct_reclaim' AS kind,
    pid,
    comm,
    `order`,
    CASE WHEN next_is_begin = 0 THEN 'paired' ELSE 'no_end' END AS status,
    ts AS begin_ts,
    CASE WHEN next_is_begin = 0 THEN next_ts END AS end_ts,
    CASE WHEN next_is_begin = 0 THEN next_ts - ts END AS duration_ns
  FROM reclaim_ordered
  WHERE
    is_begin = 1
  UNION ALL
  SELECT
    run_id,
    'direct_reclaim',
    pid,
    comm,
    CAST(NULL AS INT),
    'no_begin',
    CAST(NULL AS BIGINT),
    ts,
    CAST(NULL AS BIGINT)
  FROM reclaim_ordered
  WHERE
    is_begin = 0 AND COALESCE(prev_is_begin, 0) = 0
), kcompactd_runs AS (
  SELECT
    run_id,
    pid,
    comm,
    begin_ts,
    end_ts,
    status,
    COALESCE(begin_ts, end_ts) AS anchor_ts
  FROM _stall_compaction_runs
  WHERE
    comm LIKE 'kcompactd%'
), kcompactd_finished AS (
  SELECT
    r.*,
    f.ts AS finished_ts,
    f.`order` AS finished_order
  FROM kcompactd_runs AS r
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
          r.run_id AS k0,
          r.pid AS k1,
          r.end_ts AS _pos,
          NULL AS _t,
          1 AS _side
        FROM kcompactd_runs AS r
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
    ON _asof1.k0 = r.run_id AND _asof1.k1 = r.pid AND _asof1._pos = r.end_ts
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
    ON f.run_id = r.run_id AND f.pid = r.pid AND f.ts = _asof1._match
), kcompactd_woken AS (
  SELECT
    r.*,
    w.`order` AS wake_order
  FROM kcompactd_finished AS r
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
          r.run_id AS k0,
          r.pid AS k1,
          r.anchor_ts AS _pos,
          NULL AS _t,
          1 AS _side
        FROM kcompactd_finished AS r
        UNION ALL
        SELECT
          w.run_id AS k0,
          w.pid AS k1,
          w.ts AS _pos,
          w.ts AS _t,
          0 AS _side
        FROM mm_compaction_kcompactd_wake AS w
        WHERE
          NOT w.run_id IS NULL AND NOT w.pid IS NULL AND NOT w.ts IS NULL
      ) AS _u
    ) AS _w
    WHERE
      _side = 1
  ) AS _asof2
    ON _asof2.k0 = r.run_id AND _asof2.k1 = r.pid AND _asof2._pos = r.anchor_ts
  LEFT JOIN (
    SELECT
      *
      EXCEPT (_asof_rn)
    FROM (
      SELECT
        *,
        ROW_NUMBER() OVER (PARTITION BY w.run_id, w.pid, w.ts ORDER BY w.ts NULLS LAST) AS _asof_rn
      FROM mm_compaction_kcompactd_wake AS w
    ) AS w
    WHERE
      _asof_rn = 1
  ) AS w
    ON w.run_id = r.run_id AND w.pid = r.pid AND w.ts = _asof2._match
), kcompactd AS (
  SELECT
    run_id,
    'kcompactd' AS kind,
    pid,
    comm,
    CASE
      WHEN NOT begin_ts IS NULL AND finished_ts >= begin_ts
      THEN finished_order
      ELSE wake_order
    END AS `order`,
    status,
    begin_ts,
    end_ts,
    CASE WHEN status = 'paired' THEN end_ts - begin_ts END AS duration_ns
  FROM kcompactd_woken
), kswapd_events AS (
  SELECT
    run_id,
    pid,
    comm,
    ts,
    0 AS is_sleep,
    `order`
  FROM mm_vmscan_kswapd_wake
  WHERE
    comm LIKE 'kswapd%'
  UNION ALL
  SELECT
    run_id,
    pid,
    comm,
    ts,
    1 AS is_sleep,
    CAST(NULL AS INT)
  FROM mm_vmscan_kswapd_sleep
  WHERE
    comm LIKE 'kswapd%'
), kswapd_numbered AS (
  SELECT
    *,
    COALESCE(
      SUM(is_sleep) OVER (
        PARTITION BY run_id, pid
        ORDER BY ts NULLS LAST, is_sleep NULLS LAST
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
      ),
      0
    ) AS sleeps_before
  FROM kswapd_events
), kswapd_awake AS (
  SELECT
    run_id,
    pid,
    ANY_VALUE(comm) IGNORE NULLS AS comm,
    sleeps_before,
    MIN(CASE WHEN is_sleep = 0 THEN ts END) AS begin_ts,
    MAX(CASE WHEN is_sleep = 1 THEN ts END) AS end_ts,
    MIN_BY(CASE WHEN is_sleep = 0 THEN `order` END, CASE WHEN is_sleep = 0 THEN ts END) AS `order`
  FROM kswapd_numbered
  GROUP BY
    run_id,
    pid,
    sleeps_before
), kswapd AS (
  SELECT
    run_id,
    'kswapd' AS kind,
    pid,
    comm,
    `order`,
    CASE
      WHEN begin_ts IS NULL
      THEN 'no_begin'
      WHEN end_ts IS NULL
      THEN 'no_end'
      ELSE 'paired'
    END AS status,
    begin_ts,
    end_ts,
    CASE WHEN NOT begin_ts IS NULL AND NOT end_ts IS NULL THEN end_ts - begin_ts END AS duration_ns
  FROM kswapd_awake
)
SELECT
  *
FROM direct_compaction
UNION ALL
SELECT
  *
FROM direct_reclaim
UNION ALL
SELECT
  *
FROM kcompactd
UNION ALL
SELECT
  *
FROM kswapd;

-- TEMPORARY TABLE (a cached DataFrame) _stall_callsites
WITH direct AS (
  SELECT
    s.run_id,
    s.kind,
    s.pid,
    s.`order`,
    s.begin_ts,
    s.end_ts
  FROM _stalls AS s
  JOIN stack_pairing AS p
    ON p.run_id = s.run_id
  WHERE
    s.status = 'paired' AND s.kind IN ('direct_compaction', 'direct_reclaim')
), tasks AS (
  SELECT DISTINCT
    run_id,
    pid
  FROM direct
), allocs AS (
  SELECT
    a.run_id,
    a.pid,
    CAST(a.`order` AS INT) AS `order`,
    a.ts AS alloc_ts,
    a.pfn
  FROM mm_page_alloc AS a
  JOIN tasks AS t
    ON t.run_id = a.run_id AND t.pid = a.pid
), with_alloc AS (
  SELECT
    d.*,
    a.alloc_ts,
    a.pfn
  FROM direct AS d
  LEFT JOIN (
    SELECT
      k0,
      k1,
      k2,
      _pos,
      _match
    FROM (
      SELECT
        k0,
        k1,
        k2,
        _pos,
        _side,
        LAST_VALUE(_t) IGNORE NULLS OVER (
          PARTITION BY k0, k1, k2
          ORDER BY _pos DESC, _side NULLS LAST
          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS _match
      FROM (
        SELECT DISTINCT
          d.run_id AS k0,
          d.pid AS k1,
          d.`order` AS k2,
          d.end_ts AS _pos,
          NULL AS _t,
          1 AS _side
        FROM direct AS d
        UNION ALL
        SELECT
          a.run_id AS k0,
          a.pid AS k1,
          a.`order` AS k2,
          a.alloc_ts AS _pos,
          a.alloc_ts AS _t,
          0 AS _side
        FROM allocs AS a
        WHERE
          NOT a.run_id IS NULL
          AND NOT a.pid IS NULL
          AND NOT a.`order` IS NULL
          AND NOT a.alloc_ts IS NULL
      ) AS _u
    ) AS _w
    WHERE
      _side = 1
  ) AS _asof1
    ON _asof1.k0 = d.run_id
    AND _asof1.k1 = d.pid
    AND _asof1.k2 = d.`order`
    AND _asof1._pos = d.end_ts
  LEFT JOIN (
    SELECT
      *
      EXCEPT (_asof_rn)
    FROM (
      SELECT
        *,
        ROW_NUMBER() OVER (
          PARTITION BY a.run_id, a.pid, a.`order`, a.alloc_ts
          ORDER BY a.alloc_ts NULLS LAST
        ) AS _asof_rn
      FROM allocs AS a
    ) AS a
    WHERE
      _asof_rn = 1
  ) AS a
    ON a.run_id = d.run_id
    AND a.pid = d.pid
    AND a.`order` = d.`order`
    AND a.alloc_ts = _asof1._match
), ids AS (
  SELECT
    run_id,
    ts,
    pfn,
    CAST(`order` AS INT) AS `order`,
    MIN(stack_id) AS stack_id
  FROM alloc_stack_ids
  GROUP BY
    run_id,
    ts,
    pfn,
    `order`
)
SELECT
  w.run_id,
  w.kind,
  w.pid,
  w.begin_ts,
  COALESCE(c.callsite, '(no stack)') AS callsite
FROM with_alloc AS w
LEFT JOIN ids AS i
  ON i.run_id = w.run_id
  AND i.ts = w.alloc_ts
  AND i.pfn = w.pfn
  AND i.`order` = w.`order`
LEFT JOIN _stall_stack_callsites AS c
  ON c.run_id = w.run_id AND c.stack_id = i.stack_id;

WITH named AS (
  SELECT
    s.run_id,
    s.kind,
    s.`order`,
    s.comm,
    c.callsite,
    s.duration_ns
  FROM _stalls AS s
  LEFT JOIN _stall_callsites AS c
    ON c.run_id = s.run_id
    AND c.kind = s.kind
    AND c.pid = s.pid
    AND c.begin_ts = s.begin_ts
  WHERE
    s.status = 'paired'
), per_key AS (
  SELECT
    run_id,
    kind,
    `order`,
    comm,
    callsite,
    COUNT(*) AS stalls,
    CAST(SUM(duration_ns) AS BIGINT) AS total_ns,
    PERCENTILE(duration_ns, 0.5) AS p50_ns,
    PERCENTILE(duration_ns, 0.9) AS p90_ns,
    PERCENTILE(duration_ns, 0.99) AS p99_ns,
    MAX(duration_ns) AS max_ns
  FROM named
  GROUP BY
    run_id,
    kind,
    `order`,
    comm,
    callsite
)
SELECT
  f.run_id,
  f.labels,
  k.kind,
  k.`order`,
  k.comm,
  k.callsite,
  k.stalls,
  k.total_ns / CAST(1e6 AS DOUBLE) AS total_ms,
  k.total_ns / CAST(1e6 AS DOUBLE) / k.stalls AS mean_ms,
  k.p50_ns / CAST(1e6 AS DOUBLE) AS p50_ms,
  k.p90_ns / CAST(1e6 AS DOUBLE) AS p90_ms,
  k.p99_ns / CAST(1e6 AS DOUBLE) AS p99_ms,
  k.max_ns / CAST(1e6 AS DOUBLE) AS max_ms
FROM per_key AS k
JOIN run_facts AS f
  ON f.run_id = k.run_id
ORDER BY
  f.run_id NULLS LAST,
  k.kind NULLS LAST,
  k.total_ns DESC,
  k.`order` NULLS LAST,
  k.comm NULLS LAST,
  k.callsite NULLS LAST;
