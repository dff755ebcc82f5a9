"""Call stacks are in containment order, outermost first: Python frames, ``record_function``
ranges and aten ops merged by their times; at equal starts the longer range encloses, at
equal start and end a ``record_function`` range is outside a Python frame. A
``record_function`` range opens inside the Python call that enters it and outlives it, so the
ranges open at an instant are not one chain of ancestors: the stacks of our own H200 profile
put ``wanscope/cfg/uncond`` inside the DiT's ``forward`` and ``wanscope/block/ffn`` inside
``nn.Sequential``'s."""

from __future__ import annotations

import json

import pytest
from shared_fixtures import REPO
from synthetic_traces import kernel as gpu_kernel

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

PID = TID = 1


T0 = 1_000  # us: the times below are from T0 (a zero timestamp is no timing)


def ev(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": T0 + ts, "dur": dur, "args": args}


def py(name, ts, dur):
    return ev("python_function", name, ts, dur)


def rf(name, ts, dur):
    return ev("user_annotation", name, ts, dur)


def op(name, ts, dur, ext):
    return ev("cpu_op", name, ts, dur, **{"External id": ext})


def kernel(ts, corr):
    return gpu_kernel("gemm", T0 + ts, 5, corr)


def launched(ts, corr, gpu_ts):
    return [ev("cuda_runtime", "cudaLaunchKernel", ts, 1, correlation=corr), kernel(gpu_ts, corr)]


# The H200 pattern, small: a range opened by two nested __enter__ calls that end soon after
# it starts, then the module it contains. Nesting by containment: main 0, the __enter__ frames
# 1 and 2, the range 1 (main alone encloses it: the frames that opened it end first), the
# module 2 (main and the range).
# Equal starts: a range and a frame starting together, the longer outside; equal start and
# end: a range and a frame with the same times, the range outside (the frame written first).
EVENTS = [
    py("main.py(1): main", 0, 10_000),
    py("ranges.py(10): __enter__", 10, 20),
    py("torch/autograd/profiler.py(700): __enter__", 12, 16),
    rf("wanscope/cfg/uncond", 20, 9_000),
    py("nn.Module: WanDiT_0", 40, 8_000),
    py("dit.py(350): forward", 50, 7_000),
    py("nn.Module: Block_0", 100, 6_000),  # equal start: the longer (the block) encloses
    rf("wanscope/block/ffn", 100, 5_000),
    py("nn.Module: Sequential_1", 200, 1_000),  # equal start and end: the range is outside
    rf("wanscope/block/part_marker", 200, 1_000),
    py("linear.py(130): forward", 300, 500),
    op("aten::linear", 310, 400, 1),
    op("aten::addmm", 320, 300, 2),
    *launched(400, 1, 20_000),
]
STACK = [
    "main.py(1): main",
    "wanscope/cfg/uncond",
    "nn.Module: WanDiT_0",
    "dit.py(350): forward",
    "nn.Module: Block_0",
    "wanscope/block/ffn",
    "wanscope/block/part_marker",
    "nn.Module: Sequential_1",
    "linear.py(130): forward",
    "aten::linear",
    "aten::addmm",
]


def gap_stacks(events, tmp_path):
    # a first kernel, so that the one launched above ends a gap
    events = [*launched(5, 99, 10_000), *events]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    con = open_traces([path])
    return con, [g["stack"] for d in analyze(con)["devices"] for g in d["gaps"]["largest"]]


@pytest.mark.parametrize("order", ["as_written", "reversed"])
def test_stack_containment_order(tmp_path, order):
    events = EVENTS if order == "as_written" else EVENTS[::-1]
    con, stacks = gap_stacks(events, tmp_path)
    # the depths are as the comment says: by containment, not by the ranges open at a start
    depth = dict(con.execute("SELECT name, depth FROM cpu_ops").fetchall())
    assert (depth["wanscope/cfg/uncond"], depth["nn.Module: WanDiT_0"]) == (1, 2)
    assert (depth["ranges.py(10): __enter__"], depth["torch/autograd/profiler.py(700): __enter__"]) == (1, 2)
    assert stacks == [STACK]


def test_stack_containment_order_names_the_innermost_frame_of_a_sync(tmp_path):
    """The frame of a sync is the innermost user frame by containment: here the outer frame
    starts while two ``__enter__`` calls are open and outlives them, so it is at the top beside
    them, with the inner frame under it."""
    events = [
        py("a.py(1): f", 5, 1_000),
        py("ranges.py(10): __enter__", 0, 7),
        py("ranges.py(11): __enter__", 1, 7),
        py("b.py(2): g", 10, 900),
        op("aten::item", 20, 40, 1),
        ev("cuda_runtime", "cudaStreamSynchronize", 25, 10, correlation=5),
        *launched(15, 1, 18),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    con = open_traces([path])
    depth = dict(con.execute("SELECT name, depth FROM cpu_ops").fetchall())
    assert (depth["a.py(1): f"], depth["b.py(2): g"], depth["ranges.py(11): __enter__"]) == (0, 1, 0)
    ((frame, item),) = [(s["frame"], s["op"]) for s in analyze(con)["syncs"]]
    assert (frame, item) == ("b.py(2): g", "aten::item")


H200 = REPO / "tests" / "data" / "h200_wan21_1p3b_profile_step2.json.gz"


def test_stack_containment_order_on_our_h200_profile():
    """Every listed gap's stack: ProfilerStep > wanscope/step > wanscope/cfg > the DiT module >
    the block module > wanscope/block part > that part's modules (other frames between)."""
    result = analyze(open_traces([H200]), top=50)
    stacks = [g["stack"] for d in result["devices"] for g in d["gaps"]["largest"]]
    assert len(stacks) == 50
    levels = [
        lambda f: f.startswith("ProfilerStep#"),
        lambda f: f.startswith("wanscope/step#"),
        lambda f: f.startswith("wanscope/cfg/"),
        lambda f: f.startswith("nn.Module: WanDiT_"),
        lambda f: f.startswith("nn.Module: Block_"),
        lambda f: f.startswith("wanscope/block/"),
    ]
    full = with_modules = 0
    for stack in stacks:
        at = [next((i for i, f in enumerate(stack) if level(f)), None) for level in levels]
        present = [i for i in at if i is not None]
        # the levels present are a prefix of the chain, in its order
        assert at[: len(present)] == present and present == sorted(present), stack
        assert len(set(present)) == len(present)
        if len(present) == len(levels):
            full += 1
            block, part = at[4], at[5]
            modules = [i for i, f in enumerate(stack) if f.startswith("nn.Module: ") and i > block]
            assert all(i > part for i in modules), stack  # the part's modules (a part may call none)
            with_modules += bool(modules)
    assert full >= 10 and with_modules >= 10  # most of the largest gaps come from a block part's module
