"""``wan/video.py``: outputs are staged under temporary names and renamed together; an error or
an interrupt while writing leaves neither temporaries nor a partial set."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

from wanscope.errors import InputError
from wanscope.wan import video

pytest.importorskip("imageio_ffmpeg")

FRAMES = np.zeros((5, 32, 32, 3), dtype=np.uint8)


def test_writes_the_three_outputs(tmp_path):
    paths, fallback = video.write_outputs(FRAMES, tmp_path / "x.mp4", 16, {"note": "RANDOM WEIGHTS"})
    assert fallback is None and [p.name for p in paths] == ["x.mp4", "x.png", "x.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "x.mp4", "x.png"]
    assert json.loads((tmp_path / "x.json").read_text())["video"] == str(tmp_path / "x.mp4")


@pytest.mark.parametrize("failing", ["_write_contact_sheet", "_write_mp4"])
def test_an_interrupt_leaves_nothing(tmp_path, monkeypatch, failing):
    (tmp_path / "x.json").write_text("{}")  # an earlier run's sidecar stays as it was

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(video, failing, interrupted)
    with pytest.raises(KeyboardInterrupt):
        video.write_outputs(FRAMES, tmp_path / "x.mp4", 16, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]
    assert (tmp_path / "x.json").read_text() == "{}"


def test_a_full_disk_names_the_output_and_leaves_nothing(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # a write part-way: no file named

    monkeypatch.setattr(video, "_write_contact_sheet", full)
    with pytest.raises(OSError) as e:
        video.write_outputs(FRAMES, tmp_path / "x.mp4", 16, {})
    assert (e.value.errno, e.value.filename) == (errno.ENOSPC, str(tmp_path / "x.mp4"))
    assert list(tmp_path.iterdir()) == []


def test_check_outputs_refuses_an_unwritable_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(video.os, "access", lambda path, mode: False)  # root ignores chmod
    with pytest.raises(InputError, match="its folder is not writable"):
        video.check_outputs(tmp_path / "x.mp4")
