"""Outputs that cannot be written: a full standard output, an output folder that cannot take a
run's files (``report.write.prepare_out_dir``, used by ``profile --out``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from hostile_cli import EMBEDDED, assert_one_line_error, run_cli

from wanscope.errors import InputError
from wanscope.report.write import prepare_out_dir

FULL = "/dev/full"  # every write fails with ENOSPC (Linux)


@pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(
    "args",
    [["--version"], ["analyze", EMBEDDED, "--format", "json"], ["analyze", "--help"]],
    ids=["version", "analyze-json", "help"],
)
def test_a_full_standard_output_is_one_line_and_exit_1(args):
    with open(FULL, "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "wanscope", *map(str, args)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert_one_line_error(r, "writing the output: No space left on device", code=1)


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
    r = run_cli("profile", "--preset", "tiny", "--out", tmp_path / "f" / "sub", timeout=120)
    assert_one_line_error(r, "f: exists and is not a directory")
    assert "RANDOM WEIGHTS" not in r.stderr  # refused before the run announced itself
