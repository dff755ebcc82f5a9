"""Hostile inputs to ``wanscope analyze`` (and the ingest every trace command shares):
a fatal problem is one line naming the file, exit code 2, no traceback, no hang, bounded
memory and nothing half-written; a per-record problem is counted under ``warnings``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import duckdb
import pytest
from hostile_cli import (EMBEDDED, assert_one_line_error, gzip_stream, kernel, run_cli, write_lines,
                         write_minified)


@pytest.fixture(scope="module")
def wanscope_db(tmp_path_factory):
    """A database written by ``analyze --db`` from the embedded trace."""
    db = tmp_path_factory.mktemp("db") / "ours.duckdb"
    r = run_cli("analyze", EMBEDDED, "--db", db, "--format", "json")
    assert r.returncode == 0, r.stderr
    return db


def analyze_json(path) -> dict:
    r = run_cli("analyze", path, "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout)


# --- options --------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--top", "0"], ["--top"]),
    (["--top", "-1"], ["--top"]),
    (["--min-gap-ns", "-1"], ["--min-gap-ns"]),
    (["--min-gap-ns", "abc"], ["--min-gap-ns"]),
    (["--step-range", "a:b"], ["--step-range"]),
    (["--step-range", "::"], ["--step-range"]),
    (["--step-range", "5:2"], ["--step-range", "selects no step"]),
    (["--step-range", "3:3"], ["--step-range", "selects no step"]),
    (["--format", "yaml"], ["--format"]),
    (["--bogus"], ["--bogus"]),
])
def test_bad_options_are_one_line(args, words):
    assert_one_line_error(run_cli("analyze", EMBEDDED, *args), *words)


@pytest.mark.parametrize("args", [
    ["--step-range", "99999999999999999999999:"],
    ["--step-range", "-99999999999999999999999:99999999999999999999999"],
    ["--min-gap-ns", "99999999999999999999999"],
])
def test_huge_numbers_in_options(args):
    r = run_cli("analyze", EMBEDDED, *args, "--format", "json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    json.loads(r.stdout)


# --- what is not a regular file --------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to run the CLI as another user (root reads mode-000 files)")
def test_unreadable_file_as_another_user(tmp_path_factory):
    # As root, chmod 000 stops nothing; run the CLI as nobody against a world-traversable dir.
    import tempfile

    d = tempfile.mkdtemp(prefix="wanscope-hostile-")
    try:
        os.chmod(d, 0o755)
        trace = os.path.join(d, "t.json.gz")
        shutil.copy(EMBEDDED, trace)
        os.chmod(trace, 0)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            sys.executable, "-m", "wanscope", "analyze", trace],
                           capture_output=True, text=True, timeout=60, cwd=d)
        assert_one_line_error(r, trace, "not readable")
    finally:
        shutil.rmtree(d)
