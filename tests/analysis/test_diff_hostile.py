"""Hostile inputs and ``--out`` for ``wanscope diff``: one line naming the file, exit code 2,
no traceback or hang; never an input or a special file replaced by the HTML page; a CI gate
that cannot silently pass."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from hostile_cli import EMBEDDED, assert_one_line_error, kernel, run_cli, write_lines


@pytest.fixture()
def trace(tmp_path):
    path = tmp_path / "t.json.gz"
    shutil.copy(EMBEDDED, path)
    return path


def names(d):
    return sorted(p.name for p in d.iterdir())


def test_out_never_replaces_an_input(tmp_path, trace):
    before = trace.read_bytes()
    assert_one_line_error(run_cli("diff", trace, EMBEDDED, "--format", "html", "--out", trace), trace, "input")
    assert trace.read_bytes() == before and names(tmp_path) == ["t.json.gz"]


def test_out_that_is_a_fifo(tmp_path, trace):
    # stands for /dev/null: as root, os.replace over it replaced the device node itself
    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    assert_one_line_error(run_cli("diff", trace, trace, "--format", "html", "--out", fifo), fifo, "not a regular file")
    assert fifo.is_fifo() and names(tmp_path) == ["page.html", "t.json.gz"]


@pytest.mark.parametrize("where", ["file/diff.html", "/proc/wanscope-diff.html", "/proc/nodir/diff.html"])
def test_out_where_it_cannot_be_written(tmp_path, trace, where):
    (tmp_path / "file").write_text("x")
    out = Path(where) if where.startswith("/") else tmp_path / where
    # names the file or the directory that cannot be made (the file's path starts with it)
    assert_one_line_error(run_cli("diff", trace, trace, "--format", "html", "--out", out), out.parent)
    assert names(tmp_path) == ["file", "t.json.gz"]


def test_out_in_a_new_directory_is_made(tmp_path, trace):
    out = tmp_path / "a" / "b" / "diff.html"
    r = run_cli("diff", trace, trace, "--format", "html", "--out", out)
    assert r.returncode == 0, r.stderr
    assert names(out.parent) == ["diff.html"]


def test_out_under_something_that_is_no_directory(tmp_path, trace):
    out = tmp_path / "a" / "b" / "diff.html"
    out.parent.parent.mkdir()
    os.mkfifo(tmp_path / "a" / "b")  # b exists and is no directory: nothing made
    assert_one_line_error(run_cli("diff", trace, trace, "--format", "html", "--out", out), "not a directory")
    assert names(tmp_path / "a") == ["b"]


def test_out_replaces_an_earlier_page(tmp_path, trace):
    out = tmp_path / "diff.html"
    out.write_text("old")
    r = run_cli("diff", trace, trace, "--format", "html", "--out", out)
    assert r.returncode == 0, r.stderr
    assert out.read_text().startswith("<!") and names(tmp_path) == ["diff.html", "t.json.gz"]


@pytest.mark.parametrize("value", ["nan", "-1", "abc"])
def test_fail_if_slower_that_could_never_fire(trace, value):
    assert_one_line_error(run_cli("diff", trace, trace, "--fail-if-slower", value), "--fail-if-slower")


def test_fail_if_slower_still_fires(tmp_path):
    base = write_lines(tmp_path / "base.json", [kernel(100, 10)])
    new = write_lines(tmp_path / "new.json", [kernel(100, 20)])
    r = run_cli("diff", base, new, "--fail-if-slower", "5", "--format", "json")
    assert r.returncode == 1 and json.loads(r.stdout)["delta"]["time_change_pct"] == 100.0


@pytest.mark.parametrize("side", [0, 1])
def test_a_fifo_on_either_side(tmp_path, trace, side):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    args = [fifo, trace] if side == 0 else [trace, fifo]
    assert_one_line_error(run_cli("diff", *args), fifo, "not a regular file")


def test_gzip_of_garbage(tmp_path, trace):
    junk = tmp_path / "junk.json.gz"
    junk.write_bytes(gzip.compress(os.urandom(4096)))
    assert_one_line_error(run_cli("diff", trace, junk), junk)


def test_bad_new_writes_no_page(tmp_path, trace):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"")
    out = tmp_path / "sub" / "diff.html"
    assert_one_line_error(run_cli("diff", trace, bad, "--format", "html", "--out", out), bad)
    assert not out.parent.exists()
