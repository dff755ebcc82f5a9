"""`wanscope profile --random-weights --profile-steps 3` on the H200 (2026-11-30, torch
2.11.0+cu130, 1.3B at 832x480x81, 50-step schedule, steps 1-3 profiled, torch reference ops):
its report.json and the trace trimmed to step 2 (`scripts/trim_trace.py`) are committed."""

import json
from pathlib import Path

import pytest

from wanscope.analysis.scope import Scope
from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

DATA = Path(__file__).resolve().parents[1] / "data"
GIB = 2**30


@pytest.fixture(scope="module")
def report():
    return json.loads((DATA / "h200_wan21_1p3b_profile_report.json").read_text())


def test_run_object(report):
    run = report["run"]
    assert run["random_weights"] is True and "RANDOM WEIGHTS" in run["note"]
    assert (run["preset"], run["width"], run["height"], run["frames"]) == ("wan2.1-t2v-1.3b", 832, 480, 81)
    assert run["schedule_steps"] == 50 and run["profiled_steps"] == [1, 2, 3]
    assert run["gpu"]["name"] == "NVIDIA H200" and run["versions"]["torch"] == "2.11.0+cu130"
    peak = run["peak_memory_bytes"]
    assert peak["text_encoding"] / GIB == pytest.approx(25.08, abs=0.01)
    assert peak["denoising"] / GIB == pytest.approx(5.34, abs=0.01)
    assert peak["vae_decode"] / GIB == pytest.approx(9.30, abs=0.01)


def test_steps_utilization_attention_share(report):
    (d,) = report["devices"]
    assert d["utilization_pct"] == pytest.approx(99.4131, abs=1e-4)
    attention = next(c for c in d["categories"] if c["category"] == "attention")
    assert attention["count"] == 360  # 3 steps x 2 CFG branches x 30 blocks x (self + cross)
    assert attention["pct"] == pytest.approx(51.2761, abs=1e-4)
    gpu_ms = [s["gpu_dur_ns"] / 1e6 for s in report["steps"]]
    assert [s["step"] for s in report["steps"]] == [1, 2, 3]
    assert gpu_ms == pytest.approx([1339.26, 1348.31, 1343.56], abs=0.01)


def test_no_sync_inside_the_loop(report):
    # The only wait is the profiler window's own device synchronize after the last step.
    (s,) = report["syncs"]
    assert s["api"] == "cudaDeviceSynchronize" and s["frame"].startswith("wanscope/profile/window.py")
    last = report["steps"][-1]
    assert s["start_ns"] >= last["cpu_start_ns"] + last["cpu_dur_ns"]


def test_trimmed_step_equals_the_step_in_the_full_run(report):
    trimmed = analyze(open_traces([DATA / "h200_wan21_1p3b_profile_step2.json.gz"]))
    (step,) = trimmed["steps"]
    assert step == next(s for s in report["steps"] if s["step"] == 2)
    (d,) = trimmed["devices"]
    assert (d["window_ns"], d["busy_ns"], d["kernel_count"], d["kernel_time_ns"]) == (
        1_348_310_303,
        1_340_733_154,
        4_048,
        1_340_155_198,
    )
    assert d["utilization_pct"] == pytest.approx(99.438, abs=1e-3)
    assert trimmed["syncs"] == []
    # Same numbers as restricting the full run's analysis to that step would give.
    again = analyze(open_traces([DATA / "h200_wan21_1p3b_profile_step2.json.gz"]), scope=Scope((2, 3)))
    assert again["devices"][0]["busy_ns"] == d["busy_ns"]
