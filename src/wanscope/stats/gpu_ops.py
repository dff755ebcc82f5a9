"""GPU operations as NVIDIA's ``nsys analyze`` rules see them.

Per (rank, process, device): every kernel, memcpy and memset with valid times, plus the
profiler's own flush/stop overhead on that process that falls strictly inside the span
from the first GPU operation's start to the last one's end (the user cannot remove that
time, so the rules count it as busy; an overhead on one thread of a process counts on
every device the process used). Overhead names as in the rules' definition: "CUDA
profiling data flush overhead", "CUDA profiling stop overhead", "CUDA profiling overhead".

Unlike our ``analyze`` (docs/design.md, "Definitions"), the rules work per process and device,
not per device alone, and count this overhead as activity.
"""

from __future__ import annotations

OVERHEAD_NAMES = ("CUDA profiling data flush overhead", "CUDA profiling stop overhead", "CUDA profiling overhead")

# Columns: rank, pid, device, start_ns, end_ns.
OPS_SQL = f"""
WITH gpu AS (
    SELECT rank, pid, device, start_ns, end_ns FROM kernels
    UNION ALL
    SELECT rank, pid, device, start_ns, end_ns FROM memops
),
span AS (
    SELECT rank, pid, device, min(start_ns) AS first_start, max(end_ns) AS last_end FROM gpu GROUP BY ALL
)
SELECT * FROM gpu
UNION ALL
SELECT s.rank, s.pid, s.device, o.start_ns, o.end_ns
FROM profiler_overhead AS o
JOIN span AS s ON o.rank = s.rank AND o.pid = s.pid AND o.start_ns > s.first_start AND o.end_ns < s.last_end
WHERE o.name IN {OVERHEAD_NAMES!r}
"""

# The CUDA context of each (rank, pid, device), as the rules print it ("Context ID").
CONTEXT_SQL = "SELECT rank, pid, device, min(context) AS context FROM gpu_contexts GROUP BY ALL"


def require_activity(con) -> None:
    """Raise NoDataError when no kernel, memcpy or memset was captured."""
    from wanscope.stats.report import NoDataError

    if not con.execute("SELECT EXISTS (SELECT 1 FROM kernels) OR EXISTS (SELECT 1 FROM memops)").fetchall()[0][0]:
        raise NoDataError("no GPU activity captured: the input has no kernel, memcpy or memset records")
