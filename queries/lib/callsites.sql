-- lib/callsites: the callsite of each allocation stack: the first frame outside tracing, allocator, slab and vmalloc.
-- include: (none)
-- derived: alloc_stacks
-- views: frame_skip, stack_frames, stack_callsites

-- The frames that name no caller, as globs over the function name (offset and
-- compiler suffixes such as .isra.0 removed), by kind:
--   tracing      trace_event_raw_event_* ftrace_raw_event_* perf_trace_*
--                trace_event_buffer_* trace_buffer_unlock_commit* __ftrace_trace_stack
--                ftrace_* __trace_stack stack_trace_save* arch_stack_walk
--   allocator    __alloc_pages* alloc_pages* __alloc_frozen_pages* alloc_frozen_pages*
--                get_page_from_freelist rmqueue* __rmqueue* __get_free_pages*
--                get_zeroed_page* __folio_alloc* folio_alloc* alloc_pages_exact*
--                __alloc_pages_bulk* alloc_page_interleave alloc_pages_preferred_many
--                vma_alloc_folio*
--   slab         kmalloc* __kmalloc* ___kmalloc* kmem_cache_alloc* __kmem_cache_alloc*
--                allocate_slab new_slab ___slab_alloc __slab_alloc* slab_alloc*
--                alloc_slab_page alloc_slab_obj_exts __memcg_slab_post_alloc_hook
--                memcg_slab_post_alloc_hook kvmalloc* __kvmalloc* kvzalloc* kzalloc*
--                krealloc* __krealloc* kvrealloc* kmemdup*
--   vmalloc      __vmalloc* vmalloc* vzalloc* vm_area_alloc_pages
-- @columns
--   pattern   text   a GLOB pattern over function names
--   kind      text   tracing, allocator, slab or vmalloc
CREATE TEMP TABLE frame_skip AS
SELECT * FROM (VALUES
  ('trace_event_raw_event_*', 'tracing'), ('ftrace_raw_event_*', 'tracing'),
  ('perf_trace_*', 'tracing'), ('trace_event_buffer_*', 'tracing'),
  ('trace_buffer_unlock_commit*', 'tracing'), ('__ftrace_trace_stack', 'tracing'),
  ('ftrace_*', 'tracing'), ('__trace_stack', 'tracing'), ('stack_trace_save*', 'tracing'),
  ('arch_stack_walk', 'tracing'),
  ('__alloc_pages*', 'allocator'), ('alloc_pages*', 'allocator'),
  ('__alloc_frozen_pages*', 'allocator'), ('alloc_frozen_pages*', 'allocator'),
  ('get_page_from_freelist', 'allocator'), ('rmqueue*', 'allocator'), ('__rmqueue*', 'allocator'),
  ('__get_free_pages*', 'allocator'), ('get_zeroed_page*', 'allocator'),
  ('__folio_alloc*', 'allocator'), ('folio_alloc*', 'allocator'),
  ('alloc_pages_exact*', 'allocator'), ('__alloc_pages_bulk*', 'allocator'),
  ('alloc_page_interleave', 'allocator'), ('alloc_pages_preferred_many', 'allocator'),
  ('vma_alloc_folio*', 'allocator'),
  ('kmalloc*', 'slab'), ('__kmalloc*', 'slab'), ('___kmalloc*', 'slab'),
  ('kmem_cache_alloc*', 'slab'), ('__kmem_cache_alloc*', 'slab'), ('allocate_slab', 'slab'),
  ('new_slab', 'slab'), ('___slab_alloc', 'slab'), ('__slab_alloc*', 'slab'),
  ('slab_alloc*', 'slab'), ('alloc_slab_page', 'slab'), ('alloc_slab_obj_exts', 'slab'),
  ('__memcg_slab_post_alloc_hook', 'slab'), ('memcg_slab_post_alloc_hook', 'slab'),
  ('kvmalloc*', 'slab'), ('__kvmalloc*', 'slab'), ('kvzalloc*', 'slab'), ('kzalloc*', 'slab'),
  ('krealloc*', 'slab'), ('__krealloc*', 'slab'), ('kvrealloc*', 'slab'), ('kmemdup*', 'slab'),
  ('__vmalloc*', 'vmalloc'), ('vmalloc*', 'vmalloc'), ('vzalloc*', 'vmalloc'),
  ('vm_area_alloc_pages', 'vmalloc')
) AS t(pattern, kind);

-- Every frame of every interned allocation stack (derived table alloc_stacks),
-- innermost first, with the function it names and whether frame_skip skips it.
-- @columns
--   run_id     text   the run
--   stack_id   code   the stack within the run (alloc_stacks)
--   pos        rank   the frame's place in the stack, 1 = innermost
--   frame      text   as recorded, 'function+0xoffset'
--   fn         text   the function alone: offset and compiler suffixes (.isra.0, .cold, ...)
--                     removed
--   skipped    bool   a frame_skip pattern matches fn: the frame names no caller
--   tracing    bool   a frame_skip pattern of kind tracing matches fn (the tracer's own frames)
CREATE TEMP TABLE stack_frames AS
WITH f AS (
  SELECT run_id, stack_id, unnest(range(1, len(frames) + 1)) AS pos, unnest(frames) AS frame
  FROM alloc_stacks
),
named AS (
  SELECT run_id, stack_id, pos, frame,
         regexp_replace(regexp_replace(frame, '[+]0x[0-9a-f]+$', ''),
                        '([.](isra|part|constprop|cold|llvm|lto_priv)([.][0-9]+)?)+$', '') AS fn
  FROM f
)
SELECT n.run_id, n.stack_id, n.pos, n.frame, n.fn,
       count(k.pattern) > 0 AS skipped,
       count(CASE WHEN k.kind = 'tracing' THEN 1 END) > 0 AS tracing
FROM named AS n
LEFT JOIN frame_skip AS k ON n.fn GLOB k.pattern
GROUP BY n.run_id, n.stack_id, n.pos, n.frame, n.fn;

-- The callsite of each interned allocation stack that has frames: the first
-- frame, innermost first, that frame_skip does not skip; '(allocator)' when it
-- skips every frame (a stack cut short).
-- @columns
--   run_id         text   the run
--   stack_id       code   the stack within the run (alloc_stacks)
--   callsite_pos   rank   the callsite frame's pos in stack_frames (NULL: '(allocator)')
--   callsite       text   the callsite's function name
CREATE TEMP TABLE stack_callsites AS
WITH first_kept AS (
  SELECT run_id, stack_id, min(CASE WHEN NOT skipped THEN pos END) AS callsite_pos
  FROM stack_frames
  GROUP BY run_id, stack_id
)
SELECT k.run_id, k.stack_id, k.callsite_pos, coalesce(f.fn, '(allocator)') AS callsite
FROM first_kept AS k
LEFT JOIN stack_frames AS f
  ON f.run_id = k.run_id AND f.stack_id = k.stack_id AND f.pos = k.callsite_pos;
