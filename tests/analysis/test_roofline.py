"""Rooflines (``analysis.roofline``): a synthetic trace with known kernel times gives exact
achieved rates and fractions of the roof; on the H200 captures, the attention calls' FLOPs are
4 L L_kv D N per call from their recorded shapes and the GEMMs' follow their Input Dims."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import synthetic_traces as st
from shared_fixtures import shared_fixture

from wanscope.analysis.roofline import roofline, roofline_notes
from wanscope.analysis.scope import Scope
from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

REPO = Path(__file__).resolve().parents[2]
BF = "c10::BFloat16"
H200_BF16, H200_FP32, H200_GBPS = 989.5, 67.0, 4800.0  # the table's H200 SXM row

LINEAR = [[1, 4096, 4096], [4096, 4096], [4096]]
ADDMM = [[4096], [4096, 4096], [4096, 4096], [], []]
GELU = [[1, 4096, 4096], []]


def op(name, ts, dur, dims, types=None, concrete=None):
    e = st.host(name, ts, dur)
    if dims is not None:
        types = types or [BF if d else "Scalar" for d in dims]
        e["args"] = {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete or [""] * len(dims)}
    return e


def events(shapes: bool = True, end: int = 2000):
    """Two steps (times in us from 1000: a Kineto time of 0 is no time)."""
    d = (lambda x: x) if shapes else (lambda x: None)
    evs = [
        st.step(1, 0) | {"dur": 1000},
        # linear > addmm > the launch: the GEMM goes to linear, the outermost op with a count
        op("aten::linear", 10, 100, d(LINEAR)),
        op("aten::addmm", 12, 90, d(ADDMM)),
        st.launch(20, 1),
        st.kernel("nvjet_sm90_tst_256x128_gemm", 200, 200, 1),
        # gelu with Python frames torch.profiler left open to the trace's end around and inside it
        st.host("<built-in method gelu>", 140, end - 140, cat="python_function"),
        op("aten::gelu", 150, 20, d(GELU)),
        st.host("<built-in method launch>", 152, end - 152, cat="python_function"),
        st.launch(155, 2),
        st.kernel("vectorized_elementwise_kernel<GeluCUDAKernelImpl>", 420, 50, 2),
        # an op without a count, and a launch outside any op
        op("aten::cat", 200, 10, d([[[2, 3], [2, 3]], []])),
        st.launch(202, 3),
        st.kernel("CatArrayBatchedCopy", 480, 5, 3),
        st.launch(300, 4),
        st.kernel("mystery_kernel", 500, 2, 4),
        st.step(2, 1000) | {"dur": 1000},
        op("aten::linear", 1010, 100, d(LINEAR)),
        op("aten::addmm", 1012, 90, d(ADDMM)),
        st.launch(1020, 5),
        st.kernel("nvjet_sm90_tst_256x128_gemm", 1200, 200, 5),
    ]
    return [e | {"ts": e["ts"] + 1000} for e in evs]


def write(tmp_path, evs, gpu="NVIDIA H200") -> Path:
    path = tmp_path / "t.json"
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": gpu}], "traceEvents": evs}
    path.write_text(json.dumps(doc))
    return path


# per call: FLOPs at each peak, bytes (flops.py's formulas, by hand)
LIN_F = {"bf16": 2 * 4096**3, "fp32": 4096 * 4096}
LIN_B = (3 * 4096 * 4096 + 4096) * 2
GELU_F, GELU_B = 5 * 4096 * 4096, 2 * 4096 * 4096 * 2


def at_roof(f: dict, nbytes: float, bf16=H200_BF16, fp32=H200_FP32, gbps=H200_GBPS) -> float:
    return max(f["bf16"] / (bf16 * 1e3) + f["fp32"] / (fp32 * 1e3), nbytes / gbps)


def test_achieved_rates_and_fractions_of_the_roof(tmp_path):
    con = open_traces([write(tmp_path, events())])
    (d,) = roofline(con)["devices"]
    assert d["peaks"]["matched"] == "H200 SXM" and d["peaks"]["bf16_tflops"] == H200_BF16
    assert (d["kernel_ns"], d["counted_ns"]) == (457_000, 450_000)
    assert d["counted_pct"] == pytest.approx(100 * 450 / 457)
    lin, gelu = d["ops"]  # by time lost: the GEMM first; addmm is inside linear, no row of its own
    assert (lin["name"], lin["count"], lin["kernels"], lin["gpu_ns"]) == ("aten::linear", 2, 2, 400_000)
    assert lin["input_dims"] == LINEAR and lin["dtype"] == "bf16" and lin["family"] == "gemm"
    assert lin["category"] == "gemm"
    flops = 2 * sum(LIN_F.values())
    assert (lin["flops"], lin["bytes"]) == (flops, 2 * LIN_B)
    assert lin["achieved_tflops"] == pytest.approx(flops / 400_000 / 1e3, rel=1e-12)
    assert lin["achieved_gbps"] == pytest.approx(2 * LIN_B / 400_000, rel=1e-12)
    assert lin["intensity"] == pytest.approx(flops / (2 * LIN_B), rel=1e-12)
    t = 2 * at_roof(LIN_F, LIN_B)
    assert lin["bound"] == "compute"
    assert lin["time_at_roof_ns"] == round(t) and lin["lost_ns"] == round(400_000 - t)
    assert lin["roof_pct"] == pytest.approx(100 * t / 400_000, rel=1e-12)
    assert lin["roof_tflops"] == pytest.approx(flops / t / 1e3, rel=1e-12)
    assert lin["peak_tflops"] == pytest.approx(flops / t / 1e3, rel=1e-12)  # compute-bound: the roof is the peak

    # the gelu's kernel is launched inside Python frames left open to the trace's end: still its own
    assert (gelu["name"], gelu["count"], gelu["gpu_ns"], gelu["category"]) == ("aten::gelu", 1, 50_000, "elementwise")
    assert gelu["bound"] == "memory"
    assert gelu["roof_pct"] == pytest.approx(100 * (GELU_B / H200_GBPS) / 50_000, rel=1e-12)
    assert gelu["roof_tflops"] == pytest.approx(GELU_F / GELU_B * H200_GBPS / 1e3, rel=1e-12)  # intensity x bandwidth

    assert d["uncounted"] == [
        {"name": "aten::cat", "kernels": 1, "gpu_ns": 5_000},
        {"name": "(no op)", "kernels": 1, "gpu_ns": 2_000},
    ]
    cats = {c["category"]: c for c in d["categories"]}
    assert (cats["gemm"]["kernel_ns"], cats["gemm"]["counted_ns"], cats["gemm"]["rows"]) == (400_000, 400_000, 1)
    assert cats["gemm"]["lost_ns"] == lin["lost_ns"]
    assert cats["gemm"]["roof_pct"] == pytest.approx(lin["roof_pct"], abs=1e-3)  # of the rounded time at the roof
    assert (cats["copy_cast"]["kernel_ns"], cats["copy_cast"]["counted_ns"], cats["copy_cast"]["lost_ns"]) == (
        5_000,
        0,
        None,
    )
    assert [c["category"] for c in d["categories"]][:2] == ["gemm", "elementwise"]


def test_the_window_and_the_other_row(tmp_path):
    con = open_traces([write(tmp_path, events())])
    (d,) = roofline(con, Scope((1, 2)))["devices"]  # step 1 only
    lin = d["ops"][0]
    assert (lin["count"], lin["gpu_ns"]) == (1, 200_000)
    (d,) = roofline(con, top=1)["devices"]
    assert [r["name"] for r in d["ops"]] == ["aten::linear", "other"]
    other = d["ops"][1]
    assert (other["count"], other["gpu_ns"], other["flops"]) == (1, 50_000, GELU_F)
    assert other["lost_ns"] == round(50_000 - GELU_B / H200_GBPS) and other["bound"] is None
    assert d["uncounted"] == [
        {"name": "aten::cat", "kernels": 1, "gpu_ns": 5_000},
        {"name": "other", "kernels": 1, "gpu_ns": 2_000},
    ]


def test_measured_peaks_replace_the_datasheet(tmp_path):
    con = open_traces([write(tmp_path, events())])
    (d,) = roofline(con, peak_tflops=500, peak_fp32_tflops=50, peak_bandwidth_gbps=1000)["devices"]
    assert d["peaks"]["sources"]["bf16"] == "measured" and d["peaks"]["tf32_tflops"] == 494.5
    rows = {r["name"]: r for r in d["ops"]}
    t = 2 * at_roof(LIN_F, LIN_B, bf16=500, fp32=50, gbps=1000)
    assert rows["aten::linear"]["time_at_roof_ns"] == round(t)
    assert rows["aten::gelu"]["time_at_roof_ns"] == round(GELU_B / 1000)
    # faster than these roofs allow (peaks set below what ran): more than 100%, negative time lost
    assert rows["aten::linear"]["roof_pct"] > 100 and rows["aten::linear"]["lost_ns"] < 0


def test_a_gpu_outside_the_table_has_no_roof(tmp_path):
    con = open_traces([write(tmp_path, events(), gpu="Tesla T4")])
    result = roofline(con)
    (d,) = result["devices"]
    assert d["peaks"]["matched"] is None
    assert all(r["roof_pct"] is None and r["lost_ns"] is None for r in d["ops"])
    assert d["ops"][0]["achieved_tflops"] == pytest.approx(2 * sum(LIN_F.values()) / 400_000 / 1e3)
    assert any("not in the peak table" in n and "--peak-tflops" in n for n in roofline_notes(result))
    (d,) = roofline(con, peak_tflops=65, peak_fp32_tflops=8.1, peak_bandwidth_gbps=320)["devices"]
    assert d["ops"][0]["roof_pct"] is not None


def test_without_shapes_a_note_says_how_to_record_them(tmp_path):
    con = open_traces([write(tmp_path, events(shapes=False))])
    result = analyze(con)
    roof = result["roofline"]
    assert roof["shapes_recorded"] is False
    (d,) = roof["devices"]
    assert d["ops"] == [] and d["counted_ns"] == 0 and d["kernel_ns"] == 457_000
    assert any("record_shapes=True" in n for n in result["notes"])


def test_analyze_carries_the_section_and_its_note(tmp_path):
    result = analyze(open_traces([write(tmp_path, events())]))
    assert result["schema_version"] == 4
    (d,) = result["roofline"]["devices"]
    assert d["ops"][0]["name"] == "aten::linear"
    assert any("ops without a FLOP count, most in aten::cat, (no op)" in n for n in result["notes"])


# --- the H200 captures ------------------------------------------------------------------------

# Wan2.1 1.3B at 480p (832x480, 81 frames): 12 heads of 128, 32,760 video tokens, 512 text tokens
HEADS, HEAD_DIM, TOKENS, TEXT = 12, 128, 32760, 512


def all_rows(path) -> dict:
    (d,) = roofline(open_traces([path]), top=10_000)["devices"]
    return d


def attention_checks(rows, name, layout):
    """Each attention row's FLOPs are 4 L L_kv D N per call from its recorded shapes, and the
    shapes are Wan2.1 1.3B's: self-attention (L_kv = L) and cross-attention (L_kv = 512)."""
    seen = {}
    for r in rows:
        if r["name"] != name:
            continue
        q, k = r["input_dims"][0], r["input_dims"][1]
        if layout == "BNLD":
            (b, n, lq, dq), lk = q, k[2]
        else:
            (b, lq, n, dq), lk = q, k[1]
        assert r["flops"] == r["count"] * 4 * b * lq * lk * dq * n
        kind = "self" if lk == lq else "cross"
        seen[kind] = seen.get(kind, 0) + r["count"]
        assert (b, n, lq, dq) == (1, HEADS, TOKENS, HEAD_DIM)
        assert lk == (TOKENS if kind == "self" else TEXT)
        assert r["flops"] == r["count"] * 4 * TOKENS * lk * HEAD_DIM * HEADS
    return seen


def linear_checks(rows) -> int:
    n = 0
    for r in rows:
        if r["name"] != "aten::linear":
            continue
        x, w, b = r["input_dims"]
        m, k = x[0] * x[1] if len(x) == 3 else x[0], x[-1]
        assert w[1] == k
        assert r["flops"] == r["count"] * (2 * m * k * w[0] + (m * w[0] if b else 0))
        n += r["count"]
    return n


def test_h200_diffusers_forward_attention_and_gemms():
    d = all_rows(shared_fixture("kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz"))
    assert attention_checks(d["ops"], "aten::scaled_dot_product_attention", "BNLD") == {"self": 30, "cross": 30}
    # the backends inside SDPA have no rows: their kernels belong to the outermost op
    assert not any(r["name"] == "aten::_scaled_dot_product_cudnn_attention" for r in d["ops"])
    assert linear_checks(d["ops"]) > 300
    self_attn = next(r for r in d["ops"] if r["name"].endswith("attention") and r["input_dims"][1][2] == TOKENS)
    assert self_attn["bound"] == "compute" and 30 < self_attn["roof_pct"] < 90
    assert d["counted_pct"] > 99.9


def test_our_engine_step_counts_our_attention_and_fused_ops():
    d = all_rows(REPO / "tests" / "data" / "h200_wan21_1p3b_memory_steps.json.gz")
    assert attention_checks(d["ops"], "wanscope::attention_hopper", "BLND") == {"self": 60, "cross": 60}
    assert linear_checks(d["ops"]) > 600
    d = all_rows(REPO / "tests" / "data" / "h200_wan21_1p3b_triton_step1.json.gz")
    names = {r["name"] for r in d["ops"]}
    assert {"wanscope::rms_norm_rope", "wanscope::norm_modulate", "wanscope::add_norm_modulate"} <= names
    assert "wanscope::gated_add" in names
    assert d["counted_pct"] > 99
