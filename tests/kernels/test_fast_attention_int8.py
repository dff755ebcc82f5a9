"""wanscope::attention_int8 against float64 softmax attention, at awkward shapes (L odd, not a
multiple of the 16-row tiles the interpreter runs, one token, one head).

Bounds (relative L2 vs float64): <= 4e-2 with e4m3 P V, <= 2.5e-2 with 16-bit P V; and the
kernel within 2e-2 (FP8 PV: its tiles round p against the running maximum) or 5e-3 of the
torch reference of the same quantization. Triton 3.8's interpreter computes bf16 ``tl.dot``
wrongly (errors ~1e10, checked), so the 16-bit PV path runs in fp16 under the interpreter; the
GPU runs both.

Inputs live on the GPU when there is one (the Triton kernel), else on the CPU (the kernel under
the interpreter, as the conftest sets it). The tests used to build CPU tensors everywhere: on the
H200 they then ran only the torch reference, never the kernel, and the reference's transposed
output strides (unlike the op's fake) showed there as a non-contiguous result."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from kernel_checks import DEVICE, ON_GPU, rel_l2

from wanscope.kernels import _dispatch
from wanscope.kernels.attention_int8 import attention_int8, quantize_qk, reference

BF16, FP16 = torch.bfloat16, torch.float16
# (B, L, N, D)
SHAPES = [(1, 37, 2, 32), (2, 5, 3, 16), (1, 17, 1, 64), (1, 1, 1, 16), (1, 48, 2, 128)]
# the CPU (interpreter) runs the whole grid; the GPU, where each case compiles and tunes its
# kernel, every shape and D once, both P V precisions and dtypes, and D = 128 in all four
if ON_GPU:
    CASES = [(SHAPES[0], BF16, True), (SHAPES[1], FP16, False), (SHAPES[2], BF16, False), (SHAPES[3], FP16, True)]
    CASES += [(SHAPES[4], dtype, pv_fp8) for dtype in (BF16, FP16) for pv_fp8 in (True, False)]
else:
    CASES = [(shape, dtype, pv_fp8) for shape in SHAPES for dtype in (BF16, FP16) for pv_fp8 in (True, False)]


def _inputs(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(shape, generator=g) * 2
    k = torch.randn(shape, generator=g) * 2 + 1  # a mean over tokens for the smoothing to remove
    v = torch.randn(shape, generator=g)
    return q.to(DEVICE, dtype), k.to(DEVICE, dtype), v.to(DEVICE, dtype)


def _f64(q, k, v):
    s = torch.einsum("bind,bjnd->bnij", q.double(), k.double()) / math.sqrt(q.shape[-1])
    return (torch.softmax(s, -1) @ v.double().transpose(1, 2)).transpose(1, 2)  # [B, L, N, D]


@pytest.mark.parametrize(
    "shape, dtype, pv_fp8",
    [pytest.param(*c, id=f"{c[0]}-{str(c[1])[6:]}-pv-{'e4m3' if c[2] else '16bit'}") for c in CASES],
)
def test_matches_float64(shape, dtype, pv_fp8):
    if _dispatch.INTERPRET and dtype == torch.bfloat16 and not pv_fp8:
        pytest.skip("the interpreter's bf16 tl.dot is wrong (see module docstring)")
    q, k, v = _inputs(shape, dtype, seed=sum(shape))
    out = attention_int8(q, k, v, pv_fp8)
    assert out.shape == shape and out.dtype == dtype and out.is_contiguous()
    ref = _f64(q, k, v)
    err, ref_err = rel_l2(out, ref), rel_l2(reference(q, k, v, pv_fp8), ref)
    msg = f"{shape} {dtype} pv_fp8={pv_fp8}: kernel {err:.3e}, torch reference {ref_err:.3e}"
    assert err <= (4e-2 if pv_fp8 else 2.5e-2), msg
    assert rel_l2(out, reference(q, k, v, pv_fp8)) <= (2e-2 if pv_fp8 else 5e-3), msg


def test_strided_v_from_fused_qkv():
    """v as the third of a [B, L, 3C] projection (rows 3C apart), as the DiT passes it."""
    b, l, n, d = 1, 21, 2, 32
    qkv = torch.randn(b, l, 3 * n * d, generator=torch.Generator().manual_seed(7)).to(DEVICE, torch.float16)
    q, k, v = (qkv[..., i * n * d : (i + 1) * n * d].unflatten(-1, (n, d)) for i in range(3))
    assert not v.is_contiguous()
    out = attention_int8(q, k, v, pv_fp8=False)
    assert rel_l2(out, _f64(q, k, v)) <= 1.5e-2


@pytest.mark.parametrize("smooth", [False, True])
def test_quantize_qk_kernel_matches_torch(smooth, monkeypatch):
    if DEVICE == "cpu" and not _dispatch.INTERPRET:
        pytest.skip("needs the GPU or the interpreter to compare the kernel with the torch path")
    x = (torch.randn(2, 13, 3, 32, generator=torch.Generator().manual_seed(8)) * 3 + 1).bfloat16()
    q8, scale = quantize_qk(x.to(DEVICE), 0.5, smooth)
    q8, scale = q8.cpu(), scale.cpu()
    monkeypatch.setattr(_dispatch, "INTERPRET", False)  # the torch path on the CPU
    q8_ref, scale_ref = quantize_qk(x, 0.5, smooth)
    # the same rounding; a value within an fp32 ulp of a .5 tie may go either way
    diff = (q8.int() - q8_ref.int()).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() < 0.01
    assert torch.allclose(scale, scale_ref, rtol=1e-6, atol=0)
    centered = x.double() - (x.double().mean(1, keepdim=True) if smooth else 0)
    # half an int8 step of the row maximum, per element
    err = (q8.double() * (scale.double() / 0.5)[..., None] - centered).abs()
    assert bool((err <= (scale.double() / 0.5)[..., None] * 0.5 * (1 + 1e-5)).all())


@pytest.mark.parametrize("path", ["kernel", "torch"])
def test_opcheck(path, monkeypatch):
    """Schema and fake agree with the real op, on the kernel's path and the torch reference's
    (shape, dtype and strides: the fake is contiguous)."""
    q, k, v = _inputs((1, 9, 2, 16), torch.float16, seed=9)
    if path == "torch":
        monkeypatch.setattr(_dispatch, "INTERPRET", False)
        q, k, v = q.cpu(), k.cpu(), v.cpu()
    elif DEVICE == "cpu" and not _dispatch.INTERPRET:
        pytest.skip("the kernel needs the GPU or the interpreter")
    for pv_fp8 in (True, False):
        torch.library.opcheck(torch.ops.wanscope.attention_int8.default, (q, k, v, pv_fp8))


def test_rejects_bad_head_dim():
    q = torch.zeros(1, 4, 1, 24)
    with pytest.raises(ValueError, match="head dim"):
        attention_int8(q, q, q)
