"""``clitools.skip_teardown``: the process's own command line ends with code 0 after the
``atexit`` functions, without the interpreter's teardown; without the call, teardown runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import atexit, sys
from wanscope import cli, clitools

class Teardown:
    def __del__(self):
        print("teardown ran", flush=True)

kept = Teardown()  # a module global: finalized by the interpreter's teardown only
atexit.register(print, "atexit ran", flush=True)
if sys.argv[1] == "skip":
    clitools.skip_teardown()
sys.argv = ["wanscope", "schema", "--format", "json"]
cli.main()
"""


@pytest.mark.parametrize("mode", ["skip", "keep"])
def test_skip_teardown_runs_atexit_and_skips_the_rest(mode):
    r = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("[")  # the command's own output came first, whole
    assert "atexit ran" in lines
    assert ("teardown ran" in lines) == (mode == "keep")
