"""The tidy form every Nsight Compute reader returns: kernels, their metrics, ncu's rule rows.

One row per (kernel, metric): kernel id, kernel name, block, grid, section, metric label
(as ncu's details page prints it) and base metric name where known, unit and value in
wanscope's base units (see ``units``). A details CSV printed with labels gets its base
names from ``metric_labels.csv`` (section, label -> name), a table taken from the same
reports exported both ways by ncu 2024.1.1 (the test fixtures' ``ncu/derived`` reports).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from wanscope.ncu.units import is_missing

# the three occupancy curves ncu stores in a .ncu-rep (instanced metrics)
CURVE_METRICS = (
    "launch__occupancy_per_register_count",
    "launch__occupancy_per_block_size",
    "launch__occupancy_per_shared_mem_size",
)
# metric families known before the kernel runs (device properties, launch configuration)
_STATIC_PREFIXES = ("device__attribute_", "launch__", "profiler__", "nvlink__", "numa__", "pmsampling:")


@dataclass(frozen=True)
class Metric:
    """One metric of one kernel. ``value`` is a float in ``unit`` (a base unit), a string
    for enumerations, ``None`` for ``n/a`` and NaN for a value ncu failed to collect."""

    section: str | None
    label: str | None
    name: str | None
    unit: str
    value: float | str | None


@dataclass(frozen=True)
class RuleResult:
    """One rule row of ncu's details page (``OPT``, ``WRN``, ``INF``, ``ERR`` ...)."""

    section: str
    rule: str
    type: str
    description: str
    speedup_type: str | None = None
    speedup_pct: float | None = None


@dataclass
class KernelProfile:
    """One profiled kernel launch.

    ``block`` and ``grid`` are (x, y, z) tuples, or None where the source has none (the
    old CSV layout) or profiling failed; ``cc`` is the compute capability as ``"9.0"``;
    ``curves`` maps each of ``CURVE_METRICS`` to [(x, warps per SM)], from a .ncu-rep only.
    """

    id: int
    name: str
    block: tuple[int, int, int] | None = None
    grid: tuple[int, int, int] | None = None
    device: str | None = None
    cc: str | None = None
    metrics: list[Metric] = field(default_factory=list)
    rules: list[RuleResult] = field(default_factory=list)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    _by_name: dict | None = field(default=None, repr=False, compare=False)
    _by_label: dict | None = field(default=None, repr=False, compare=False)

    def _index(self) -> None:
        self._by_name, self._by_label = {}, {}
        for m in self.metrics:
            if m.name is not None:
                self._by_name.setdefault(m.name, m)
            if m.label is not None:
                self._by_label.setdefault((m.section, m.label), m)

    def metric(self, name: str) -> Metric | None:
        """The metric with base name ``name``, found by name or through its ncu label."""
        if self._by_name is None:
            self._index()
        m = self._by_name.get(name)
        if m is not None:
            return m
        for section, label in labels_for(name):
            m = self._by_label.get((section, label))
            if m is not None:
                return m
        return None

    def value(self, name: str):
        """The value of metric ``name`` in base units; None when absent, n/a or NaN."""
        m = self.metric(name)
        if m is None or is_missing(m.value):
            return None
        return m.value

    def number(self, name: str) -> float | None:
        """Like ``value`` but only numbers (a finite or infinite float), else None."""
        v = self.value(name)
        return v if isinstance(v, float) else None

    @property
    def profiling_failed(self) -> bool:
        """True when ncu measured nothing for this kernel. Its duration
        (``gpu__time_duration.sum``) is collected in every pass, so NaN or ``n/a`` there
        means the replay failed (the sglang ``flash_fwd_kernel``: every measured value NaN,
        block ``(0, 0, 0)``; peak constants and device attributes still filled in). Without
        a duration column, every measured value being missing means the same."""
        duration = self.metric("gpu__time_duration.sum")
        if duration is not None:
            return is_missing(duration.value)
        measured = [
            m.value
            for m in self.metrics
            if not isinstance(m.value, str) and not (m.name or "").startswith(_STATIC_PREFIXES)
        ]
        return bool(measured) and all(is_missing(v) for v in measured)


@dataclass
class NcuReport:
    """Every kernel of one report. ``source`` names the layout the file was read as:
    ``details-csv``, ``raw-csv`` or ``ncu-rep``; ``warnings``: the ``==WARNING==``,
    ``==PROF==``, ``==ERROR==`` and ``==INFO==`` lines ncu wrote into a CSV, as they are."""

    path: str
    source: str
    kernels: list[KernelProfile]
    warnings: list[str] = field(default_factory=list)

    def rows(self):
        """The tidy table: (kernel_id, kernel_name, block, grid, section, label, name,
        unit, value) per metric."""
        for k in self.kernels:
            for m in k.metrics:
                yield (k.id, k.name, k.block, k.grid, m.section, m.label, m.name, m.unit, m.value)


@lru_cache(maxsize=1)
def label_table() -> dict[tuple[str, str], tuple[str, str]]:
    """(section, label) -> (base metric name, base unit as ncu 2024.1.1 names it)."""
    text = resources.files("wanscope.ncu").joinpath("metric_labels.csv").read_text()
    rows = csv.DictReader(text.splitlines())
    return {(r["section"], r["label"]): (r["name"], r["base_unit"]) for r in rows}


@lru_cache(maxsize=1)
def _labels_by_name() -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for key, (name, _unit) in label_table().items():
        out.setdefault(name, []).append(key)
    return out


def labels_for(name: str) -> list[tuple[str, str]]:
    """The (section, label) pairs under which ncu's details page prints metric ``name``."""
    return _labels_by_name().get(name, [])


def name_for(section: str | None, label: str) -> str | None:
    """The base metric name behind a details-page label, or None when not in the table."""
    hit = label_table().get((section or "", label))
    return hit[0] if hit else None


def finite(x) -> bool:
    """True for a float that is neither NaN nor infinite."""
    return isinstance(x, float) and math.isfinite(x)
