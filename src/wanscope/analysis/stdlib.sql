-- The SQL definitions the analyses build on (docs/sql.md; the definitions themselves:
-- docs/design.md, "Definitions"), as DuckDB macros over the canonical tables (schema.sql).
-- wanscope creates them as TEMP macros on every connection it opens (analysis/stdlib.py), so
-- `analyze`, `wanscope query` and the Python API's Trace.sql call the same SQL.
-- Each macro's comment block names it with its parameters, says what it returns, then lists
-- its parameters and its output columns, each line "name TYPE unit: description" as
-- schema.sql's columns; `wanscope schema` prints the columns.
-- Step bounds: the parameters step_from and step_to select the steps with
-- step_from <= step < step_to (half-open, as --step-range A:B). A NULL bound is open; both
-- NULL (the default) is the whole trace, no step selected. Step numbers are never negative,
-- so step_from 0 selects every step.
-- Created before this file, from the rule table categories.csv: the scalar macro
-- kernel_category(name), a kernel name's category (docs/design.md, "Categories").

-- overlaps_steps(rank, pid, start_ns, end_ns, step_from, step_to)
-- Scalar: whether the host interval start_ns..end_ns of process pid of rank overlaps the CPU
-- range of a selected step of the same process (ends included); TRUE for every interval when
-- both bounds are NULL.
-- Parameters:
--   rank INTEGER          -: distributed rank of the interval
--   pid BIGINT            -: its host process
--   start_ns BIGINT       ns: its start on the host
--   end_ns BIGINT         ns: its end on the host
--   step_from INTEGER     -: the first step selected, NULL for no lower bound
--   step_to INTEGER       -: the step after the last one selected, NULL for no upper bound
CREATE OR REPLACE TEMP MACRO overlaps_steps(rank, pid, start_ns, end_ns, step_from, step_to) AS
  (step_from IS NULL AND step_to IS NULL)
  OR EXISTS (
    SELECT 1 FROM steps _s
    WHERE _s.rank = rank AND _s.pid = pid AND start_ns <= _s.end_ns AND end_ns >= _s.start_ns
      AND (step_from IS NULL OR _s.step >= step_from) AND (step_to IS NULL OR _s.step < step_to));

-- gpu_activity(step_from, step_to)
-- Every GPU activity record, one row each: the kernels, memcpys and memsets with valid times
-- (ingest dropped the others and counted them in ingest_warnings). With step bounds, only the
-- records launched inside the CPU range of a selected step, where a record's launch is the API
-- call with the same correlation id in the same process.
-- Parameters:
--   step_from INTEGER     -: the first step selected, NULL (default) for no lower bound
--   step_to INTEGER       -: the step after the last one selected, NULL (default) for no upper bound
-- Columns:
--   rank INTEGER          -: distributed rank
--   device INTEGER        -: GPU index
--   stream BIGINT         -: CUDA stream id
--   start_ns BIGINT       ns: start on the GPU
--   end_ns BIGINT         ns: end on the GPU
--   dur_ns BIGINT         ns: end_ns - start_ns
--   name VARCHAR          -: name as recorded (kernels demangled)
--   kind VARCHAR          -: kernel, memcpy or memset
--   correlation BIGINT    -: CUPTI correlation id, shared with the launching API call
--   pid BIGINT            -: host process that launched it
--   category VARCHAR      -: kernel_category(name) for a kernel; memcpy_<copy kind> (memcpy_HtoD, ...; memcpy_unknown without one) or memset for a memory operation
CREATE OR REPLACE TEMP MACRO gpu_activity(step_from := NULL, step_to := NULL) AS TABLE
  -- A kernel's category depends on its name only: classified once per distinct name.
  WITH _ops AS (
    SELECT k.rank, k.device, k.stream, k.start_ns, k.end_ns, k.dur_ns, k.name, 'kernel' AS kind,
           k.correlation, k.pid, coalesce(c.category, 'other') AS category
    FROM kernels k
    LEFT JOIN (SELECT name, kernel_category(name) AS category FROM (SELECT DISTINCT name FROM kernels)) c
      ON c.name = k.name
    UNION ALL
    SELECT rank, device, stream, start_ns, end_ns, dur_ns, name, kind, correlation, pid,
           CASE WHEN kind = 'memcpy' THEN 'memcpy_' || coalesce(copy_kind, 'unknown') ELSE 'memset' END
    FROM memops)
  SELECT * FROM _ops a
  -- Without bounds the subquery's side is empty (constant-false filter): nothing to join.
  WHERE (step_from IS NULL AND step_to IS NULL)
     OR EXISTS (
       SELECT 1 FROM api_calls c JOIN steps s ON s.rank = c.rank AND s.pid = c.pid
         AND c.start_ns BETWEEN s.start_ns AND s.end_ns
       WHERE NOT (step_from IS NULL AND step_to IS NULL)
         AND c.rank = a.rank AND c.pid = a.pid AND c.correlation = a.correlation
         AND (step_from IS NULL OR s.step >= step_from) AND (step_to IS NULL OR s.step < step_to));

-- step_gpu(step_from, step_to)
-- Each step's two intervals (docs/design.md, "Step"), one row per step range: its CPU interval
-- (the range itself) and its GPU interval, from the first start to the last end of the GPU
-- activity launched inside the CPU range. Every step without bounds; with them, the selected.
-- Parameters:
--   step_from INTEGER     -: the first step listed, NULL (default) for no lower bound
--   step_to INTEGER       -: the step after the last one listed, NULL (default) for no upper bound
-- Columns:
--   rank INTEGER          -: distributed rank
--   step INTEGER          -: step number from the range name
--   pid BIGINT            -: host process
--   tid BIGINT            -: host thread that ran the step
--   cpu_start_ns BIGINT   ns: CPU range start
--   cpu_end_ns BIGINT     ns: CPU range end
--   gpu_start_ns BIGINT   ns: start of the GPU interval (NULL when the step launched no GPU work)
--   gpu_end_ns BIGINT     ns: end of the GPU interval (NULL when the step launched no GPU work)
--   gpu_ops BIGINT        count: GPU activity records launched inside the CPU range
CREATE OR REPLACE TEMP MACRO step_gpu(step_from := NULL, step_to := NULL) AS TABLE
  SELECT s.rank, s.step, s.pid, s.tid, s.start_ns AS cpu_start_ns, s.end_ns AS cpu_end_ns,
         min(a.start_ns) AS gpu_start_ns, max(a.end_ns) AS gpu_end_ns, count(a.start_ns) AS gpu_ops
  FROM steps s
  LEFT JOIN api_calls c ON c.rank = s.rank AND c.pid = s.pid AND c.start_ns BETWEEN s.start_ns AND s.end_ns
  LEFT JOIN gpu_activity() a ON a.rank = c.rank AND a.pid = c.pid AND a.correlation = c.correlation
  WHERE (step_from IS NULL OR s.step >= step_from) AND (step_to IS NULL OR s.step < step_to)
  GROUP BY ALL;

-- gpu_windows(step_from, step_to)
-- The window of each (rank, device) with GPU activity in scope (docs/design.md, "Window"):
-- without bounds, from its first activity start to its last activity end; with them, the union
-- of the selected steps' GPU intervals, each taken on the devices that ran activity of the
-- steps inside it.
-- Parameters:
--   step_from INTEGER     -: the first step selected, NULL (default) for no lower bound
--   step_to INTEGER       -: the step after the last one selected, NULL (default) for no upper bound
-- Columns:
--   rank INTEGER          -: distributed rank
--   device INTEGER        -: GPU index
--   window_start_ns BIGINT ns: start of the window
--   window_end_ns BIGINT  ns: end of the window
--   window_ns BIGINT      ns: length of the window (without bounds window_end_ns - window_start_ns; with them the length of the union, which leaves out the time between steps)
CREATE OR REPLACE TEMP MACRO gpu_windows(step_from := NULL, step_to := NULL) AS TABLE
  SELECT rank, device, min(start_ns) AS window_start_ns, max(end_ns) AS window_end_ns,
         max(end_ns) - min(start_ns) AS window_ns
  FROM gpu_activity() WHERE step_from IS NULL AND step_to IS NULL GROUP BY ALL
  UNION ALL
  SELECT rank, device, min(lo), max(hi), sum(hi - lo)::BIGINT FROM (
    -- the union of the steps' intervals: an interval starting after every earlier one ended
    -- begins a new part
    SELECT rank, device, min(lo) AS lo, max(hi) AS hi FROM (
      SELECT *, sum(CASE WHEN prev_hi IS NULL OR lo > prev_hi THEN 1 ELSE 0 END)
                  OVER (PARTITION BY rank, device ORDER BY lo, hi ROWS UNBOUNDED PRECEDING) AS part
      FROM (
        SELECT *, max(hi) OVER (PARTITION BY rank, device ORDER BY lo, hi
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_hi
        FROM (
          SELECT DISTINCT a.rank, a.device, s.gpu_start_ns AS lo, s.gpu_end_ns AS hi
          FROM step_gpu(step_from, step_to) s
          JOIN gpu_activity(step_from, step_to) a
            ON a.rank = s.rank AND a.start_ns >= s.gpu_start_ns AND a.end_ns <= s.gpu_end_ns)))
    GROUP BY rank, device, part)
  WHERE NOT (step_from IS NULL AND step_to IS NULL)
  GROUP BY ALL;

-- busy_islands(step_from, step_to)
-- The union over all streams of each device's GPU activity in scope (docs/design.md, "Busy and
-- utilization"), as its maximal intervals, the islands: overlapping and touching intervals, on
-- any stream, share an island. Busy time is the sum of the islands' dur_ns.
-- Parameters:
--   step_from INTEGER     -: the first step selected, NULL (default) for no lower bound
--   step_to INTEGER       -: the step after the last one selected, NULL (default) for no upper bound
-- Columns:
--   rank INTEGER          -: distributed rank
--   device INTEGER        -: GPU index
--   island BIGINT         -: number of the island on its device, from 1 in time order
--   start_ns BIGINT       ns: start of the island's first activity
--   end_ns BIGINT         ns: the latest end of its activity
--   dur_ns BIGINT         ns: end_ns - start_ns
--   ops BIGINT            count: activity records in the island
CREATE OR REPLACE TEMP MACRO busy_islands(step_from := NULL, step_to := NULL) AS TABLE
  -- Only the times go through the window passes (with the names they are several times slower).
  SELECT rank, device, island::BIGINT AS island, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
         max(end_ns) - min(start_ns) AS dur_ns, count(*) AS ops
  FROM (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                OVER (PARTITION BY rank, device ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM (
      SELECT rank, device, start_ns, end_ns,
             max(end_ns) OVER (PARTITION BY rank, device ORDER BY start_ns, end_ns
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
      FROM gpu_activity(step_from, step_to)))
  GROUP BY rank, device, island;

-- idle_gaps(step_from, step_to)
-- The holes between consecutive busy islands of each device (docs/design.md, "Idle gap"), of
-- any length. A gap ends where the next island starts; the ops that start then end it.
-- Parameters:
--   step_from INTEGER     -: the first step selected, NULL (default) for no lower bound
--   step_to INTEGER       -: the step after the last one selected, NULL (default) for no upper bound
-- Columns:
--   rank INTEGER          -: distributed rank
--   device INTEGER        -: GPU index
--   start_ns BIGINT       ns: end of the island before the gap
--   end_ns BIGINT         ns: start of the island after it
--   dur_ns BIGINT         ns: end_ns - start_ns, never 0
--   next_island BIGINT    -: busy_islands' number of the island after the gap
CREATE OR REPLACE TEMP MACRO idle_gaps(step_from := NULL, step_to := NULL) AS TABLE
  SELECT rank, device, start_ns, end_ns, end_ns - start_ns AS dur_ns, next_island FROM (
    SELECT rank, device, end_ns AS start_ns, lead(start_ns) OVER w AS end_ns, lead(island) OVER w AS next_island
    FROM busy_islands(step_from, step_to) WINDOW w AS (PARTITION BY rank, device ORDER BY island))
  WHERE next_island IS NOT NULL;
