"""A standard output that cannot be written (``cli.py``): one line and exit code 1; a standard
stream closed before the start: no error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hostile_cli import EMBEDDED, assert_one_line_error
from shared_fixtures import HANG_S

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
            timeout=HANG_S,
        )
    assert_one_line_error(r, "writing the output: No space left on device", code=1)


@pytest.mark.parametrize("args", [["--version"], ["schema", "--format", "json"]], ids=["version", "schema"])
@pytest.mark.parametrize("closed", [1, 2], ids=["stdout", "stderr"])
def test_a_standard_stream_closed_before_the_start_is_no_error(args, closed):
    """``wanscope ... >&-`` or ``2>&-``: Python starts with that stream None; what would go
    there is dropped, the rest as usual, exit 0."""
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", *args],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        preexec_fn=lambda: os.close(closed),
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert (r.stdout == "") == (closed == 1)
