"""Memory from PyTorch's memory events (``memory_events``: torch.profiler's
``profile_memory=True``, ``wanscope profile --memory``), per (rank, device), the CPU as device
-1.

- ``peak_allocated_bytes``: the largest ``total_allocated`` the allocator reported after an
  event; ``peak_ns`` the first time it was reached. ``peak_reserved_bytes``: the largest
  ``total_reserved`` (the caching allocator's segments; on the CPU, as PyTorch reports it).
- ``timeline``: ``TIMELINE_POINTS`` or fewer (time, allocated, reserved) points: the window
  cut in equal intervals, each interval's point at its highest allocated total (so the peak
  is on the timeline).
- ``at_peak``: the blocks live at the peak (allocated at or before ``peak_ns``, not freed by
  then: an allocation's free is the next event with its address on its device), by the
  outermost aten op that allocated them on their thread (``(no op)`` for an allocation outside
  any op), largest first: ``name``, ``bytes``, ``blocks``. The top ``top`` rows, then ``other``.
  What an event allocated (> 0) or freed (< 0) is the change in ``total_allocated`` since the
  device's previous event, in the trace's order (the events' own ``Bytes`` are not ingested:
  ``trace/kineto.py``); a device's first event, which has no previous one, takes the size its
  free gives, and is left out where it has none.
"""

from __future__ import annotations

TIMELINE_POINTS = 200

_LIVE_AT_PEAK_SQL = """
WITH d AS (
  SELECT *, rowid AS seq, total_allocated::HUGEINT - lag(total_allocated) OVER (ORDER BY ts_ns, rowid) AS bytes
  FROM memory_events WHERE rank = $rank AND device = $device
), e AS (
  SELECT *, lead(bytes) OVER w AS next_bytes, lead(ts_ns) OVER w AS next_ns
  FROM d WINDOW w AS (PARTITION BY addr ORDER BY ts_ns, seq)
), live AS (
  SELECT row_number() OVER () AS i, pid, tid, ts_ns, coalesce(bytes, -least(next_bytes, 0)) AS bytes FROM e
  WHERE coalesce(bytes, -least(next_bytes, 0)) > 0 AND ts_ns <= $peak
    AND NOT (coalesce(next_bytes, 0) < 0 AND next_ns <= $peak)
), named AS (
  SELECT l.bytes, arg_min(o.name, o.start_ns) AS op
  FROM live l
  LEFT JOIN cpu_ops o ON o.rank = $rank AND o.pid = l.pid AND o.tid = l.tid AND o.kind = 'op'
                     AND o.start_ns <= l.ts_ns AND l.ts_ns <= o.end_ns
  GROUP BY l.i, l.bytes
)
SELECT coalesce(op, '(no op)'), sum(bytes), count(*) FROM named GROUP BY 1 ORDER BY 2 DESC, 1
"""


def memory(con, top: int = 10) -> list[dict]:
    """One entry per (rank, device) with memory events, by rank then device (fields above;
    bytes and ns). Empty for a trace without them."""
    out = []
    rows = con.execute(
        """SELECT rank, device, count(*), max(total_allocated), arg_min(ts_ns, (-total_allocated, ts_ns)),
                  max(total_reserved), min(ts_ns), max(ts_ns)
           FROM memory_events GROUP BY ALL ORDER BY rank, device"""
    ).fetchall()
    for rank, device, n, peak, peak_ns, reserved, first, last in rows:
        out.append(
            {
                "rank": rank,
                "device": device,
                "events": n,
                "peak_allocated_bytes": peak,
                "peak_ns": peak_ns,
                "peak_reserved_bytes": reserved,
                "timeline": _timeline(con, rank, device, first, last),
                "at_peak": _at_peak(con, rank, device, peak_ns, top),
            }
        )
    return out


def _timeline(con, rank: int, device: int, first: int, last: int) -> list[list[int]]:
    width = max(1, -(-(last - first + 1) // TIMELINE_POINTS))
    return [
        list(r)
        for r in con.execute(
            """SELECT arg_max(ts_ns, (total_allocated, -ts_ns)), max(total_allocated),
                      arg_max(total_reserved, (total_allocated, -ts_ns))
               FROM memory_events WHERE rank = $rank AND device = $device
               GROUP BY (ts_ns - $first) // $width ORDER BY 1""",
            {"rank": rank, "device": device, "first": first, "width": width},
        ).fetchall()
    ]


def _at_peak(con, rank: int, device: int, peak_ns: int, top: int) -> list[dict]:
    rows = con.execute(_LIVE_AT_PEAK_SQL, {"rank": rank, "device": device, "peak": peak_ns}).fetchall()
    out = [{"name": name, "bytes": int(b), "blocks": n} for name, b, n in rows[:top]]
    rest = rows[top:]
    if rest:
        out.append({"name": "other", "bytes": int(sum(r[1] for r in rest)), "blocks": sum(r[2] for r in rest)})
    return out
