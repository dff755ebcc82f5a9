"""The reports ``wanscope stats`` knows, by NVIDIA's names."""

from __future__ import annotations

from wanscope.stats.api_sum import cuda_api_sum
from wanscope.stats.gpu_gaps import gpu_gaps
from wanscope.stats.gpu_time_split import gpu_time_split
from wanscope.stats.gpu_time_util import gpu_time_util
from wanscope.stats.kern_sum import cuda_gpu_kern_sum
from wanscope.stats.mem_size_sum import cuda_gpu_mem_size_sum
from wanscope.stats.mem_time_sum import cuda_gpu_mem_time_sum
from wanscope.stats.nvtx_sum import nvtx_sum
from wanscope.stats.report import Report

REPORTS = {
    "cuda_gpu_kern_sum": cuda_gpu_kern_sum,
    "cuda_gpu_mem_time_sum": cuda_gpu_mem_time_sum,
    "cuda_gpu_mem_size_sum": cuda_gpu_mem_size_sum,
    "cuda_api_sum": cuda_api_sum,
    "nvtx_sum": nvtx_sum,
    "gpu_gaps": gpu_gaps,
    "gpu_time_util": gpu_time_util,
    "gpu_time_split": gpu_time_split,
}


def run_report(con, name: str, **options) -> Report:
    """Run report ``name`` on a database with the canonical tables; ``options`` are the
    rule options (``gap_ms``, ``threshold``, ``chunks``, ``rows``) where they apply."""
    return REPORTS[name](con, **options)
