"""The icicle's tree follows containment: a ``record_function`` range that opens inside the
Python call entering it (``record_function.__enter__``, as torch.profiler records it with
Python stacks) still holds everything that runs inside it."""

from __future__ import annotations

import json

from wanscope.analysis.icicle import icicle_nodes
from wanscope.trace import open_traces


def event(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def chains(nodes) -> dict[str, tuple[str, ...]]:
    """label -> labels from the thread root down to it (labels are unique in this trace)."""
    by_id = {n["id"]: n for n in nodes}
    out = {}
    for n in nodes:
        chain, m = [], n
        while m is not None:
            chain.append(m["label"])
            m = by_id.get(m["parent"])
        out[n["label"]] = tuple(reversed(chain))
    return out


def test_ranges_that_outlive_their_entering_call_keep_their_children(tmp_path):
    events = [
        event("python_function", "pipeline.py(10): denoise", 1000, 100),
        event("python_function", "profiler.py(20): __enter__", 1010, 3),  # enters the range, then returns
        event("user_annotation", "wanscope/step#0", 1011, 50),  # opens inside __enter__, outlives it
        event("python_function", "dit.py(30): forward", 1020, 30),
        event("cpu_op", "aten::linear", 1025, 10),
        event("python_function", "profiler.py(40): __exit__", 1060, 2),
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    nodes = icicle_nodes(open_traces([str(trace)]), min_share=0)
    c = chains(nodes)
    root = "rank 0 · pid 1 · thread 1"
    assert c["aten::linear"] == (
        root,
        "pipeline.py(10): denoise",
        "wanscope/step#0",
        "dit.py(30): forward",
        "aten::linear",
    )
    assert c["profiler.py(20): __enter__"] == (root, "pipeline.py(10): denoise", "profiler.py(20): __enter__")
    # starts inside the range and ends after it: not inside it either
    assert c["profiler.py(40): __exit__"] == (root, "pipeline.py(10): denoise", "profiler.py(40): __exit__")
    totals = {n["label"]: n["total_ns"] for n in nodes}
    assert (totals[root], totals["wanscope/step#0"], totals["dit.py(30): forward"]) == (100_000, 50_000, 30_000)


def test_steps_merge_into_one_subtree_and_every_thread_keeps_its_root(tmp_path):
    events = []
    for n, t0 in enumerate((1000, 2000, 3000, 4000), 1):
        events += [
            event("user_annotation", f"ProfilerStep#{n}", t0, 800),
            event("user_annotation", "nn.Module: Block_0", t0 + 10, 700),
            event("cpu_op", "aten::mm", t0 + 20, 500),
        ]
    events.append({**event("cpu_op", "aten::add", 1100, 1), "tid": 2})  # 1 us of 3.2 ms: under min_share
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    nodes = icicle_nodes(open_traces([str(trace)]))
    by_label = {n["label"]: n for n in nodes}
    step = by_label["ProfilerStep#* (4 merged)"]
    assert (step["total_ns"], step["merged"], step["kind"], step["module"]) == (3_200_000, 4, "annotation", None)
    mm = by_label["aten::mm"]
    assert (mm["total_ns"], mm["merged"], mm["module"]) == (2_000_000, 1, "Block")
    assert [n["label"] for n in nodes if n["parent"] == ""] == [
        "rank 0 · pid 1 · thread 1",
        "rank 0 · pid 1 · thread 2",
    ]
    assert "aten::add" not in by_label  # pruned, its thread's root kept
