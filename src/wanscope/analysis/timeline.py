"""GPU timeline data: activity per (rank, device, stream) as segments for plotting.

Long traces hold far more ops than a page can draw; ops are merged per stream and
category into segments no shorter than ``window / max_segments`` (a pixel's worth), so
the picture stays exact at the resolution it is drawn. Inside the ``detail`` intervals (the
views around the report's listed idle gaps) every op is a segment of its own, so that zoomed
in there the gaps between ops show.
"""

from __future__ import annotations

from wanscope.analysis.scope import Scope


def timeline_segments(con, scope: Scope, max_segments: int = 20_000, detail=()) -> list[dict]:
    """Rows ``rank``, ``device``, ``stream``, ``category``, ``start_ns``, ``end_ns``,
    ``ops`` (ops merged into the segment), ``name`` (the longest op in it), times relative
    to the device's window start. ``detail``: (rank, device, start_ns, end_ns) intervals,
    absolute, whose ops are not merged."""
    values = ", ".join(f"({int(r)}, {int(d)}, {int(a)}, {int(b)})" for r, d, a, b in detail)
    detail_sql = f"(VALUES {values}) v(rank, device, a, b)" if values else "(SELECT 0, 0, 0, -1) v(rank, device, a, b)"
    sql = f"""
    WITH sized AS (
      SELECT a.*, w.window_start_ns, greatest(w.window_ns // {int(max_segments)}, 1) AS quantum,
             row_number() OVER () AS seq
      FROM gpu_activity({scope.args}) a JOIN gpu_windows({scope.args}) w USING (rank, device)),
    detailed AS (
      SELECT DISTINCT s.seq FROM sized s JOIN {detail_sql}
        ON s.rank = v.rank AND s.device = v.device AND s.end_ns >= v.a AND s.start_ns <= v.b),
    binned AS (
      SELECT s.*, CASE WHEN d.seq IS NULL THEN (start_ns - window_start_ns) // quantum ELSE -s.seq END AS bin
      FROM sized s LEFT JOIN detailed d USING (seq))
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
