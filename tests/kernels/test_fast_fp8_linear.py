"""wanscope::quantize_fp8_rows and FP8Linear against float64, over dtypes and awkward shapes.

Bound per quantized element: half an e4m3 ulp of its value (2^-4 relative for normals, 2^-10 x
scale absolute for subnormals). Triton 3.8's interpreter converts to e4m3 without carrying a
mantissa overflow into the exponent (125.44 -> 64 instead of 128), truncates subnormals (6.63
steps -> 6) and rounds ties away from zero (42 -> 44, not 40; all checked): under the
interpreter the carry elements are excluded and the others get one full ulp. The layer tests
run the torch path of the same quantization (``_dispatch.INTERPRET`` off); the GPU test checks
``_scaled_mm`` against it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from wanscope.kernels import _dispatch  # noqa: E402

from wanscope.kernels.fp8_linear import FP8, FP8Linear, quantize_fp8_rows, reference  # noqa: E402

# (M, K): one element, odd sizes, K across the kernel's 2048-column chunk
SHAPES = [(1, 1), (37, 300), (5, 2049), (3, 17)]


def _f64(x, gelu):
    xd = x.double()
    return torch.nn.functional.gelu(xd, approximate="tanh") if gelu else xd


def _carries(ref_q: torch.Tensor) -> torch.Tensor:
    """Elements whose e4m3 value is a power of two reached by rounding up (mantissa carry)."""
    v = ref_q.float().abs()
    return (v > 0) & (torch.frexp(v).mantissa == 0.5)


@pytest.mark.parametrize("gelu", [False, True], ids=["plain", "gelu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_quantize_rows(shape, dtype, gelu):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    x[0, 0] = 0.0  # a zero element and, for K = 1, an all-zero row
    q, scale = quantize_fp8_rows(x, gelu)
    assert q.dtype == FP8 and q.shape == shape and scale.shape == (shape[0], 1)
    target = _f64(x, gelu)
    expected_scale = target.abs().amax(1, keepdim=True).clamp_min(1e-12) / 448
    assert torch.allclose(scale.double(), expected_scale, rtol=1e-6, atol=0)
    ref_q, _ = reference(x, gelu)
    ok, ulps = torch.ones(shape, dtype=torch.bool), 0.5
    if _dispatch.INTERPRET:
        ok, ulps = ~_carries(ref_q), 1.0
        assert ok.float().mean() > 0.8  # e4m3 powers of two: 1 in 8 values
    else:
        assert torch.equal(q.float(), ref_q.float())
    err = (q.double() * scale.double() - target).abs()
    bound = torch.maximum(target.abs() * 2.0**-3, scale.double() * 2.0**-9) * ulps * (1 + 1e-6)
    assert bool((err[ok] <= bound[ok]).all()), f"max err/bound {(err / bound)[ok].max().item():.3f}"


@pytest.fixture
def torch_path(monkeypatch):
    """The torch reference of the quantizer on the CPU, even under the interpreter."""
    monkeypatch.setattr(_dispatch, "INTERPRET", False)


@pytest.mark.parametrize("bias", [True, False])
def test_fp8_linear_error(bias, torch_path):
    """The layer's output vs a float64 product: rel L2 between 0.5% and 4% (e4m3 on both
    operands; bf16 would be ~0.3%), at a shape with K large enough to average."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(33, 256, generator=g).bfloat16()
    w = (torch.randn(80, 256, generator=g) / 16).bfloat16()
    b = torch.randn(80, generator=g).bfloat16() if bias else None
    out = FP8Linear(w, b)(x)
    assert out.shape == (33, 80) and out.dtype == torch.bfloat16
    ref = x.double() @ w.double().t() + (b.double() if bias else 0)
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    assert 5e-3 < rel < 4e-2, rel


def test_gelu_input_matches_gelu_then_linear(torch_path):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(9, 64, generator=g).bfloat16()
    w, b = torch.randn(32, 64, generator=g).bfloat16(), torch.randn(32, generator=g).bfloat16()
    fused = FP8Linear(w, b, gelu_input=True)(x)
    plain = FP8Linear(w, b)(torch.nn.functional.gelu(x.float(), approximate="tanh"))
    ref = torch.nn.functional.gelu(x.double(), approximate="tanh") @ w.double().t() + b.double()
    rel = lambda y: ((y.double() - ref).norm() / ref.norm()).item()  # noqa: E731
    assert rel(fused) < 4e-2 and abs(rel(fused) - rel(plain)) < 1e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="_scaled_mm needs CUDA")
def test_scaled_mm_matches_cpu_emulation():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(100, 256, generator=g).bfloat16()
    w, b = torch.randn(128, 256, generator=g).bfloat16(), torch.randn(128, generator=g).bfloat16()
    cpu = FP8Linear(w, b)(x).double()
    gpu = FP8Linear(w.cuda(), b.cuda())(x.cuda()).double().cpu()
    assert ((gpu - cpu).norm() / cpu.norm()).item() < 4e-3  # bf16 output rounding, summation order
