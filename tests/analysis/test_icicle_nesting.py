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
    root = "rank 0 · thread 1"
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
