"""``analyze`` lists the fused Triton kernels per device (empty when there are none)."""

from shared_fixtures import REPO, shared_fixture
from synthetic_traces import base_and_new

from wanscope.analysis.scope import Scope
from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces


def test_triton_example():
    (d,) = analyze(open_traces([shared_fixture("kineto/hta/triton_example/triton_example.json.gz")]))["devices"]
    assert [(f["name"], f["kind"], f["ops"], f["count"], f["total_ns"], f["pct"]) for f in d["fused_kernels"]] == [
        ("triton_poi_fused_add_cos_sin_0", "poi", ["add", "cos", "sin"], 1, 1_760, 100.0)
    ]


def test_eager_trace_has_none():
    (d,) = analyze(open_traces([shared_fixture("kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz")]))["devices"]
    assert d["fused_kernels"] == []


def test_shares_match_top_kernels_in_a_step_range(tmp_path):
    result = analyze(open_traces([base_and_new(tmp_path)[1]]), scope=Scope((2, 3)))
    (d,) = result["devices"]
    assert [(f["name"], f["ops"], f["total_ns"], f["pct"]) for f in d["fused_kernels"]] == [
        ("triton_poi_fused_add_mul_0", ["add", "mul"], 15_000, 25.0),
        ("triton__0d1d2de", ["mean", "pow"], 5_000, 8.3333),
    ]
    tops = {k["name"]: k["pct"] for k in d["top_kernels"]}
    assert all(tops[f["name"]] == f["pct"] for f in d["fused_kernels"])


def test_means_are_whole_nanoseconds():
    # every time is integer ns, means rounded: 13,107,907 ns / 30 launches = 436,930.23 -> 436,930
    (d,) = analyze(open_traces([REPO / "tests" / "data" / "h200_diffusers_wan21_1p3b_compiled_forward.json.gz"]))[
        "devices"
    ]
    fused = d["fused_kernels"][0]
    assert (fused["name"], fused["count"], fused["total_ns"], fused["mean_ns"]) == (
        "triton_red_fused__fused_rms_norm_add_copy_mul_slice_sub_unbind_view_1",
        30,
        13_107_907,
        436_930,
    )
    top = d["top_kernels"][0]
    assert (top["count"], top["total_ns"], top["mean_ns"]) == (60, 361_910_729, 6_031_845)  # 6,031,845.48
    rows = d["fused_kernels"] + d["top_kernels"]
    assert all(type(r["mean_ns"]) is int and r["mean_ns"] == round(r["total_ns"] / r["count"]) for r in rows)
