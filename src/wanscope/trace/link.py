"""Post-ingest linking shared by every source format.

After all files are ingested, ``finish`` computes what depends on the whole database:
the nesting of host ranges (``cpu_ops.id``, ``parent_id``, ``depth``), the host process
of GPU work whose source records only the correlation id (Kineto), and the ``steps``.
"""

from __future__ import annotations

import duckdb

# Host ranges nest by time on one thread. A sweep over start (+1) and end (-1) events
# gives each op's depth; at equal times ends come before starts (adjacent ops are
# siblings), longer ops start before shorter ones, and a zero-length op's own end comes
# after its start. The parent is then the latest-starting op one level up (ASOF join).
_NEST_SQL = """
CREATE OR REPLACE TEMP TABLE _ops AS
SELECT row_number() OVER (ORDER BY rank, pid, tid, start_ns, end_ns DESC) - 1 AS id,
       * EXCLUDE (id, parent_id, depth)
FROM cpu_ops;

CREATE OR REPLACE TEMP TABLE _depth AS
WITH ev AS (
  SELECT id, rank, pid, tid, start_ns AS t, 1 AS typ, -end_ns AS k, 1 AS delta FROM _ops
  UNION ALL
  SELECT id, rank, pid, tid, end_ns AS t, CASE WHEN dur_ns = 0 THEN 2 ELSE 0 END AS typ, -start_ns AS k, -1 AS delta FROM _ops
), run AS (
  SELECT id, typ, sum(delta) OVER (PARTITION BY rank, pid, tid ORDER BY t, typ, k, id
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS level
  FROM ev
)
SELECT id, greatest(level - 1, 0)::INTEGER AS depth FROM run WHERE typ = 1;

CREATE OR REPLACE TEMP TABLE _nested AS
SELECT o.*, d.depth FROM _ops o JOIN _depth d USING (id);

DELETE FROM cpu_ops;
INSERT INTO cpu_ops
SELECT c.id, p.id, c.depth, c.kind, c.name, c.rank, c.pid, c.tid, c.start_ns, c.end_ns, c.dur_ns,
       c.external_id, c.input_dims
FROM _nested c
ASOF LEFT JOIN _nested p
  ON c.rank = p.rank AND c.pid = p.pid AND c.tid = p.tid AND p.depth = c.depth - 1
 AND c.start_ns >= p.start_ns;
DROP TABLE _ops; DROP TABLE _depth; DROP TABLE _nested;
"""

_LINK_PID_SQL = """
CREATE OR REPLACE TEMP TABLE _launch AS
SELECT rank, correlation, min(pid) AS pid FROM api_calls WHERE correlation IS NOT NULL GROUP BY ALL;
UPDATE kernels SET pid = l.pid FROM _launch l
 WHERE kernels.pid IS NULL AND kernels.rank = l.rank AND kernels.correlation = l.correlation;
UPDATE memops SET pid = l.pid FROM _launch l
 WHERE memops.pid IS NULL AND memops.rank = l.rank AND memops.correlation = l.correlation;
UPDATE cuda_syncs SET pid = l.pid FROM _launch l
 WHERE cuda_syncs.pid IS NULL AND cuda_syncs.rank = l.rank AND cuda_syncs.correlation = l.correlation;
DROP TABLE _launch;
"""

# Our own step ranges win over the profiler's; never both (DESIGN.md, "Step").
_STEPS_SQL = """
INSERT INTO steps
WITH ours AS (
  SELECT rank, try_cast(regexp_extract(name, '^wanscope/step#(\\d+)$', 1) AS INTEGER) AS step, name, pid, tid, start_ns, end_ns
  FROM cpu_ops WHERE name LIKE 'wanscope/step#%'
), prof AS (
  SELECT rank, try_cast(regexp_extract(name, '^ProfilerStep#(\\d+)$', 1) AS INTEGER) AS step, name, pid, tid, start_ns, end_ns
  FROM cpu_ops WHERE name LIKE 'ProfilerStep#%' AND kind <> 'python'
)
SELECT * FROM ours WHERE step IS NOT NULL
UNION ALL
SELECT * FROM prof WHERE step IS NOT NULL AND rank NOT IN (SELECT rank FROM ours WHERE step IS NOT NULL)
ORDER BY rank, start_ns;
"""


def finish(con: duckdb.DuckDBPyConnection) -> None:
    """Compute nesting, launch links and steps once every source is in ``con``."""
    con.execute(_NEST_SQL)
    con.execute(_LINK_PID_SQL)
    con.execute(_STEPS_SQL)
