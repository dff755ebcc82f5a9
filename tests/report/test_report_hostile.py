"""Hostile ``--out`` for ``wanscope report``: one line naming the place, exit code 2, no
traceback; never a special file or an input replaced; Ctrl-C leaves no directory, no
temporary file and never one report file without the other."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hostile_cli import EMBEDDED, assert_one_line_error, kernel, run_cli
from shared_fixtures import HANG_S
from synthetic_traces import launch


def names(d):
    return sorted(p.name for p in d.iterdir())


def test_out_under_a_regular_file(tmp_path):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "sub"
    assert_one_line_error(run_cli("report", EMBEDDED, "--out", out), out)
    assert names(tmp_path) == ["file"]


def test_out_where_nothing_can_be_created():
    assert_one_line_error(run_cli("report", EMBEDDED, "--out", "/proc/wanscope-report"), "/proc/wanscope-report")


def test_out_that_is_a_file(tmp_path):
    out = tmp_path / "report"
    out.write_text("x")
    assert_one_line_error(run_cli("report", EMBEDDED, "--out", out), out)
    assert out.read_text() == "x"


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_report_file_that_is_not_a_regular_file(tmp_path, kind):
    target = tmp_path / "report.html"
    if kind == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)
    assert_one_line_error(run_cli("report", EMBEDDED, "--out", tmp_path), target)
    assert names(tmp_path) == ["report.html"]  # and no report.json without its page
    assert target.is_dir() if kind == "directory" else target.is_fifo()


def test_report_never_replaces_its_input(tmp_path):
    trace = tmp_path / "report.json"
    trace.write_bytes(__import__("gzip").decompress(EMBEDDED.read_bytes()))
    before = trace.read_bytes()
    assert_one_line_error(run_cli("report", trace, "--out", tmp_path), trace, "input")
    assert trace.read_bytes() == before and names(tmp_path) == ["report.json"]


def test_bad_trace_creates_no_directory(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"traceEvents": [')
    out = tmp_path / "out"
    assert_one_line_error(run_cli("report", bad, "--out", out), bad)
    assert not out.exists()


@pytest.mark.parametrize(
    "args, word", [(["--top", "0"], "--top"), (["--step-range", "x"], "--step-range"), ([], "--out")]
)
def test_bad_options(tmp_path, args, word):
    out = [] if not args else ["--out", tmp_path / "out"]
    assert_one_line_error(run_cli("report", EMBEDDED, *out, *args), word)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def busy_trace(tmp_path_factory):
    """40,000 kernels with launches, and how long a report of it takes here."""
    events = []
    for i in range(40_000):
        events.append(launch(10 + 3 * i, i + 1, dur=1))
        events.append(kernel(11 + 3 * i, 1.5, corr=i + 1, name=f"k{i % 50}"))
    d = tmp_path_factory.mktemp("busy")
    path = d / "busy.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(map(json.dumps, events)) + "\n]}\n")
    t = time.monotonic()
    assert run_cli("report", path, "--out", d / "timing").returncode == 0
    return path, time.monotonic() - t


@pytest.mark.parametrize("fraction", [0.45, 0.55, 0.65, 0.8, 0.9, 0.97])
def test_ctrl_c_leaves_no_partial_report(tmp_path, busy_trace, fraction):
    """Interrupt at points through the run (startup, ingest, analysis, rendering, writing)."""
    trace, seconds = busy_trace
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wanscope", "report", trace, "--out", out],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(seconds * fraction)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG_S)
    assert "Traceback" not in err, err
    # finished (0), interrupted (130), or the signal came as the interpreter exited (-2)
    assert proc.returncode in (0, 130, -signal.SIGINT), err
    # Either no directory at all, or both files whole (the run got past its writes);
    # never one file without the other, a half-written one or a temporary one.
    if out.exists():
        assert names(out) == ["report.html", "report.json"], (proc.returncode, err)
        json.loads((out / "report.json").read_text())
        assert (out / "report.html").read_text().rstrip().endswith("</html>")
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]


def test_report_into_an_existing_directory_keeps_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    r = run_cli("report", EMBEDDED, "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    assert names(tmp_path) == ["notes.txt", "report.html", "report.json"]
    json.loads((tmp_path / "report.json").read_text())


def test_an_interrupt_raised_where_python_cannot_comes_again():
    """A Ctrl-C that lands in a callback Python cannot raise from (importlib's module-lock
    weakref, as in the run above) is neither printed as "Exception ignored" nor lost: its
    signal comes again and interrupts where Python next runs; anything else unraisable goes
    to the default hook."""
    import types

    from wanscope.cli import _lost_interrupt

    seen = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            _lost_interrupt(types.SimpleNamespace(exc_value=KeyboardInterrupt()), default=seen.append)
            for _ in range(10**6):  # the handler runs between bytecodes
                pass
    finally:
        signal.signal(signal.SIGINT, before)
    assert seen == []
    other = types.SimpleNamespace(exc_value=ValueError("x"))
    _lost_interrupt(other, default=seen.append)
    assert seen == [other]
