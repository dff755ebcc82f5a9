"""Host time and the op-level diff on traces recorded here with plain torch.profiler on the CPU:
a loop of steps, and the same loop with one more matrix multiply per step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import synthetic_traces
from test_host import _union_ns

from wanscope.analysis.diff import diff, frame_key
from wanscope.analysis.host import host
from wanscope.trace import open_traces

STEPS = 4


def record(path, extra_matmul: bool):
    """One thread for the ops, so that on a loaded machine every op slows alike and the extra
    matmul stays far the largest change (with a pool, a descheduled worker can stall a small op
    for longer than one matmul takes)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _record(path, extra_matmul)
    finally:
        torch.set_num_threads(threads)


def _record(path, extra_matmul: bool):
    x, w = torch.randn(1024, 1024), torch.randn(1024, 1024)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=STEPS)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule, with_stack=True
    ) as p:
        for _ in range(2 + STEPS):
            y = torch.relu(x @ w)
            if extra_matmul:
                y = y @ w
            y.sum().item()
            p.step()
    p.export_chrome_trace(str(path))
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("recorded")
    return record(d / "base.json", False), record(d / "new.json", True)


def test_self_times_add_up_per_thread(traces):
    for path in traces:
        con = open_traces([str(path)])
        h = host(con, top=1000)
        steps = con.execute("SELECT start_ns, end_ns FROM steps").fetchall()
        assert h["window"] == "steps" and len(steps) == STEPS
        main = next(t for t in h["threads"] if any(op["name"].startswith("ProfilerStep#") for op in t["ops"]))
        # the steps are the thread's outermost ranges in the window: busy all through them
        assert main["busy_ns"] == _union_ns(steps) == sum(op["self_ns"] for op in main["ops"])
        mm = next(op for op in main["ops"] if op["name"] == "aten::mm")
        assert mm["count"] == STEPS * (2 if path.name == "new.json" else 1)
        assert 0 < mm["self_ns"] <= mm["total_ns"]


def test_the_op_diff_names_the_extra_matmul_first(traces):
    base, new = (open_traces([str(p)]) for p in traces)
    ops = diff(base, new)["ops"]
    # the first aten op; a Python frame's self time (the interpreter's own) can swing more on a
    # loaded machine than one matmul per step
    first = next(r for r in ops["top_changes"] if r["kind"] == "op")
    assert first["name"] in ("aten::mm", "aten::matmul")
    assert first["delta_self_ns"] > 0
    mm = next(r for r in ops["top_changes"] if r["name"] == "aten::mm")
    assert (mm["base_count"], mm["new_count"]) == (STEPS, 2 * STEPS)
    assert (mm["base_kernels"], mm["new_kernels"]) == (0, 0)  # a CPU run launches no kernels


def test_frames_match_across_edits(tmp_path):
    assert frame_key("python", "m.py(12): f") == frame_key("python", "m.py(40): f") == "m.py: f"
    assert frame_key("python", "<built-in method x of T object at 0x7f00ab>") == "<built-in method x of T object>"
    assert frame_key("op", "aten::mm") == "aten::mm"

    def frame(name, ts, dur):
        return synthetic_traces.host(name, ts, dur, cat="python_function")

    # m.py's f moved from line 12 to 40 (matched); two functions called forward (lines 5 and 9,
    # then 6 and 10) stay apart, as frame_key would name each pair with one key
    base = [frame("m.py(12): f", 1000, 10), frame("m.py(5): forward", 1020, 10), frame("m.py(9): forward", 1040, 30)]
    new = [frame("m.py(40): f", 1000, 20), frame("m.py(6): forward", 1030, 10), frame("m.py(10): forward", 1050, 30)]
    ops = diff(
        *(
            open_traces([synthetic_traces.write_trace(tmp_path / f"{k}.json", ev)])
            for k, ev in (("b", base), ("n", new))
        )
    )["ops"]
    assert (ops["window"], ops["common"], ops["appeared"], ops["disappeared"]) == ("trace", 1, 2, 2)
    (f,) = [r for r in ops["top_changes"] if r["name"] == "m.py(12): f"]
    assert (f["base_count"], f["new_count"], f["base_self_ns"], f["new_self_ns"]) == (1, 1, 10_000, 20_000)
    assert sorted(r["name"] for r in ops["top_changes"] if r["base_count"] == 0) == [
        "m.py(10): forward",
        "m.py(6): forward",
    ]
