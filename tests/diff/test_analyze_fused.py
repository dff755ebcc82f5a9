"""``analyze`` lists the fused Triton kernels per device (empty when there are none)."""

from shared_fixtures import shared_fixture
from synthetic_traces import base_and_new

from wanscope.analysis.scope import Scope
from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces


def test_triton_example():
    (d,) = analyze(open_traces([shared_fixture("kineto/hta/triton_example/triton_example.json.gz")]))["devices"]
    assert [(f["name"], f["kind"], f["ops"], f["count"], f["total_ns"], f["pct"]) for f in d["fused_kernels"]] == [
        ("triton_poi_fused_add_cos_sin_0", "poi", ["add", "cos", "sin"], 1, 1_760, 100.0)]


def test_eager_trace_has_none():
    (d,) = analyze(open_traces([shared_fixture("kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz")]))["devices"]
    assert d["fused_kernels"] == []


def test_shares_match_top_kernels_in_a_step_range(tmp_path):
    result = analyze(open_traces([base_and_new(tmp_path)[1]]), scope=Scope((2, 3)))
    (d,) = result["devices"]
    assert [(f["name"], f["ops"], f["total_ns"], f["pct"]) for f in d["fused_kernels"]] == [
        ("triton_poi_fused_add_mul_0", ["add", "mul"], 15_000, 25.0), ("triton__0d1d2de", ["mean", "pow"], 5_000, 8.3333)]
    tops = {k["name"]: k["pct"] for k in d["top_kernels"]}
    assert all(tops[f["name"]] == f["pct"] for f in d["fused_kernels"])
