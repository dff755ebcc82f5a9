"""``gpu_time_util`` (an ``nsys analyze`` rule): time chunks where a GPU was mostly idle.

NVIDIA's definition: per process and device, the span from the first GPU operation's
start to the last one's end (``gpu_ops``) is cut into ``chunks`` equal chunks of
``ceil(span / chunks)`` ns (the last one is clipped to the span, and dropped when it
would start after the end). A chunk's in-use percentage is the summed overlap of the
operations with it over its length: overlapping operations on several streams add up,
so it can pass 100%. Chunks below ``threshold`` % are reported, consecutive ones merged
into one row whose percentage is the length-weighted mean, rounded to 0.1; rows by
percentage, then duration. Defaults as NVIDIA's: 50%, 30 chunks, 50 rows.

Differences from our ``analyze`` utilization: that one is one number per device over
all processes, from the union of intervals (never above 100%), over the whole window.
"""

from __future__ import annotations

from wanscope.errors import UsageError
from wanscope.stats.gpu_ops import CONTEXT_SQL, OPS_SQL, require_activity
from wanscope.stats.report import Report, limit_sql

COLUMNS = ["Row#", "In-Use (%)", "Duration (ns)", "Start (ns)", "PID", "Device ID", "Context ID"]
DEFAULT_THRESHOLD_PCT = 50
DEFAULT_CHUNKS = 30
DEFAULT_ROWS = 50


def gpu_time_util(
    con, threshold: int = DEFAULT_THRESHOLD_PCT, chunks: int = DEFAULT_CHUNKS, rows: int = DEFAULT_ROWS
) -> Report:
    """Args: threshold: report chunks below this in-use %; chunks: 1 to 1000; rows: at
    most this many rows, 0 for all.

    Raises:
        UsageError: chunks out of range.
        NoDataError: no GPU activity captured.
    """
    if not 1 <= chunks <= 1000:
        raise UsageError(f"--chunks must be between 1 and 1000, not {chunks}")
    require_activity(con)
    limit = limit_sql(rows)
    result = con.execute(
        f"""
        WITH ops AS ({OPS_SQL}),
        span AS (
            SELECT rank, pid, device, min(start_ns) AS first_start, max(end_ns) AS last_end,
                   ceil((max(end_ns) - min(start_ns))::DOUBLE / $chunks) AS size
            FROM ops GROUP BY ALL
        ),
        chunk AS (
            SELECT * FROM (
                SELECT rank, pid, device, i, first_start + i * size AS c_start,
                       least(first_start + i * size + size, last_end) AS c_end
                FROM span, range($chunks) AS r(i)
            ) WHERE c_start < c_end
        ),
        busy AS (
            SELECT c.rank, c.pid, c.device, c.i, c.c_start, c.c_end,
                   -- least/greatest skip NULLs: an empty chunk must sum nothing, not its own length
                   coalesce(sum(least(o.end_ns, c.c_end) - greatest(o.start_ns, c.c_start))
                            FILTER (WHERE o.start_ns IS NOT NULL), 0) AS busy_ns
            FROM chunk AS c
            LEFT JOIN ops AS o
              ON o.rank = c.rank AND o.pid = c.pid AND o.device = c.device AND o.start_ns < c.c_end AND o.end_ns > c.c_start
            GROUP BY c.rank, c.pid, c.device, c.i, c.c_start, c.c_end
        ),
        low AS (
            SELECT *, busy_ns / (c_end - c_start) * 100 AS in_use FROM busy WHERE busy_ns / (c_end - c_start) * 100 < $threshold
        ),
        runs AS (
            SELECT rank, pid, device, min(c_start) AS run_start, max(c_end) - min(c_start) AS duration,
                   round(sum((c_end - c_start) * in_use) / sum(c_end - c_start), 1) AS in_use
            FROM (SELECT *, i - row_number() OVER (PARTITION BY rank, pid, device ORDER BY i) AS run FROM low)
            GROUP BY rank, pid, device, run
        )
        SELECT row_number() OVER (ORDER BY in_use, duration, run_start, pid, device), in_use, duration::BIGINT,
               run_start::BIGINT, r.pid, r.device, c.context
        FROM runs AS r LEFT JOIN ({CONTEXT_SQL}) AS c USING (rank, pid, device)
        ORDER BY 1 {limit}
        """,
        {"chunks": int(chunks), "threshold": threshold},
    ).fetchall()
    return Report("gpu_time_util", COLUMNS, result, f"no time chunk has an average GPU utilization below {threshold}%")
