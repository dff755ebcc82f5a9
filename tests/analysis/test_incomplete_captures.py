"""Incomplete captures do not pass as complete (class 4 of the real-trace issue): each case is a
``warnings`` kind with its count and a ``notes`` sentence, on traces the tests build."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from synthetic_traces import host, launch
from synthetic_traces import kernel as gpu_kernel

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces


def kernel(ts, corr, dur=5, name="gemm_kernel"):
    return gpu_kernel(name, ts, dur, corr)


def analyzed(tmp_path, events, **header):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({**header, "traceEvents": events}))
    return analyze(open_traces([path])), path


def test_graph_launches_whose_kernels_are_missing(tmp_path):
    # 100 graph launches, each of two kernels; the kernels of 90 were dropped
    events = []
    for i in range(100):
        events.append(launch(1000 + 100 * i, i + 1, "cudaGraphLaunch"))
        if i < 10:
            events += [kernel(1010 + 100 * i, i + 1), kernel(1020 + 100 * i, i + 1)]
    doc, _ = analyzed(tmp_path, events)
    assert doc["warnings"] == {"graph_launch_without_kernels": 90}
    assert (
        "90 of 100 cudaGraphLaunch calls have no kernel records: their kernels were not captured (or were excluded "
        "at ingest) and utilization undercounts (warnings: graph_launch_without_kernels)" in doc["notes"]
    )


def test_kernel_launches_whose_kernels_were_dropped(tmp_path):
    events = [launch(1000 + 10 * i, i + 1, "cudaLaunchKernel") for i in range(5)]
    events += [launch(1100, 6, "cuLaunchKernelEx"), kernel(1200, 6)]
    events += [kernel(1010 + 10 * i, i + 1) for i in range(3)]  # 3 of the 5 runtime launches
    doc, _ = analyzed(tmp_path, events)
    assert doc["warnings"] == {"launch_without_kernel": 2}
    assert [n for n in doc["notes"] if "no kernel records" in n] == [
        "2 of 5 cudaLaunchKernel calls have no kernel records: their kernels were not captured (or were excluded "
        "at ingest) and utilization undercounts (warnings: launch_without_kernel)"
    ]


def test_launches_without_any_kernel_record(tmp_path):
    events = [launch(1000 + 10 * i, i + 1, "cudaLaunchKernel") for i in range(4)]
    events.append(launch(1100, 5, "cudaGraphLaunch"))
    doc, _ = analyzed(tmp_path, events)
    assert doc["warnings"] == {"no_kernel_records": 5}
    assert any(
        n.startswith("the capture has 5 kernel launches (1 cudaGraphLaunch, 4 cudaLaunchKernel) and no kernel record")
        for n in doc["notes"]
    )


def test_steps_without_gpu_records(tmp_path):
    events = [
        host("ProfilerStep#1", 1000, 100, "user_annotation"),
        launch(1010, 1, "cudaLaunchKernel"),
        kernel(1020, 1),
        host("ProfilerStep#2", 1200, 100, "user_annotation"),  # host work only
        host("aten::add", 1210, 20),
        host("ProfilerStep#3", 1400, 100, "user_annotation"),
        launch(1410, 2, "cudaLaunchKernel"),
        kernel(1420, 2),
    ]
    doc, _ = analyzed(tmp_path, events)
    assert [s["gpu_dur_ns"] for s in doc["steps"]] == [5_000, None, 5_000]
    assert doc["warnings"] == {"step_without_gpu": 1}
    assert (
        "1 step of ranks that ran GPU work launched no GPU work in its CPU range: 2 (rank 0); their GPU times are "
        "missing (warnings: step_without_gpu)" in doc["notes"]
    )


def test_a_cpu_only_trace_has_no_step_warning(tmp_path):
    doc, _ = analyzed(tmp_path, [host("ProfilerStep#1", 1000, 100, "user_annotation"), host("aten::add", 1010, 20)])
    assert doc["warnings"] == {} and doc["devices"] == []


def test_with_stack_but_no_python_frames(tmp_path):
    events = [host("aten::mm", 1000, 50), launch(1010, 1, "cudaLaunchKernel"), kernel(1020, 1)]
    doc, path = analyzed(tmp_path, events, with_stack=1)
    assert doc["warnings"] == {"stack_without_python_frames": 1}
    assert (
        f"{path}: its header says with_stack, but it holds no Python frame: the call stacks are aten ops and "
        "annotations only (warnings: stack_without_python_frames)" in doc["notes"]
    )
    doc, _ = analyzed(tmp_path, [host("train.py(3): step", 990, 80, "python_function"), *events], with_stack=1)
    assert doc["warnings"] == {}


def test_nsys_graph_level_records_count_as_busy_time(tmp_path):
    """An export of ``nsys --cuda-graph-trace=graph``: a graph run is one GRAPH_TRACE row and no
    kernel rows. Three runs of 1 ms after the last kernel of our H200 capture (its own rows)."""
    path = tmp_path / "graphs.sqlite"
    shutil.copy(Path(__file__).parents[1] / "data" / "h200_wan21_1p3b_triton_step1.sqlite", path)
    before = analyze(open_traces([path]))["devices"][0]
    db = sqlite3.connect(path)
    (pid, end) = db.execute('SELECT globalPid, max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL, "
        "deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "graphId INTEGER, contextId INTEGER)"
    )
    runs = [
        (end + 10_000 + i * 2_000_000, end + 10_000 + i * 2_000_000 + 1_000_000, 0, 7, None, pid, 12, 1)
        for i in range(3)
    ]
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, ?, ?, ?, ?, ?, ?)", runs)
    db.commit()
    db.close()
    doc = analyze(open_traces([path]))
    (d,) = doc["devices"]
    assert doc["warnings"]["graph_trace"] == 3
    assert d["busy_ns"] == before["busy_ns"] + 3_000_000 and d["kernel_count"] == before["kernel_count"] + 3
    graphs = [k for k in d["top_kernels"] if k["name"] == "CUDA graph 12 (graph-level trace)"]
    assert [(k["count"], k["total_ns"]) for k in graphs] == [(3, 3_000_000)]
    assert any(n.startswith("3 CUDA graph runs were traced at graph level") for n in doc["notes"])
