"""FLOPs and bytes per op family (``analysis.flops``) against hand-counted shapes; the argument
positions it reads against the schemas of the installed torch, and against what torch.profiler
records on the CPU."""

from __future__ import annotations

import json

import pytest

from wanscope.analysis import flops
from wanscope.analysis.flops import count

BF, HALF, F32, F8 = "c10::BFloat16", "c10::Half", "float", "c10::Float8_e4m3fn"


def c(name, dims, types=None, concrete=None):
    """``count`` of one call given as Python lists (types default: the dims' entries as bf16
    tensors, [] as a Scalar)."""
    if types is None:
        types = [BF if d else "Scalar" for d in dims]
    if concrete is None:
        concrete = [""] * len(dims)
    return count(name, json.dumps(dims), json.dumps(types), json.dumps(concrete))


def units(result) -> dict[str, float]:
    return dict(result.flops)


# --- gemm -------------------------------------------------------------------------------------


def test_mm_is_2mnk_and_reads_both_operands_writes_the_product():
    r = c("aten::mm", [[64, 128], [128, 32]])
    assert r.family == "gemm" and r.dtype == "bf16"
    assert units(r) == {"bf16": 2 * 64 * 128 * 32}
    assert r.bytes == (64 * 128 + 128 * 32 + 64 * 32) * 2


def test_addmm_adds_one_flop_per_output_for_the_bias_at_the_fp32_peak():
    r = c("aten::addmm", [[32], [64, 128], [128, 32], [], []], [HALF, HALF, HALF, "Scalar", "Scalar"])
    assert units(r) == {"fp16": 2 * 64 * 128 * 32, "fp32": 64 * 32}
    assert r.bytes == (64 * 128 + 128 * 32 + 64 * 32 + 32) * 2


def test_bmm_fp32_runs_at_the_fp32_peak():
    r = c("aten::bmm", [[4, 8, 16], [4, 16, 2]], [F32, F32])
    assert units(r) == {"fp32": 2 * 4 * 8 * 16 * 2}
    assert r.bytes == (4 * 8 * 16 + 4 * 16 * 2 + 4 * 8 * 2) * 4


def test_addmm_with_a_gelu_epilogue():
    dims = [[256], [64, 128], [128, 256], [], [], []]
    r = c("aten::_addmm_activation", dims, [BF, BF, BF, "Scalar", "Scalar", "Scalar"], ["", "", "", "1", "1", "True"])
    assert units(r) == {"bf16": 2 * 64 * 128 * 256, "fp32": (1 + 9) * 64 * 256}  # bias, tanh GELU
    relu = c("aten::_addmm_activation", dims, None, ["", "", "", "1", "1", "False"])
    assert units(relu)["fp32"] == 2 * 64 * 256


def test_baddbmm():
    r = c("aten::baddbmm", [[4, 8, 2], [4, 8, 16], [4, 16, 2], [], []])
    assert units(r) == {"bf16": 2 * 4 * 8 * 16 * 2, "fp32": 4 * 8 * 2}


def test_matmul_broadcasts_batch_dims_and_takes_vectors():
    r = c("aten::matmul", [[3, 1, 5, 6], [2, 6, 7]])  # batch (3, 2), out [3, 2, 5, 7]
    assert units(r) == {"bf16": 2 * 3 * 2 * 5 * 6 * 7}
    assert r.bytes == (3 * 5 * 6 + 2 * 6 * 7 + 3 * 2 * 5 * 7) * 2
    r = c("aten::matmul", [[6], [6, 7]])  # a vector times a matrix: [7]
    assert units(r) == {"bf16": 2 * 6 * 7}
    assert r.bytes == (6 + 6 * 7 + 7) * 2
    assert c("aten::matmul", [[3, 5], [6, 7]]) is None  # inner dims differ


def test_linear_flattens_leading_dims():
    r = c("aten::linear", [[2, 10, 16], [32, 16], [32]])
    assert units(r) == {"bf16": 2 * 20 * 16 * 32, "fp32": 20 * 32}
    assert r.bytes == (2 * 10 * 16 + 32 * 16 + 32 + 20 * 32) * 2
    r = c("aten::linear", [[2, 10, 16], [32, 16], []], [BF, BF, ""])  # no bias
    assert units(r) == {"bf16": 2 * 20 * 16 * 32}


def test_scaled_mm_fp8_with_scales_bias_and_bf16_out():
    dims = [[64, 128], [128, 32], [64, 1], [1, 32], [32], [], [], []]
    types = [F8, F8, F32, F32, BF, "", "Scalar", "Scalar"]
    r = c("aten::_scaled_mm", dims, types, ["", "", "", "", "", "", "15", "False"])
    assert units(r) == {"fp8": 2 * 64 * 128 * 32, "fp32": 64 * 32}
    assert r.bytes == 64 * 128 + 128 * 32 + 64 * 32 * 2 + 32 * 2 + 64 * 4 + 32 * 4


# --- convolution ------------------------------------------------------------------------------

CONV = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]
CONV_TYPES = [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]


def test_conv2d_strided_padded_runs_at_tf32():
    r = c("aten::conv2d", [[2, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []], CONV_TYPES, CONV)
    # out [2, 4, 4, 4]: (8 + 2 - 2 - 1) // 2 + 1 = 4
    assert r.family == "conv"
    assert units(r) == {"tf32": 2 * 2 * 4 * 4 * (4 * 3 * 3 * 3)}
    assert r.bytes == (2 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 2 * 4 * 4 * 4) * 4


def test_wan_patch_embedding_conv3d():
    """Wan2.1 1.3B's patch embedding at 480p: [1, 16, 21, 60, 104] by [1536, 16, 1, 2, 2],
    stride (1, 2, 2): out [1, 1536, 21, 30, 52], 32,760 positions."""
    dims = [[1, 16, 21, 60, 104], [1536, 16, 1, 2, 2], [1536], [], [], [], []]
    types = [BF, BF, BF, "ScalarList", "ScalarList", "ScalarList", "Scalar"]
    r = c("aten::conv3d", dims, types, ["", "", "", "[1, 2, 2]", "[0, 0, 0]", "[1, 1, 1]", "1"])
    assert units(r) == {"bf16": 2 * 32760 * 1536 * 16 * 4, "fp32": 1536 * 32760}
    assert r.bytes == (16 * 21 * 60 * 104 + 1536 * 16 * 4 + 1536 + 1536 * 32760) * 2
    # cudnn_convolution takes padding before stride
    cudnn = [[1, 16, 21, 60, 104], [1536, 16, 1, 2, 2], [], [], [], [], [], [], []]
    t = [BF, BF, "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"]
    r2 = c("aten::cudnn_convolution", cudnn, t, ["", "", "[0, 0, 0]", "[1, 2, 2]", "[1, 1, 1]", "1", "", "", ""])
    assert units(r2) == {"bf16": 2 * 32760 * 1536 * 16 * 4}


def test_grouped_conv1d():
    r = c("aten::conv1d", [[1, 8, 100], [8, 1, 5], [], [], [], [], []], None, ["", "", "", "[1]", "[2]", "[1]", "8"])
    assert units(r) == {"bf16": 2 * 1 * 100 * (8 * 1 * 5)}  # depthwise: C_in / groups = 1


def test_transposed_convolution():
    dims = [[1, 4, 5, 5], [4, 2, 3, 3], [], [], [], [], [], []]
    types = [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"]
    r = c("aten::conv_transpose2d", dims, types, ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1", "[1, 1]"])
    # out (5 - 1) * 2 - 2 + (3 - 1) + 1 + 1 = 10, C_out 2; each input position scatters the kernel
    assert units(r) == {"tf32": 2 * 25 * (4 * 2 * 3 * 3)}
    assert r.bytes == (4 * 25 + 4 * 2 * 9 + 2 * 100) * 4


def test_convolution_backward_counts_the_gradients_it_computes():
    dims = [[2, 4, 4, 4], [2, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], [], [], [], []]
    types = [F32, F32, F32] + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    concrete = ["", "", "", "[4]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"]
    r = c("aten::convolution_backward", dims, types, concrete)
    assert units(r) == {"tf32": 2 * (2 * 2 * 4 * 4 * 108)}  # grad_input and grad_weight
    assert r.bytes == (128 + 384 + 108 + 384 + 108) * 4


def test_string_padding_is_not_counted():
    """padding="same" is a string, which torch.profiler does not record."""
    types = [F32, F32, "", "ScalarList", "", "ScalarList", "Scalar"]
    assert c("aten::conv2d", [[2, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []], types, CONV) is None


# --- attention --------------------------------------------------------------------------------

SDPA_TYPES = [BF, BF, BF, "", "Scalar", "Scalar", "", "Scalar"]


def sdpa(q, k, v, causal="False"):
    return c(
        "aten::scaled_dot_product_attention",
        [q, k, v, [], [], [], [], []],
        SDPA_TYPES,
        ["", "", "", "", "0.", causal, "", "False"],
    )


def test_sdpa_self_and_cross_attention_at_wan_shapes():
    """4 B N L L_kv D: Wan2.1 1.3B at 480p, 12 heads of 128, 32,760 video tokens, 512 text tokens."""
    r = sdpa([1, 12, 32760, 128], [1, 12, 32760, 128], [1, 12, 32760, 128])
    assert r.family == "attention" and r.total_flops == 4 * 12 * 32760 * 32760 * 128
    assert units(r) == {"bf16": 4 * 12 * 32760 * 32760 * 128}
    assert r.bytes == 4 * 12 * 32760 * 128 * 2  # q, k, v, o
    r = sdpa([1, 12, 32760, 128], [1, 12, 512, 128], [1, 12, 512, 128])
    assert r.total_flops == 4 * 12 * 32760 * 512 * 128
    assert r.bytes == (2 * 12 * 32760 * 128 + 2 * 12 * 512 * 128) * 2


def test_causal_halves_gqa_counts_query_heads_and_dv_may_differ():
    assert sdpa([1, 8, 16, 64], [1, 8, 16, 64], [1, 8, 16, 64], causal="True").total_flops == 2 * 8 * 16 * 16 * 64
    assert sdpa([1, 8, 16, 64], [1, 2, 32, 64], [1, 2, 32, 64]).total_flops == 4 * 8 * 16 * 32 * 64
    r = sdpa([1, 8, 16, 64], [1, 8, 32, 64], [1, 8, 32, 32])
    assert r.total_flops == 2 * 8 * 16 * 32 * 64 + 2 * 8 * 16 * 32 * 32
    assert r.bytes == (8 * 16 * 64 + 8 * 32 * 64 + 8 * 32 * 32 + 8 * 16 * 32) * 2


def test_backends_and_their_layouts():
    q, k = [2, 64, 4, 32], [2, 128, 4, 32]  # [B, L, N, D]
    dims = [q, k, k] + [[]] * 7
    types = [BF] * 3 + [""] * 2 + ["Scalar"] * 5
    concrete = [""] * 8 + ["True", "False"]  # is_causal at 8
    r = c("aten::_flash_attention_forward", dims, types, concrete)
    assert r.total_flops == 4 * 2 * 4 * 64 * 128 * 32 / 2
    assert r.bytes == (2 * 64 * 4 * 32 * 2 + 2 * 128 * 4 * 32 * 2) * 2
    varlen = c("aten::_flash_attention_forward", [[100, 4, 32], [100, 4, 32], [100, 4, 32]] + [[]] * 7, types, concrete)
    assert varlen is None  # per-sequence lengths are not recorded
    eff = [[2, 64, 4, 32], [2, 128, 4, 32], [2, 128, 4, 32]] + [[]] * 7
    mask_type = [""] * 9 + ["1"]  # custom_mask_type 1: causal
    assert c("aten::_efficient_attention_forward", eff, None, mask_type).total_flops == 4 * 2 * 4 * 64 * 128 * 32 / 2
    bnld = [[1, 12, 256, 64]] * 3 + [[]] * 6
    cudnn = c("aten::_scaled_dot_product_cudnn_attention", bnld, None, [""] * 4 + ["False", "0.", "True", "False", ""])
    assert cudnn.total_flops == 2 * 12 * 256 * 256 * 64  # is_causal at 6


def test_our_attention_ops_run_their_8bit_products_at_the_8bit_peaks():
    q = [1, 32760, 12, 128]
    types = [BF, BF, BF, "Scalar"]
    full = 2 * 12 * 32760 * 32760 * 128  # each of Q K^T and P V
    assert units(c("wanscope::attention_hopper", [q, q, q, []], types, ["", "", "", "False"])) == {"bf16": 2 * full}
    assert units(c("wanscope::attention_hopper", [q, q, q, []], types, ["", "", "", "True"])) == {
        "int8": full,
        "bf16": full,
    }
    assert units(c("wanscope::attention_int8", [q, q, q, []], types, ["", "", "", "True"])) == {
        "int8": full,
        "fp8": full,
    }
    assert units(c("wanscope::attention_int8", [q, q, q, []], types, ["", "", "", "False"])) == {
        "int8": full,
        "bf16": full,
    }
    cross = c("wanscope::attention_hopper", [q, [1, 512, 12, 128], [1, 512, 12, 128], []], types, ["", "", "", "False"])
    assert cross.total_flops == 4 * 12 * 32760 * 512 * 128


# --- elementwise, norms, softmax, reductions ---------------------------------------------------


def test_binary_ops_broadcast_and_promote():
    r = c("aten::add", [[4, 1, 8], [3, 8], []], [BF, BF, "Scalar"], ["", "", "1"])
    assert r.family == "elementwise" and units(r) == {"fp32": 4 * 3 * 8}
    assert r.bytes == (4 * 8 + 3 * 8 + 4 * 3 * 8) * 2
    assert units(c("aten::add", [[4, 1, 8], [3, 8], []], [BF, BF, "Scalar"], ["", "", "2"])) == {"fp32": 2 * 96}
    mixed = c("aten::mul", [[10, 8], [8]], [BF, F32])  # bf16 with fp32: an fp32 result
    assert mixed.bytes == 80 * 2 + 8 * 4 + 80 * 4
    eq = c("aten::eq", [[10], [10]])
    assert eq.bytes == 10 * 2 + 10 * 2 + 10  # a bool result


def test_in_place_ops_write_their_first_input_and_copies_have_no_flops():
    r = c("aten::mul_", [[10], [10]])
    assert units(r) == {"fp32": 10} and r.bytes == (10 + 10 + 10) * 2
    cp = c("aten::copy_", [[100], [100], []], [BF, F32, "Scalar"])
    assert cp.total_flops == 0 and cp.bytes == 100 * 4 + 100 * 2


def test_activations():
    assert units(c("aten::gelu", [[1000], []], [BF, ""])) == {"fp32": 5 * 1000}  # approximate not recorded: "none"
    assert units(c("aten::silu", [[1000]])) == {"fp32": 5 * 1000}
    assert c("aten::silu", [[1000]]).bytes == 2 * 1000 * 2
    assert units(c("aten::sigmoid", [[10]])) == {"fp32": 40}


def test_norms():
    ln = [[2, 1536], [], [], [], [], []]
    types = [F32, "ScalarList", "", "", "Scalar", "Scalar"]
    r = c("aten::layer_norm", ln, types)
    assert r.family == "norm" and units(r) == {"fp32": 5 * 3072} and r.bytes == 2 * 3072 * 4
    ln[2], ln[3], types[2], types[3] = [1536], [1536], F32, F32
    r = c("aten::layer_norm", ln, types)
    assert units(r) == {"fp32": 7 * 3072} and r.bytes == (2 * 3072 + 2 * 1536) * 4
    rms = c("aten::rms_norm", [[2, 64], [], [64], []], [BF, "ScalarList", BF, "Scalar"])
    assert units(rms) == {"fp32": 4 * 128} and rms.bytes == (2 * 128 + 64) * 2
    gn = c("aten::group_norm", [[2, 32, 4, 4], [], [32], [32], [], []], [BF, "Scalar", BF, BF, "Scalar", "Scalar"])
    assert units(gn) == {"fp32": 7 * 1024}
    bn_dims = [[2, 3, 4], [3], [3], [3], [3], [], [], [], []]
    bn_types = [BF] * 5 + ["Scalar"] * 4
    bn = c("aten::batch_norm", bn_dims, bn_types, [""] * 5 + ["False", "0.1", "1e-05", "True"])
    assert units(bn) == {"fp32": 4 * 24}  # inference: centering and scaling, then the affine pair


def test_softmax_and_reduction():
    r = c("aten::softmax", [[4, 10], [], []], [BF, "Scalar", "Scalar"], ["", "-1", "6"])  # dtype=float32
    assert r.family == "softmax" and units(r) == {"fp32": 5 * 40} and r.bytes == 40 * 2 + 40 * 4
    r = c("aten::_softmax", [[4, 10], [], []], [BF, "Scalar", "Scalar"], ["", "-1", "True"])  # half_to_float
    assert r.bytes == 40 * 2 + 40 * 4
    s = c("aten::sum", [[4, 5, 6], [], [], []], [BF, "ScalarList", "Scalar", ""], ["", "[1, 2]", "True", ""])
    assert s.family == "reduction" and units(s) == {"fp32": 120} and s.bytes == 120 * 2 + 4 * 2


def test_our_fused_norm_ops():
    x, w, cs = [1, 32760, 1536], [1536], [32760, 1, 64]
    r = c("wanscope::rms_norm_rope", [x, w, cs, cs, [], []], [BF, F32, F32, F32, "Scalar", "Scalar"])
    assert units(r) == {"fp32": (3 + 1 + 3) * 32760 * 1536}  # RMSNorm with weight, then RoPE
    assert r.bytes == 2 * 32760 * 1536 * 2 + 1536 * 4 + 2 * 32760 * 64 * 4
    # as the engine's trace records it: fp32 stream, adaLN shift and scale, bf16 out (15)
    dims = [x, [], [], [1, 1536], [1, 1536], [], []]
    types = [F32, "", "", F32, F32, "Scalar", "Scalar"]
    r = c("wanscope::norm_modulate", dims, types, ["", "", "", "", "", "1e-06", "15"])
    assert units(r) == {"fp32": (5 + 3) * 32760 * 1536}
    assert r.bytes == 32760 * 1536 * 4 + 2 * 1536 * 4 + 32760 * 1536 * 2
    dims = [x, x, [1, 1536], [1536], [1536], [], [], [], []]
    types = [F32, BF, F32, F32, F32, "", "", "Scalar", "Scalar"]
    r = c("wanscope::add_norm_modulate", dims, types, [""] * 7 + ["1e-06", "15"])
    assert units(r) == {"fp32": (5 + 1 + 1 + 2) * 32760 * 1536}  # LN, affine, gated residual
    n = 32760 * 1536
    assert r.bytes == n * 4 + n * 2 + 3 * 1536 * 4 + n * 2 + n * 4  # x, y, gate/w/b; h bf16, x' fp32
    g = c("wanscope::gated_add", [x, x, [1, 1536]], [F32, BF, F32])
    assert units(g) == {"fp32": 2 * n} and g.bytes == n * 4 + n * 2 + 1536 * 4 + n * 4
    q = c("wanscope::quantize_fp8_rows", [[64, 128], []], [BF, "Scalar"], ["", "True"])
    assert units(q) == {"fp32": (5 + 9) * 64 * 128} and q.bytes == 64 * 128 * 2 + 64 * 128 + 64 * 4


# --- what is not counted ----------------------------------------------------------------------


def test_unknown_ops_unreadable_arguments_and_missing_types():
    assert c("aten::cat", [[[2, 3], [2, 3]], []]) is None
    assert c("triton_poi_fused_gelu_view_6", [[1, 32760, 8960], []]) is None
    assert count("aten::mm", "not json", None, None) is None
    assert count("aten::mm", None, None, None) is None
    assert c("aten::mm", [[4, 5], []], [BF, "Scalar"]) is None  # no second matrix
    r = count("aten::mm", json.dumps([[4, 5], [5, 6]]), None, None)  # a trace without "Input type"
    assert r.dtype is None and r.bytes == (20 + 30 + 24) * 2  # taken as bf16


def test_op_names_list_every_family_with_in_place_forms():
    names = set(flops.op_names())
    assert {"aten::linear", "aten::conv3d", "aten::scaled_dot_product_attention", "aten::layer_norm"} <= names
    assert {"aten::add", "aten::add_", "aten::copy_", "aten::gelu", "aten::gelu_"} <= names
    assert {"wanscope::attention_hopper", "wanscope::rms_norm_rope", "wanscope::quantize_fp8_rows"} <= names


# --- argument positions against torch ---------------------------------------------------------

torch = pytest.importorskip("torch")


def _arg(op: str, i: int, overload: str | None = None) -> str:
    """The name of argument ``i`` of ``op``'s schema: the overload given, else ``default`` or
    the first one taking a tensor first (``aten::add.default`` adds two Scalars)."""
    ns, name = op.split("::")
    packet = getattr(getattr(torch.ops, ns), name)
    if overload is None:
        schemas = [getattr(packet, o)._schema for o in ("default", *packet.overloads()) if o in packet.overloads()]
        schema = next(s for s in schemas if s.arguments and str(s.arguments[0].type) == "Tensor")
    else:
        schema = getattr(packet, overload)._schema
    return schema.arguments[i].name


def _our_ops():
    pytest.importorskip("triton")
    import wanscope.kernels.attention_flash
    import wanscope.kernels.attention_hopper
    import wanscope.kernels.attention_int8
    import wanscope.kernels.fp8_linear
    import wanscope.kernels.norm_modulate
    import wanscope.kernels.rms_norm_rope  # noqa: F401  (registers the custom ops)


def test_argument_positions_match_the_schemas():
    _our_ops()
    for op, (_, causal, mask) in flops.ATTENTION.items():
        if causal is not None:
            assert _arg(op, causal) in ("is_causal", "custom_mask_type"), op
        if mask is not None:
            assert _arg(op, mask) in ("attn_mask", "attn_bias", "bias"), op
    want = ("input|self", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")
    for op, at in flops.CONVOLUTION.items():
        for names, i in zip(want, at, strict=True):
            if isinstance(i, int) and not isinstance(i, bool):
                assert _arg(op, i) in names.split("|"), (op, i)
    for op, (x, w, b, _) in flops.NORMS.items():
        assert (_arg(op, x), _arg(op, w)) in (("input", "weight"),), op
        if b is not None:
            assert _arg(op, b) == "bias", op
    assert _arg("aten::batch_norm", 5) == "training"
    assert _arg("aten::_addmm_activation", 5) == "use_gelu"
    assert [_arg("aten::_scaled_mm", i) for i in (2, 3, 4, 5, 6)] == [
        "scale_a",
        "scale_b",
        "bias",
        "scale_result",
        "out_dtype",
    ]
    assert (_arg("aten::convolution_backward", 7), _arg("aten::convolution_backward", 10)) == (
        "transposed",
        "output_mask",
    )
    assert _arg("aten::add", flops.ALPHA_INDEX["add"]) == "alpha"
    assert (_arg("aten::softmax", 2, "int"), _arg("aten::_softmax", 2)) == ("dtype", "half_to_float")
    assert (_arg("aten::sum", 1, "dim_IntList"), _arg("aten::sum", 3, "dim_IntList")) == ("dim", "dtype")
    assert _arg("wanscope::attention_hopper", 3) == "qk_int8"
    assert _arg("wanscope::attention_int8", 3) == "pv_fp8"
    assert (_arg("wanscope::attention_flash", 3), _arg("wanscope::attention_flash", 4)) == ("qk", "pv")
    assert [_arg("wanscope::rms_norm_rope", i) for i in (1, 2)] == ["weight", "cos"]
    assert [_arg("wanscope::norm_modulate", i) for i in (1, 2, 3, 4, 6)] == [
        "weight",
        "bias",
        "shift",
        "scale",
        "out_dtype",
    ]
    assert [_arg("wanscope::add_norm_modulate", i) for i in (2, 3, 4, 5, 6, 8)] == [
        "gate",
        "weight",
        "bias",
        "shift",
        "scale",
        "out_dtype",
    ]
    assert _arg("wanscope::quantize_fp8_rows", 1) == "gelu"


def test_scalar_type_codes_match_torch():
    """Dtype arguments are recorded as c10::ScalarType numbers: what torch.profiler writes for
    softmax's dtype."""
    x = torch.randn(2, 3)
    dtypes = {torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64", torch.bfloat16: "bf16"}
    with torch.profiler.profile(record_shapes=True) as prof:
        for dt in dtypes:
            torch.softmax(x, -1, dtype=dt)
    codes = [e.concrete_inputs[2] for e in prof.events() if e.name == "aten::softmax" and e.concrete_inputs]
    assert [flops.SCALAR_TYPES[int(code)] for code in codes] == list(dtypes.values())


def test_what_the_cpu_profiler_records_counts_as_hand_counted(tmp_path):
    """Real records of torch.profiler (CPU): strided conv2d, a causal SDPA, add with alpha, a
    softmax to fp64, a sum over dims, and conv2d with padding="same" (a string, not recorded:
    not counted, the aten::convolution inside it is)."""
    import torch.nn.functional as F

    from wanscope.trace import open_traces

    x, w, q = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(1, 2, 16, 8)
    with torch.profiler.profile(record_shapes=True) as prof:
        F.conv2d(x, w, None, stride=2, padding=1)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        torch.add(x, x, alpha=2)
        torch.softmax(x, -1, dtype=torch.float64)
        x.sum(dim=[1, 2], keepdim=True)
        F.conv2d(x, w, None, padding="same")
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    con = open_traces([path])
    rows = con.execute(
        "SELECT name, input_dims, input_types, concrete_inputs FROM cpu_ops WHERE kind = 'op' ORDER BY start_ns"
    ).fetchall()
    got = {}
    for name, *args in rows:
        r = count(name, *args)
        got.setdefault(name, []).append(None if r is None else (units(r), r.bytes))
    assert got["aten::conv2d"] == [({"tf32": 2 * 2 * 16 * 108}, (384 + 108 + 128) * 4), None]
    assert got["aten::convolution"][1] == ({"tf32": 2 * 2 * 64 * 108}, (384 + 108 + 512) * 4)  # same: out 8x8
    assert got["aten::scaled_dot_product_attention"] == [({"fp32": 2 * 2 * 16 * 16 * 8}, 4 * 256 * 4)]
    assert got["aten::add"] == [({"fp32": 2 * 384}, 3 * 384 * 4)]
    assert got["aten::softmax"] == [({"fp32": 5 * 384}, 384 * 4 + 384 * 8)]
    assert got["aten::sum"] == [({"fp32": 384}, 384 * 4 + 2 * 8 * 4)]
