"""Where the real fixtures live, and skipping when they are absent; the hang guard of the tests'
subprocesses (imported by tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wanscope.data import DEFAULT_TRACE_NAME, default_trace

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"

# The ``timeout=`` of the tests' subprocesses (the CLI, torchrun, Chromium): a hang guard, not a
# time limit. The slowest of them (torchrun, compare-modes) take about 20 s on a loaded 2-core
# machine; this is many times that, so that only a hang reaches it, and fails the test instead of
# stalling the suite.
HANG_S = 300.0


# Fixtures that ship inside the package too (our own H200 capture): a byte-identical copy,
# used where ../shared is absent so that a fresh clone still runs their tests.
PACKAGED = {f"kineto/{DEFAULT_TRACE_NAME}": default_trace}


def shared_fixture(relative: str) -> Path:
    """A file under ../shared/fixtures (or its packaged copy, ``PACKAGED``), or skip the test
    with a reason when it is absent (a user's fresh clone has no ../shared)."""
    path = SHARED_FIXTURES / relative
    if not path.exists() and relative in PACKAGED:
        path = PACKAGED[relative]()
    if not path.exists():
        pytest.skip(f"real fixture {relative} not present (../shared/fixtures is absent in a fresh clone)")
    return path
