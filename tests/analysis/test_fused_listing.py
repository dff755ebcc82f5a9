"""The fused-kernel listing on traces: the real HTA Triton example (one Inductor kernel
launched by cuLaunchKernel) and the synthetic compiled trace (an old-style GPU name whose
ops come from the host range Inductor opened around the launch)."""

from shared_fixtures import shared_fixture
from synthetic_traces import base_and_new

from wanscope.analysis.fused import aten_calls, fused_kernels, ops_summary
from wanscope.analysis.scope import Scope
from wanscope.trace import open_traces

TRITON_EXAMPLE = "kineto/hta/triton_example/triton_example.json.gz"


def test_triton_example_listing():
    con = open_traces([shared_fixture(TRITON_EXAMPLE)])
    assert fused_kernels(con) == {
        (0, 0): [
            {
                "name": "triton_poi_fused_add_cos_sin_0",
                "launched_as": "triton_poi_fused_add_cos_sin_0",
                "kind": "poi",
                "ops": ["add", "cos", "sin"],
                "unmatched": [],
                "ops_from": "name",
                "suffix": None,
                "count": 1,
                "total_ns": 1760,
                "mean_ns": 1760,
                "min_ns": 1760,
                "max_ns": 1760,
                "pct": 100.0,
            }
        ]
    }
    assert aten_calls(con) == {}  # the compiled region ran no aten ops on the host


def test_synthetic_listing_and_op_summary(tmp_path):
    base_path, new_path = base_and_new(tmp_path)
    base, new = open_traces([base_path]), open_traces([new_path])
    (listing,) = fused_kernels(new, per_device=False).values()
    assert listing == [
        {
            "name": "triton_poi_fused_add_mul_0",
            "launched_as": "triton_poi_fused_add_mul_0",
            "kind": "poi",
            "ops": ["add", "mul"],
            "unmatched": [],
            "ops_from": "name",
            "suffix": None,
            "count": 2,
            "total_ns": 30_000,
            "mean_ns": 15_000,
            "min_ns": 15_000,
            "max_ns": 15_000,
            "pct": 26.087,
        },
        {
            "name": "triton__0d1d2de",
            "launched_as": "triton_red_fused_mean_pow_1",
            "kind": "red",
            "ops": ["mean", "pow"],
            "unmatched": [],
            "ops_from": "launch_range",
            "suffix": "0d1d2de",
            "count": 1,
            "total_ns": 5_000,
            "mean_ns": 5_000,
            "min_ns": 5_000,
            "max_ns": 5_000,
            "pct": 4.3478,
        },
    ]
    assert fused_kernels(new) == {(0, 0): listing}  # one device: the same rows
    assert fused_kernels(base) == {}
    eager = aten_calls(base)
    assert eager == {"add": 2, "mul": 1}
    assert ops_summary(listing, eager, aten_calls(new)) == [
        {
            "op": "add",
            "eager_calls": 2,
            "compiled_calls": 0,
            "kernels": ["triton_poi_fused_add_mul_0"],
            "launches": 2,
            "total_ns": 30_000,
        },
        {
            "op": "mul",
            "eager_calls": 1,
            "compiled_calls": 0,
            "kernels": ["triton_poi_fused_add_mul_0"],
            "launches": 2,
            "total_ns": 30_000,
        },
        {
            "op": "mean",
            "eager_calls": 0,
            "compiled_calls": 0,
            "kernels": ["triton_red_fused_mean_pow_1"],
            "launches": 1,
            "total_ns": 5_000,
        },
        {
            "op": "pow",
            "eager_calls": 0,
            "compiled_calls": 0,
            "kernels": ["triton_red_fused_mean_pow_1"],
            "launches": 1,
            "total_ns": 5_000,
        },
    ]


def test_listing_follows_the_step_scope(tmp_path):
    new = open_traces([base_and_new(tmp_path)[1]])
    (rows,) = fused_kernels(new, Scope((2, 3))).values()  # step 2 only: 15 + 40 + 5 us of kernels
    assert [(r["name"], r["count"], r["total_ns"], r["pct"]) for r in rows] == [
        ("triton_poi_fused_add_mul_0", 1, 15_000, 25.0),
        ("triton__0d1d2de", 1, 5_000, 8.3333),
    ]
