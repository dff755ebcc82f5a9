"""``cuda_gpu_mem_size_sum``: GPU memory operations grouped by operation, by bytes.

NVIDIA's definition: the ``bytes`` of each memcpy and memset grouped by operation, in MB
(10^6 bytes) with three decimals, rows by total size descending (ties: by name, ours).
"""

from __future__ import annotations

from wanscope.stats.memops import operation_sql
from wanscope.stats.report import NoDataError, Report
from wanscope.stats.summary import summarize

COLUMNS = ["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation"]
BYTES_PER_MB = 1e6


def cuda_gpu_mem_size_sum(con) -> Report:
    """Raises NoDataError when no memcpy or memset was captured."""
    # a memory operation whose size was not recorded (or not a number) has no place here
    rows = summarize(
        con,
        f"SELECT {operation_sql()} AS operation, bytes AS value FROM memops WHERE bytes IS NOT NULL",
        ["operation"],
        "total DESC, operation",
    )
    if not rows:
        raise NoDataError("no GPU memory operations (memcpy/memset) with a size in the input")

    def mb(nbytes):
        return round(nbytes / BYTES_PER_MB, 3)

    return Report(
        "cuda_gpu_mem_size_sum",
        COLUMNS,
        [
            (mb(total), n, mb(mean), mb(med), mb(lo), mb(hi), mb(sd), op)
            for _, total, n, mean, med, lo, hi, sd, op in rows
        ],
    )
