"""A GPU's peaks: the datasheet table ``gpu_peaks.csv`` shipped with the package, matched by the
device name the trace records, each value overridable by a measured one.

The table holds dense (no 2:4 sparsity) peaks per precision, in TFLOP/s (``int8_tops``: tera
integer operations per second), and the DRAM bandwidth in GB/s (10^9 bytes per second), one row
per GPU with the datasheet or whitepaper it comes from (``source``). Rows are tried in order and
the first whose ``pattern`` (a case-insensitive regular expression) is found in the device name
wins, so that e.g. ``H100 NVL`` is tried before ``H100``. Where a datasheet gives only the
with-sparsity figure the table holds half of it (the datasheets' own footnote: sparsity doubles
them). Values a datasheet does not give (FP8 before Ada) are empty: no peak.

``UNITS`` are the table's precisions, the units ``flops.Count`` assigns FLOPs to; ``fp32`` is the
CUDA cores' FP32 rate, not a tensor-core one.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

UNITS = ("bf16", "fp16", "tf32", "fp32", "fp8", "int8")
_COLUMNS = {u: f"{u}_tflops" for u in UNITS} | {"int8": "int8_tops"}


@dataclass(frozen=True)
class Row:
    """One row of ``gpu_peaks.csv``: ``tflops`` unit -> peak (TFLOP/s; int8: TOP/s)."""

    gpu: str
    pattern: str
    tflops: dict[str, float]
    bandwidth_gbps: float
    source: str


@lru_cache(maxsize=1)
def table() -> tuple[Row, ...]:
    """The rows of ``gpu_peaks.csv`` in priority order."""
    text = resources.files("wanscope.analysis").joinpath("gpu_peaks.csv").read_text()
    return tuple(
        Row(
            r["gpu"],
            r["pattern"],
            {u: float(r[c]) for u, c in _COLUMNS.items() if r[c].strip()},
            float(r["bandwidth_gbps"]),
            r["source"],
        )
        for r in csv.DictReader(text.splitlines())
    )


def lookup(name: str | None) -> Row | None:
    """The table row of a device name as recorded (``NVIDIA H200``, ``NVIDIA H100 80GB HBM3``),
    None where no row matches."""
    if not name:
        return None
    return next((r for r in table() if re.search(r.pattern, name, re.IGNORECASE)), None)


@dataclass(frozen=True)
class Peaks:
    """The peaks a device's roofline uses.

    Attributes:
        gpu: the device name as the trace records it (None: not recorded).
        matched: the table row's GPU (None: no row matched).
        tflops: unit -> peak TFLOP/s (int8: TOP/s); units without a peak are absent.
        bandwidth_gbps: DRAM bandwidth, GB/s (None: unknown).
        sources: field (a unit or ``bandwidth``) -> ``datasheet`` (the table), ``measured``
            (an override) or ``trace`` (the bandwidth the trace's device properties give, used
            where the table has no row).
        citation: the table row's ``source``.
    """

    gpu: str | None
    matched: str | None
    tflops: dict[str, float] = field(default_factory=dict)
    bandwidth_gbps: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    citation: str | None = None

    def as_dict(self) -> dict:
        """The JSON form (docs/json.md, ``roofline``, ``peaks``)."""
        return {
            "gpu": self.gpu,
            "matched": self.matched,
            **{_COLUMNS[u]: self.tflops.get(u) for u in UNITS},
            "bandwidth_gbps": self.bandwidth_gbps,
            "sources": dict(self.sources),
            "citation": self.citation,
        }


def device_peaks(
    name: str | None,
    trace_bandwidth_gbps: float | None = None,
    peak_tflops: float | None = None,
    peak_fp32_tflops: float | None = None,
    peak_bandwidth_gbps: float | None = None,
) -> Peaks:
    """The peaks of one device: the table's row for ``name``, then the overrides.

    Args:
        name: the device name as recorded (``devices.name``).
        trace_bandwidth_gbps: the bandwidth the trace's device properties give
            (``devices.memory_bandwidth_gbps``), used only where the table has no row.
        peak_tflops: a measured dense BF16/FP16 tensor-core peak, TFLOP/s: replaces the bf16
            and fp16 peaks (the other precisions keep the table's).
        peak_fp32_tflops: a measured FP32 (CUDA-core) peak, TFLOP/s.
        peak_bandwidth_gbps: a measured DRAM bandwidth, GB/s.
    """
    row = lookup(name)
    tflops = dict(row.tflops) if row else {}
    sources = dict.fromkeys(tflops, "datasheet")
    bandwidth = row.bandwidth_gbps if row else trace_bandwidth_gbps
    if bandwidth is not None:
        sources["bandwidth"] = "datasheet" if row else "trace"
    for units, value in ((("bf16", "fp16"), peak_tflops), (("fp32",), peak_fp32_tflops)):
        if value is not None:
            for u in units:
                tflops[u] = float(value)
                sources[u] = "measured"
    if peak_bandwidth_gbps is not None:
        bandwidth = float(peak_bandwidth_gbps)
        sources["bandwidth"] = "measured"
    return Peaks(name, row.gpu if row else None, tflops, bandwidth, sources, row.source if row else None)
