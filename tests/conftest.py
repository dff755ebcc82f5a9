"""Puts tests/ on sys.path (pytest's rootdir conftest) so tests in every folder can import the
shared helpers beside it (``shared_fixtures``, ``hostile_cli``, ``synthetic_traces``); holds
the fixtures they share (``embedded_db``); skips the tests marked ``gpu`` or ``cpu_only``
(pyproject.toml registers the markers) where the machine does not fit them, with the reason.

``@pytest.mark.gpu`` needs a CUDA device, ``@pytest.mark.gpu(2)`` two of them (NCCL);
``@pytest.mark.cpu_only`` is the CPU run of something a CUDA machine runs otherwise (the
1.3B preset, one GPU per rank): skipped where CUDA is available. Both take an optional
``reason=`` for the skip message. torch is imported only when a marked test is collected,
and not at all when it is not installed (the analysis-only install: no device counts as none).
"""

from __future__ import annotations

import functools
import importlib.util

import pytest
from hostile_cli import EMBEDDED, run_cli


@functools.cache
def cuda_devices() -> int:
    """How many CUDA devices torch sees (0 without CUDA, or without torch)."""
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _why(mark) -> str:
    reason = mark.kwargs.get("reason")
    return f" ({reason})" if reason else ""


def pytest_collection_modifyitems(items):
    """Marks the tests that cannot run here to be skipped (``skipif``: the summary then names
    each test's line, which it folds away for ``skip``)."""
    for item in items:
        for mark in item.iter_markers("gpu"):
            needed = mark.args[0] if mark.args else mark.kwargs.get("n", 1)
            if cuda_devices() < needed:
                what = "CUDA" if needed == 1 else f"{needed} CUDA devices"
                item.add_marker(pytest.mark.skipif(True, reason=f"needs {what}{_why(mark)}; found {cuda_devices()}"))
        for mark in item.iter_markers("cpu_only"):
            if cuda_devices():
                item.add_marker(pytest.mark.skipif(True, reason=f"the CPU run{_why(mark)}; CUDA is available here"))


@pytest.fixture(scope="session")
def embedded_db(tmp_path_factory):
    """A database written by ``analyze --db`` from the embedded trace (read, never changed,
    by the tests that take it: small and fast to open)."""
    path = tmp_path_factory.mktemp("db") / "embedded.duckdb"
    r = run_cli("analyze", EMBEDDED, "--db", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    return path
