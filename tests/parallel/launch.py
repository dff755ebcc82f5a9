"""Start the ranks of a CPU (gloo) run as separate processes with torchrun's environment, so a
test controls each one (torchrun itself would end the others when one fails)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from shared_fixtures import HANG_S

HERE = Path(__file__).resolve().parent

# How late a rank may end after its cue (a peer killed or frozen, a timeout run out) on a loaded
# machine: one that ends within a second or two on an idle one took 42 s on a busy 2-core one.
# Every time bound of these tests has this much slack, and each test's --dist-timeout is chosen
# so that the broken path (waiting out a --dist-timeout that should have been cut short, or the
# default of 300 s where --dist-timeout should apply) lands beyond its bound.
SLACK_S = 120.0


def run_main(args, capsys, monkeypatch, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``wanscope ARGS`` in this process, with ``env`` set (torchrun's variables): (exit code,
    stderr). For a run refused before any work or rendezvous, where a process of its own would
    only add its start (torch's import, seconds on a loaded machine) to the check."""
    from wanscope.cli import main

    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """The variables torchrun sets for ``rank``."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def rank_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    """This process's environment with torchrun's variables for ``rank``, one thread per rank."""
    return {**os.environ, **torchrun_env(rank, world_size, port), "OMP_NUM_THREADS": "1"}


class Rank:
    """One rank's process; threads collect its stdout and stderr so the test can wait for text."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self._readers = [threading.Thread(target=self._read, args=(name,), daemon=True) for name in self._chunks]
        for t in self._readers:
            t.start()

    def _read(self, name: str):
        stream = getattr(self.proc, name)
        for chunk in iter(lambda: stream.read1(4096), b""):
            self._chunks[name].append(chunk)

    @property
    def stdout(self) -> str:
        return b"".join(self._chunks["stdout"]).decode(errors="replace")

    @property
    def stderr(self) -> str:
        return b"".join(self._chunks["stderr"]).decode(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float) -> bool:
        """Wait until the regex ``pattern`` matches stderr (True), or the process ends or time
        runs out (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ended = self.proc.poll() is not None
            if re.search(pattern, self.stderr):
                return True
            if ended:
                return False
            time.sleep(0.05)
        return False

    def finish(self, timeout_s: float) -> int:
        """Wait for the exit (killing the process past ``timeout_s``, then raising
        ``subprocess.TimeoutExpired``); returns the exit code."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            for t in self._readers:
                t.join(timeout=5)
        return self.proc.returncode


def start_ranks(
    args: list[str], world_size: int, ranks=None, module: str | None = "wanscope", port=None, per_rank_args=None
) -> list[Rank]:
    """Start ``ranks`` (default: all) of a ``world_size`` run of ``python -m module args``
    (or ``python args`` when module is None); ``per_rank_args[r]`` is appended for rank r."""
    port = port or free_port()
    out = []
    for r in range(world_size) if ranks is None else ranks:
        argv = (
            [sys.executable] + (["-m", module] if module else []) + list(args) + list((per_rank_args or {}).get(r, []))
        )
        out.append(Rank(argv, rank_env(r, world_size, port)))
    return out


def run_ranks(args, world_size: int, timeout_s: float = HANG_S, **kw) -> list[tuple[int, str]]:
    """Run all ranks to completion: [(exit code, stderr)] in rank order."""
    ranks = start_ranks(args, world_size, **kw)
    try:
        return [(r.finish(timeout_s), r.stderr) for r in ranks]
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()


def error_line(stderr: str) -> str:
    """The one wanscope error line of a failed rank (asserting there is exactly one, last of
    wanscope's own lines, and no Python traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("wanscope: error:")]
    assert len(lines) == 1, stderr
    return lines[0]
