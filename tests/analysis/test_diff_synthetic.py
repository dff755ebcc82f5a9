"""``diff`` on two synthetic traces whose numbers are computed by hand in
``synthetic_traces.py``; the cases of one side without steps or GPU work, and two CPU runs
compared by their steps' CPU time."""

import pytest
from synthetic_traces import BASE_EVENTS, base_and_new, cpu_base_and_new, kernel, launch, write_trace

from wanscope.analysis.diff import diff
from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return base_and_new(tmp_path_factory.mktemp("traces"))


@pytest.fixture(scope="module")
def result(paths):
    base, new = paths
    return diff(open_traces([base]), open_traces([new]), "base.json", "new.json", top=10)


def test_sides(result):
    b, n = result["base"], result["new"]
    assert result["time_basis"] == "step"
    assert {
        k: b[k]
        for k in (
            "devices",
            "steps",
            "mean_step_ns",
            "longest_window_ns",
            "time_ns",
            "window_ns",
            "busy_ns",
            "utilization_pct",
            "kernel_count",
            "kernel_time_ns",
            "memop_count",
            "memop_time_ns",
        )
    } == {
        "devices": 1,
        "steps": 2,
        "mean_step_ns": 77_500,
        "longest_window_ns": 275_000,
        "time_ns": 77_500,
        "window_ns": 275_000,
        "busy_ns": 145_000,
        "utilization_pct": 52.7273,
        "kernel_count": 5,
        "kernel_time_ns": 140_000,
        "memop_count": 1,
        "memop_time_ns": 5_000,
    }
    assert {
        k: n[k]
        for k in (
            "steps",
            "time_ns",
            "window_ns",
            "busy_ns",
            "utilization_pct",
            "kernel_count",
            "kernel_time_ns",
            "memop_count",
        )
    } == {
        "steps": 2,
        "time_ns": 60_000,
        "window_ns": 265_000,
        "busy_ns": 115_000,
        "utilization_pct": 43.3962,
        "kernel_count": 5,
        "kernel_time_ns": 115_000,
        "memop_count": 0,
    }
    assert b["label"] == "base.json" and b["sources"][0]["format"] == "kineto"
    assert result["delta"] == {
        "time_ns": -17_500,
        "time_change_pct": -22.5806,
        "busy_ns": -30_000,
        "utilization_pct": -9.3311,
        "kernel_count": 0,
        "kernel_time_ns": -25_000,
    }
    assert result["warnings"] == []


def test_categories_and_attention(result):
    assert result["categories"] == [
        {
            "category": "attention",
            "base_count": 2,
            "new_count": 2,
            "base_ns": 80_000,
            "new_ns": 80_000,
            "delta_ns": 0,
            "base_pct": 57.1429,
            "new_pct": 69.5652,
            "delta_pct": 12.4223,
        },
        {
            "category": "triton_fused",
            "base_count": 0,
            "new_count": 3,
            "base_ns": 0,
            "new_ns": 35_000,
            "delta_ns": 35_000,
            "base_pct": 0.0,
            "new_pct": 30.4348,
            "delta_pct": 30.4348,
        },
        {
            "category": "elementwise",
            "base_count": 2,
            "new_count": 0,
            "base_ns": 30_000,
            "new_ns": 0,
            "delta_ns": -30_000,
            "base_pct": 21.4286,
            "new_pct": 0.0,
            "delta_pct": -21.4286,
        },
        {
            "category": "gemm",
            "base_count": 1,
            "new_count": 0,
            "base_ns": 30_000,
            "new_ns": 0,
            "delta_ns": -30_000,
            "base_pct": 21.4286,
            "new_pct": 0.0,
            "delta_pct": -21.4286,
        },
        {
            "category": "memset",
            "base_count": 1,
            "new_count": 0,
            "base_ns": 5_000,
            "new_ns": 0,
            "delta_ns": -5_000,
            "base_pct": None,
            "new_pct": None,
            "delta_pct": None,
        },
    ]
    assert result["attention"] == {"base_pct": 57.1429, "new_pct": 69.5652, "delta_pct": 12.4223}


def test_categories_equal_each_analysis(paths, result):
    for side, path in zip(("base", "new"), paths):
        (device,) = analyze(open_traces([path]))["devices"]
        expected = {c["category"]: (c["count"], c["total_ns"], c["pct"]) for c in device["categories"]}
        got = {
            c["category"]: (c[f"{side}_count"], c[f"{side}_ns"], c[f"{side}_pct"])
            for c in result["categories"]
            if c[f"{side}_count"]
        }
        assert got == expected


def test_kernels(result):
    k = result["kernels"]
    assert k["common"] == 1
    assert k["appeared"] == {
        "names": 2,
        "count": 3,
        "total_ns": 35_000,
        "top": [
            {
                "name": "triton_poi_fused_add_mul_0",
                "category": "triton_fused",
                "count": 2,
                "total_ns": 30_000,
                "pct": 26.087,
            },
            {"name": "triton__0d1d2de", "category": "triton_fused", "count": 1, "total_ns": 5_000, "pct": 4.3478},
        ],
    }
    assert [(r["name"], r["count"], r["total_ns"]) for r in k["disappeared"]["top"]] == [
        ("gemm_kernel", 1, 30_000),
        ("elementwise_kernel_mul", 1, 20_000),
        ("vectorized_elementwise_kernel_add", 1, 10_000),
    ]
    assert [(r["name"], r["delta_ns"]) for r in k["top_changes"]] == [
        ("gemm_kernel", -30_000),
        ("triton_poi_fused_add_mul_0", 30_000),
        ("elementwise_kernel_mul", -20_000),
        ("vectorized_elementwise_kernel_add", -10_000),
        ("triton__0d1d2de", 5_000),
        ("sdpa_flash_fwd", 0),
    ]


def test_fused(result):
    assert [
        (f["trace"], f["name"], f["kind"], f["ops"], f["count"], f["total_ns"], f["eager_ops"])
        for f in result["fused_kernels"]
    ] == [
        ("new", "triton_poi_fused_add_mul_0", "poi", ["add", "mul"], 2, 30_000, ["add", "mul"]),
        ("new", "triton__0d1d2de", "red", ["mean", "pow"], 1, 5_000, []),
    ]
    assert [(r["trace"], r["op"], r["eager_calls"], r["kernels"]) for r in result["fused_ops"]] == [
        ("new", "add", 2, ["triton_poi_fused_add_mul_0"]),
        ("new", "mul", 1, ["triton_poi_fused_add_mul_0"]),
        ("new", "mean", 0, ["triton_red_fused_mean_pow_1"]),
        ("new", "pow", 0, ["triton_red_fused_mean_pow_1"]),
    ]
    assert len(result["notes"]) == 1 and "may be partial" in result["notes"][0]


def test_top_limits_the_lists(paths):
    base, new = paths
    r = diff(open_traces([base]), open_traces([new]), top=1)
    assert [x["name"] for x in r["kernels"]["top_changes"]] == ["gemm_kernel"]
    assert r["kernels"]["disappeared"]["names"] == 3 and len(r["kernels"]["disappeared"]["top"]) == 1


def test_window_basis_when_one_side_has_no_steps(tmp_path, paths):
    no_steps = write_trace(
        tmp_path / "nosteps.json", [e for e in BASE_EVENTS if not e["name"].startswith("ProfilerStep")]
    )
    r = diff(open_traces([no_steps]), open_traces([paths[1]]))
    assert r["time_basis"] == "window"
    assert (r["base"]["time_ns"], r["new"]["time_ns"]) == (275_000, 265_000)
    assert r["delta"]["time_change_pct"] == -3.6364
    assert r["warnings"] == ["only NEW has steps with GPU work: times compared are whole windows"]


def test_nothing_in_common_still_diffs(tmp_path, paths):
    other = write_trace(tmp_path / "other.json", [launch(5000, 1), kernel("my_custom_kernel", 5010, 7, 1)])
    r = diff(open_traces([paths[0]]), open_traces([other]))
    assert r["kernels"]["common"] == 0
    assert r["warnings"] == [
        "only BASE has steps with GPU work: times compared are whole windows",
        "BASE and NEW share no kernel names: they may be different workloads; totals and shares still compare",
    ]
    assert r["new"]["time_ns"] == 7_000 and r["categories"][-1]["category"] == "memset"
    assert {c["category"]: c["new_pct"] for c in r["categories"]}["other"] == 100.0


def test_side_without_gpu_work(tmp_path, paths):
    cpu_only = write_trace(tmp_path / "cpu.json", [BASE_EVENTS[1]])  # one aten::add on the host
    r = diff(open_traces([cpu_only]), open_traces([paths[1]]))
    assert r["base"]["devices"] == 0 and r["base"]["time_ns"] is None
    assert r["delta"]["time_change_pct"] is None
    assert r["attention"] == {"base_pct": None, "new_pct": 69.5652, "delta_pct": None}
    assert r["warnings"][0].startswith("BASE (") and "has no GPU activity" in r["warnings"][0]
    assert r["time_basis"] == "window"  # a GPU time does not compare with a CPU one


def test_two_cpu_runs_compare_their_steps_cpu_time(tmp_path):
    base, new = cpu_base_and_new(tmp_path)
    r = diff(open_traces([base]), open_traces([new]), "cpu_base.json", "cpu_new.json")
    assert r["time_basis"] == "cpu_step"
    fields = ("devices", "steps", "mean_step_ns", "cpu_steps", "mean_step_cpu_ns", "longest_window_ns", "time_ns")
    assert [[r[side][k] for k in fields] for side in ("base", "new")] == [
        [0, 0, None, 2, 110_000, None, 110_000],
        [0, 0, None, 2, 82_500, None, 82_500],
    ]
    assert (r["delta"]["time_ns"], r["delta"]["time_change_pct"]) == (-27_500, -25.0)
    assert r["warnings"] == [
        "BASE (cpu_base.json) has no GPU activity: its GPU times and shares are empty",
        "NEW (cpu_new.json) has no GPU activity: its GPU times and shares are empty",
        "neither trace has GPU activity: the time compared is the mean CPU time of a step (its host range), "
        "not GPU time",
    ]
    assert r["categories"] == [] and r["attention"] == {"base_pct": None, "new_pct": None, "delta_pct": None}


def test_a_cpu_run_without_steps_has_no_time(tmp_path):
    base, new = cpu_base_and_new(tmp_path)
    no_steps = write_trace(tmp_path / "nosteps.json", [{**e, "cat": "cpu_op"} for e in BASE_EVENTS[1:2]])
    r = diff(open_traces([no_steps]), open_traces([new]))
    assert r["time_basis"] == "window"
    assert (r["base"]["cpu_steps"], r["base"]["time_ns"], r["new"]["time_ns"]) == (0, None, None)
    assert r["delta"]["time_change_pct"] is None


def test_compiled_against_itself(paths):
    r = diff(open_traces([paths[1]]), open_traces([paths[1]]))
    assert r["delta"]["time_change_pct"] == 0.0 and r["kernels"]["common"] == 3
    assert [(f["trace"], f["name"], f["eager_ops"]) for f in r["fused_kernels"]] == [
        ("base", "triton_poi_fused_add_mul_0", []),
        ("base", "triton__0d1d2de", []),
        ("new", "triton_poi_fused_add_mul_0", []),
        ("new", "triton__0d1d2de", []),
    ]
    assert r["notes"][1] == "neither trace recorded aten ops on the host, so fused ops cannot be matched to eager ops"
