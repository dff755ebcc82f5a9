"""A zero-duration kernel is still a kernel: it is counted (kernel counts, top kernels,
categories), pairs with its launch, ends a gap and belongs to its step like any other
GPU record, with 0 ns, and the ``zero_duration`` warning counts it beside. The same for
memcpys and memsets, and for Nsight Systems exports."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from shared_fixtures import shared_fixture

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces


def gpu(cat, name, ts, dur, corr):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": 7, "correlation": corr},
    }


def host(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


EVENTS = [
    host("user_annotation", "ProfilerStep#1", 1, 18),
    host("user_annotation", "ProfilerStep#2", 19, 20),
    host("cuda_runtime", "cudaLaunchKernel", 5, 1, correlation=1),
    gpu("kernel", "gemm_a", 10, 5, 1),  # 10..15
    host("cuda_runtime", "cudaLaunchKernel", 20, 1, correlation=2),
    gpu("kernel", "gemm_zero", 30, 0, 2),  # 30..30, the only GPU work of step 2
    host("cuda_runtime", "cudaMemsetAsync", 21, 1, correlation=3),
    gpu("gpu_memset", "Memset (Device)", 30, 0, 3),
    host("cuda_runtime", "cudaLaunchKernel", 45, 1, correlation=4),
    gpu("kernel", "gemm_a", 50, 10, 4),  # 50..60
]


def layouts(tmp_path):
    native = tmp_path / "native.json"
    blocks = [
        "  {\n    " + ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items()) + "\n  }"
        for e in EVENTS
    ]
    native.write_text('{\n  "traceEvents": [\n' + ",\n".join(blocks) + "\n  ]\n}\n")
    mini = tmp_path / "mini.json"
    mini.write_text(json.dumps({"traceEvents": EVENTS}, separators=(",", ":")))
    return [native, mini]


@pytest.mark.parametrize("layout", [0, 1])
def test_a_zero_duration_kernel_is_still_a_kernel(tmp_path, layout):
    path = layouts(tmp_path)[layout]
    con = open_traces([path])
    r = analyze(con)
    assert r["warnings"] == {"zero_duration": 2}
    (d,) = r["devices"]
    assert (d["kernel_count"], d["kernel_time_ns"], d["memop_count"], d["memop_time_ns"]) == (3, 15_000, 1, 0)
    assert (d["window_start_ns"], d["window_end_ns"], d["busy_ns"]) == (10_000, 60_000, 15_000)
    rows = {k["name"]: (k["count"], k["total_ns"], k["min_ns"], k["max_ns"]) for k in d["top_kernels"]}
    assert rows == {"gemm_a": (2, 15_000, 5_000, 10_000), "gemm_zero": (1, 0, 0, 0)}
    assert {c["category"]: c["count"] for c in d["categories"]} == {"gemm": 3, "memset": 1}
    # it pairs with its launch
    assert con.execute(
        "SELECT a.start_ns FROM kernels k JOIN api_calls a USING (rank, correlation) WHERE k.name = 'gemm_zero'"
    ).fetchall() == [(20_000,)]
    # it ends the gap before it (kernels first at equal starts), launched from step 2
    gaps = [(g["start_ns"], g["dur_ns"], g["next_op"]["name"], g["launch"]["start_ns"]) for g in d["gaps"]["largest"]]
    assert gaps == [(30_000, 20_000, "gemm_a", 45_000), (15_000, 15_000, "gemm_zero", 20_000)]
    assert [(s["step"], s["gpu_start_ns"], s["gpu_dur_ns"]) for s in r["steps"]] == [(1, 10_000, 5_000), (2, 30_000, 0)]


def test_a_zero_duration_kernel_is_still_a_kernel_in_nsys(tmp_path):
    path = tmp_path / "zero.sqlite"
    shutil.copy(shared_fixture("nsys/fuser_64ee035dc_report1_h200_test_matmul.sqlite"), path)
    before = analyze(open_traces([path]))
    db = sqlite3.connect(path)
    (rowid, start) = db.execute(
        'SELECT rowid, start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY "end" - start DESC LIMIT 1'
    ).fetchone()
    db.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start WHERE rowid = ?', [rowid])
    db.commit()
    db.close()
    after = analyze(open_traces([path]))
    assert after["warnings"] == {**before["warnings"], "zero_duration": 1}
    (b,), (a,) = before["devices"], after["devices"]
    assert a["kernel_count"] == b["kernel_count"] == 19
    assert a["kernel_time_ns"] < b["kernel_time_ns"]
    con = open_traces([path])
    assert con.execute(
        "SELECT k.dur_ns, count(a.start_ns) FROM kernels k LEFT JOIN api_calls a USING (rank, pid, correlation) "
        "WHERE k.start_ns = ? GROUP BY 1",
        [start],
    ).fetchall() == [(0, 1)]
