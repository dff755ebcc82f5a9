"""Where the real fixtures live, and skipping when they are absent (imported by tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


# Fixtures that ship inside the package too (our own H200 captures): byte-identical copies,
# used where ../shared is absent so that a fresh clone still runs their tests.
PACKAGED = {"kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz": "h200_diffusers_wan21_1p3b_eager_forward.json.gz"}


def shared_fixture(relative: str) -> Path:
    """A file under ../shared/fixtures (or its packaged copy, ``PACKAGED``), or skip the test
    with a reason when it is absent (a user's fresh clone has no ../shared)."""
    path = SHARED_FIXTURES / relative
    if not path.exists() and relative in PACKAGED:
        from importlib import resources

        path = Path(str(resources.files("wanscope.data").joinpath(PACKAGED[relative])))
    if not path.exists():
        pytest.skip(f"real fixture {relative} not present (../shared/fixtures is absent in a fresh clone)")
    return path
