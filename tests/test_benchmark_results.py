"""benchmarks/_common.py's result files: named ``NAME-YYYY-MM-DD[-label].json`` and carrying the
commit they ran at."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # _common imports it

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _common


def test_result_name():
    assert _common.result_name("dit_forward", "2026-11-30") == "dit_forward-2026-11-30.json"
    assert _common.result_name("fast_mode", "2026-11-30", "int8-3wg-a") == "fast_mode-2026-11-30-int8-3wg-a.json"
    assert _common.result_name("fast_mode", "2026-11-30", "b", smoke=True) == "fast_mode-2026-11-30-b-smoke.json"


@pytest.mark.parametrize("label", ["session7", "session-7-a", "run10", "a-run-10", "Int8", "", "a b", "../x", "-a"])
def test_result_name_refuses_labels(label):
    with pytest.raises(ValueError):
        _common.result_name("fast_mode", "2026-11-30", label)
    with pytest.raises(ValueError):
        _common.result_label(label)


def test_result_name_refuses_a_date_that_is_not_one():
    with pytest.raises(ValueError):
        _common.result_name("fast_mode", "30.11.2026")


def test_write_result_names_the_file_and_records_the_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("WANSCOPE_COMMIT", raising=False)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    path = _common.write_result(tmp_path, "fast_mode", {"date": "2026-12-01", "smoke": False}, "int8-3wg-a")
    assert path == tmp_path / "fast_mode-2026-12-01-int8-3wg-a.json"
    assert json.loads(path.read_text()) == {"date": "2026-12-01", "smoke": False, "commit": head.stdout.strip()}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_commit_from_the_environment_or_none_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("WANSCOPE_COMMIT", "57c8e79")
    assert _common.git_commit(tmp_path) == "57c8e79"
    path = _common.write_result(tmp_path / "out", "dit_forward", {"date": "2026-12-01", "smoke": True})
    assert path.name == "dit_forward-2026-12-01-smoke.json"
    assert json.loads(path.read_text())["commit"] == "57c8e79"
    monkeypatch.delenv("WANSCOPE_COMMIT")
    outside = tmp_path / "plain"
    outside.mkdir()
    if subprocess.run(["git", "-C", str(outside), "rev-parse"], capture_output=True).returncode == 0:
        pytest.skip("tmp_path is inside a git checkout")
    assert _common.git_commit(outside) is None
    # a commit already in the result is kept
    path = _common.write_result(outside, "x", {"date": "2026-12-01", "commit": "abc1234"})
    assert json.loads(path.read_text())["commit"] == "abc1234"
