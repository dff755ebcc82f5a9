"""Other accelerators' device events that Kineto writes (MTIA's ``mtia_ccp_events``, as in
Holistic Trace Analysis' public test data; Cambricon MLU's, ...) are left out of the
analysis, which covers CUDA and ROCm GPU work, but never silently: counted
(``warnings.other_accelerator``) and named by category in a note."""

from __future__ import annotations

import json

import pytest

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces


def ev(cat, name, ts, dur, pid=0, tid=7, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


CUDA = [
    ev("cuda_runtime", "cudaLaunchKernel", 1_000, 1, pid=1, tid=1, correlation=1),
    ev("kernel", "gemm", 1_010, 5, device=0, stream=7, correlation=1),
]
MTIA = [
    ev("mtia_ccp_events", "mtia_kernel_a", 1_020, 30, pid=2, tid=3),
    ev("mtia_ccp_events", "mtia_kernel_b", 1_060, 30, pid=2, tid=3),
    ev("mlu_memcpy", "Memcpy HtoD", 1_100, 3, pid=4, tid=5),
]
UNKNOWN = [ev("mystery_category", "x", 1_200, 1, pid=1, tid=1)]


def write(path, events, layout):
    if layout == "native":
        blocks = [
            "  {\n    " + ",\n    ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in e.items()) + "\n  }"
            for e in events
        ]
        path.write_text('{\n  "traceEvents": [\n' + ",\n".join(blocks) + "\n  ]\n}\n")
    else:
        path.write_text(json.dumps({"traceEvents": events}, separators=(",", ":")))
    return path


@pytest.mark.parametrize("layout", ["native", "min"])
def test_other_accelerators_device_events_are_named_in_a_note(tmp_path, layout):
    r = analyze(open_traces([write(tmp_path / "t.json", CUDA + MTIA + UNKNOWN, layout)]))
    assert r["warnings"] == {"other_accelerator": 3, "unknown_category": 1}
    (d,) = r["devices"]
    assert (d["kernel_count"], d["memop_count"], d["window_ns"]) == (1, 0, 5_000)
    (note,) = [n for n in r["notes"] if "other accelerators" in n]
    assert note.startswith("3 device events of other accelerators left out: ")
    assert "mlu_memcpy (MLU) 1, mtia_ccp_events (MTIA) 2" in note


def test_other_accelerators_only(tmp_path):
    """An MTIA-only trace: no GPU activity, and a note on what was left out."""
    path = tmp_path / "a.json"
    write(path, MTIA[:2], "min")
    b = write(tmp_path / "b.json", MTIA[:1], "native")
    r = analyze(open_traces([path, b]))
    assert r["devices"] == [] and r["warnings"] == {"other_accelerator": 3}
    assert any(n.startswith("no GPU activity") for n in r["notes"])
    (note,) = [n for n in r["notes"] if "other accelerators" in n]
    assert "mtia_ccp_events (MTIA) 3" in note


def test_no_note_without_other_accelerators(tmp_path):
    r = analyze(open_traces([write(tmp_path / "t.json", CUDA, "min")]))
    assert r["warnings"] == {} and not [n for n in r["notes"] if "other accelerators" in n]
