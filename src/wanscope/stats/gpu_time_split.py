"""``gpu_time_split``: how GPU time divides between kernels and memory operations.

Ours, not an NVIDIA report: the summed ``end - start`` of kernels and of memory
operations (memcpy + memset), each as a share of the two together: the "compute vs
memory-op time" split the profiling study read off ``nsys stats`` (92.8% / 7.2%).
Summed durations, like NVIDIA's summaries: overlapping operations count in full.
"""

from __future__ import annotations

from wanscope.stats.gpu_ops import require_activity
from wanscope.stats.report import Report

COLUMNS = ["Category", "Time (%)", "Total Time (ns)", "Count"]


def gpu_time_split(con) -> Report:
    """Raises NoDataError when no GPU activity was captured."""
    require_activity(con)
    rows = con.execute(
        """
        WITH parts AS (
            SELECT 'Kernels' AS category, coalesce(sum(dur_ns), 0) AS total, count(*) AS n FROM kernels
            UNION ALL
            SELECT 'Memory operations', coalesce(sum(dur_ns), 0), count(*) FROM memops
        )
        SELECT category, round(total * 100.0 / sum(total) OVER (), 1), total, n FROM parts ORDER BY total DESC
        """
    ).fetchall()
    return Report("gpu_time_split", COLUMNS, rows)
