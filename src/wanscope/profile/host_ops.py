"""Host time of the profiled steps by operator: where the CPU's time goes, GPU or not.

Each outermost aten op inside a step range (one not nested in another aten op on its thread)
counts once with its inclusive host time, so the rows partition the host time spent in aten
ops without double counting; what remains of the steps' time is Python and launch overhead
outside any aten op. On a CPU run this is where the step's time goes; on a GPU run it is the
host side only (the GPU side is in the kernel tables). Nsight Systems exports have no aten ops.
"""

from __future__ import annotations

HOST_OPS_SQL = """
WITH aten AS (
  SELECT o.rank, o.pid, o.tid, o.name, o.start_ns, o.end_ns, o.dur_ns, o.depth
  FROM cpu_ops o JOIN steps s
    ON o.rank = s.rank AND o.pid = s.pid AND o.tid = s.tid AND o.start_ns >= s.start_ns AND o.end_ns <= s.end_ns
  WHERE o.kind = 'op' AND o.name LIKE 'aten::%'),
marked AS (
  -- host ranges nest, so an op lies inside an earlier-starting aten op iff one of those ends no earlier
  SELECT *, max(end_ns) OVER (PARTITION BY rank, pid, tid ORDER BY start_ns, end_ns DESC, depth
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS enclosing_end
  FROM aten)
SELECT name, count(*) AS count, sum(dur_ns) AS total_ns
FROM marked WHERE enclosing_end IS NULL OR enclosing_end < end_ns
GROUP BY name ORDER BY total_ns DESC, name
"""


def host_ops(con, top: int = 10) -> dict:
    """Host time of the steps by outermost aten op.

    Returns:
        ``step_time_ns`` (sum of the steps' CPU ranges), ``aten_time_ns`` (sum over outermost
        aten ops), ``ops``: the ``top`` ops by time, then an ``other`` row with the rest, each
        ``name``, ``count``, ``total_ns`` (inclusive host time) and ``pct`` (share of
        ``step_time_ns``).
    """
    step_time = con.execute("SELECT coalesce(sum(end_ns - start_ns), 0) FROM steps").fetchone()[0]
    rows = con.execute(HOST_OPS_SQL).fetchall()

    def row(name, count, total):
        return {
            "name": name,
            "count": int(count),
            "total_ns": int(total),
            "pct": 100 * total / step_time if step_time else None,
        }

    ops = [row(*r) for r in rows[:top]]
    rest = rows[top:]
    if rest:
        ops.append(row("other", sum(r[1] for r in rest), sum(r[2] for r in rest)))
    return {"step_time_ns": int(step_time), "aten_time_ns": int(sum(r[2] for r in rows)), "ops": ops}
