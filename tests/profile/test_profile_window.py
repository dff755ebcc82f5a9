"""The torch.profiler window: exactly the profiled steps are traced, and a run interrupted inside
the window (an error, Ctrl-C) leaves no trace and no temporary file behind."""

from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch")

from wanscope.profile.window import KinetoWindow


def fake_steps(window, count, fail_at=None):
    """``count`` steps of a little CPU work, each in a ``wanscope/step#i`` range."""
    window.start()
    try:
        for i in range(count):
            if i == fail_at:
                raise KeyboardInterrupt
            with torch.profiler.record_function(f"wanscope/step#{i}"):
                torch.ones(64, 64) @ torch.ones(64, 64)
            window.after_step(i)
    finally:
        window.stop()


def test_only_the_profiled_steps_are_traced(tmp_path):
    trace = tmp_path / "trace.json.gz"
    window = KinetoWindow(trace, warmup=2, profile_steps=2, cuda=False, metadata={"random_weights": True})
    fake_steps(window, 5)  # one more step after the window: not traced either
    doc = json.load(gzip.open(trace, "rt"))
    steps = sorted(e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("wanscope/step#"))
    assert steps == ["wanscope/step#2", "wanscope/step#3"]
    assert doc["wanscope_run"] == {"random_weights": True}
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json.gz"]


@pytest.mark.parametrize("fail_at", [0, 2, 3])  # before, at the start of, inside the window
def test_interrupted_window_writes_nothing(tmp_path, fail_at):
    window = KinetoWindow(tmp_path / "trace.json.gz", warmup=2, profile_steps=2, cuda=False, metadata={})
    with pytest.raises(KeyboardInterrupt):
        fake_steps(window, 4, fail_at=fail_at)
    assert list(tmp_path.iterdir()) == []
