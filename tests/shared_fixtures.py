"""Where the real fixtures live, and skipping when they are absent (imported by tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


def shared_fixture(relative: str) -> Path:
    """A file under ../shared/fixtures, or skip the test with a reason when it is absent
    (a user's fresh clone has no ../shared)."""
    path = SHARED_FIXTURES / relative
    if not path.exists():
        pytest.skip(f"real fixture {relative} not present (../shared/fixtures is absent in a fresh clone)")
    return path
