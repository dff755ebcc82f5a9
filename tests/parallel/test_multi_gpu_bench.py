"""``benchmarks/multi_gpu.py``'s own logic: which Ulysses variants it times, and the exposed
communication it reads from a profiled step's Kineto trace."""

from __future__ import annotations

import importlib.util
import json
from argparse import Namespace
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "multi_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("multi_gpu_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_variants_skip_groupings_that_do_not_fit_or_repeat(bench):
    args = Namespace(head_groups="1,2,2@copy-engine,3,6,9,1+4+1", normal_priority="3,1+1")
    assert bench.ulysses_variants(args, 6) == [  # 1.3B on 2 GPUs; 9 groups are 6 of one head
        ("g=1", "1", True),
        ("g=2", "2", True),
        ("g=2@copy-engine", "2@copy-engine", True),
        ("g=3", "3", True),
        ("g=6", "6", True),
        ("g=1+4+1", "1+4+1", True),
        ("g=3 normal-priority", "3", False),
    ]
    assert bench.ulysses_variants(args, 3) == [  # 1.3B on 4 GPUs
        ("g=1", "1", True),
        ("g=2", "2", True),
        ("g=2@copy-engine", "2@copy-engine", True),
        ("g=3", "3", True),
        ("g=3 normal-priority", "3", False),
    ]


def kernel(name, ts_us, dur_us):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts_us, "dur": dur_us, "pid": 0, "tid": 7}


def test_exposed_communication_counts_what_no_compute_kernel_overlaps(bench, tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(
        json.dumps(
            {
                "traceEvents": [
                    kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 0, 100),
                    kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 90, 70),  # 90-160: 50 us alone
                    kernel("void at::native::elementwise_kernel<128, 2>", 150, 50),  # 150-200
                    kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 195, 10),  # hidden but 5 us
                    kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 300, 10),
                    kernel("void c10d::symmetric_memory::barrier_kernel(unsigned int**, unsigned long)", 320, 5),
                    # a copy-engine copy, 100-150: exposed where no compute kernel runs (100-150)
                    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP", "ts": 100, "dur": 50, "pid": 0, "tid": 7},
                    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 400, "pid": 1, "tid": 1},
                ]
            }
        )
    )
    assert bench.exposed_communication(trace) == {
        "kernels": 6,
        "step_gpu_ms": 0.325,
        "all_to_all_count": 2,
        "all_to_all_ms": 0.08,
        "exposed_all_to_all_ms": 0.055,
        "communication_ms": 0.095,
        "exposed_communication_ms": 0.07,
        "copy_engine_ms": 0.05,
        "exposed_copy_engine_ms": 0.05,
    }
    trace.write_text(
        json.dumps(
            {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 400, "pid": 1, "tid": 1}]}
        )
    )
    assert bench.exposed_communication(trace) == {"kernels": 0}


def test_exposed_communication_starts_at_the_profiled_step(bench, tmp_path):
    """The barrier before the step spins while the other rank starts its profiler: not the step's."""
    trace = tmp_path / "trace.json"
    trace.write_text(
        json.dumps(
            {
                "traceEvents": [
                    kernel(
                        "ncclDevKernel_AllReduce_Sum_u8_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0, 500000
                    ),  # the barrier
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "name": bench.STEP_RANGE,
                        "ts": 500010,
                        "dur": 300,
                        "pid": 1,
                        "tid": 1,
                    },
                    kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 500020, 100),
                    kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 500100, 40),  # 20 us alone
                ]
            }
        )
    )
    assert bench.exposed_communication(trace) == {
        "kernels": 2,
        "step_gpu_ms": 0.12,
        "all_to_all_count": 1,
        "all_to_all_ms": 0.04,
        "exposed_all_to_all_ms": 0.02,
        "communication_ms": 0.04,
        "exposed_communication_ms": 0.02,
        "copy_engine_ms": 0.0,
        "exposed_copy_engine_ms": 0.0,
    }
