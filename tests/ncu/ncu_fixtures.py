"""Shared fixtures for the Nsight Compute tests: real reports from ../shared/fixtures/ncu."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "ncu"
DERIVED = FIXTURES / "derived"

REPS = {
    "sglang": FIXTURES / "sglang_16ab0c94_profile_h800.ncu-rep",
    "cutlass": FIXTURES / "cutlass_panjd123_0667dc2e_report_a100.ncu-rep",
    "esmm": FIXTURES / "esmm_049ec61_profile_a10g.ncu-rep",
}


def fixture(path: Path) -> Path:
    """The path, or skip the test when the shared fixtures are not checked out."""
    if not FIXTURES.is_dir():
        pytest.skip(f"shared fixtures absent: {FIXTURES}")
    if not path.exists():
        pytest.skip(f"fixture missing: {path}")
    return path


def needs_ncu_report():
    """Skip when NVIDIA's ncu-report package is not installed (needed for .ncu-rep)."""
    return pytest.importorskip("ncu_report")
