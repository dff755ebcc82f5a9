"""The linter and the formatter run as tests, so the README's test command is the whole check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff(args):
    # the settings are pyproject.toml's [tool.ruff]
    run = subprocess.run([sys.executable, "-m", "ruff", *args, "."], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
