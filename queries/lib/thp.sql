-- lib/thp: THP faults from the trace and their success.
-- include: allocs, vmstat
-- views: thp_fault_attempts, thp_fault_success, thp_fault_unsure
-- internal: _thp_gfp, _thp_orders, _thp_order_allocs

-- THP faults from the trace (KERNEL-ERAS.md sections 1, 2, 6). There is no
-- THP-fault event: a fault is one or two mm_page_alloc attempts at the PMD huge
-- page order whose gfp_flags hold every bit of GFP_TRANSHUGE_LIGHT (value from
-- the run's own print_flags table). On NUMA kernels the first attempt adds
-- __GFP_THISNODE | __GFP_NORETRY (local node, compaction only); if it fails and
-- the mask allows direct reclaim, the same task retries at once without them.
CREATE TEMP VIEW _thp_gfp AS
SELECT
  run_id,
  max(CASE WHEN name = 'GFP_TRANSHUGE_LIGHT' THEN value END) AS transhuge_light,
  max(CASE WHEN name = '__GFP_THISNODE' AND (value & (value - 1)) = 0 THEN value END) AS gfp_thisnode,
  max(CASE WHEN name = '__GFP_DIRECT_RECLAIM' AND (value & (value - 1)) = 0 THEN value END)
    AS gfp_direct_reclaim
FROM print_flags
WHERE event = 'mm_page_alloc' AND field = 'gfp_flags' AND kind = 'flags' AND value > 0
GROUP BY run_id;

-- The PMD huge page order per run. The data tells it first: the kernel adds
-- __GFP_THISNODE to a THP-mask allocation only at HPAGE_PMD_ORDER, so the order
-- such attempts are made at is that order. Else the run's pageblock_order
-- (equal to HPAGE_PMD_ORDER wherever pageblocks are huge-page sized, section 5).
-- The views below read _thp_orders by name: thp's thp_order parameter replaces
-- it for that analysis, and they follow.
CREATE TEMP VIEW _thp_orders AS
WITH seen AS (
  SELECT a.run_id, a."order", count(*) AS n
  FROM mm_page_alloc AS a
  JOIN _thp_gfp AS g ON g.run_id = a.run_id
  WHERE g.transhuge_light IS NOT NULL AND g.gfp_thisnode IS NOT NULL AND a."order" > 0
    AND (a.gfp_flags & g.transhuge_light) = g.transhuge_light
    AND (a.gfp_flags & g.gfp_thisnode) <> 0
  GROUP BY a.run_id, a."order"
),
best AS (
  SELECT run_id, arg_max("order", n) AS "order" FROM seen GROUP BY run_id
)
SELECT f.run_id,
       CAST(coalesce(b."order", f.pageblock_order) AS INTEGER) AS thp_order,
       CASE WHEN b."order" IS NOT NULL THEN 'trace: order of __GFP_THISNODE THP attempts'
            ELSE 'pageblock_order (' || f.pageblock_order_source || ')' END AS thp_order_source
FROM run_facts AS f
LEFT JOIN best AS b ON b.run_id = f.run_id;

-- Every allocation at the run's THP order, classified by who asked:
--   fault        THP mask, any task but khugepaged (anonymous THP faults; also
--                MADV_COLLAPSE and huge shmem pages, which share the mask)
--   khugepaged   THP mask from khugepaged (collapses: not faults)
--   other        any other mask (page-cache large folios, hugetlb pages, drivers)
--   unknown      the run's print_flags carry no GFP_TRANSHUGE_LIGHT
-- thisnode_try: the first, local-node attempt; may_reclaim: direct reclaim allowed.
CREATE TEMP VIEW _thp_order_allocs AS
SELECT
  a.run_id, a.ts, a.pid, a.comm, a.gfp_flags, a.failed, o.thp_order,
  CASE WHEN g.transhuge_light IS NULL THEN 'unknown'
       WHEN (a.gfp_flags & g.transhuge_light) <> g.transhuge_light THEN 'other'
       WHEN a.comm = 'khugepaged' THEN 'khugepaged'
       ELSE 'fault' END AS kind,
  coalesce((a.gfp_flags & g.gfp_thisnode) <> 0, false) AS thisnode_try,
  coalesce((a.gfp_flags & g.gfp_direct_reclaim) <> 0, false) AS may_reclaim
FROM page_allocs AS a
JOIN _thp_orders AS o ON o.run_id = a.run_id AND a."order" = o.thp_order
LEFT JOIN _thp_gfp AS g ON g.run_id = a.run_id;

-- THP fault attempts with the retry marked: an attempt without __GFP_THISNODE
-- right after a failed __GFP_THISNODE attempt of the same task that allowed
-- direct reclaim is the second half of the same fault. A fault succeeded iff
-- one of its attempts did, so faults = attempts - retries, successes = attempts
-- that got a page. Failures equal vmstat's thp_fault_fallback (without memcg
-- charge failures). Successes can exceed thp_fault_alloc, which 6.18 counts
-- when the huge page is mapped, not when it is allocated: two threads of one
-- process faulting the same 2 MiB at once both allocate a huge page; the one
-- that takes the page-table lock second finds the PMD mapped and frees its
-- page. Its allocation is a success in the trace and no fault in vmstat. The
-- trace cannot tell it apart: its only marks (the task frees the page-table
-- page it allocated, then the huge page, before it allocates again) are those
-- of a task that maps a huge page and unmaps it without allocating in between.
-- @columns
--   run_id         text   the run
--   ts             ns     the mm_page_alloc at the THP order
--   pid            code   the faulting task
--   comm           text   its command name
--   gfp_flags      flags  the allocation's gfp mask
--   failed         bool   no huge page was handed out
--   thp_order      order  the run's PMD huge page order
--   kind           text   'fault' (the only kind this view keeps)
--   thisnode_try   bool   the first, local-node attempt (__GFP_THISNODE)
--   may_reclaim    bool   direct reclaim allowed (__GFP_DIRECT_RECLAIM)
--   is_retry       bool   the second attempt of a fault whose first failed
CREATE TEMP VIEW thp_fault_attempts AS
SELECT
  *,
  coalesce(NOT thisnode_try
           AND lag(thisnode_try) OVER w AND lag(failed) OVER w AND lag(may_reclaim) OVER w,
           false) AS is_retry
FROM _thp_order_allocs
WHERE kind = 'fault'
WINDOW w AS (PARTITION BY run_id, pid ORDER BY ts);

-- THP fault success per run (section 6), the one place it is computed:
-- vmstat_pct = thp_fault_alloc / (thp_fault_alloc + thp_fault_fallback);
-- vmstat_alloc_pct leaves memcg charge failures out of the fallbacks;
-- trace_pct = faults that got a huge page / faults (thp_fault_attempts inside
-- trace_windows). success_pct is vmstat's when the run's samples give it, else
-- the trace's; source says which ('vmstat', 'trace', NULL: neither).
-- @columns
--   run_id                      text   the run
--   thp_fault_alloc             count  vmstat thp_fault_alloc over the capture (NULL: no samples)
--   thp_fault_fallback          count  vmstat thp_fault_fallback over the capture
--   thp_fault_fallback_charge   count  vmstat thp_fault_fallback_charge (memcg charge failures)
--   vmstat_pct                  %      100 * thp_fault_alloc / (alloc + fallback)
--   vmstat_alloc_pct            %      the same without the memcg charge failures
--   trace_faults                count  faults in the trace inside trace_windows
--   trace_retries               count  their second attempts
--   trace_successes             count  faults that got a huge page
--   trace_pct                   %      100 * trace_successes / trace_faults
--   success_pct                 %      vmstat_pct when the run's samples give it, else trace_pct
--   source                      text   'vmstat', 'trace' or NULL (neither gives a value)
CREATE TEMP VIEW thp_fault_success AS
WITH
vm AS (
  SELECT
    run_id,
    _vmstat_delta('thp_fault_alloc', name, delta) AS thp_fault_alloc,
    _vmstat_delta('thp_fault_fallback', name, delta) AS thp_fault_fallback,
    _vmstat_delta('thp_fault_fallback_charge', name, delta) AS thp_fault_fallback_charge
  FROM vmstat_deltas
  GROUP BY run_id
),
tr AS (
  SELECT a.run_id,
         count(CASE WHEN NOT a.is_retry THEN 1 END) AS faults,
         count(CASE WHEN a.is_retry THEN 1 END) AS retries,
         count(CASE WHEN NOT a.failed THEN 1 END) AS successes
  FROM thp_fault_attempts AS a
  JOIN trace_windows AS w ON w.run_id = a.run_id
  WHERE w.lo IS NULL OR a.ts BETWEEN w.lo AND w.hi
  GROUP BY a.run_id
),
rates AS (
  SELECT
    f.run_id,
    v.thp_fault_alloc,
    v.thp_fault_fallback,
    v.thp_fault_fallback_charge,
    100.0 * v.thp_fault_alloc / nullif(v.thp_fault_alloc + v.thp_fault_fallback, 0) AS vmstat_pct,
    100.0 * v.thp_fault_alloc
      / nullif(v.thp_fault_alloc + v.thp_fault_fallback - coalesce(v.thp_fault_fallback_charge, 0), 0)
      AS vmstat_alloc_pct,
    coalesce(t.faults, 0) AS trace_faults,
    coalesce(t.retries, 0) AS trace_retries,
    coalesce(t.successes, 0) AS trace_successes,
    100.0 * t.successes / nullif(t.faults, 0) AS trace_pct
  FROM run_facts AS f
  LEFT JOIN vm AS v ON v.run_id = f.run_id
  LEFT JOIN tr AS t ON t.run_id = f.run_id
)
SELECT * FROM _prefer_vmstat(rates);

-- THP fault successes the trace cannot tell from allocations vmstat counts as no
-- fault, per run (section 6): the huge page of a task that lost the race to map
-- the same 2 MiB, of a memcg charge failure (vmstat: a fallback) or of a fault
-- whose page-table page could not be had are all freed by the same task right
-- away, before it allocates again; so is the page of a task that maps it and
-- unmaps it at once. A success is unsure when the task's next allocation or free
-- at the THP order (the events recorded) is the free of that page; when the run
-- recorded no mm_page_free events, every success is. Each unsure success could
-- be one thp_fault_alloc fewer, and one thp_fault_fallback more (a charge failure).
--
-- The capture's edges, where a run is counted over the whole capture (no vmstat
-- window): vmstat counts a fault when it is mapped, after its allocation. A task
-- that was between the two when the capture began is a fault vmstat counts and
-- the trace never saw (one per faulting task at most: start_edge, either
-- counter's count could be that much higher); a task whose last recorded event
-- is its fault attempt may have been mapped, or counted as a fallback, only
-- after the capture ended (end_edge_*: that counter's count could be that much
-- lower). Inside a vmstat window the trace sees across both edges: 0 there.
-- @columns
--   run_id              text   the run
--   frees_recorded      bool   the run recorded mm_page_free
--   unsure              count  successful fault attempts that may not be faults vmstat counts
--                              as thp_fault_alloc (inside trace_windows)
--   start_edge          count  faults that may have begun before the capture (tasks that fault
--                              in it; 0 for runs counted inside a vmstat window)
--   end_edge_successes  count  successes that are their task's last recorded event (0 inside a
--                              vmstat window)
--   end_edge_failures   count  failed attempts that are their task's last recorded event (0
--                              inside a vmstat window)
CREATE TEMP VIEW thp_fault_unsure AS
WITH
recorded AS (
  SELECT DISTINCT run_id FROM event_tables WHERE event = 'mm_page_free'
),
successes AS (
  SELECT a.run_id, a.pid, a.ts, p.pfn
  FROM thp_fault_attempts AS a
  JOIN page_allocs AS p ON p.run_id = a.run_id AND p.pid = a.pid AND p.ts = a.ts
   AND p."order" = a.thp_order AND NOT p.failed
  JOIN trace_windows AS w ON w.run_id = a.run_id
  WHERE NOT a.failed AND (w.lo IS NULL OR a.ts BETWEEN w.lo AND w.hi)
),
tasks AS (SELECT DISTINCT run_id, pid FROM successes),
ev AS (
  SELECT a.run_id, a.pid, a.ts, 0 AS is_free, a.pfn
  FROM page_allocs AS a JOIN tasks AS t ON t.run_id = a.run_id AND t.pid = a.pid
  UNION ALL
  SELECT f.run_id, f.pid, f.ts, 1, f.pfn
  FROM mm_page_free AS f
  JOIN tasks AS t ON t.run_id = f.run_id AND t.pid = f.pid
  JOIN _thp_orders AS o ON o.run_id = f.run_id AND f."order" = o.thp_order
),
nexts AS (
  SELECT run_id, pid, ts, is_free, pfn,
         lead(is_free) OVER w AS next_is_free, lead(pfn) OVER w AS next_pfn
  FROM ev
  WINDOW w AS (PARTITION BY run_id, pid ORDER BY ts, is_free)
),
unsure AS (
  SELECT s.run_id, count(*) AS n
  FROM successes AS s
  JOIN nexts AS x ON x.run_id = s.run_id AND x.pid = s.pid AND x.ts = s.ts AND x.is_free = 0
   AND x.pfn = s.pfn
  LEFT JOIN recorded AS r ON r.run_id = s.run_id
  WHERE r.run_id IS NULL OR (x.next_is_free = 1 AND x.next_pfn = s.pfn)
  GROUP BY s.run_id
),
-- the capture's edges (runs without a vmstat window only)
capture_faults AS (
  SELECT a.run_id, a.pid, a.ts, a.failed
  FROM thp_fault_attempts AS a
  JOIN trace_windows AS w ON w.run_id = a.run_id
  WHERE w.lo IS NULL
),
faulting AS (SELECT DISTINCT run_id, pid FROM capture_faults),
last_events AS (
  SELECT e.run_id, e.pid, max(e.ts) AS ts
  FROM (SELECT a.run_id, a.pid, a.ts FROM page_allocs AS a
        JOIN faulting AS t ON t.run_id = a.run_id AND t.pid = a.pid
        UNION ALL
        SELECT f.run_id, f.pid, f.ts FROM mm_page_free AS f
        JOIN faulting AS t ON t.run_id = f.run_id AND t.pid = f.pid) AS e
  GROUP BY e.run_id, e.pid
),
edges AS (
  SELECT c.run_id, count(DISTINCT c.pid) AS start_edge,
         count(CASE WHEN c.ts = l.ts AND NOT c.failed THEN 1 END) AS end_successes,
         count(CASE WHEN c.ts = l.ts AND c.failed THEN 1 END) AS end_failures
  FROM capture_faults AS c
  JOIN last_events AS l ON l.run_id = c.run_id AND l.pid = c.pid
  GROUP BY c.run_id
)
SELECT f.run_id, r.run_id IS NOT NULL AS frees_recorded, coalesce(u.n, 0) AS unsure,
       coalesce(e.start_edge, 0) AS start_edge, coalesce(e.end_successes, 0) AS end_edge_successes,
       coalesce(e.end_failures, 0) AS end_edge_failures
FROM run_facts AS f
LEFT JOIN recorded AS r ON r.run_id = f.run_id
LEFT JOIN unsure AS u ON u.run_id = f.run_id
LEFT JOIN edges AS e ON e.run_id = f.run_id;
