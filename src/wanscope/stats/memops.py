"""NVIDIA's names for GPU memory operations, from the canonical ``memops`` columns.

A memcpy is ``[CUDA memcpy <label>]`` with the label of its copy kind as Nsight Systems
labels CUPTI's ``CUpti_ActivityMemcpyKind`` (``ENUM_CUDA_MEMCPY_OPER``, e.g.
``Device-to-Host``); a memset is ``[CUDA memset]``. Built from ``copy_kind`` rather than
read from ``memops.name``, so the memory reports work for every source; for exports
without ``ENUM_*`` tables (2021) the labels are the documented enum values, where
``nsys stats`` itself skips these reports.
"""

from __future__ import annotations

from wanscope.trace.nsys_export import MEMCPY_KINDS


def operation_sql() -> str:
    """SQL expression over a ``memops`` row: NVIDIA's operation name."""
    whens = " ".join(f"WHEN '{short}' THEN '[CUDA memcpy {label}]'" for short, label in MEMCPY_KINDS.values())
    return f"CASE WHEN kind = 'memset' THEN '[CUDA memset]' ELSE CASE copy_kind {whens} ELSE '[CUDA memcpy ' || coalesce(copy_kind, 'Unknown') || ']' END END"
