"""The child run that nsys and ncu re-execute, on the CPU with the CUDA profiler calls recorded
instead of made: its command line parses back to the same options, cudaProfilerStart/Stop
bracket exactly the profiled steps (the device drained first), and the run object it hands to
the parent says capture ``nsys``. The ncu child skips the VAE."""

from __future__ import annotations

import json
import sys

import pytest

torch = pytest.importorskip("torch")

from cli_context import parse_profile

from wanscope.profile import driver
from wanscope.profile.cli import child_argv, run_child
from wanscope.profile.options import resolve
from wanscope.profile.window import CudaProfilerWindow


@pytest.fixture
def cuda_calls(monkeypatch):
    """Record torch.cuda.synchronize / profiler.start / profiler.stop and each step's end."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))
    after_step = CudaProfilerWindow.after_step

    def logged(self, index):
        calls.append(f"step {index}")
        after_step(self, index)

    monkeypatch.setattr(CudaProfilerWindow, "after_step", logged)
    return calls


def test_child_command_line_parses_back(tmp_path):
    opts = resolve(0, preset="tiny", warmup=1, profile_steps=2, legacy_step_lookup=True)
    argv = child_argv(opts, tmp_path, "nsys", "--run-info", str(tmp_path / "info.json"))
    assert argv[:4] == [sys.executable, "-m", "wanscope", "profile"]
    p = parse_profile(argv[4:]).params
    assert (p["child"], p["run_info"], p["out_dir"]) == ("nsys", tmp_path / "info.json", tmp_path)
    assert (p["warmup"], p["profile_steps"], p["legacy_step_lookup"], p["random_weights"]) == (1, 2, True, True)


def test_nsys_child_brackets_the_profiled_steps(tmp_path, cuda_calls):
    opts = resolve(0, preset="tiny", warmup=1, profile_steps=2)
    info = tmp_path / "info.json"
    run_child(opts, "nsys", info)
    assert cuda_calls == ["step 0", "sync", "start", "step 1", "step 2", "sync", "stop"]
    run = json.loads(info.read_text())
    assert (run["capture"], run["profiled_steps"], run["random_weights"]) == ("nsys", [1, 2], True)
    assert list(run["stage_wall_ns"]) == ["text_encoding", "denoising", "vae_decode"]


def test_ncu_child_is_one_step_without_the_vae(cuda_calls):
    opts = resolve(0, preset="tiny").with_steps(0, 1)
    m = driver.run(opts, CudaProfilerWindow(opts.warmup, opts.profile_steps), decode=False, attention_only_in_dit=True)
    assert cuda_calls == ["sync", "start", "step 0", "sync", "stop"]
    assert list(m.stage_wall_ns) == ["text_encoding", "denoising"] and len(m.step_wall_ns) == 1
