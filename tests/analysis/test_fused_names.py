"""The Inductor kernel-name parser on names of the forms Inductor and Triton write."""

import pytest

from wanscope.analysis.fused import is_specialization, op_names, parse_kernel_name, split_ops

# name -> (kind, ops, unmatched, suffix)
NAMES = {
    # torch 2.1+: triton_<kind>_fused_<ops sorted by name>_<index>
    "triton_poi_fused__to_copy_add_mul_native_layer_norm_0": (
        "poi",
        ["_to_copy", "add", "mul", "native_layer_norm"],
        [],
        None,
    ),
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1": (
        "red",
        ["_to_copy", "add", "mean", "mul", "pow", "rsqrt"],
        [],
        None,
    ),
    "triton_per_fused_native_layer_norm_2": ("per", ["native_layer_norm"], [], None),
    "triton_tem_fused_mm_3": ("tem", ["mm"], [], None),
    "triton_poi_fused__scaled_dot_product_cudnn_attention_add_5": (
        "poi",
        ["_scaled_dot_product_cudnn_attention", "add"],
        [],
        None,
    ),
    "triton_poi_fused_add_gelu_3": ("poi", ["add", "gelu"], [], None),
    "triton_poi_fused_add_cos_sin_0": ("poi", ["add", "cos", "sin"], [], None),
    "triton_tem_fused_addmm_gelu_view_12": ("tem", ["addmm", "gelu", "view"], [], None),
    "triton_red_fused_native_layer_norm_native_layer_norm_backward_7": (
        "red",
        ["native_layer_norm", "native_layer_norm_backward"],
        [],
        None,
    ),
    "triton_per_fused__log_softmax__to_copy_nll_loss_forward_11": (
        "per",
        ["_log_softmax", "_to_copy", "nll_loss_forward"],
        [],
        None,
    ),
    "triton_red_fused_var_mean_4": ("red", ["var_mean"], [], None),
    "triton_poi_fused_clone_permute_unsqueeze_view_23": ("poi", ["clone", "permute", "unsqueeze", "view"], [], None),
    "triton_poi_fused_cat_mul_sub_unbind_41": ("poi", ["cat", "mul", "sub", "unbind"], [], None),
    "triton_poi_fused_convert_element_type_rsqrt_2": ("poi", ["convert_element_type", "rsqrt"], [], None),
    "triton_tem_fused_flex_attention_0": ("tem", ["flex_attention"], [], None),
    "triton_spl_fused_cumsum_0": ("spl", ["cumsum"], [], None),
    "triton_for_fused_0": ("for", [], [], None),
    "triton_for_fused__foreach_addcdiv__foreach_div_0": ("for", ["_foreach_addcdiv", "_foreach_div"], [], None),
    "triton_unk_fused_add_9": ("unk", ["add"], [], None),
    # a trailing in-place op keeps its underscore
    "triton_poi_fused_add__0": ("poi", ["add_"], [], None),
    # index with more than one digit
    "triton_poi_fused_add_mul_128": ("poi", ["add", "mul"], [], None),
    # descriptive_names="torch": module names are not op names, kept and flagged
    "triton_poi_fused_l__self___norm1_add_7": ("poi", ["l__self___norm1", "add"], ["l__self___norm1"], None),
    "triton_poi_fused_add_mystery_op_mul_3": ("poi", ["add", "mystery_op", "mul"], ["mystery_op"], None),
    # torch 2.0: no kind
    "triton_fused_add_mul_0": (None, ["add", "mul"], [], None),
    # descriptive names off / unique names off: no ops in the name
    "triton_poi__0": ("poi", [], [], None),
    "triton_": (None, [], [], None),
    # Triton 2.x appended argument specializations to the compiled name
    "triton__0d1d2d3de4e": (None, [], [], "0d1d2d3de4e"),
    "triton__0d1d2de": (None, [], [], "0d1d2de"),
    "triton_poi_fused_add_0_0d1d2de": ("poi", ["add"], [], "0d1d2de"),
    "triton_red_fused__to_copy_mean_3_0d1d2d3e4de": ("red", ["_to_copy", "mean"], [], "0d1d2d3e4de"),
    "triton_poi_fused_add_0_0123": ("poi", ["add"], [], "0123"),
    "triton_poi_fused_add_0_0c1d2de": ("poi", ["add"], [], "0c1d2de"),
    # a hash-like token after the index
    "triton_poi_fused_add_gelu_3_c3a1f9e2b7d4": ("poi", ["add", "gelu"], [], "c3a1f9e2b7d4"),
    # an autotuning benchmark of a template: no kind, the template's op
    "triton_mm_4": (None, ["mm"], [], None),
}


@pytest.mark.parametrize("name", list(NAMES))
def test_parse(name):
    kind, ops, unmatched, suffix = NAMES[name]
    parsed = parse_kernel_name(name)
    assert (parsed.kind, list(parsed.ops), list(parsed.unmatched), parsed.suffix) == (kind, ops, unmatched, suffix)


@pytest.mark.parametrize(
    "name",
    [
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
        "nvjet_sm90_tst_256x152_64x4_1x2_h_bz_coopA_bias_TNT",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
        "_attn_fwd",
    ],
)
def test_not_triton(name):
    assert parse_kernel_name(name) is None


def test_split_ops_underscores():
    assert split_ops("_to_copy_add") == (["_to_copy", "add"], [])
    assert split_ops("native_layer_norm_native_layer_norm_backward") == (
        ["native_layer_norm", "native_layer_norm_backward"],
        [],
    )
    assert split_ops("abc_add_xyz_q") == (["abc", "add", "xyz_q"], ["abc", "xyz_q"])
    assert split_ops("") == ([], [])


def test_specialization_suffixes():
    assert is_specialization("0d1d2d3de4e") and is_specialization("0123") and is_specialization("0c")
    assert not is_specialization("0") and not is_specialization("12") and not is_specialization("0d2d")
    assert not is_specialization("add")


def test_op_list_is_packet_names():
    names = op_names()
    assert len(names) > 1500
    assert {
        "_to_copy",
        "native_layer_norm",
        "_scaled_dot_product_cudnn_attention",
        "add",
        "add_",
        "mm",
        "convert_element_type",
        "flex_attention",
    } <= names
    assert not any("." in n or "::" in n for n in names)
