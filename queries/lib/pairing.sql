-- lib/pairing: begin/end pairing: a task's begin and end events of one kind paired into intervals.
-- include: (none)
-- internal: _begin_end_pairs

-- Begin/end pairing (KERNEL-ERAS.md section 1), the one place it is done: compaction
-- runs (lib/compaction.sql), direct reclaim (stalls) and memcg-limit reclaim
-- (vmstat_trace) pair their events here. `bounds` names a table or CTE of one kind of
-- interval's events, each row with run_id, pid, ts and is_begin (1: a begin, 0: an end)
-- besides what its caller reads. A task's events are ordered by ts, a begin before an
-- end at the same ts; an end pairs with the event before it when that is a begin. One
-- row per pair and per half whose other half is not in the capture:
--   run_id, pid  the task
--   begin_row    the begin's row of `bounds`, as a struct (NULL: no_begin)
--   end_row      the end's row (NULL: no_end)
--   pairing      'paired'; 'no_begin', an end whose begin came before the capture (or
--                was lost); 'no_end', a begin whose end came after it
CREATE TEMP MACRO _begin_end_pairs(bounds) AS TABLE
WITH ordered AS (
  SELECT b.run_id, b.pid, b.is_begin, b AS row_,
         lag(b.is_begin) OVER w AS prev_is_begin,
         lag(b) OVER w AS prev_row,
         lead(b.is_begin) OVER w AS next_is_begin
  FROM query_table(bounds) AS b
  WINDOW w AS (PARTITION BY b.run_id, b.pid ORDER BY b.ts, b.is_begin DESC)
)
SELECT run_id, pid,
       CASE WHEN prev_is_begin = 1 THEN prev_row END AS begin_row,
       row_ AS end_row,
       CASE WHEN prev_is_begin = 1 THEN 'paired' ELSE 'no_begin' END AS pairing
FROM ordered
WHERE is_begin = 0
UNION ALL
SELECT run_id, pid, row_ AS begin_row, NULL AS end_row, 'no_end' AS pairing
FROM ordered
WHERE is_begin = 1 AND coalesce(next_is_begin, 1) = 1;
