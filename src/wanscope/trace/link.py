"""Post-ingest linking shared by every source format.

After all files are ingested, ``finish`` computes what depends on the whole database:
the nesting of host ranges (``cpu_ops.id``, ``parent_id``, ``depth``), the host process
of GPU work whose source records only the correlation id (Kineto), and the ``steps``.
"""

from __future__ import annotations

import duckdb
import numpy as np


def _ordered_key(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is NULL, value) of a fetched column: NULLs sort last, as SQL's default."""
    if isinstance(a, np.ma.MaskedArray):
        return np.ma.getmaskarray(a), a.filled(0)
    return np.zeros(len(a), bool), a


def nest(rank, pid, tid, start, end) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nesting of host ranges by time on each thread.

    Args:
        rank, pid, tid: int64 [n] (pid, tid may be masked where NULL); start, end: int64 [n], ns.

    Returns:
        (id, parent, depth), aligned with the inputs: ``id`` is the position in the order
        (rank, pid, tid, start, end descending); ``parent`` the id of the innermost
        enclosing range on the same thread, -1 at the top; ``depth`` 0 at the top.

    A range's depth is the number of ranges open on its thread when it starts: those that
    started before it in the order above, less those that ended by then. At equal times
    an end comes before a start (adjacent ranges are siblings), except the end of a
    zero-length range, which comes after the starts at its instant. The parent is the last
    range before it in the order one level up (the one still open). Everything is sorting
    and binary search (numpy): O(n log n), no per-range Python.
    """
    n = len(start)
    pid_null, pid_v = _ordered_key(pid)
    tid_null, tid_v = _ordered_key(tid)
    order = np.lexsort((-end, start, tid_v, tid_null, pid_v, pid_null, rank))
    s, e = start[order], end[order]
    new_thread = np.zeros(n, bool)
    new_thread[:1] = True
    for col in (rank, pid_null, pid_v, tid_null, tid_v):
        c = col[order]
        new_thread[1:] |= c[1:] != c[:-1]
    thread = np.cumsum(new_thread) - 1
    first = np.flatnonzero(new_thread)[thread]  # position of the thread's first range
    pos = np.arange(n)
    # Times as dense ranks (so thread * span + 2 * rank + flag cannot overflow int64).
    times, ranked = np.unique(np.concatenate((s, e)), return_inverse=True)
    span = 2 * len(times) + 2
    ends = np.sort(thread * span + 2 * ranked[n:] + (e == s))
    ended = np.searchsorted(ends, thread * span + 2 * ranked[:n] + 1) - first
    depth = np.maximum(pos - first - ended, 0)
    by_depth = np.sort(depth * n + pos)
    up = (depth - 1) * n
    at = np.searchsorted(by_depth, up + pos) - 1
    cand = by_depth[np.maximum(at, 0)] - up
    found = (depth > 0) & (at >= 0) & (cand >= 0) & (cand < pos)
    cand = np.where(found, cand, 0)
    found &= thread[cand] == thread
    ids = np.empty(n, np.int64)
    ids[order] = pos
    parent = np.empty(n, np.int64)
    parent[order] = np.where(found, cand, -1)
    out_depth = np.empty(n, np.int32)
    out_depth[order] = depth
    return ids, parent, out_depth


def _nest_cpu_ops(con: duckdb.DuckDBPyConnection) -> None:
    cols = con.execute("SELECT rowid AS rid, rank, pid, tid, start_ns, end_ns FROM cpu_ops").fetchnumpy()
    if not len(cols["rid"]):
        return
    ids, parent, depth = nest(cols["rank"], cols["pid"], cols["tid"], cols["start_ns"], cols["end_ns"])
    con.register("_nesting", {"rid": cols["rid"], "id": ids, "parent": parent, "depth": depth})
    try:
        con.execute("""UPDATE cpu_ops SET id = n.id, parent_id = nullif(n.parent, -1), depth = n.depth
                       FROM _nesting n WHERE cpu_ops.rowid = n.rid""")
    finally:
        con.unregister("_nesting")


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
    _nest_cpu_ops(con)
    con.execute(_LINK_PID_SQL)
    con.execute(_STEPS_SQL)
