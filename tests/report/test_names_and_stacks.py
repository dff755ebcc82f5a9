"""Readable kernel names: the short form keeps what tells two kernels apart (the functor of an
``elementwise_kernel``, its vector width), and no two distinct kernels ever share one."""

import csv
from pathlib import Path

from wanscope.report.kernel_names import candidates, display_names
from wanscope.report.stacks import collapse, common_prefix, is_library_frame

DATA = Path(__file__).resolve().parents[1] / "data"
MUL_BF16 = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor"
    "<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >"
    "(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast"
    "<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor"
    "<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})"
)
MUL_FP32 = MUL_BF16.replace("c10::BFloat16", "float")
ADD_BF16 = MUL_BF16.replace("MulFunctor", "AddFunctor")
COPY = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda"
    "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}> >"
    "(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() "
    "const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, ...)"
)


def test_the_short_form_names_the_kernel_its_widths_and_its_functor():
    shown = display_names([MUL_BF16, ADD_BF16, COPY])
    assert shown[MUL_BF16] == "elementwise_kernel<128, 4> · BinaryFunctor MulFunctor"
    assert shown[ADD_BF16] == "elementwise_kernel<128, 4> · BinaryFunctor AddFunctor"
    assert shown[COPY] == "elementwise_kernel<128, 2> · direct_copy_kernel_cuda"
    # the first 60 characters, as the old labels had them, are the same for the two binary kernels
    assert MUL_BF16[:60] == ADD_BF16[:60]


def test_kernels_that_differ_only_in_element_type_get_their_types():
    shown = display_names([MUL_BF16, MUL_FP32])
    assert shown == {
        MUL_BF16: "elementwise_kernel<128, 4> · BinaryFunctor MulFunctor (BFloat16)",
        MUL_FP32: "elementwise_kernel<128, 4> · BinaryFunctor MulFunctor (float)",
    }


def test_names_that_are_not_cpp_signatures_stay_whole_or_lose_their_middle():
    assert candidates("Memset (Device)") == ["Memset (Device)"]
    assert candidates("triton_poi_fused_mul_silu_2") == ["triton_poi_fused_mul_silu_2"]
    long = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"
    first, last = candidates(long)
    assert (first, last) == ("cudnn_generated_fort_native_sdpa_sm…64x128x128_4x1x1_cga1x1x1_kernel0_0", long)
    # two long names that share their ends fall back to the full names
    other = long.replace("knob_7", "knob_9")
    assert display_names([long, other]) == {long: long, other: other}


def test_no_two_of_the_real_kernel_names_share_a_short_form():
    with open(DATA / "kernel_names.csv", newline="") as f:
        names = [row["name"] for row in csv.DictReader(f)]
    shown = display_names(names)
    assert len(set(shown.values())) == len(set(names)) == 164
    # and most are much shorter than the names they stand for
    assert sum(len(shown[n]) < len(n) for n in set(names)) >= 40
    assert max(len(v) for k, v in shown.items() if v != k.removeprefix("void ")) <= 110


def test_same_names_after_cleaning_are_numbered():
    assert display_names(["a\x01b", "a\x02b"]) == {"a\x01b": "a\ufffdb", "a\x02b": "a\ufffdb [2]"}


STACK = [
    "<frozen runpy>(198): _run_module_as_main",
    "train.py(40): <module>",
    "ProfilerStep#2",
    "nn.Module: Block_3",
    "torch/nn/modules/module.py(1783): _call_impl",
    "model.py(88): forward",
    "contextlib.py(81): inner",
    "<built-in function linear>",
    "aten::linear",
    "aten::addmm",
]


def test_stacks_collapse_to_the_programs_own_frames():
    assert [is_library_frame(e) for e in STACK[:2]] == [True, False]
    assert collapse(STACK) == [
        "train.py(40): <module>",
        "ProfilerStep#2",
        "nn.Module: Block_3",
        "model.py(88): forward",
        "aten::addmm",
    ]
    other = [*STACK[:3], "nn.Module: Block_4", "aten::mul"]
    assert common_prefix([STACK, other]) == 3
    assert collapse(STACK, 3) == ["nn.Module: Block_3", "model.py(88): forward", "aten::addmm"]
    assert common_prefix([STACK]) == 0 and common_prefix([STACK, STACK]) == len(STACK) - 1
    # a script named like a standard library module is still the program's entry
    script = ["profile.py(3): <module>", "typing.py(10): inner", "aten::mm"]
    assert collapse(script) == ["profile.py(3): <module>", "aten::mm"]


def test_a_name_of_thousands_of_identifiers_gets_a_short_form_quickly():
    huge = "void k<" + ", ".join(f"ns::T{i}x" for i in range(8000)) + ">(int)"
    forms = candidates(huge)
    assert forms[0] == "k · T0x T1x" and len(forms) <= 12 and forms[-1] == huge.removeprefix("void ")


def test_numbering_skips_labels_already_shown_and_no_name_starts_with_a_separator():
    shown = display_names(["a\x01b", "a\x02b", "a\ufffdb [2]"])
    assert len(set(shown.values())) == 3
    assert candidates("<unknown>")[0] == "unknown"


def test_gap_stacks_count_what_they_hide_once():
    from wanscope.report.html import _stacks

    other = [*STACK[:3], "nn.Module: Block_4", "aten::mul"]
    gaps = [{"stack": s, "next_op": {"name": "k"}} for s in (STACK, other)]
    ((first, second),) = _stacks(
        {"devices": [{"rank": 0, "device": 0, "gaps": {"largest": gaps}}]}, {"k": "k"}
    ).values()
    # STACK: 3 shared, then 3 own of 7 (a torch frame, contextlib, the built-in, aten::linear hidden)
    assert (first["shared"], first["own"], first["skipped"]) == (3, collapse(STACK, 3), 4)
    assert (second["own"], second["skipped"]) == (["nn.Module: Block_4", "aten::mul"], 0)


def test_plot_labels_show_markup_in_names_as_text():
    from wanscope.report.figures import plot_text

    assert plot_text("a<a href='x'>b</a> & <br>") == "a&lt;a href='x'&gt;b&lt;/a&gt; &amp; &lt;br&gt;"
