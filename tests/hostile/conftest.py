"""Fixtures shared by the hostile-input tests."""

from __future__ import annotations

import pytest
from hostile_cli import EMBEDDED, run_cli


@pytest.fixture(scope="session")
def embedded_db(tmp_path_factory):
    """A database written by ``analyze --db`` from the embedded trace (read, never changed,
    by the tests that take it: small and fast to open)."""
    path = tmp_path_factory.mktemp("db") / "embedded.duckdb"
    r = run_cli("analyze", EMBEDDED, "--db", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    return path
