"""The headline numbers on the real H200 Wan2.1 trace.

Expected values were computed with exact decimal arithmetic, independently of our code
(issue 2, "Must hold")."""

import pytest
from shared_fixtures import shared_fixture

from wanscope.analysis.summary import analyze
from wanscope.data import default_trace
from wanscope.trace import open_traces

H200 = "kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz"


@pytest.fixture(scope="module")
def result():
    return analyze(open_traces([shared_fixture(H200)]))


def test_window_busy_utilization(result):
    (d,) = result["devices"]
    assert (d["rank"], d["device"]) == (0, 0)
    assert d["window_ns"] == 611_124_155
    assert d["busy_ns"] == 606_512_150
    assert d["utilization_pct"] == pytest.approx(99.2453, abs=5e-5)
    assert d["kernel_count"] == 1_896
    assert d["memop_count"] == 301
    assert d["kernel_time_ns"] == 606_202_235
    assert d["kernel_busy_ns"] == 606_202_235  # one stream: no kernel overlap


def test_top_kernel_is_cudnn_attention(result):
    top = result["devices"][0]["top_kernels"]
    assert top[0]["name"].startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_")
    assert top[0]["count"] == 60
    assert top[0]["total_ns"] == 353_335_184
    assert top[0]["pct"] == pytest.approx(58.29, abs=0.005)
    assert len(top) == 11 and top[-1]["name"] == "other"
    assert sum(k["total_ns"] for k in top) == 606_202_235
    assert sum(k["count"] for k in top) == 1_896


def test_categories_reconcile(result):
    cats = {c["category"]: c for c in result["devices"][0]["categories"]}
    assert cats["attention"]["total_ns"] == 353_335_184
    assert cats["memset"]["count"] == 301 and cats["memset"]["pct"] is None
    kernel_cats = [c for c in cats.values() if c["pct"] is not None]
    assert sum(c["total_ns"] for c in kernel_cats) == 606_202_235
    assert sum(c["pct"] for c in kernel_cats) == pytest.approx(100.0, abs=1e-3)


def test_gaps_and_the_stack_behind_the_largest(result):
    g = result["devices"][0]["gaps"]
    assert g["count"] == 2_196
    assert g["total_ns"] == 4_612_005
    assert sum(b["count"] for b in g["histogram"].values()) == 2_196
    assert sum(b["total_ns"] for b in g["histogram"].values()) == 4_612_005
    big = g["largest"][0]
    assert big["dur_ns"] == 205_663
    assert big["next_op"]["correlation"] == 55
    assert "cudnn::engines_precompiled::nchwToNhwcKernel" in big["next_op"]["name"]
    assert big["launch"]["api"] == "cudaLaunchKernel"
    stack = big["stack"]
    wanted = [
        "diffusers/models/transformers/transformer_wan.py(628): forward",
        "nn.Module: Conv3d_0",
        "aten::conv3d",
        "aten::cudnn_convolution",
    ]
    positions = [stack.index(w) for w in wanted]
    assert positions == sorted(positions)
    assert stack[-1] == "aten::cudnn_convolution"
    assert stack[0] == "wan_baseline.py(106): <module>"  # outermost first


def test_syncs_and_warnings(result):
    # The capture script synchronized twice around the forward; nothing inside it synced.
    assert [s["api"] for s in result["syncs"]] == ["cudaDeviceSynchronize"] * 2
    assert result["syncs"][0]["wait_ns"] == 292_921_806
    assert result["syncs"][0]["frame"] == "wan_baseline.py(96): trace"
    # 187 flow ends and 2 flow starts without their other half, as Kineto wrote them.
    assert result["warnings"] == {"unpaired_flow": 189}
    assert result["steps"] == []


def test_embedded_default_is_the_same_trace():
    con = open_traces([default_trace()])
    assert analyze(con)["devices"][0]["busy_ns"] == 606_512_150
