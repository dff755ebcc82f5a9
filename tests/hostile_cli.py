"""Helpers for the hostile-input tests (``test_*_hostile.py`` beside the tests of each command):
run the CLI in a subprocess (bounded in time and
address space, so a hang or a memory blow-up fails the test instead of the machine) and
check the error contract: one line on stderr naming the file, exit code 2, no traceback."""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
from pathlib import Path

from shared_fixtures import HANG_S

REPO = Path(__file__).resolve().parents[1]
EMBEDDED = REPO / "src" / "wanscope" / "data" / "h200_diffusers_wan21_1p3b_eager_forward.json.gz"


def _limit_memory(limit_bytes: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply


def run_cli(*args, memory_gb: float = 6, **kwargs) -> subprocess.CompletedProcess:
    """``python -m wanscope ARGS`` with a hang guard (``HANG_S``) and an address-space limit."""
    return subprocess.run(
        [sys.executable, "-m", "wanscope", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        preexec_fn=_limit_memory(int(memory_gb * (1 << 30))),
        **kwargs,
    )


def assert_one_line_error(r: subprocess.CompletedProcess, *words: str, code: int = 2) -> str:
    """The error contract; returns the line."""
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, (r.returncode, r.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("wanscope: error: "), r.stderr[-3000:]
    for w in words:
        assert str(w) in lines[0], (w, lines[0])
    return lines[0]


def kernel(ts, dur, corr=1, name="k", **extra):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": 7, "correlation": corr, **extra},
    }


def write_lines(path: Path, events: list, raw_lines: list[bytes] = ()) -> Path:
    """One event per line (after ``raw_lines``, which are written as they are)."""
    lines = [*raw_lines, *(json.dumps(e).encode() for e in events)]
    path.write_bytes(b'{"traceEvents": [\n' + b",\n".join(lines) + b"\n]}\n")
    return path


def write_minified(path: Path, events: list, raw_events: list[bytes] = ()) -> Path:
    body = b",".join([*raw_events, *(json.dumps(e, separators=(",", ":")).encode() for e in events)])
    path.write_bytes(b'{"traceEvents":[' + body + b"]}")
    return path


def gzip_stream(path: Path, head: bytes, unit: bytes, total: int, tail: bytes = b"") -> Path:
    """A gzip file that inflates to ``head``, ``unit`` repeated to about ``total`` bytes,
    then ``tail``: a small file (a few KB per GB), built at once as a multi-member gzip
    (one compressed 1 MiB member written over and over; gzip readers concatenate members)."""
    block = gzip.compress(unit * ((1 << 20) // len(unit)), compresslevel=9)
    with open(path, "wb") as f:
        f.write(gzip.compress(head))
        for _ in range(total >> 20):
            f.write(block)
        f.write(gzip.compress(tail))
    return path
