"""INT8 q and k for the fast mode's ``Q K^T`` in ``attention_hopper(..., qk_int8=True)``.

For q [B, Lq, N, D] and k [B, Lk, N, D] (bf16, fp16 or fp32; read in place by their row stride)
and the softmax scale ``c`` in log2 units (``log2(e) / sqrt(D)`` for attention)::

    mu[b, h]     = mean_t k[b, t, h, :]                      # smoothing (SageAttention): the
                                                             # softmax of q.(k - mu) is q.k's
    sk[b, h]     = max_{t, d} |k[b, t, h, d] - mu[b, h, d]| / 127
    k8[b, t, h]  = round((k[b, t, h] - mu[b, h]) / sk[b, h])          # int8, |k8| <= 127
    sq[b, t, h]  = max_d |q[b, t, h, d]| / 127
    q8[b, t, h]  = round(q[b, t, h] / sq[b, t, h])                    # int8, |q8| <= 127
    f[b, t, h]   = c * sq[b, t, h] * sk[b, h]                         # fp32 row factor
    kn[b, h]     = max_t |k8[b, t, h, :]|                             # fp32 (integer norms)

so the log2-unit score of query i and key j is ``f_i (q8_i . k8_j)``, an exact int32 dot
(|q8 . k8| <= 128 * 127^2 < 2^22 for D <= 128) times one fp32 factor per query row. One scale
per (batch, head) for k, not per token or block: the kernel then folds every scale into ``f``,
a per-row factor, and its inner loop keeps one FFMA per score (a per-key scale would add a
multiply per score). q and k come out of an RMSNorm across heads (the Wan DiT's q/k norm), so
every token's k has nearly the same norm and a per-head scale loses little to a per-token one.
``kn`` bounds every score of row i by ``f_i |q8_i| kn`` (Cauchy-Schwarz on the quantized
vectors, the very ints the tensor cores multiply): the kernel's fixed softmax shift needs it.
Rounding is to nearest, half away from zero.

Error: each element moves by at most half a step, ``sk / 2`` or ``sq / 2``; for Gaussian-like
rows (max ~4-5 RMS) that is ~0.4-0.6% of the RMS per element.

Ideas: SageAttention (Zhang et al. 2024, arXiv:2410.02367): INT8 ``Q K^T`` and k smoothed by its
mean over tokens. Work: k is read twice (statistics, quantize) and q once, each written once as
int8: ~0.35 GB moved at [1, 32760, 12, 128].

On CUDA tensors (or CPU ones under Triton's interpreter) the passes run Triton kernels;
otherwise the torch ``reference``, with the same formulas (an element may round to the
neighbouring integer where the two order the fp32 operations differently).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from wanscope.kernels._dispatch import use_triton

_LOG2E = 1.4426950408889634
_MIN_AMAX = 1e-12  # a zero row or head quantizes to zeros with a finite scale
ROWS = 64  # tokens per program of the quantize passes
STAT_ROWS = 256  # tokens per program of k's statistics pass


@triton.jit
def _k_stats_kernel(
    k_ptr, row_stride, L, N, sum_ptr, min_ptr, max_ptr, D: tl.constexpr, ROWS: tl.constexpr, STEP: tl.constexpr
):
    # per channel of one (batch, head), over ROWS tokens of k [B, L, N, D]: the sum, min and max,
    # written to row (chunk, b * N + h) of [chunks, B * N, D] partials (summed up by torch: no
    # atomics, the same bits every run). Elementwise over [STEP, D] tiles, reduced once at the end.
    chunk = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // N
    h = bh % N
    d = tl.arange(0, D)
    acc = tl.zeros([STEP, D], tl.float32)
    lo = tl.full([STEP, D], float("inf"), tl.float32)
    hi = tl.full([STEP, D], -float("inf"), tl.float32)
    for i in tl.static_range(0, ROWS, STEP):
        t = chunk * ROWS + i + tl.arange(0, STEP)
        ok = (t < L)[:, None]
        x = tl.load(k_ptr + (b * L + t).to(tl.int64)[:, None] * row_stride + h * D + d[None, :], mask=ok, other=0.0).to(
            tl.float32
        )
        acc += x
        lo = tl.minimum(lo, tl.where(ok, x, float("inf")))
        hi = tl.maximum(hi, tl.where(ok, x, -float("inf")))
    out = (chunk * tl.num_programs(1) + bh) * D + d
    tl.store(sum_ptr + out, tl.sum(acc, axis=0))
    tl.store(min_ptr + out, tl.min(lo, axis=0))
    tl.store(max_ptr + out, tl.max(hi, axis=0))


@triton.jit
def _quantize_head_rows_kernel(
    x_ptr,
    row_stride,
    L,
    N,
    mean_ptr,
    head_scale_ptr,
    out_ptr,
    scale_ptr,
    norm_ptr,
    c,
    min_amax,
    D: tl.constexpr,
    ROWS: tl.constexpr,
    IS_K: tl.constexpr,
):
    # ROWS tokens of one (batch, head) of x [B, L, N, D] (row stride row_stride) to int8 in a
    # contiguous [B, L, N, D]. k (IS_K): minus mean[b, h, :], times 1 / head_scale[b, h], and
    # the largest row norm of the ints written to norm[chunk, b * N + h] (partials: torch takes
    # their max). q: by its own row max, scale[b, t, h] = c * max|q| / 127 * head_scale[b, h].
    bh = tl.program_id(1)
    b = bh // N
    h = bh % N
    t = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    d = tl.arange(0, D)
    rows = (b * L + t).to(tl.int64)
    mask = (t < L)[:, None]
    x = tl.load(x_ptr + rows[:, None] * row_stride + h * D + d[None, :], mask=mask, other=0.0).to(tl.float32)
    head_scale = tl.load(head_scale_ptr + bh)
    if IS_K:
        y = (x - tl.load(mean_ptr + bh * D + d)[None, :]) * (1.0 / head_scale)
    else:
        amax = tl.maximum(tl.max(tl.abs(x), axis=1), min_amax)
        y = x * (127.0 / amax)[:, None]
        tl.store(scale_ptr + rows * N + h, c * (amax / 127.0) * head_scale, mask=t < L)
    y = tl.minimum(tl.maximum(tl.where(y >= 0, y + 0.5, y - 0.5), -127.0), 127.0).to(tl.int8)  # trunc
    tl.store(out_ptr + rows[:, None] * (N * D) + h * D + d[None, :], y, mask=mask)
    if IS_K:
        yf = tl.where(mask, y.to(tl.float32), 0.0)  # rows past L hold -mu / sk
        norm = tl.sqrt(tl.max(tl.sum(yf * yf, axis=1), axis=0))
        tl.store(norm_ptr + tl.program_id(0) * tl.num_programs(1) + bh, norm)


def _heads_side_by_side(x: torch.Tensor) -> torch.Tensor:
    """x [B, L, N, D] itself where the kernels can read it by its row stride (unit last stride,
    each token's heads side by side, batches one after another), else a contiguous copy."""
    b, l, n, d = x.shape
    ok = x.stride(3) == 1 and (n == 1 or x.stride(2) == d) and (b == 1 or x.stride(0) == l * x.stride(1))
    return x if ok else x.contiguous()


def k_stats(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k's smoothing mean and INT8 scale per (batch, head): [B, Lk, N, D] -> (mu [B, N, D] fp32,
    sk [B, N] fp32); see the module docstring. One Triton pass over k on CUDA (per-chunk partial
    sums and extrema, then summed by torch in a fixed order), torch reductions otherwise."""
    b, lk, n, d = k.shape
    if use_triton(k):
        k = _heads_side_by_side(k)
        chunks = triton.cdiv(lk, STAT_ROWS)
        parts = torch.empty((3, chunks, b * n, d), dtype=torch.float32, device=k.device)
        _k_stats_kernel[(chunks, b * n)](
            k, k.stride(1), lk, n, parts[0], parts[1], parts[2], D=d, ROWS=STAT_ROWS, STEP=32, num_warps=4
        )
        mu = (parts[0].sum(dim=0) / lk).view(b, n, d)
        kmin, kmax = parts[1].amin(dim=0).view(b, n, d), parts[2].amax(dim=0).view(b, n, d)
    else:
        mu = k.mean(dim=1, dtype=torch.float32)
        kmin, kmax = (x.float() for x in torch.aminmax(k, dim=1))
    amax = torch.maximum(kmax - mu, mu - kmin).amax(dim=-1)
    return mu.contiguous(), (amax.clamp_min(_MIN_AMAX) / 127.0).contiguous()


def _round(y: torch.Tensor) -> torch.Tensor:
    return torch.trunc(y + 0.5 * torch.sign(y)).clamp(-127, 127).to(torch.int8)


def reference(q: torch.Tensor, k: torch.Tensor, c: float):
    """``quantize_qk_int8`` in torch ops (any layout; ``c`` given)."""
    mu, sk = k_stats(k)
    k8 = _round((k.float() - mu[:, None]) * (1.0 / sk[:, None, :, None]))
    amax = q.float().abs().amax(dim=-1).clamp_min(_MIN_AMAX)  # [B, Lq, N]
    q8 = _round(q.float() * (127.0 / amax)[..., None])
    f = c * (amax / 127.0) * sk[:, None]
    kn = k8.float().square().sum(-1).sqrt().amax(dim=1)  # [B, N]
    return q8, f, k8, kn


def quantize_qk_int8(q: torch.Tensor, k: torch.Tensor, c: float | None = None):
    """Quantize q and k for an INT8 ``Q K^T`` (the module docstring's formulas).

    Args:
        q: [B, Lq, N, D]; k: [B, Lk, N, D] (Lk >= 1); bf16, fp16 or fp32; D a power of 2 (the
            kernel's tile); read in place with unit last stride, each token's heads side by side
            and batches one after another, else copied.
        c: the softmax scale in log2 units, folded into ``f``; default ``log2(e) / sqrt(D)``,
            attention's.

    Returns:
        ``(q8, f, k8, kn)``: q8 int8 [B, Lq, N, D] and k8 int8 [B, Lk, N, D], contiguous; f fp32
        [B, Lq, N] (the score factor per query row); kn fp32 [B, N] (the largest row norm of k8).
    """
    if c is None:
        c = _LOG2E / math.sqrt(q.shape[-1])
    if not use_triton(q):
        return reference(q, k, c)
    b, lq, n, d = q.shape
    lk = k.shape[1]
    q, k = _heads_side_by_side(q), _heads_side_by_side(k)
    mu, sk = k_stats(k)
    q8 = torch.empty(q.shape, dtype=torch.int8, device=q.device)
    k8 = torch.empty(k.shape, dtype=torch.int8, device=q.device)
    f = torch.empty((b, lq, n), dtype=torch.float32, device=q.device)
    norms = torch.empty((triton.cdiv(lk, ROWS), b * n), dtype=torch.float32, device=q.device)
    for x, length, out, is_k in ((k, lk, k8, True), (q, lq, q8, False)):
        if length:  # Lq may be 0
            _quantize_head_rows_kernel[(triton.cdiv(length, ROWS), b * n)](
                x, x.stride(1), length, n, mu, sk, out, f, norms, c, _MIN_AMAX, D=d, ROWS=ROWS, IS_K=is_k, num_warps=4
            )
    return q8, f, k8, norms.amax(dim=0).view(b, n)
