"""The host side (``analysis.host``): self time per op and thread, the Python frames, launch
overhead and the launch queue; on a hand-built trace, on every real fixture (self times add up
to the union of each thread's ranges, computed here apart), and on a trace recorded here with
plain torch.profiler."""

from __future__ import annotations

import numpy as np
import pytest
from cli_context import run_main
from shared_fixtures import REPO, SHARED_FIXTURES
from synthetic_traces import host, kernel, launch, write_trace

from wanscope.analysis.host import host as analyze_host
from wanscope.analysis.host import op_totals
from wanscope.analysis.host_ranges import Siblings, cut_ends, host_ranges
from wanscope.analysis.scope import Scope
from wanscope.trace import open_traces
from wanscope.trace.link import nest

US = 1000

# One thread, times in us. A record_function range ("block") opens inside the Python call that
# enters it (m.py __enter__) and outlives it, as torch.profiler records them; aten::copy_ runs
# past the step's end; aten::zeros lies outside the step.
EVENTS = [
    host("ProfilerStep#1", 1000, 100, cat="user_annotation"),
    host("aten::linear", 1010, 40),
    host("aten::addmm", 1015, 30),
    launch(1020, 1, dur=10),
    kernel("gemm", 1040, 20, 1),
    host("m.py(1): __enter__", 1055, 5, cat="python_function"),
    host("block", 1058, 32, cat="user_annotation"),
    host("aten::mul", 1070, 10),
    launch(1072, 2, dur=4),
    kernel("mul", 1100, 10, 2),
    host("aten::copy_", 1095, 25),
    host("aten::zeros", 1150, 10),
]
# self, in us: launch 10, addmm 30 - 10, linear 40 - 30, __enter__ cut at block's start 3,
# block 32 - 10, mul 10 - 4, launch 4, copy_ 5 inside the step, the step 100 - (40 + 3 + 32 + 5)
SELF_US = {
    "cudaLaunchKernel": 14,
    "aten::addmm": 20,
    "aten::linear": 10,
    "m.py(1): __enter__": 3,
    "block": 22,
    "aten::mul": 6,
    "aten::copy_": 5,
    "ProfilerStep#1": 20,
}


def _ops(tmp_path, events, name="t.json"):
    h = analyze_host(open_traces([write_trace(tmp_path / name, events)]), top=100)
    (th,) = h["threads"]
    return h, th, {op["name"]: op for op in th["ops"]}


def test_self_time_by_op_inside_the_steps(tmp_path):
    h, th, ops = _ops(tmp_path, EVENTS)
    assert h["window"] == "steps"
    assert {n: op["self_ns"] for n, op in ops.items()} == {n: v * US for n, v in SELF_US.items()}
    assert th["busy_ns"] == sum(op["self_ns"] for op in th["ops"]) == 100 * US
    assert ops["aten::copy_"]["total_ns"] == 5 * US and ops["cudaLaunchKernel"]["count"] == 2
    assert ops["block"]["kind"] == "annotation" and ops["m.py(1): __enter__"]["kind"] == "python"
    assert ops["cudaLaunchKernel"]["kind"] == "runtime" and ops["ProfilerStep#1"]["self_pct"] == 20.0
    assert h["python_frames"] == [{"name": "m.py(1): __enter__", "count": 1, "total_ns": 5 * US, "self_ns": 3 * US}]


def test_launch_overhead_and_queue(tmp_path):
    h, _, _ = _ops(tmp_path, EVENTS)
    (lo,) = h["launch"]
    assert (lo["window_ns"], lo["api_calls"], lo["api_ns"], lo["launches"]) == (100 * US, 2, 14 * US, 2)
    assert lo["api_pct"] == 14.0 and lo["launches_per_s"] == 20_000.0
    assert lo["top_calls"] == [{"name": "cudaLaunchKernel", "count": 2, "total_ns": 14 * US}]
    (q,) = h["launch_queue"]
    # one kernel waiting 1020..1040 and 1072..1100 of 1020..1100: mean (20 + 28) / 80
    assert (q["launches"], q["max"], q["start_ns"], q["end_ns"]) == (2, 1, 1020 * US, 1100 * US)
    assert q["mean"] == pytest.approx(0.6)
    lengths = [n for _, n in q["timeline"]]
    assert max(lengths) == 1 and lengths[0] == 1 and 0 in lengths and len(lengths) == 200


def test_kernels_each_op_launched(tmp_path):
    rows = op_totals(open_traces([write_trace(tmp_path / "t.json", EVENTS)]))
    by_name = {r["name"]: (r["kernels"], r["kernel_ns"]) for r in rows}
    # gemm (20 us) launched inside aten::addmm inside aten::linear: the innermost op's; mul's (10 us)
    assert (by_name["aten::addmm"], by_name["aten::linear"], by_name["aten::mul"]) == (
        (1, 20 * US),
        (0, 0),
        (1, 10 * US),
    )
    assert by_name["m.py(1): __enter__"] == (0, 0)  # no Python frame encloses a launch


def test_whole_trace_without_steps(tmp_path):
    h, th, ops = _ops(tmp_path, EVENTS[1:])
    assert h["window"] == "trace"
    assert ops["aten::copy_"]["self_ns"] == 25 * US and ops["aten::zeros"]["self_ns"] == 10 * US
    # linear 40 + __enter__ 3 + block 32 (its overlap with __enter__ counted once) + copy_ 25 + zeros 10
    assert th["busy_ns"] == sum(op["self_ns"] for op in th["ops"]) == 110 * US


def test_a_step_range_selects_the_window(tmp_path):
    # a second step 2000..2100 with one op: --step-range 2:3 counts only it
    events = EVENTS + [host("ProfilerStep#2", 2000, 100, cat="user_annotation"), host("aten::add", 2010, 30)]
    con = open_traces([write_trace(tmp_path / "t.json", events)])
    (th,) = analyze_host(con, Scope((2, 3)), top=100)["threads"]
    assert {op["name"]: op["self_ns"] for op in th["ops"]} == {"ProfilerStep#2": 70 * US, "aten::add": 30 * US}
    assert th["busy_ns"] == 100 * US
    (lo,) = analyze_host(con, Scope((1, 2)), top=100)["launch"]
    assert (lo["window_ns"], lo["launches"]) == (100 * US, 2)


def test_nesting_of_ranges_that_overlap_without_nesting():
    # 0: the step 0..100; 1: enter 10..20; 2: a range opened in it 15..60; 3: an op in that 30..40;
    # 4: exit 55..70, which closes range 2 and outlives it
    start = np.array([0, 10, 15, 30, 55])
    end = np.array([100, 20, 60, 40, 70])
    ids, parent, depth = nest(np.zeros(5, np.int32), start, end)
    assert (ids.tolist(), parent.tolist(), depth.tolist()) == ([0, 1, 2, 3, 4], [-1, 0, 0, 2, 0], [0, 1, 1, 2, 1])
    parent = parent.astype(np.int32)
    cut = cut_ends(start, end, parent, Siblings.of(parent, np.array([True, False, False, False, False])))
    assert cut.tolist() == [100, 15, 55, 40, 70]


def _fixtures():
    local = sorted((REPO / "tests" / "data").glob("*.json.gz")) + sorted((REPO / "tests" / "data").glob("*.sqlite"))
    shared = sorted(SHARED_FIXTURES.glob("kineto/**/*.json.gz")) + sorted(SHARED_FIXTURES.glob("nsys/*.sqlite"))
    return local + shared


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _clipped(ranges, windows):
    if windows is None:
        return ranges
    return [(max(s, ws), min(e, we)) for s, e in ranges for ws, we in windows if s < we and e > ws]


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_self_times_add_up_to_each_threads_busy_time(path):
    con = open_traces([str(path)])
    h = analyze_host(con)
    windows = None
    if h["window"] == "steps":
        windows = {}
        for rank, s, e in con.execute("SELECT rank, start_ns, end_ns FROM steps").fetchall():
            windows.setdefault(rank, []).append((s, e))
    ranges = {}
    for rank, pid, tid, s, e in con.execute(
        "SELECT rank, pid, tid, start_ns, end_ns FROM cpu_ops UNION ALL SELECT rank, pid, tid, start_ns, end_ns FROM api_calls"
    ).fetchall():
        ranges.setdefault((rank, pid, tid), []).append((s, e))
    assert h["threads"]
    for th in h["threads"]:
        key = (th["rank"], th["pid"], th["tid"])
        union = _union_ns(_clipped(ranges[key], None if windows is None else windows.get(th["rank"], [])))
        assert th["busy_ns"] == union, key
        assert all(op["total_ns"] >= op["self_ns"] for op in th["ops"]), key
    ranges = host_ranges(con, Scope())
    for table, (total, self_ns, _) in ranges.tables.items():
        assert (self_ns >= 0).all() and (self_ns <= total).all(), table  # every range, not only the sums


# CUDA API calls that overlap other ranges without nesting (clock skew between CUPTI and the
# profiler, a driver call inside a runtime call): (events, self time in us by name)
OVERLAPS = {
    "driver_call_in_runtime_call": (
        [host("aten::add", 1000, 30), launch(1005, 1, dur=20), launch(1006, 1, "cuLaunchKernel", dur=18)],
        {"aten::add": 10, "cudaLaunchKernel": 2, "cuLaunchKernel": 18},
    ),
    "two_calls_overlap_on_a_thread_without_ops": (
        [launch(1005, 1, dur=20), launch(1010, 2, dur=20)],
        {"cudaLaunchKernel": 25},
    ),
    "call_starts_in_a_top_op": (
        [host("aten::a", 1000, 10), launch(1005, 1, dur=10)],
        {"aten::a": 5, "cudaLaunchKernel": 10},
    ),
    "call_starts_in_a_child_and_outlives_it": (
        [host("aten::linear", 1000, 100), host("aten::addmm", 1010, 80), launch(1050, 1, dur=45)],
        {"aten::linear": 15, "aten::addmm": 40, "cudaLaunchKernel": 45},
    ),
    "call_one_ns_past_its_op": (
        [host("aten::linear", 1000, 100), host("aten::addmm", 1010, 40), launch(1020, 1, dur=30.001)],
        {"aten::linear": 59.999, "aten::addmm": 10, "cudaLaunchKernel": 30.001},
    ),
    "the_same_call_twice": (
        [host("aten::add", 1000, 30), launch(1005, 1, dur=20), launch(1005, 1, dur=20)],
        {"aten::add": 10, "cudaLaunchKernel": 20},
    ),
}


@pytest.mark.parametrize("case", sorted(OVERLAPS))
def test_api_calls_that_overlap_without_nesting(tmp_path, case):
    events, want = OVERLAPS[case]
    h, th, ops = _ops(tmp_path, [*events, kernel("k", 1200, 5, 1)])
    assert {name: op["self_ns"] for name, op in ops.items()} == {k: round(v * US) for k, v in want.items()}
    ranges = [(round(ev["ts"] * US), round((ev["ts"] + ev["dur"]) * US)) for ev in events]
    assert th["busy_ns"] == _union_ns(ranges)
    (q,) = h["launch_queue"]
    assert (q["launches"], q["max"]) == (1, 1)  # one kernel, however many calls share its correlation id


def test_names_are_shown_as_they_are(tmp_path):
    """Op names are data: rich markup in them is neither read (``[/]`` would raise) nor lost, and
    control characters do not reach the terminal."""
    events = [host("q[/attn]", 1000, 10), host("[bold]x", 1020, 10), host("a\x1b[31mb", 1040, 10)]
    r = run_main("analyze", str(write_trace(tmp_path / "t.json", events)))
    assert r.returncode == 0, r.stderr
    assert "q[/attn]" in r.stdout and "[bold]x" in r.stdout and "\x1b" not in r.stdout and "a\ufffd[31mb" in r.stdout
