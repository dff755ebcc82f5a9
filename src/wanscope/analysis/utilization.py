"""Window, busy time and utilization per (rank, device).

Busy is the union over all streams of a device of its GPU activity intervals, so
utilization = busy / window never exceeds 100%. Kernel-only busy time (the union of
kernel intervals alone) and the plain sum of kernel durations are reported beside it.
"""

from __future__ import annotations

from wanscope.analysis.scope import Scope


def device_utilization(con, scope: Scope) -> list[dict]:
    """One dict per (rank, device): ``window_ns``, ``busy_ns``, ``kernel_busy_ns``,
    ``utilization_pct``, ``kernel_count``, ``kernel_time_ns``, ``memop_count``,
    ``memop_time_ns`` (all times in ns)."""
    sql = f"""
    WITH activity AS (FROM gpu_activity({scope.args})),
    busy AS (SELECT rank, device, sum(dur_ns) AS busy_ns FROM busy_islands({scope.args}) GROUP BY ALL),
    _k AS (
      SELECT rank, device, start_ns, end_ns,
             max(end_ns) OVER (PARTITION BY rank, device ORDER BY start_ns, end_ns
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
      FROM activity WHERE kind = 'kernel'),
    kbusy AS (
      SELECT rank, device, sum(greatest(end_ns - greatest(start_ns, coalesce(prev_end, start_ns)), 0)) AS kernel_busy_ns
      FROM _k GROUP BY ALL),
    counts AS (
      SELECT rank, device,
             count(*) FILTER (kind = 'kernel') AS kernel_count,
             coalesce(sum(dur_ns) FILTER (kind = 'kernel'), 0) AS kernel_time_ns,
             count(*) FILTER (kind <> 'kernel') AS memop_count,
             coalesce(sum(dur_ns) FILTER (kind <> 'kernel'), 0) AS memop_time_ns
      FROM activity GROUP BY ALL)
    SELECT w.rank, w.device, w.window_start_ns, w.window_end_ns, w.window_ns, b.busy_ns,
           coalesce(k.kernel_busy_ns, 0), c.kernel_count, c.kernel_time_ns, c.memop_count, c.memop_time_ns
    FROM gpu_windows({scope.args}) w JOIN busy b USING (rank, device) JOIN counts c USING (rank, device)
    LEFT JOIN kbusy k USING (rank, device)
    ORDER BY w.rank, w.device
    """
    out = []
    for r in con.execute(sql).fetchall():
        rank, device, w0, w1, window, busy, kbusy, kc, kt, mc, mt = r
        out.append(
            {
                "rank": rank,
                "device": device,
                "window_start_ns": int(w0),
                "window_end_ns": int(w1),
                "window_ns": int(window),
                "busy_ns": int(busy),
                "kernel_busy_ns": int(kbusy),
                "utilization_pct": round(100.0 * busy / window, 4) if window else None,
                "kernel_count": kc,
                "kernel_time_ns": int(kt),
                "memop_count": mc,
                "memop_time_ns": int(mt),
            }
        )
    return out
