-- alloc_origins: who makes the allocations: kernel stacks, callsites and subsystems, by order and class
--
-- Which code paths allocate pages, at which orders, and which of them make the
-- non-blocking high-order allocations that can claim a HighAtomic pageblock?
-- The answers of `perf kmem stat --page --caller`, bcc memleak and page_owner,
-- from a recording with kernel stacks (the atomic-origins preset, trace-cmd -T):
-- every allocation is paired with the stack recorded for it, stacks are
-- interned per run (stack_id), and each stack gets a callsite and a subsystem.
--
-- Pairing (derived table alloc_stack_ids, queries/derived_tables.py): the kernel writes
-- an event's stack after the event, on the same CPU, microseconds later. An
-- interrupt during that unwind nests its own events and stacks inside, so per
-- CPU, in time order, events and stacks match like brackets (`A B S(B) S(A)`).
-- A stack whose innermost frame is another event's trace function is not
-- taken. alloc_origins.pairing shows how many stacks and allocations paired.
--
-- callsite: the first frame, innermost first, that names a caller: outside
-- tracing, the page allocator, slab and vmalloc (lib/callsites.sql lists the
-- frames it skips); '(allocator)' when every frame is skipped (a stack cut short).
--
-- subsystem: from queries/subsystems.csv (glob -> subsystem) or the file given
-- as --param subsystems=FILE: the first frame from the callsite outward that a
-- pattern matches, the longest pattern if several do; 'other' if none.
--
-- Classes (as atomic_orders; KERNEL-ERAS.md section 3, bits from the run's
-- print_flags; lib/allocs.sql page_alloc_classes): highatomic_eligible,
-- other_nonblocking (no __GFP_DIRECT_RECLAIM), blocking, unknown (no gfp table
-- in the run).
--
-- @param era VARCHAR auto [auto|A|B] force an era instead of the one from kernel_release
-- @param alloc_class VARCHAR all [all|nonblocking|highatomic_eligible|other_nonblocking|blocking|unknown] only allocations of this class (nonblocking: the first two)
-- @param subsystems FILE subsystems.csv the function -> subsystem table (CSV: pattern,subsystem)
-- @param top_n INTEGER 0 [0..100000000] stacks per run in stacks and outstanding (0: all)
-- @param match_order BOOLEAN true outstanding: a free must have the allocation's order
-- @param root VARCHAR none [none|run|comm|class|order|subsystem] folded: a root frame above each stack
-- @param weight VARCHAR allocs [allocs|pages] folded: count allocations or pages (2^order each)
-- @requires mm_page_alloc kernel_stack
-- @derived alloc_stacks alloc_stack_ids
-- @include allocs, callsites
--
-- Caveats: an allocation made before its stack was recorded, or whose stack
-- was lost, has no stack and is counted only in alloc_origins.pairing. Events
-- lost to a ring-buffer overrun can shift the pairing of the events around the
-- loss on that CPU; a stack and an event at the same nanosecond are taken in the
-- order event, then stack. Symbols come from the kallsyms in trace.dat; an
-- address outside it shows as 0x... Frames of inlined functions do not appear
-- (the unwinder sees return addresses only). The filter of the atomic-origins preset keeps only order > 0
-- allocations without __GFP_DIRECT_RECLAIM: the blocking class is then empty.
-- Rates use the run's capture window.
--
-- Sections:
--   alloc_origins               per run and stack (this is the default section: .stacks)
--   alloc_origins.callsites     per run, callsite, order and class
--   alloc_origins.subsystems    per run, subsystem, order and class
--   alloc_origins.outstanding   pages not freed by the end of the capture, per stack
--   alloc_origins.folded        folded stacks for flame graphs (--format folded)
--   alloc_origins.pairing       per run: allocations and stacks paired, unpaired

-- @prelude
-- The function -> subsystem table; the path is a bound parameter.
CREATE TEMP TABLE subsystem_map AS
SELECT pattern, subsystem
FROM read_csv($subsystems, header = true, auto_detect = false, comment = '#',
              columns = {'pattern': 'VARCHAR', 'subsystem': 'VARCHAR'})
WHERE pattern IS NOT NULL AND pattern <> '' AND subsystem IS NOT NULL;

-- Per stack: frames as recorded, callsite (lib/callsites.sql), subsystem, and
-- the frames a flame graph shows (root first, the tracing frames at the leaf
-- end left out).
CREATE TEMP TABLE stack_origins AS
WITH marks AS (
  SELECT run_id, stack_id, coalesce(min(CASE WHEN NOT tracing THEN pos END), 1) AS first_real_pos
  FROM stack_frames
  GROUP BY run_id, stack_id
),
matches AS (
  SELECT f.run_id, f.stack_id, m.subsystem,
         row_number() OVER (PARTITION BY f.run_id, f.stack_id
                            ORDER BY f.pos, length(m.pattern) DESC, m.subsystem) AS rn
  FROM stack_frames AS f
  JOIN stack_callsites AS c ON c.run_id = f.run_id AND c.stack_id = f.stack_id AND f.pos >= c.callsite_pos
  JOIN subsystem_map AS m ON f.fn GLOB m.pattern
),
shown AS (
  SELECT f.run_id, f.stack_id, list(f.fn ORDER BY f.pos DESC) AS flame_frames
  FROM stack_frames AS f
  JOIN marks AS k ON k.run_id = f.run_id AND k.stack_id = f.stack_id AND f.pos >= k.first_real_pos
  GROUP BY f.run_id, f.stack_id
)
SELECT s.run_id, s.stack_id, s.frames, len(s.frames) AS depth,
       c.callsite,
       coalesce(m.subsystem, 'other') AS subsystem,
       coalesce(w.flame_frames, []) AS flame_frames
FROM alloc_stacks AS s
JOIN stack_callsites AS c ON c.run_id = s.run_id AND c.stack_id = s.stack_id
LEFT JOIN matches AS m ON m.run_id = s.run_id AND m.stack_id = s.stack_id AND m.rn = 1
LEFT JOIN shown AS w ON w.run_id = s.run_id AND w.stack_id = s.stack_id;

-- Every allocation of the selected class with its stack (NULL: none paired).
-- Rows pair with alloc_stack_ids by (run, ts, pfn, order) and, for the rare
-- duplicates of that key, by their rank within it.
CREATE TEMP TABLE origin_allocs AS
WITH classed AS (
  SELECT c.run_id, c.ts, c.comm, c.pfn, c."order", c.failed, c.highatomic_era, c.alloc_class,
         row_number() OVER (PARTITION BY c.run_id, c.ts, c.pfn, c."order" ORDER BY c.comm) AS k
  FROM _alloc_classes_in_era((SELECT era FROM query_params)) AS c
),
ids AS (
  SELECT run_id, ts, pfn, "order", stack_id,
         row_number() OVER (PARTITION BY run_id, ts, pfn, "order" ORDER BY cpu) AS k
  FROM alloc_stack_ids
)
SELECT a.run_id, a.ts, a.comm, a.pfn, a."order", a.failed, a.highatomic_era, a.alloc_class,
       i.stack_id
FROM classed AS a
CROSS JOIN query_params AS p
LEFT JOIN ids AS i
  ON i.run_id = a.run_id AND i.ts = a.ts AND i.pfn = a.pfn AND i."order" = a."order" AND i.k = a.k
WHERE p.alloc_class = 'all'
   OR p.alloc_class = a.alloc_class
   OR (p.alloc_class = 'nonblocking' AND a.alloc_class IN ('highatomic_eligible', 'other_nonblocking'));

-- @section stacks: per run and distinct stack: allocations by order and class, callsite, subsystem, frames
-- @columns
--   highatomic_era        text   'A' or 'B': the eligibility rule applied
--   stack_id              code   the stack within the run (1 = first seen)
--   allocs                count  mm_page_alloc events (attempts) with this stack
--   failed                count  of them, failed (pfn = -1UL)
--   pages                 pages  pages handed out: sum of 2^order over the successful ones
--   pct_of_run            %      % of the run's allocations with a stack (of the selected class)
--   orders                text   attempts per order, 'ORDER:COUNT ...', ascending
--   highatomic_eligible   count  attempts in that class
--   other_nonblocking     count  attempts in that class
--   blocking              count  attempts in that class
--   unknown               count  attempts in that class (the run has no gfp table)
--   callsite              text   the first frame outside tracing, allocator, slab and vmalloc
--   subsystem             text   from the subsystem table, 'other' if no pattern matches
--   depth                 count  frames in the stack
--   frames                list   the stack as recorded, innermost first, 'function+0xoffset'
WITH
counts AS (
  SELECT run_id, stack_id, any_value(highatomic_era) AS highatomic_era,
         count(*) AS allocs,
         count(CASE WHEN failed THEN 1 END) AS failed,
         CAST(coalesce(sum(CASE WHEN NOT failed THEN CAST(1 AS BIGINT) << "order" END), 0) AS BIGINT)
           AS pages,
         count(CASE WHEN alloc_class = 'highatomic_eligible' THEN 1 END) AS highatomic_eligible,
         count(CASE WHEN alloc_class = 'other_nonblocking' THEN 1 END) AS other_nonblocking,
         count(CASE WHEN alloc_class = 'blocking' THEN 1 END) AS blocking,
         count(CASE WHEN alloc_class = 'unknown' THEN 1 END) AS unknown
  FROM origin_allocs
  WHERE stack_id IS NOT NULL
  GROUP BY run_id, stack_id
),
per_order AS (
  SELECT run_id, stack_id,
         string_agg(CAST("order" AS VARCHAR) || ':' || CAST(n AS VARCHAR), ' ' ORDER BY "order") AS orders
  FROM (SELECT run_id, stack_id, "order", count(*) AS n
        FROM origin_allocs WHERE stack_id IS NOT NULL
        GROUP BY run_id, stack_id, "order") AS o
  GROUP BY run_id, stack_id
),
ranked AS (
  SELECT *,
         row_number() OVER (PARTITION BY run_id ORDER BY allocs DESC, stack_id) AS rank,
         100.0 * allocs / sum(allocs) OVER (PARTITION BY run_id) AS pct_of_run
  FROM counts
)
SELECT
  f.run_id,
  f.labels,
  r.highatomic_era,
  r.stack_id,
  r.allocs,
  r.failed,
  r.pages,
  r.pct_of_run,
  o.orders,
  r.highatomic_eligible,
  r.other_nonblocking,
  r.blocking,
  r.unknown,
  s.callsite,
  s.subsystem,
  s.depth,
  s.frames
FROM ranked AS r
JOIN run_facts AS f ON f.run_id = r.run_id
JOIN per_order AS o ON o.run_id = r.run_id AND o.stack_id = r.stack_id
JOIN stack_origins AS s ON s.run_id = r.run_id AND s.stack_id = r.stack_id
WHERE $top_n = 0 OR r.rank <= $top_n
ORDER BY f.run_id, r.rank

-- @section callsites: per run, callsite, order and class: allocations, stacks, share
-- @columns
--   highatomic_era        text   'A' or 'B'
--   callsite              text   as in alloc_origins.stacks
--   subsystem             text   the subsystem of the callsite's stacks (several: the most
--                                  allocations')
--   order                 order  allocation order
--   alloc_class           text   highatomic_eligible | other_nonblocking | blocking | unknown
--   allocs                count  attempts
--   failed                count  of them, failed
--   pages                 pages  pages handed out (2^order per successful attempt)
--   stacks                count  distinct stacks behind them
--   allocs_per_s          /s     attempts per second of capture
--   pct_of_run            %      % of the run's allocations with a stack (of the selected class)
WITH
joined AS (
  SELECT a.run_id, a.highatomic_era, a."order", a.alloc_class, a.failed, a.stack_id,
         s.callsite, s.subsystem
  FROM origin_allocs AS a
  JOIN stack_origins AS s ON s.run_id = a.run_id AND s.stack_id = a.stack_id
),
counts AS (
  SELECT run_id, any_value(highatomic_era) AS highatomic_era, callsite, "order", alloc_class,
         mode(subsystem) AS subsystem,
         count(*) AS allocs,
         count(CASE WHEN failed THEN 1 END) AS failed,
         CAST(coalesce(sum(CASE WHEN NOT failed THEN CAST(1 AS BIGINT) << "order" END), 0) AS BIGINT)
           AS pages,
         count(DISTINCT stack_id) AS stacks
  FROM joined
  GROUP BY run_id, callsite, "order", alloc_class
)
SELECT
  f.run_id,
  f.labels,
  c.highatomic_era,
  c.callsite,
  c.subsystem,
  c."order",
  c.alloc_class,
  c.allocs,
  c.failed,
  c.pages,
  c.stacks,
  c.allocs / f.duration_s AS allocs_per_s,
  100.0 * c.allocs / sum(c.allocs) OVER (PARTITION BY c.run_id) AS pct_of_run
FROM counts AS c
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c.allocs DESC, c.callsite, c."order", c.alloc_class

-- @section subsystems: per run, subsystem, order and class: allocations, callsites, share
-- @columns
--   highatomic_era        text   'A' or 'B'
--   subsystem             text   from the subsystem table ('other': no pattern matched)
--   order                 order  allocation order
--   alloc_class           text   highatomic_eligible | other_nonblocking | blocking | unknown
--   allocs                count  attempts
--   failed                count  of them, failed
--   pages                 pages  pages handed out (2^order per successful attempt)
--   callsites             count  distinct callsites
--   stacks                count  distinct stacks
--   top_callsite          text   the callsite with the most of these attempts
--   allocs_per_s          /s     attempts per second of capture
--   pct_of_run            %      % of the run's allocations with a stack (of the selected class)
WITH
joined AS (
  SELECT a.run_id, a.highatomic_era, a."order", a.alloc_class, a.failed, a.stack_id,
         s.callsite, s.subsystem
  FROM origin_allocs AS a
  JOIN stack_origins AS s ON s.run_id = a.run_id AND s.stack_id = a.stack_id
),
by_callsite AS (
  SELECT run_id, subsystem, "order", alloc_class, callsite, count(*) AS n
  FROM joined
  GROUP BY run_id, subsystem, "order", alloc_class, callsite
),
top AS (
  SELECT run_id, subsystem, "order", alloc_class, arg_max(callsite, n) AS top_callsite
  FROM by_callsite
  GROUP BY run_id, subsystem, "order", alloc_class
),
counts AS (
  SELECT run_id, any_value(highatomic_era) AS highatomic_era, subsystem, "order", alloc_class,
         count(*) AS allocs,
         count(CASE WHEN failed THEN 1 END) AS failed,
         CAST(coalesce(sum(CASE WHEN NOT failed THEN CAST(1 AS BIGINT) << "order" END), 0) AS BIGINT)
           AS pages,
         count(DISTINCT callsite) AS callsites,
         count(DISTINCT stack_id) AS stacks
  FROM joined
  GROUP BY run_id, subsystem, "order", alloc_class
)
SELECT
  f.run_id,
  f.labels,
  c.highatomic_era,
  c.subsystem,
  c."order",
  c.alloc_class,
  c.allocs,
  c.failed,
  c.pages,
  c.callsites,
  c.stacks,
  t.top_callsite,
  c.allocs / f.duration_s AS allocs_per_s,
  100.0 * c.allocs / sum(c.allocs) OVER (PARTITION BY c.run_id) AS pct_of_run
FROM counts AS c
JOIN top AS t ON t.run_id = c.run_id AND t.subsystem = c.subsystem AND t."order" = c."order"
             AND t.alloc_class = c.alloc_class
JOIN run_facts AS f ON f.run_id = c.run_id
ORDER BY f.run_id, c.allocs DESC, c.subsystem, c."order", c.alloc_class

-- @section outstanding: pages allocated and not freed by the end of the capture, per stack (memleak, page_owner)
-- @requires mm_page_free
-- An allocation is freed by the first mm_page_free of its pfn after it (of its
-- order too, unless match_order=false); failed attempts are left out. The page
-- may be freed after the capture ends: outstanding is "not freed while traced".
-- Blocks split and freed page by page (split_page, alloc_pages_exact) free at
-- order 0: with match_order=true they stay outstanding, with false the first
-- page's free counts for the block. A recording whose frees were filtered
-- (e.g. -e kmem:mm_page_free:'order > 0') must keep the frees of the orders
-- analysed.
-- @columns
--   stack_id              code   as in alloc_origins.stacks
--   outstanding           count  successful allocations of this stack not freed by capture end
--   outstanding_pages     pages  their pages (2^order each)
--   allocs                count  successful allocations of this stack
--   freed                 count  of them, freed during the capture
--   oldest_age_s          s      capture end minus the earliest outstanding allocation
--   median_age_s          s      median of (capture end - allocation ts) over the outstanding
--   median_lifetime_s     s      median of (free ts - allocation ts) over the freed
--   callsite              text   as in alloc_origins.stacks
--   subsystem             text   as in alloc_origins.stacks
--   frames                list   the stack, innermost first
WITH
ok AS (
  SELECT run_id, ts, pfn, "order", stack_id
  FROM origin_allocs
  WHERE stack_id IS NOT NULL AND NOT failed
),
frees AS (SELECT run_id, ts, pfn, "order" FROM mm_page_free),
same_order AS (
  SELECT a.*, f.ts AS free_ts
  FROM ok AS a
  ASOF LEFT JOIN frees AS f
    ON f.run_id = a.run_id AND f.pfn = a.pfn AND f."order" = a."order" AND f.ts > a.ts
),
any_order AS (
  SELECT a.*, f.ts AS free_ts
  FROM ok AS a
  ASOF LEFT JOIN frees AS f ON f.run_id = a.run_id AND f.pfn = a.pfn AND f.ts > a.ts
),
paired AS (
  SELECT * FROM same_order WHERE (SELECT match_order FROM query_params)
  UNION ALL
  SELECT * FROM any_order WHERE NOT (SELECT match_order FROM query_params)
),
counts AS (
  SELECT p.run_id, p.stack_id,
         count(CASE WHEN p.free_ts IS NULL THEN 1 END) AS outstanding,
         CAST(coalesce(sum(CASE WHEN p.free_ts IS NULL THEN CAST(1 AS BIGINT) << p."order" END), 0)
              AS BIGINT) AS outstanding_pages,
         count(*) AS allocs,
         count(p.free_ts) AS freed,
         (max(f.last_ts) - min(CASE WHEN p.free_ts IS NULL THEN p.ts END)) / 1e9 AS oldest_age_s,
         median(CASE WHEN p.free_ts IS NULL THEN (f.last_ts - p.ts) / 1e9 END) AS median_age_s,
         median((p.free_ts - p.ts) / 1e9) AS median_lifetime_s
  FROM paired AS p
  JOIN run_facts AS f ON f.run_id = p.run_id
  GROUP BY p.run_id, p.stack_id
),
ranked AS (
  SELECT *, row_number() OVER (PARTITION BY run_id
                               ORDER BY outstanding_pages DESC, outstanding DESC, stack_id) AS rank
  FROM counts
  WHERE outstanding > 0
)
SELECT
  f.run_id,
  f.labels,
  r.stack_id,
  r.outstanding,
  r.outstanding_pages,
  r.allocs,
  r.freed,
  r.oldest_age_s,
  r.median_age_s,
  r.median_lifetime_s,
  s.callsite,
  s.subsystem,
  s.frames
FROM ranked AS r
JOIN run_facts AS f ON f.run_id = r.run_id
JOIN stack_origins AS s ON s.run_id = r.run_id AND s.stack_id = r.stack_id
WHERE $top_n = 0 OR r.rank <= $top_n
ORDER BY f.run_id, r.rank

-- @section folded: folded stacks for flame graphs: `kmemscope query alloc_origins.folded DS --run ID --format folded`
-- One row per distinct root-first frame sequence; --format folded writes the
-- lines `frame;frame;...;frame samples` that flamegraph.pl, inferno and
-- speedscope read. Frames are function names (no offsets, no compiler
-- suffixes such as .isra.0), root first, the
-- tracing frames at the leaf end left out; characters that would break the
-- format (';', white space, control characters) become '_'. With several runs
-- pick one (--run) or give each its own root (--param root=run): otherwise the
-- runs' stacks add up.
-- @columns
--   stack                 text   frames root first, joined by ';' (root=...: that frame first)
--   samples               count  allocations (weight=allocs) or pages (weight=pages) on this stack
WITH
joined AS (
  SELECT a.run_id, a.comm, a."order", a.alloc_class, a.failed, s.subsystem, s.flame_frames
  FROM origin_allocs AS a
  JOIN stack_origins AS s ON s.run_id = a.run_id AND s.stack_id = a.stack_id
),
rooted AS (
  SELECT j.run_id,
         CASE p.root WHEN 'none' THEN j.flame_frames
                     WHEN 'run' THEN list_prepend(j.run_id, j.flame_frames)
                     WHEN 'comm' THEN list_prepend(coalesce(j.comm, '?'), j.flame_frames)
                     WHEN 'class' THEN list_prepend(j.alloc_class, j.flame_frames)
                     WHEN 'order' THEN list_prepend('order-' || CAST(j."order" AS VARCHAR), j.flame_frames)
                     ELSE list_prepend(j.subsystem, j.flame_frames) END AS frames,
         CASE WHEN p.weight = 'pages'
              THEN CASE WHEN j.failed THEN 0 ELSE CAST(1 AS BIGINT) << j."order" END
              ELSE 1 END AS w
  FROM joined AS j
  CROSS JOIN query_params AS p
),
folded AS (
  SELECT run_id,
         array_to_string(list_transform(frames, lambda x:
           coalesce(nullif(regexp_replace(x, '[[:cntrl:][:space:];]', '_', 'g'), ''), '?')), ';')
           AS stack,
         sum(w) AS samples
  FROM rooted
  GROUP BY ALL
)
SELECT f.run_id, f.labels, d.stack, CAST(d.samples AS BIGINT) AS samples
FROM folded AS d
JOIN run_facts AS f ON f.run_id = d.run_id
WHERE d.samples > 0
ORDER BY f.run_id, d.samples DESC, d.stack

-- @section pairing: per run: how many allocations got a stack and what the stacks paired with
-- @derived stack_pairing
-- @columns
--   allocs                count  mm_page_alloc events of the run (every class)
--   allocs_with_stack     count  of them, paired with a kernel stack
--   allocs_without_stack  count  of them, none (stack lost, or the capture ended first)
--   stacks                count  kernel_stack records of the run
--   stacks_alloc          count  paired with an allocation
--   stacks_other          count  paired with another traced event (e.g. mm_page_free)
--   stacks_unpaired       count  no event at their level (their event came before the capture)
--   stacks_mismatched     count  the innermost frame names another event than the allocation
--   distinct_stacks       count  stack_ids of the run
SELECT
  f.run_id,
  f.labels,
  coalesce(p.allocs, a.allocs, 0) AS allocs,
  coalesce(p.allocs_with_stack, 0) AS allocs_with_stack,
  coalesce(p.allocs, a.allocs, 0) - coalesce(p.allocs_with_stack, 0) AS allocs_without_stack,
  coalesce(p.stacks, 0) AS stacks,
  coalesce(p.stacks_alloc, 0) AS stacks_alloc,
  coalesce(p.stacks_other, 0) AS stacks_other,
  coalesce(p.stacks_unpaired, 0) AS stacks_unpaired,
  coalesce(p.stacks_mismatched, 0) AS stacks_mismatched,
  coalesce(d.n, 0) AS distinct_stacks
FROM run_facts AS f
LEFT JOIN stack_pairing AS p ON p.run_id = f.run_id
LEFT JOIN (SELECT run_id, count(*) AS allocs FROM mm_page_alloc GROUP BY run_id) AS a
  ON a.run_id = f.run_id
LEFT JOIN (SELECT run_id, count(*) AS n FROM alloc_stacks GROUP BY run_id) AS d
  ON d.run_id = f.run_id
ORDER BY f.run_id
