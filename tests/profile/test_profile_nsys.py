"""``--nsys`` plumbing without a GPU: finding nsys (PATH, $NSYS, NVIDIA's folders including the
one inside Nsight Compute on the H200), the exact nsys command, the renames, and one-line errors
that leave no partial file. The capture itself runs on the H200."""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import sys

import pytest

from wanscope.profile import nsys

FAKE_NSYS = """#!{python}
# records its arguments, then acts as nsys would: writes STEM.nsys-rep and STEM.sqlite
import json, os, sys
args = sys.argv[1:]
open(os.environ["FAKE_NSYS_LOG"], "w").write(json.dumps(args))
mode = os.environ.get("FAKE_NSYS_MODE", "ok")
stem = args[args.index("-o") + 1]
if mode == "fail":
    sys.exit(3)
open(stem + ".qdstrm", "w").write("partial")
open(stem + ".nsys-rep", "w").write("rep")
if mode == "ok":
    open(stem + ".sqlite", "w").write("sqlite")
    os.unlink(stem + ".qdstrm")
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "nsys"
    exe.parent.mkdir()
    exe.write_text(FAKE_NSYS.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_NSYS_LOG", str(tmp_path / "args.json"))
    monkeypatch.delenv("NSYS", raising=False)
    return exe


def test_nsys_command_is_the_capture_range_one():
    cmd = nsys.nsys_command("/x/nsys", "/out/.nsys-capture", ["python3", "-m", "wanscope", "profile"])
    assert cmd == [
        "/x/nsys",
        "profile",
        "-t",
        "cuda,nvtx,osrt",
        "-s",
        "none",
        "--cpuctxsw=none",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--export",
        "sqlite",
        "--force-overwrite",
        "true",
        "-o",
        "/out/.nsys-capture",
        "python3",
        "-m",
        "wanscope",
        "profile",
    ]


def test_find_nsys_on_path_env_and_nvidia_folders(fake_nsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_nsys.parent))
    assert nsys.find_nsys() == str(fake_nsys)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("NSYS", str(fake_nsys))
    assert nsys.find_nsys() == str(fake_nsys)
    monkeypatch.delenv("NSYS")
    monkeypatch.setattr(nsys, "NSYS_GLOBS", (str(tmp_path / "*" / "nsys"),))
    assert nsys.find_nsys() == str(fake_nsys)


def test_the_nsys_inside_nsight_compute_is_searched():
    """The H200 image has nsys only there (docs/design.md, "Capturing")."""
    assert any(
        fnmatch.fnmatch("/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys", g) for g in nsys.NSYS_GLOBS
    )


def test_missing_nsys_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsys, "NSYS_GLOBS", (str(tmp_path / "none" / "nsys"),))
    with pytest.raises(nsys.NsysError) as e:
        nsys.find_nsys()
    assert str(e.value) == nsys.HOW_TO_GET and "\n" not in str(e.value)
    monkeypatch.setenv("NSYS", str(tmp_path / "nope"))
    with pytest.raises(nsys.NsysError, match=f"NSYS={tmp_path / 'nope'}: not an executable"):
        nsys.find_nsys()


def test_capture_renames_the_export(fake_nsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    rep, sqlite = nsys.capture(str(fake_nsys), out, ["python3", "-m", "wanscope", "profile", "--child", "nsys"])
    assert (rep, sqlite) == (out / "trace.nsys-rep", out / "trace.sqlite")
    assert sorted(p.name for p in out.iterdir()) == ["trace.nsys-rep", "trace.sqlite"]
    args = json.loads((tmp_path / "args.json").read_text())
    assert args[args.index("-o") + 1] == str(out / ".nsys-capture")
    assert args[-6:] == ["python3", "-m", "wanscope", "profile", "--child", "nsys"]


@pytest.mark.parametrize(
    "mode, message",
    [
        ("fail", "nsys exited with status 3: see its messages above"),
        (
            "no-sqlite",
            "nsys wrote no .nsys-capture.sqlite in {out}: see its messages above "
            "(its importer needs libdw.so.1, Debian package libdw1, on LD_LIBRARY_PATH)",
        ),
    ],
)
def test_failed_capture_is_one_line_and_leaves_nothing(fake_nsys, tmp_path, monkeypatch, mode, message):
    monkeypatch.setenv("FAKE_NSYS_MODE", mode)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(nsys.NsysError) as e:
        nsys.capture(str(fake_nsys), out, ["true"])
    assert str(e.value) == message.format(out=out)
    assert os.listdir(out) == []
