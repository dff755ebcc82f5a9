"""An output folder that cannot take a run's files (``report.write.prepare_out_dir``, used by
``profile --out``); a full standard output is ``tests/test_cli_stdout.py``'s."""

from __future__ import annotations

import os
import re

import pytest
from hostile_cli import assert_one_line_error, run_cli

from wanscope.errors import InputError
from wanscope.report.write import prepare_out_dir


def test_prepare_out_dir_creates_the_folder(tmp_path):
    prepare_out_dir(tmp_path / "a" / "b", ("report.json",))
    assert (tmp_path / "a" / "b").is_dir() and list((tmp_path / "a" / "b").iterdir()) == []


@pytest.mark.parametrize(
    "setup, out, problem",
    [
        (lambda d: (d / "f").write_text("x"), "f", "f: exists and is not a directory"),
        (lambda d: (d / "f").write_text("x"), "f/sub", "f: exists and is not a directory"),
        (lambda d: (d / "o" / "report.json").mkdir(parents=True), "o", "report.json: is a directory"),
        (lambda d: ((d / "o").mkdir(), os.mkfifo(d / "o" / "report.json")), "o", "report.json: is a named pipe (FIFO)"),
    ],
    ids=["a-file", "under-a-file", "an-output-is-a-folder", "an-output-is-a-fifo"],
)
def test_prepare_out_dir_refuses(tmp_path, setup, out, problem):
    setup(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(InputError, match=re.escape(problem)):
        prepare_out_dir(tmp_path / out, ("report.json",))
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_profile_refuses_an_out_folder_under_a_file_before_any_work(tmp_path):
    (tmp_path / "f").write_text("x")
    r = run_cli("profile", "--preset", "tiny", "--out", tmp_path / "f" / "sub")
    assert_one_line_error(r, "f: exists and is not a directory")
    assert "RANDOM WEIGHTS" not in r.stderr  # refused before the run announced itself
