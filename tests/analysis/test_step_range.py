"""``--step-range`` on the host side: syncs count only when their wait overlaps a
selected step's CPU range (GPU ``sync`` and CPU-only ``would_sync`` alike); a range that
selects no step is a usage error naming the trace's steps.

Two small Kineto traces, times in us as Kineto writes them, one host thread (pid 1, tid 1):
  GPU: step 1 (host 1000..1100) launches a kernel and waits in aten::item 1010..1030
       (cudaStreamSynchronize 1015..1025); step 2 (host 1200..1300) the same, aten::item
       1250..1260 (sync 1252..1258); after the steps, cudaDeviceSynchronize 1350..1400.
  CPU: the same host ops without CUDA: aten::item 1010..1030, 1250..1260 and 1350..1400.
"""

import json

import pytest
from shared_fixtures import REPO

from wanscope.analysis.scope import Scope, step_list
from wanscope.analysis.summary import analyze
from wanscope.errors import UsageError
from wanscope.trace import open_traces

PID = TID = 1


def host(name, ts, dur, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": {}}


def api(name, ts, dur, corr):
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": PID,
        "tid": TID,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def kernel(ts, dur, corr):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": "gemm_kernel",
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": 7, "correlation": corr},
    }


def step(n, ts):
    return host(f"ProfilerStep#{n}", ts, 100, cat="user_annotation")


CPU_EVENTS = [
    step(1, 1000),
    host("aten::item", 1010, 20),
    step(2, 1200),
    host("aten::item", 1250, 10),
    host("aten::item", 1350, 50),
]
GPU_EVENTS = CPU_EVENTS[:-1] + [
    api("cudaLaunchKernel", 1002, 2, 1),
    kernel(1005, 5, 1),
    api("cudaStreamSynchronize", 1015, 10, 10),
    api("cudaLaunchKernel", 1202, 2, 2),
    kernel(1205, 35, 2),
    api("cudaStreamSynchronize", 1252, 6, 11),
    api("cudaDeviceSynchronize", 1350, 50, 12),
]


def open_events(tmp_path, name, events):
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return open_traces([path])


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    return open_events(tmp_path_factory.mktemp("gpu"), "gpu.json", GPU_EVENTS)


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    return open_events(tmp_path_factory.mktemp("cpu"), "cpu.json", CPU_EVENTS)


def waits(con, step_range=None):
    return [
        (s["kind"], s["api"], s["op"], s["start_ns"], s["wait_ns"])
        for s in analyze(con, scope=Scope(step_range))["syncs"]
    ]


def test_gpu_syncs_outside_the_selected_steps_are_left_out(gpu):
    assert waits(gpu) == [
        ("sync", "cudaStreamSynchronize", "aten::item", 1_015_000, 10_000),
        ("sync", "cudaStreamSynchronize", "aten::item", 1_252_000, 6_000),
        ("sync", "cudaDeviceSynchronize", None, 1_350_000, 50_000),
    ]
    assert waits(gpu, (2, 3)) == [("sync", "cudaStreamSynchronize", "aten::item", 1_252_000, 6_000)]
    assert waits(gpu, (2, None)) == waits(gpu, (2, 3))
    assert waits(gpu, (None, 2)) == [("sync", "cudaStreamSynchronize", "aten::item", 1_015_000, 10_000)]


def test_would_syncs_outside_the_selected_steps_are_left_out(cpu):
    assert [w[3] for w in waits(cpu)] == [1_010_000, 1_250_000, 1_350_000]
    assert waits(cpu, (2, 3)) == [("would_sync", None, "aten::item", 1_250_000, 10_000)]
    assert waits(cpu, (1, 3)) == [
        ("would_sync", None, "aten::item", 1_010_000, 20_000),
        ("would_sync", None, "aten::item", 1_250_000, 10_000),
    ]


def test_the_profilers_closing_sync_is_outside_the_step():
    # the H200 triton trace: one profiled step, then the profiler's cudaDeviceSynchronize
    con = open_traces([REPO / "tests" / "data" / "h200_wan21_1p3b_triton_step1.json.gz"])
    assert [(s["api"], s["start_ns"]) for s in analyze(con)["syncs"]] == [
        ("cudaDeviceSynchronize", 5_162_865_974_810_241)
    ]
    assert analyze(con, scope=Scope((1, 2)))["syncs"] == []


def test_a_range_that_selects_no_step_is_a_usage_error(cpu):
    with pytest.raises(UsageError) as e:
        analyze(cpu, scope=Scope((7, 9)))
    assert str(e.value) == "--step-range 7:9 selects no step: the trace's steps are 1-2"
    with pytest.raises(UsageError, match=r"^--step-range :1 selects no step: the trace's steps are 1-2$"):
        analyze(cpu, scope=Scope((None, 1)))
    assert [s["step"] for s in analyze(cpu, scope=Scope((2, 9)))["steps"]] == [2]


def test_step_list_joins_runs():
    assert step_list([7, 1, 3, 2, 2, 9, 10]) == "1-3, 7, 9-10"
    assert step_list([551]) == "551"
