"""``cuda_gpu_kern_sum``: CUDA kernels grouped by name, by total GPU time.

NVIDIA's definition: every kernel record's ``end - start``, grouped by the (demangled)
name; "Time (%)" is the share of the summed kernel time (not of wall time); rows by total
time descending, then instance count, then name. Our ``analyze`` kernel shares use the
same denominator but within the analysis window and by category as well.
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
    "Name",
]


def cuda_gpu_kern_sum(con) -> Report:
    """Raises NoDataError when no kernel was captured."""
    rows = summarize(con, "SELECT name, dur_ns AS value FROM kernels", ["name"], "total DESC, n, name")
    if not rows:
        raise NoDataError("no CUDA kernels in the input (cuda_gpu_kern_sum needs kernel records)")
    return Report("cuda_gpu_kern_sum", COLUMNS, rows)
