"""``wanscope profile`` on a CUDA GPU with the tiny preset (seconds): GPU step times, no sync
inside the steps by default, one real sync per step at the sampler's ``.item()`` with
``--legacy-step-lookup``, the profiler's own sync after the last step, peak memory per stage;
and the same steps through Nsight Systems where nsys runs. Skipped without CUDA."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from wanscope.profile.result import PROFILER_SYNC_NOTE
from wanscope.wan.sampler import FlowSampler

pytestmark = pytest.mark.gpu
TINY = ["profile", "--preset", "tiny", "--profile-steps", "2"]


def run_profile(out, *extra):
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", *TINY, *extra, "--out", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    return json.loads((out / "report.json").read_text())


def split_syncs(report):
    """(syncs inside a step's CPU range, syncs outside every step)."""

    def inside(s):
        return any(
            st["cpu_start_ns"] <= s["start_ns"] < st["cpu_start_ns"] + st["cpu_dur_ns"] for st in report["steps"]
        )

    syncs = report["syncs"]
    return [s for s in syncs if inside(s)], [s for s in syncs if not inside(s)]


def check_gpu_report(report, capture):
    run = report["run"]
    assert (run["device"], run["dtype"], run["capture"]) == ("cuda", "bf16", capture)
    assert run["gpu"]["name"] == torch.cuda.get_device_name(0)
    assert all(v > 0 for v in run["peak_memory_bytes"].values()), run["peak_memory_bytes"]
    (device,) = report["devices"]
    assert device["kernel_count"] > 0 and 0 < device["utilization_pct"] <= 100
    assert [s["step"] for s in report["steps"]] == [1, 2]
    assert all(s["gpu_dur_ns"] > 0 for s in report["steps"])
    assert PROFILER_SYNC_NOTE in report["notes"]


def test_gpu_profile_has_no_sync_inside_the_steps(tmp_path):
    report = run_profile(tmp_path)
    check_gpu_report(report, "torch.profiler")
    inside, outside = split_syncs(report)
    assert inside == []
    # torch.profiler waits for the device before it stops, after the last step
    assert [(s["kind"], s["api"]) for s in outside] == [("sync", "cudaDeviceSynchronize")]
    assert outside[0]["start_ns"] >= report["steps"][-1]["cpu_start_ns"] + report["steps"][-1]["cpu_dur_ns"]


def test_gpu_legacy_lookup_syncs_once_per_step(tmp_path):
    report = run_profile(tmp_path, "--legacy-step-lookup")
    _, first = inspect.getsourcelines(FlowSampler._lookup)
    inside, _ = split_syncs(report)
    assert [(s["kind"], s["op"], s["frame"]) for s in inside] == [
        ("sync", "aten::item", f"wanscope/wan/sampler.py({first}): _lookup")
    ] * 2
    assert all(s["wait_ns"] > 0 and s["gpu_idle_after_ns"] is not None for s in inside)


def test_gpu_profile_through_nsys(tmp_path):
    from wanscope.errors import WanscopeError
    from wanscope.profile.nsys import find_nsys

    try:
        find_nsys()
    except WanscopeError as e:
        pytest.skip(str(e))
    report = run_profile(tmp_path, "--nsys")
    check_gpu_report(report, "nsys")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "report.html",
        "report.json",
        "trace.nsys-rep",
        "trace.sqlite",
    ]
    inside, _ = split_syncs(report)
    assert inside == []
