"""GPU timeline data: activity per (rank, device, stream) as segments for plotting.

Long traces hold far more ops than a page can draw; ops are merged per stream and category
into segments no shorter than ``window x streams / max_segments``, so that a device's
timeline has about ``max_segments`` segments per category however many streams it has, and
the picture stays exact at the resolution it is drawn. Inside the ``detail`` intervals (the
views around the report's listed idle gaps) every op is a segment of its own, and no merged
segment reaches across one, so that zoomed in there the gaps between ops show. The query is
one pass and one group-by over the activity: the intervals enter as expressions, not a join.
"""

from __future__ import annotations

from wanscope.analysis.scope import Scope


def timeline_segments(con, scope: Scope, max_segments: int = 20_000, detail=()) -> list[dict]:
    """Rows ``rank``, ``device``, ``stream``, ``category``, ``start_ns``, ``end_ns``,
    ``ops`` (ops merged into the segment), ``name`` (the longest op in it), times relative
    to the device's window start. ``detail``: (rank, device, start_ns, end_ns) intervals,
    absolute, whose ops are not merged."""
    views = [tuple(int(x) for x in v) for v in detail]
    inside = " OR ".join(f"(rank = {r} AND device = {d} AND end_ns >= {a} AND start_ns <= {b})" for r, d, a, b in views)
    # which stretch between the views an op starts in: ops on either side of a view never merge
    after = " + ".join(f"(rank = {r} AND device = {d} AND start_ns > {b})::BIGINT" for r, d, a, b in views)
    sql = f"""
    WITH streams AS (
      SELECT rank, device, count(DISTINCT stream) AS n FROM gpu_activity({scope.args}) GROUP BY rank, device),
    sized AS (
      SELECT a.*, w.window_start_ns,
             greatest(w.window_ns * s.n // {int(max_segments)}, 1) AS quantum
      FROM gpu_activity({scope.args}) a JOIN gpu_windows({scope.args}) w USING (rank, device)
      JOIN streams s USING (rank, device)),
    binned AS (
      SELECT *, CASE WHEN {inside or "false"} THEN -1 - (start_ns - window_start_ns)
                     ELSE ((start_ns - window_start_ns) // quantum) * {len(views) + 1} + ({after or "0"}) END AS bin
      FROM sized)
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
