"""``clitools.skip_teardown``: the process's own command line ends with code 0 after the
``atexit`` functions, without the interpreter's teardown; without the call, teardown runs."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize(
    ("mode", "profiler", "skipped"), [("skip", False, True), ("keep", False, False), ("skip", True, False)]
)
def test_skip_teardown_runs_atexit_and_skips_the_rest(mode, profiler, skipped):
    """Under a CUDA profiler's injection (Nsight's ``CUDA_INJECTION64_PATH``) teardown runs."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
    if profiler:
        env["CUDA_INJECTION64_PATH"] = "/nonexistent/libinjection.so"  # read only by CUDA's init
    r = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("[")  # the command's own output came first, whole
    assert "atexit ran" in lines
    assert ("teardown ran" in lines) != skipped


def test_an_in_process_call_returns_and_clears_the_request(capsys):
    from wanscope import cli, clitools

    clitools.skip_teardown()
    cli.main(["schema", "--format", "json"])  # returns: an os._exit here would end pytest
    assert capsys.readouterr().out.startswith("[")
    assert clitools.take_skip_teardown() is False
