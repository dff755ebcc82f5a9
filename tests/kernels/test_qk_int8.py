"""wanscope.kernels.qk_int8: the Triton quantize passes (GPU, or the CPU interpreter) against the
torch reference, and the reference against its own definition.

The kernel and the reference do the same fp32 arithmetic; they may still round an element to
the neighbouring integer where the two compute ``x * (127 / amax)`` or ``(x - mu) / sk`` with a
different operation order (measured on the interpreter: 9 of the 26,880 q elements at the first
shape, by one); the test allows that for at most 0.1% of the elements.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from kernel_checks import DEVICE

from wanscope.kernels import _dispatch
from wanscope.kernels.qk_int8 import STAT_ROWS, k_stats, quantize_qk_int8, reference

C = 1.4426950408889634 / math.sqrt(64)
# (B, Lq, Lk, N, D): L not a multiple of the 64-token programs, one token, B = 2 and N = 3
SHAPES = [(2, 70, 130, 3, 64), (1, 1, 1, 1, 16), (1, 65, 64, 2, 32)]


def _inputs(b, lq, lk, n, d, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(lq + lk)
    q = torch.randn(b, lq, n, d, generator=g) * 2
    k = torch.randn(b, lk, n, d, generator=g) + torch.linspace(-3, 3, d)  # a mean over tokens per channel
    return q.to(DEVICE, dtype), k.to(DEVICE, dtype)


def _assert_ints_close(a, b):
    diff = (a.int() - b.int()).abs()
    assert diff.max().item() <= 1 and (diff > 0).float().mean().item() <= 1e-3


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_kernel_matches_reference(shape):
    q, k = _inputs(*shape)
    q8, f, k8, kn = quantize_qk_int8(q, k, C)
    rq8, rf, rk8, _ = reference(q, k, C)
    b, lq, lk, n, d = shape
    assert q8.shape == (b, lq, n, d) and k8.shape == (b, lk, n, d) and q8.dtype == k8.dtype == torch.int8
    assert f.shape == (b, lq, n) and kn.shape == (b, n) and f.dtype == kn.dtype == torch.float32
    _assert_ints_close(q8, rq8)
    _assert_ints_close(k8, rk8)
    assert torch.allclose(f, rf, rtol=1e-6, atol=0)
    # kn from the kernel's own ints: the exact norm of its k8
    assert torch.allclose(kn, k8.float().norm(dim=-1).amax(dim=1), rtol=1e-6)


@pytest.mark.parametrize("lk", [1, 130, 2 * STAT_ROWS + 3])
def test_k_stats_kernel_matches_torch(lk, monkeypatch):
    """The statistics pass (partial sums and extrema per chunk of tokens, a masked last chunk)
    against torch's mean and aminmax."""
    _, k = _inputs(2, 1, lk, 3, 64)
    mu, sk = k_stats(k)
    monkeypatch.setattr(_dispatch, "INTERPRET", False)
    cpu_mu, cpu_sk = k_stats(k.cpu())
    assert torch.allclose(mu.cpu(), cpu_mu, rtol=1e-5, atol=1e-6) and torch.allclose(sk.cpu(), cpu_sk, rtol=1e-5)


def test_strided_and_head_major_inputs_give_the_same_ints():
    """k as the second half of a [B, L, 2 N D] projection (the DiT's layout, read in place) and as
    a head-major [B, N, L, D] view (copied first) give the contiguous k's ints."""
    q, k = _inputs(2, 70, 130, 3, 64)
    kv = torch.cat([torch.zeros_like(k), k], dim=2)  # [B, L, 2N, D]
    strided = kv[:, :, 3:]
    assert not strided.is_contiguous()
    head_major = k.transpose(1, 2).contiguous().transpose(1, 2)
    assert not head_major.is_contiguous()
    want = quantize_qk_int8(q, k, C)
    for other in (strided, head_major):
        assert all(torch.equal(x, y) for x, y in zip(quantize_qk_int8(q, other, C), want))
    assert all(torch.equal(x, y) for x, y in zip(k_stats(head_major), k_stats(k)))


def test_default_scale_is_attentions():
    q, k = _inputs(1, 3, 4, 1, 64)
    assert torch.equal(quantize_qk_int8(q, k)[1], quantize_qk_int8(q, k, C)[1])  # C = log2(e) / sqrt(64)


def test_reference_definition():
    """Scores from the ints and the factor approximate c q.(k - mean k) to int8 precision, and the
    ints use the full range."""
    q, k = _inputs(1, 40, 50, 2, 64)
    q8, f, k8, kn = reference(q, k, C)
    qf, kf = q.double(), k.double()
    kc = kf - kf.mean(dim=1, keepdim=True)
    exact = C * torch.einsum("bind,bjnd->bnij", qf, kc)
    approx = torch.einsum("bind,bjnd->bnij", q8.double(), k8.double()) * f.double().permute(0, 2, 1)[..., None]
    err = (approx - exact).norm() / exact.norm()
    assert err.item() < 1.5e-2  # per-element steps of max/127: ~0.5% RMS each for q and k
    assert q8.abs().amax(dim=-1).min().item() == 127  # every row reaches its max
    assert k8.abs().amax().item() == 127
    assert torch.equal(kn, k8.float().norm(dim=-1).amax(dim=1))
