"""Two kernels side by side (two reports, e.g. two attention backends, or two kernels of
one report): the diagnosis numbers of each and their ratio."""

from __future__ import annotations

import re
from dataclasses import dataclass

from wanscope.errors import InputError, UsageError
from wanscope.ncu.diagnosis import Diagnosis, diagnose
from wanscope.ncu.model import NcuReport

# (key in Diagnosis.facts, row label) in display order
ROWS = (
    ("duration_ns", "duration (ns)"),
    ("sm_throughput_pct", "SM throughput (% of peak)"),
    ("memory_throughput_pct", "memory throughput (% of peak)"),
    ("dram_throughput_pct", "DRAM throughput (% of peak)"),
    ("registers_per_thread", "registers per thread"),
    ("block_size", "block size (threads)"),
    ("grid_size", "grid size (blocks)"),
    ("shared_mem_per_block_bytes", "shared memory per block (bytes)"),
    ("waves_per_sm", "waves per SM"),
    ("theoretical_occupancy_pct", "theoretical occupancy (%)"),
    ("achieved_occupancy_pct", "achieved occupancy (%)"),
    ("warps_active_per_scheduler", "active warps per scheduler"),
    ("warps_eligible_per_scheduler", "eligible warps per scheduler"),
    ("issue_slot_utilization_pct", "issue-slot utilization (%)"),
    ("no_eligible_pct", "cycles with no eligible warp (%)"),
)


@dataclass
class Comparison:
    """``rows``: (label, value in A, value in B, B / A or None)."""

    a: Diagnosis
    b: Diagnosis
    rows: list[tuple[str, object, object, float | None]]

    def summary(self) -> str:
        ta, tb = self.a.facts.get("duration_ns"), self.b.facts.get("duration_ns")
        if not ta or not tb:
            return f"A: {self.a.verdict}; B: {self.b.verdict}."
        return (
            f"B takes {tb / ta:.2f}x the time of A ({tb / 1e6:,.3f} ms vs {ta / 1e6:,.3f} ms); "
            f"A is {self.a.verdict}, B is {self.b.verdict}."
        )

    def to_json(self) -> dict:
        return {
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "rows": [{"metric": k, "a": va, "b": vb, "b_over_a": r} for k, va, vb, r in self.rows],
            "summary": self.summary(),
        }


def select_kernels(report: NcuReport, regex: str | None) -> list:
    """The report's kernels whose name matches ``regex`` (``re.search``), all when None.

    Raises:
        UsageError: the regex does not compile.
        InputError: no kernel matches.
    """
    if regex is None:
        return list(report.kernels)
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise UsageError(f"--kernel {regex!r} is not a regular expression: {e}") from None
    hits = [k for k in report.kernels if pattern.search(k.name)]
    if not hits:
        raise InputError(report.path, f"no kernel name matches {regex!r}")
    return hits


def main_kernel(report: NcuReport, regex: str | None):
    """The kernel to compare: the longest of those matching ``regex`` (profiled kernels
    before failed ones)."""
    hits = select_kernels(report, regex)
    return max(hits, key=lambda k: (not k.profiling_failed, k.number("gpu__time_duration.sum") or 0.0))


def compare(a: Diagnosis, b: Diagnosis) -> Comparison:
    rows = []
    for key, label in ROWS:
        va, vb = a.facts.get(key), b.facts.get(key)
        ratio = vb / va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va else None
        rows.append((label, va, vb, ratio))
    rows.append(("verdict", a.verdict, b.verdict, None))
    return Comparison(a, b, rows)


def compare_reports(ra: NcuReport, rb: NcuReport, regex_a: str | None, regex_b: str | None) -> Comparison:
    return compare(diagnose(main_kernel(ra, regex_a)), diagnose(main_kernel(rb, regex_b)))
