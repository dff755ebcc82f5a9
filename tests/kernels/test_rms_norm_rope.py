"""wanscope::rms_norm_rope against a float64 formula, over dtypes, awkward shapes, with and
without RoPE, on contiguous rows and on the q/k column slices of a fused QKV output.

Tensors live on the GPU when there is one (``kernel_checks.DEVICE``: the Triton kernel there),
else on the CPU under the interpreter. The GPU runs each (dtype, RoPE, layout) once, the shapes
taking turns; the interpreter runs the whole grid."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_checks import DEVICE, ON_GPU, assert_close_to_f64

from wanscope.kernels import rms_norm_rope
from wanscope.wan.config import DiTConfig
from wanscope.wan.dit import apply_rope, rope_tables

# (B, L, N, D): one head of 2, odd head counts, D not a power of two, L not a grid product
SHAPES = [(1, 1, 1, 2), (2, 7, 3, 10), (1, 5, 2, 34), (2, 13, 5, 12)]
_FLAGS = [
    (dtype, rope, fused)
    for dtype in (torch.float32, torch.bfloat16)
    for rope in (True, False)
    for fused in (False, True)
]
if ON_GPU:
    CASES = [(SHAPES[i % 4], *flags) for i, flags in enumerate(_FLAGS)]
    # the 14B's rows: 40 heads of 128 (dim 5120), its k third of the fused QKV output
    CASES.append(((1, 2048, 40, 128), torch.bfloat16, True, True))
else:
    CASES = [(shape, *flags) for shape in SHAPES for flags in _FLAGS]


def inputs(b, l, n, d, dtype, seed, fused=False):
    g = torch.Generator().manual_seed(seed)
    c = n * d
    if fused:  # the q, k, v thirds of one [B, L, 3C] projection; take the k third
        x = (torch.randn(b, l, 3 * c, generator=g) * 3).to(dtype)[..., c : 2 * c]
    else:
        x = (torch.randn(b, l, c, generator=g) * 3).to(dtype)
    weight = torch.rand(c, generator=g) + 0.5
    angles = torch.rand(l, 1, d // 2, generator=g, dtype=torch.float64) * 40
    rope = (torch.cos(angles).float().to(DEVICE), torch.sin(angles).float().to(DEVICE))
    return x.to(DEVICE), weight.to(DEVICE), rope


def f64(x, weight, rope, n, eps=1e-6):
    xd = x.double()
    u = xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    u = u.unflatten(-1, (n, -1, 2))  # [B, L, N, D/2, 2]
    if rope is not None:
        c, s = rope[0].double(), rope[1].double()
        u = torch.stack([u[..., 0] * c - u[..., 1] * s, u[..., 0] * s + u[..., 1] * c], dim=-1)
    return u.flatten(-2)  # [B, L, N, D]


def torch_lowp(x, weight, rope, n, eps=1e-6):
    """The unfused torch path of wan/dit.py in x's dtype (norm rounded, then RoPE)."""
    u = torch.nn.functional.rms_norm(x.float(), x.shape[-1:], weight, eps).type_as(x).unflatten(-1, (n, -1))
    return u if rope is None else apply_rope(u, *rope)


@pytest.mark.parametrize(
    "shape, dtype, with_rope, fused",
    CASES,
    ids=[f"{c[0]}-{str(c[1])[6:]}-{'rope' if c[2] else 'norm-only'}-{'qkv-slice' if c[3] else 'rows'}" for c in CASES],
)
def test_matches_float64(shape, dtype, with_rope, fused):
    b, l, n, d = shape
    x, weight, rope = inputs(*shape, dtype, seed=sum(shape), fused=fused)
    rope = rope if with_rope else None
    out = rms_norm_rope(x, weight, rope, n, 1e-6)
    assert out.shape == shape and out.dtype == dtype and out.is_contiguous()
    assert_close_to_f64(
        out,
        f64(x, weight, rope, n),
        torch_lowp(x, weight, rope, n),
        name=f"{shape} {dtype} rope={with_rope} fused={fused}",
        fp32_rtol=4e-6,
    )


def test_with_the_model_rope_tables():
    """The model's own tables: grid (3, 4, 6), head dim 32 split 12/10/10, fp32 like the reference path."""
    cfg = DiTConfig(dim=64, num_heads=2)
    cos, sin = rope_tables(cfg, (3, 4, 6), torch.device(DEVICE))
    x = torch.randn(2, 72, 64, device=DEVICE)
    weight = torch.rand(64, device=DEVICE) + 0.5
    out = rms_norm_rope(x, weight, (cos, sin), 2, cfg.eps)
    ref = torch_lowp(x, weight, (cos, sin), 2, cfg.eps)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_opcheck():
    x, weight, (cos, sin) = inputs(2, 5, 2, 6, torch.float32, seed=0, fused=True)
    torch.library.opcheck(torch.ops.wanscope.rms_norm_rope.default, (x, weight, cos, sin, 2, 1e-6))
    torch.library.opcheck(torch.ops.wanscope.rms_norm_rope.default, (x, weight, None, None, 2, 1e-6))
