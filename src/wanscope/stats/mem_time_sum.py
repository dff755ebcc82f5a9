"""``cuda_gpu_mem_time_sum``: GPU memory operations grouped by operation, by time.

NVIDIA's definition: memcpy and memset records' ``end - start`` grouped by operation
(``[CUDA memcpy Device-to-Host]``, ``[CUDA memset]``, ...); "Time (%)" is the share of the
summed memory-operation time; rows by total time descending (ties: by name, ours).
"""

from __future__ import annotations

from wanscope.stats.memops import operation_sql
from wanscope.stats.report import NoDataError, Report
from wanscope.stats.summary import summarize

COLUMNS = [
    "Time (%)",
    "Total Time (ns)",
    "Count",
    "Avg (ns)",
    "Med (ns)",
    "Min (ns)",
    "Max (ns)",
    "StdDev (ns)",
    "Operation",
]


def cuda_gpu_mem_time_sum(con) -> Report:
    """Raises NoDataError when no memcpy or memset was captured."""
    rows = summarize(
        con,
        f"SELECT {operation_sql()} AS operation, dur_ns AS value FROM memops",
        ["operation"],
        "total DESC, operation",
    )
    if not rows:
        raise NoDataError("no GPU memory operations (memcpy/memset) in the input")
    return Report("cuda_gpu_mem_time_sum", COLUMNS, rows)
