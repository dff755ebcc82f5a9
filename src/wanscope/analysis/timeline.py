"""GPU timeline data: activity per (rank, device, stream) as segments for plotting.

Long traces hold far more ops than a page can draw; ops are merged per stream and
category into segments no shorter than ``window / max_segments`` (a pixel's worth), so
the picture stays exact at the resolution it is drawn.
"""

from __future__ import annotations

from wanscope.analysis.scope import Scope


def timeline_segments(con, scope: Scope, max_segments: int = 20_000) -> list[dict]:
    """Rows ``rank``, ``device``, ``stream``, ``category``, ``start_ns``, ``end_ns``,
    ``ops`` (ops merged into the segment), ``name`` (the longest op in it), times relative
    to the device's window start."""
    sql = f"""
    WITH sized AS (
      SELECT a.*, w.window_start_ns, greatest(w.window_ns // {int(max_segments)}, 1) AS quantum
      FROM gpu_activity({scope.args}) a JOIN gpu_windows({scope.args}) w USING (rank, device)),
    binned AS (
      SELECT *, (start_ns - window_start_ns) // quantum AS bin FROM sized)
    SELECT rank, device, stream, category,
           min(start_ns) - any_value(window_start_ns), max(end_ns) - any_value(window_start_ns),
           count(*), arg_max(name, dur_ns)
    FROM binned GROUP BY rank, device, stream, category, bin
    ORDER BY rank, device, stream, 5
    """
    return [
        {
            "rank": r,
            "device": d,
            "stream": s,
            "category": c,
            "start_ns": int(a),
            "end_ns": int(b),
            "ops": n,
            "name": name,
        }
        for r, d, s, c, a, b, n, name in con.execute(sql).fetchall()
    ]
