"""``kernels.name_norm``: one spelling of a kernel name whichever tool demangled it, so that a
Kineto trace and an Nsight Systems export of the same work pair their kernels (before, a
Kineto-vs-nsys diff listed the templated ATen kernels as appeared and disappeared)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wanscope.analysis.diff import diff
from wanscope.trace import open_traces
from wanscope.trace.names import normalize_kernel_name

DATA = Path(__file__).parents[1] / "data"
STEP = "h200_wan21_1p3b_triton_step1"  # one step captured by torch.profiler and by nsys


@pytest.fixture(scope="module")
def both():
    return open_traces([DATA / f"{STEP}.json.gz"]), open_traces([DATA / f"{STEP}.sqlite"])


def test_every_kernel_of_the_same_step_pairs_up(both):
    kineto, nsys = both
    names = [dict(con.execute("SELECT name, name_norm FROM kernels GROUP BY ALL").fetchall()) for con in both]
    assert len(names[0]) == len(names[1]) == 38
    assert set(names[0].values()) == set(names[1].values())
    assert len(set(names[0]) & set(names[1])) == 10  # as recorded, only these agree
    # and each normal name has as many launches in one capture as in the other
    counts = [dict(con.execute("SELECT name_norm, count(*) FROM kernels GROUP BY 1").fetchall()) for con in both]
    assert counts[0] == counts[1] and sum(counts[0].values()) == 1225


def test_a_kineto_vs_nsys_diff_has_nothing_appeared_or_disappeared(both):
    kineto, nsys = both
    result = diff(kineto, nsys)
    kernels = result["kernels"]
    assert (kernels["common"], kernels["appeared"]["names"], kernels["disappeared"]["names"]) == (38, 0, 0)


@pytest.mark.parametrize(
    "kineto, nsys",
    [
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1})",
            "void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)",
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*, float const*, float const*, float*, float*, float*)",
            "void at::native::<unnamed>::vectorized_layer_norm_kernel<float, float, (bool)0>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",
        ),
    ],
)
def test_the_two_spellings_of_a_templated_kernel(kineto, nsys):
    assert normalize_kernel_name(kineto) == normalize_kernel_name(nsys)


@pytest.mark.parametrize("name", ["nvjet_sm90_tst_256x152_64x4_1x2_h_bz_coopA_bias_TNT", "triton_poi_fused_add_0"])
def test_a_plain_name_is_itself(name):
    assert normalize_kernel_name(name) == name
