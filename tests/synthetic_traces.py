"""Two small Kineto traces with hand-computed numbers: an eager-like BASE and a
compiled-like NEW of the same two steps (imported by the diff tests).

Times below are in us as Kineto writes them; the tests expect ns. One host thread (pid 1,
tid 1), one GPU stream (device 0, stream 7).

BASE, two ProfilerSteps:
  step 1 (host 1000..1100): aten::add -> sdpa_flash_fwd 1020..1060 (attention);
      aten::mul -> elementwise_kernel_mul 1060..1080; aten::add -> vectorized_elementwise_kernel_add
      1090..1100 (both elementwise). GPU 1020..1100 = 80 us.
  step 2 (host 1200..1300): sdpa_flash_fwd 1220..1260; gemm_kernel 1260..1290; a memset
      1290..1295. GPU 1220..1295 = 75 us.
  window 1020..1295 = 275 us; busy 70 + 75 = 145 us; kernels 140 us (attention 80, elementwise 30,
  gemm 30), memset 5 us; mean step 77.5 us.

NEW, the same steps compiled:
  step 1: triton_poi_fused_add_mul_0 1020..1035 (launched by cuLaunchKernel inside a host range of
      the same name); sdpa_flash_fwd 1035..1075. GPU 55 us.
  step 2: triton_poi_fused_add_mul_0 1220..1235; sdpa_flash_fwd 1235..1275; an old-style
      triton__0d1d2de 1280..1285 launched inside the host range triton_red_fused_mean_pow_1.
      GPU 65 us.
  window 1020..1285 = 265 us; busy 55 + 55 + 5 = 115 us; kernels 115 us (attention 80,
  triton_fused 35); mean step 60 us.
"""

from __future__ import annotations

import json

PID, TID, DEVICE, STREAM = 1, 1, 0, 7


def host(name, ts, dur, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": {}}


def launch(ts, corr, name="cudaLaunchKernel", dur=2):
    cat = "cuda_driver" if name.startswith("cu") and not name.startswith("cuda") else "cuda_runtime"
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": PID,
        "tid": TID,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def kernel(name, ts, dur, corr):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": DEVICE,
        "tid": STREAM,
        "ts": ts,
        "dur": dur,
        "args": {"device": DEVICE, "stream": STREAM, "correlation": corr},
    }


def memset(ts, dur, corr):
    return {
        "ph": "X",
        "cat": "gpu_memset",
        "name": "Memset (Device)",
        "pid": DEVICE,
        "tid": STREAM,
        "ts": ts,
        "dur": dur,
        "args": {"device": DEVICE, "stream": STREAM, "correlation": corr, "bytes": 1024},
    }


def step(n, ts):
    return host(f"ProfilerStep#{n}", ts, 100, cat="user_annotation")


BASE_EVENTS = [
    step(1, 1000),
    host("aten::add", 1010, 10),
    launch(1012, 1),
    kernel("sdpa_flash_fwd", 1020, 40, 1),
    host("aten::mul", 1030, 10),
    launch(1032, 2),
    kernel("elementwise_kernel_mul", 1060, 20, 2),
    host("aten::add", 1040, 10),
    launch(1042, 3),
    kernel("vectorized_elementwise_kernel_add", 1090, 10, 3),
    step(2, 1200),
    launch(1210, 4),
    kernel("sdpa_flash_fwd", 1220, 40, 4),
    launch(1212, 5),
    kernel("gemm_kernel", 1260, 30, 5),
    launch(1214, 6, "cudaMemsetAsync"),
    memset(1290, 5, 6),
]

NEW_EVENTS = [
    step(1, 1000),
    host("triton_poi_fused_add_mul_0", 1010, 10),
    launch(1012, 1, "cuLaunchKernel"),
    kernel("triton_poi_fused_add_mul_0", 1020, 15, 1),
    launch(1022, 2),
    kernel("sdpa_flash_fwd", 1035, 40, 2),
    step(2, 1200),
    host("triton_poi_fused_add_mul_0", 1210, 10),
    launch(1212, 3, "cuLaunchKernel"),
    kernel("triton_poi_fused_add_mul_0", 1220, 15, 3),
    launch(1222, 4),
    kernel("sdpa_flash_fwd", 1235, 40, 4),
    host("triton_red_fused_mean_pow_1", 1240, 10),
    launch(1242, 5, "cuLaunchKernel"),
    kernel("triton__0d1d2de", 1280, 5, 5),
]

# Two CPU runs (no CUDA activities): BASE's steps take 100 and 120 us on the host (mean 110),
# NEW's 80 and 85 (mean 82.5): NEW is 25% faster in mean step CPU time.
CPU_BASE_EVENTS = [
    host("ProfilerStep#1", 1000, 100, "user_annotation"),
    host("aten::add", 1010, 10),
    host("ProfilerStep#2", 1200, 120, "user_annotation"),
    host("aten::add", 1210, 10),
]
CPU_NEW_EVENTS = [
    host("ProfilerStep#1", 1000, 80, "user_annotation"),
    host("aten::add", 1010, 10),
    host("ProfilerStep#2", 1200, 85, "user_annotation"),
    host("aten::add", 1210, 10),
]


def write_trace(path, events):
    """A Kineto trace file holding ``events``; returns ``path``."""
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def base_and_new(tmp_path):
    """(BASE path, NEW path) written under ``tmp_path``."""
    return write_trace(tmp_path / "base.json", BASE_EVENTS), write_trace(tmp_path / "new.json", NEW_EVENTS)


def cpu_base_and_new(tmp_path):
    """The two CPU runs' (BASE path, NEW path) written under ``tmp_path``."""
    return (
        write_trace(tmp_path / "cpu_base.json", CPU_BASE_EVENTS),
        write_trace(tmp_path / "cpu_new.json", CPU_NEW_EVENTS),
    )
