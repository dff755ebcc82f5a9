"""Memory from PyTorch's memory events, on traces recorded here with plain torch.profiler
(``profile_memory=True``): a program holds three 64 MiB tensors at once, then frees them."""

from __future__ import annotations

import json

import pytest

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

torch = pytest.importorskip("torch")
MIB = 1 << 20


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("memory") / "trace.json"
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        held = [torch.ones(16 * MIB) for _ in range(3)]  # 3 x 64 MiB of float32
        del held
        torch.randn(8, 8) @ torch.randn(8, 8)
    prof.export_chrome_trace(str(path))
    return path


def test_the_peak_is_the_tensors_held_at_once(recorded):
    (m,) = analyze(open_traces([recorded]))["memory"]
    assert (m["rank"], m["device"]) == (0, -1)  # the CPU
    events = json.loads(recorded.read_text())["traceEvents"]
    memory = sorted((e for e in events if e["name"] == "[memory]"), key=lambda e: e["ts"])
    # the CPU allocator rounds nothing: three blocks of 64 MiB over what was allocated before
    # the first of them (the first event)
    baseline = memory[0]["args"]["Total Allocated"] - memory[0]["args"]["Bytes"]
    assert memory[0]["args"]["Bytes"] == 64 * MIB and m["peak_allocated_bytes"] - baseline == 192 * MIB
    assert m["at_peak"][0] == {"name": "aten::ones", "bytes": 192 * MIB, "blocks": 3}
    assert [m["peak_ns"], m["peak_allocated_bytes"]] in [p[:2] for p in m["timeline"]]
    assert m["events"] == len(memory)
    assert m["peak_allocated_bytes"] == max(e["args"]["Total Allocated"] for e in memory)


def test_a_trace_without_memory_events_says_so(tmp_path):
    path = tmp_path / "t.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.randn(8, 8) @ torch.randn(8, 8)
    prof.export_chrome_trace(str(path))
    doc = analyze(open_traces([path]))
    assert doc["memory"] == []
    assert (
        "no memory events in the trace: record them with torch.profiler's profile_memory=True "
        "(wanscope profile --memory) for peak memory and what holds it" in doc["notes"]
    )


def test_a_free_pairs_with_its_allocation_by_address(tmp_path):
    """Built here: two blocks at addresses 1 and 2 (10 and 20 bytes), 1 freed before the peak
    (30 = 20 + 10 allocated at address 1 again), then everything freed."""

    def mem(ts, total, addr):
        args = {"Total Allocated": total, "Total Reserved": 64, "Addr": addr, "Device Type": 1, "Device Id": 0}
        return {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "args": args,
        }

    op = {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 1004, "dur": 10, "args": {}}
    events = [
        op,
        mem(1000, 10, 1),
        mem(1005, 30, 2),
        mem(1010, 20, 1),
        mem(1012, 30, 1),
        mem(1020, 10, 2),
        mem(1030, 0, 1),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (m,) = analyze(open_traces([path]))["memory"]
    assert (m["device"], m["peak_allocated_bytes"], m["peak_ns"], m["peak_reserved_bytes"]) == (0, 30, 1_005_000, 64)
    # at the first peak (1005): block 1 (10 bytes, outside any op) and block 2 (20, in aten::empty)
    assert m["at_peak"] == [
        {"name": "aten::empty", "bytes": 20, "blocks": 1},
        {"name": "(no op)", "bytes": 10, "blocks": 1},
    ]


def test_memory_events_without_a_usable_total_or_device_are_counted(tmp_path):
    def mem(ts, total, device=0):
        args = {"Total Allocated": total, "Total Reserved": 0, "Addr": 1, "Device Type": 1, "Device Id": device}
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "args": args}

    big = 2**63 - 1
    events = [mem(1000, 10), mem(1001, -5), mem(1002, "abc"), mem(1003, 20, device=-5), mem(1004, big), mem(1005, 0)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    doc = analyze(open_traces([path]))
    assert doc["warnings"] == {"malformed_event": 3}
    (m,) = doc["memory"]
    # the largest total, and the changes between totals as wide as they come without overflow
    assert (m["events"], m["peak_allocated_bytes"]) == (3, big)


def test_the_h200_capture_of_a_dit_loop():
    """tests/data/h200_wan21_1p3b_memory_steps.json.gz: ``wanscope profile --memory`` of
    benchmarks/memory_trace_program.py on an H200 (2026-12-02, random weights). The peak is the
    largest total the events report, read here apart from the ingest; the blocks live at the peak
    add up to no more than it."""
    import gzip
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "data" / "h200_wan21_1p3b_memory_steps.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    gpu = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    doc = analyze(open_traces([path]))
    (m,) = [m for m in doc["memory"] if m["device"] == 0]
    assert m["events"] == len(gpu) == 9020
    assert m["peak_allocated_bytes"] == max(a["Total Allocated"] for a in gpu)
    assert m["peak_reserved_bytes"] == max(a["Total Reserved"] for a in gpu)
    assert 0 < sum(row["bytes"] for row in m["at_peak"]) <= m["peak_allocated_bytes"]
    assert [s["step"] for s in doc["steps"]] == [1, 2] and doc["host"]["window"] == "steps"
