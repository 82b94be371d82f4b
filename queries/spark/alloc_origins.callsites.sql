-- alloc_origins.callsites: Spark SQL written by tools/spark_golden.py (sqlglot 30.30.0, uint64 as decimal); do not edit
-- regenerate: python tools/spark_golden.py --write

-- TEMPORARY TABLE (a cached DataFrame) frame_skip
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

-- TEMPORARY TABLE (a cached DataFrame) subsystem_map
SELECT
  pattern,
  subsystem
FROM _file_subsystems
WHERE
  NOT pattern IS NULL AND pattern <> '' AND NOT subsystem IS NULL;

-- TEMPORARY TABLE (a cached DataFrame) stack_frames
WITH f AS (
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
    frame,
    REGEXP_REPLACE(
      REGEXP_REPLACE(frame, '[+]0x[0-9a-f]+$', ''),
      '([.](isra|part|constprop|cold|llvm|lto_priv)([.][0-9]+)?)+$',
      ''
    ) AS fn
  FROM f
)
SELECT
  n.run_id,
  n.stack_id,
  n.pos,
  n.frame,
  n.fn,
  COUNT(k.pattern) > 0 AS skipped,
  COUNT(CASE WHEN k.kind = 'tracing' THEN 1 END) > 0 AS tracing
FROM named AS n
LEFT JOIN frame_skip AS k
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
  n.frame,
  n.fn;

-- TEMPORARY TABLE (a cached DataFrame) stack_origins
WITH marks AS (
  SELECT
    run_id,
    stack_id,
    MIN(CASE WHEN NOT skipped THEN pos END) AS callsite_pos,
    COALESCE(MIN(CASE WHEN NOT tracing THEN pos END), 1) AS first_real_pos
  FROM stack_frames
  GROUP BY
    run_id,
    stack_id
), matches AS (
  SELECT
    f.run_id,
    f.stack_id,
    m.subsystem,
    ROW_NUMBER() OVER (
      PARTITION BY f.run_id, f.stack_id
      ORDER BY f.pos NULLS LAST, LENGTH(m.pattern) DESC, m.subsystem NULLS LAST
    ) AS rn
  FROM stack_frames AS f
  JOIN marks AS k
    ON k.run_id = f.run_id AND k.stack_id = f.stack_id AND f.pos >= k.callsite_pos
  JOIN subsystem_map AS m
    ON f.fn RLIKE CONCAT(
      '(?s)^',
      REPLACE(
        REPLACE(
          REPLACE(REGEXP_REPLACE(m.pattern, '([.+^$(){}|\\\\])', '\\\\$1'), '*', '.*'),
          '?',
          '.'
        ),
        '[!',
        '[^'
      ),
      '$'
    )
), shown AS (
  SELECT
    f.run_id,
    f.stack_id,
    TRANSFORM(SORT_ARRAY(COLLECT_LIST(NAMED_STRUCT('k0', f.pos, 'v', f.fn)), FALSE), e -> e.v) AS flame_frames
  FROM stack_frames AS f
  JOIN marks AS k
    ON k.run_id = f.run_id AND k.stack_id = f.stack_id AND f.pos >= k.first_real_pos
  GROUP BY
    f.run_id,
    f.stack_id
)
SELECT
  s.run_id,
  s.stack_id,
  s.frames,
  SIZE(s.frames) AS depth,
  COALESCE(c.fn, '(allocator)') AS callsite,
  COALESCE(m.subsystem, 'other') AS subsystem,
  COALESCE(w.flame_frames, ARRAY()) AS flame_frames
FROM alloc_stacks AS s
JOIN marks AS k
  ON k.run_id = s.run_id AND k.stack_id = s.stack_id
LEFT JOIN stack_frames AS c
  ON c.run_id = s.run_id AND c.stack_id = s.stack_id AND c.pos = k.callsite_pos
LEFT JOIN matches AS m
  ON m.run_id = s.run_id AND m.stack_id = s.stack_id AND m.rn = 1
LEFT JOIN shown AS w
  ON w.run_id = s.run_id AND w.stack_id = s.stack_id;

-- TEMPORARY TABLE (a cached DataFrame) origin_allocs
WITH classed AS (
  SELECT
    c.run_id,
    c.ts,
    c.comm,
    c.pfn,
    c.`order`,
    c.failed,
    CASE WHEN p.era = 'auto' THEN c.run_era ELSE p.era END AS highatomic_era,
    CASE
      WHEN NOT c.has_gfp_table
      THEN 'unknown'
      WHEN (
        CASE
          WHEN COALESCE(NULLIF(p.era, 'auto'), c.run_era) = 'A'
          THEN c.eligible_era_a
          ELSE c.eligible_era_b
        END
      )
      THEN 'highatomic_eligible'
      WHEN NOT c.blocking
      THEN 'other_nonblocking'
      ELSE 'blocking'
    END AS alloc_class,
    ROW_NUMBER() OVER (PARTITION BY c.run_id, c.ts, c.pfn, c.`order` ORDER BY c.comm NULLS LAST) AS k
  FROM page_alloc_classes AS c
  CROSS JOIN query_params AS p
), ids AS (
  SELECT
    run_id,
    ts,
    pfn,
    `order`,
    stack_id,
    ROW_NUMBER() OVER (PARTITION BY run_id, ts, pfn, `order` ORDER BY cpu NULLS LAST) AS k
  FROM alloc_stack_ids
)
SELECT
  a.run_id,
  a.ts,
  a.comm,
  a.pfn,
  a.`order`,
  a.failed,
  a.highatomic_era,
  a.alloc_class,
  i.stack_id
FROM classed AS a
CROSS JOIN query_params AS p
LEFT JOIN ids AS i
  ON i.run_id = a.run_id
  AND i.ts = a.ts
  AND i.pfn = a.pfn
  AND i.`order` = a.`order`
  AND i.k = a.k
WHERE
  p.alloc_class = 'all'
  OR p.alloc_class = a.alloc_class
  OR (
    p.alloc_class = 'nonblocking'
    AND a.alloc_class IN ('highatomic_eligible', 'other_nonblocking')
  );

WITH joined AS (
  SELECT
    a.run_id,
    a.highatomic_era,
    a.`order`,
    a.alloc_class,
    a.failed,
    a.stack_id,
    s.callsite,
    s.subsystem
  FROM origin_allocs AS a
  JOIN stack_origins AS s
    ON s.run_id = a.run_id AND s.stack_id = a.stack_id
), counts AS (
  SELECT
    run_id,
    ANY_VALUE(highatomic_era) IGNORE NULLS AS highatomic_era,
    callsite,
    `order`,
    alloc_class,
    MODE(subsystem) AS subsystem,
    COUNT(*) AS allocs,
    COUNT(CASE WHEN failed THEN 1 END) AS failed,
    CAST(COALESCE(SUM(CASE WHEN NOT failed THEN SHIFTLEFT(CAST(1 AS BIGINT), `order`) END), 0) AS BIGINT) AS pages,
    COUNT(DISTINCT stack_id) AS stacks
  FROM joined
  GROUP BY
    run_id,
    callsite,
    `order`,
    alloc_class
)
SELECT
  f.run_id,
  f.labels,
  c.highatomic_era,
  c.callsite,
  c.subsystem,
  c.`order`,
  c.alloc_class,
  c.allocs,
  c.failed,
  c.pages,
  c.stacks,
  c.allocs / f.duration_s AS allocs_per_s,
  CAST(100.0 AS DOUBLE) * c.allocs / SUM(c.allocs) OVER (PARTITION BY c.run_id) AS pct_of_run
FROM counts AS c
JOIN run_facts AS f
  ON f.run_id = c.run_id
ORDER BY
  f.run_id NULLS LAST,
  c.allocs DESC,
  c.callsite NULLS LAST,
  c.`order` NULLS LAST,
  c.alloc_class NULLS LAST;
