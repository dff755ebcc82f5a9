"""wanscope::norm_modulate / add_norm_modulate / gated_add against a float64 formula, over
dtypes and awkward shapes (C not a power of two, below and above the block, B > 1).

Tensors live on the GPU when there is one (``kernel_checks.DEVICE``: the Triton kernels there;
CPU tensors would run only the torch reference), else on the CPU under the interpreter. The
GPU, where each case compiles its own kernel, runs each variant in both dtypes, the shapes
taking turns; the interpreter runs the whole grid."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_checks import DEVICE, ON_GPU, assert_close_to_f64

from wanscope.kernels import gated_add, norm_modulate
from wanscope.kernels.norm_modulate import reference

SHAPES = [(1, 1, 1), (2, 7, 33), (1, 5, 130), (3, 4, 257)]
DTYPES = [torch.float32, torch.bfloat16]
# (residual, gate, affine, modulation): the four uses in a DiT block
VARIANTS = {
    "norm1+mod": (False, False, False, True),
    "gated add+norm3 affine": (True, True, True, False),
    "add+norm2+mod": (True, False, False, True),
    "all": (True, True, True, True),
}
if ON_GPU:
    CASES = [
        (SHAPES[(2 * i + j) % 4], dtype, variant)
        for i, variant in enumerate(VARIANTS)
        for j, dtype in enumerate(DTYPES)
    ]
    ADD_CASES = [(shape, DTYPES[i % 2]) for i, shape in enumerate(SHAPES)]
    # the 14B's width (dim 5120), in both dtypes
    CASES += [((1, 1024, 5120), torch.bfloat16, "all"), ((1, 1024, 5120), torch.float32, "add+norm2+mod")]
    ADD_CASES.append(((1, 1024, 5120), torch.bfloat16))
else:
    CASES = [(shape, dtype, variant) for shape in SHAPES for dtype in DTYPES for variant in VARIANTS]
    ADD_CASES = [(shape, dtype) for shape in SHAPES for dtype in DTYPES]


def _id(case):
    return "-".join(str(c)[6:] if isinstance(c, torch.dtype) else str(c) for c in case)


def make(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    b, l, c = shape

    def rnd(*s, dt=torch.float32, mean=0.0):
        return (torch.randn(*s, generator=g, dtype=torch.float64) + mean).to(DEVICE, dt)

    # an offset mean checks the centring; gate etc. are fp32 as in the model, and strided as
    # the unbind of the [B, 6, C] modulation table makes them
    table = rnd(b, 6, c)
    return dict(
        x=rnd(b, l, c, dt=dtype, mean=3.0),
        y=rnd(b, l, c, dt=torch.bfloat16 if dtype != torch.float32 else dtype),
        gate=table[:, 0],
        shift=table[:, 1],
        scale=table[:, 2] * 0.5,
        weight=rnd(c),
        bias=rnd(c),
    )


def f64(x, y=None, gate=None, weight=None, bias=None, shift=None, scale=None, eps=1e-6):
    """The formula in float64; the stream is rounded to its dtype after the add, as stored."""
    xd = x.double()
    if y is not None:
        yd = y.double() * (gate.double()[:, None] if gate is not None else 1.0)
        xd = (xd + yd).to(x.dtype).double()
    mean = xd.mean(-1, keepdim=True)
    var = ((xd - mean) ** 2).mean(-1, keepdim=True)
    h = (xd - mean) / torch.sqrt(var + eps)
    if weight is not None:
        h = h * weight.double() + bias.double()
    if shift is not None:
        h = h * (1 + scale.double()[:, None]) + shift.double()[:, None]
    return xd, h


def lowp(x, y=None, gate=None, weight=None, bias=None, shift=None, scale=None, eps=1e-6, dtype=torch.bfloat16):
    """PyTorch computing the same in ``dtype`` throughout (its own low-precision error)."""
    if y is not None:
        x = x.to(dtype) + y.to(dtype) * (gate.to(dtype)[:, None] if gate is not None else 1)
    h = torch.nn.functional.layer_norm(
        x.to(dtype),
        x.shape[-1:],
        None if weight is None else weight.to(dtype),
        None if bias is None else bias.to(dtype),
        eps,
    )
    if shift is not None:
        h = h * (1 + scale.to(dtype)[:, None]) + shift.to(dtype)[:, None]
    return h


@pytest.mark.parametrize("shape, dtype, variant", CASES, ids=map(_id, CASES))
def test_matches_float64(shape, dtype, variant):
    has_y, has_gate, affine, mod = VARIANTS[variant]
    t = make(shape, dtype, seed=sum(shape))
    kw = dict(
        y=t["y"] if has_y else None,
        gate=t["gate"] if has_gate else None,
        weight=t["weight"] if affine else None,
        bias=t["bias"] if affine else None,
        shift=t["shift"] if mod else None,
        scale=t["scale"] if mod else None,
    )
    out_dtype = dtype
    res = norm_modulate(
        t["x"],
        residual=kw["y"],
        gate=kw["gate"],
        weight=kw["weight"],
        bias=kw["bias"],
        shift=kw["shift"],
        scale=kw["scale"],
        eps=1e-6,
        out_dtype=out_dtype,
    )
    x_ref, h_ref = f64(t["x"], **kw)
    h = res[1] if has_y else res
    assert h.dtype == out_dtype and h.shape == shape
    assert_close_to_f64(h, h_ref, lowp(t["x"], **kw, dtype=dtype), name=f"h {variant} {shape} {dtype}")
    if has_y:
        x_new = res[0]
        assert x_new.dtype == dtype
        # the stream is the fp32 sum rounded to its dtype: within two ulps (at the largest
        # value) of the float64 sum so rounded (product and sum are each rounded in fp32 first)
        tol = 2 * torch.finfo(dtype).eps * x_ref.abs().max().item()
        diff = (x_new.double() - x_ref).abs()
        assert diff.max().item() <= tol, f"max {diff.max().item():.3e} mean {diff.mean().item():.3e} tol {tol:.3e}"


@pytest.mark.parametrize("shape, dtype", ADD_CASES, ids=map(_id, ADD_CASES))
def test_gated_add(shape, dtype):
    t = make(shape, dtype, seed=7 + sum(shape))
    out = gated_add(t["x"], t["y"], t["gate"])
    expected = (t["x"].double() + t["y"].double() * t["gate"].double()[:, None]).to(dtype)
    assert out.dtype == dtype
    # one rounding of the fp32 sum: at most one ulp from rounding the float64 sum
    diff = (out.double() - expected.double()).abs().max().item()
    assert diff <= torch.finfo(dtype).eps * expected.double().abs().max().item(), diff


def test_fp32_residual_bf16_output_like_the_model():
    """The model's case: fp32 stream, bf16 block output, fp32 modulation, bf16 normalized output."""
    t = make((2, 9, 96), torch.float32, seed=3)
    y = t["y"].to(torch.bfloat16)
    x_new, h = norm_modulate(
        t["x"], residual=y, gate=t["gate"], shift=t["shift"], scale=t["scale"], out_dtype=torch.bfloat16
    )
    x_ref, h_ref = reference(t["x"], y, t["gate"], None, None, t["shift"], t["scale"], 1e-6, torch.bfloat16)
    assert x_new.dtype == torch.float32 and h.dtype == torch.bfloat16
    torch.testing.assert_close(x_new, x_ref, rtol=1e-6, atol=1e-6)
    # both round the same fp32 value once: at most one bf16 ulp apart
    assert ((h.float() - h_ref.float()).abs() <= 2**-7 * h_ref.float().abs() + 1e-6).all()


def test_bad_shapes_raise():
    x = torch.randn(1, 4, 8, device=DEVICE)
    if not x.is_cuda and not __import__("wanscope.kernels._dispatch", fromlist=["x"]).INTERPRET:
        pytest.skip("shape checks live in the Triton launcher")
    with pytest.raises(ValueError, match="contiguous"):
        norm_modulate(x.transpose(1, 2).contiguous().transpose(1, 2))
    with pytest.raises(ValueError, match="shift"):
        norm_modulate(x, shift=torch.randn(1, 7, device=DEVICE), scale=torch.randn(1, 7, device=DEVICE))


def test_opcheck():
    """Schema, fake implementation and autograd registration are consistent (torch.compile needs them)."""
    t = make((2, 3, 20), torch.float32, seed=1)
    torch.library.opcheck(
        torch.ops.wanscope.norm_modulate.default, (t["x"], None, None, t["shift"], t["scale"], 1e-6, torch.bfloat16)
    )
    torch.library.opcheck(
        torch.ops.wanscope.add_norm_modulate.default,
        (t["x"], t["y"], t["gate"], t["weight"], t["bias"], None, None, 1e-6, torch.float32),
    )
    torch.library.opcheck(torch.ops.wanscope.gated_add.default, (t["x"], t["y"], t["gate"]))
