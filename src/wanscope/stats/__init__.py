"""NVIDIA's Nsight Systems summaries, reproduced over the canonical tables.

``nsys stats`` reports (``cuda_gpu_kern_sum``, ``cuda_gpu_mem_time_sum``,
``cuda_gpu_mem_size_sum``, ``cuda_api_sum``, ``nvtx_sum``) and ``nsys analyze`` rules
(``gpu_gaps``, ``gpu_time_util``) as SQL over the tables every ingested source fills,
with NVIDIA's definitions, column names and rounding, so ``wanscope stats`` prints what
``nsys stats`` prints. They are a layer of their own, beside the ``analyze`` definitions
of docs/design.md ("Definitions"); ``docs/nsys.md`` lists where the two differ. ``gpu_time_split`` adds the
kernels-vs-memory-operations share that the profiling study used.

Definitions: NVIDIA Nsight Systems User Guide, "Report Scripts" and "Expert Systems
Analysis", and each report's ``--help-reports`` / ``--help-rules`` text.
"""

from wanscope.stats.registry import REPORTS, run_report

__all__ = ["REPORTS", "run_report"]
