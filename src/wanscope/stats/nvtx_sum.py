"""``nvtx_sum``: NVTX ranges grouped by style and name, by total host time.

NVIDIA's definition: push/pop and start/end ranges that were closed, ``end - start``,
grouped by style (PushPop, StartEnd) and range name, a range in a named domain being
named ``domain:text``; "Time (%)" is the share of the summed range time (nested ranges
count in full, so this is not a share of wall time). Rows by total descending, then
range name (the order of nsys 2023.4.4's output in the fixtures; the instance count plays
no part). Reads ``nvtx_ranges``, which only Nsight Systems sources fill.
"""

from __future__ import annotations

from wanscope.stats.report import NoDataError, Report
from wanscope.stats.summary import summarize

COLUMNS = [
    "Time (%)",
    "Total Time (ns)",
    "Instances",
    "Avg (ns)",
    "Med (ns)",
    "Min (ns)",
    "Max (ns)",
    "StdDev (ns)",
    "Style",
    "Range",
]


def nvtx_sum(con) -> Report:
    """Raises NoDataError when no NVTX range was captured."""
    rows = summarize(
        con,
        "SELECT style, coalesce(domain || ':', '') || name AS range, dur_ns AS value FROM nvtx_ranges",
        ["style", "range"],
        "total DESC, range, style",
    )
    if not rows:
        raise NoDataError("no NVTX ranges in the input (nvtx_sum reads Nsight Systems NVTX data)")
    return Report("nvtx_sum", COLUMNS, rows)
