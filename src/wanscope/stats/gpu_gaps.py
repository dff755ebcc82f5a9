"""``gpu_gaps`` (an ``nsys analyze`` rule): the longest times a GPU sat idle.

NVIDIA's definition: per process and device, the holes in the union of its GPU
operations (``gpu_ops``: kernels, memory operations and unavoidable profiler overhead),
from the first operation's start to the last one's end; a hole counts when it lasts
strictly longer than ``gap_ms``; the largest ``rows`` holes by duration (then start),
with the process, device and CUDA context. Defaults as NVIDIA's: 500 ms, 50 rows.

Differences from our ``analyze`` gaps: those are per device over all processes, use no
threshold but ``--min-gap-ns``, and name the op that ends each gap. NVIDIA's query cuts
to ``rows`` before sorting when there are more gaps than that; we sort first (the
documented intent), which differs only when more than ``rows`` gaps pass the threshold.
"""

from __future__ import annotations

from wanscope.stats.gpu_ops import CONTEXT_SQL, OPS_SQL, require_activity
from wanscope.stats.report import Report, limit_sql

COLUMNS = ["Row#", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"]
DEFAULT_GAP_MS = 500
DEFAULT_ROWS = 50


def gpu_gaps(con, gap_ms: int = DEFAULT_GAP_MS, rows: int = DEFAULT_ROWS) -> Report:
    """Args: gap_ms: minimum gap, ms (a gap must be longer); rows: at most this many
    rows, 0 for all. Raises NoDataError when no GPU activity was captured."""
    require_activity(con)
    limit = limit_sql(rows)
    result = con.execute(
        f"""
        WITH ops AS ({OPS_SQL}),
        ordered AS (
            SELECT *, max(end_ns) OVER (PARTITION BY rank, pid, device ORDER BY start_ns, end_ns
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until
            FROM ops
        ),
        gaps AS (
            SELECT rank, pid, device, busy_until AS gap_start, start_ns - busy_until AS duration
            FROM ordered WHERE start_ns - busy_until > ?
        )
        SELECT row_number() OVER (ORDER BY duration DESC, gap_start, pid, device), duration, gap_start, g.pid, g.device, c.context
        FROM gaps AS g LEFT JOIN ({CONTEXT_SQL}) AS c USING (rank, pid, device)
        ORDER BY 1 {limit}
        """,
        [int(gap_ms) * 1_000_000],
    ).fetchall()
    return Report("gpu_gaps", COLUMNS, result, f"no GPU was idle for more than {gap_ms} ms")
