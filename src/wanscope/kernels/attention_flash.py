"""FlashAttention forward for Hopper in Triton: token-major q, k, v, TMA tiles, exact or 8-bit.

For one (batch, head), q [Lq, D], k and v [Lk, D], no mask, ``c = log2(e) / sqrt(D)``::

    s[i, j] = c (q[i] . k[j])                            # log2 units: exp2 below, scale folded in
    m_i     = running max_j s[i, j]                      # online softmax, per K/V tile
    p[i, j] = 2^(s[i, j] - m_i);  l_i = sum_j p[i, j]    # acc and l rescaled by 2^(m_old - m_new)
    o[i]    = (sum_j p[i, j] v[j]) / l_i                 # normalized once, at the end

One program per ``BLOCK_M`` query rows of one (batch, head), K/V streamed in ``BLOCK_N``-token
tiles through TMA (``tl.make_tensor_descriptor``, or host ``TensorDescriptor``s): a 2-D
descriptor over the token-major [B*L, N*D] rows addresses head h's [BLOCK, D] tile at column
h*D, so the [B, L, N, D] tensors the DiT produces are read in place (v may be the strided
third of a fused QKV output). Full K tiles run unmasked; the last, partial one is peeled and
masked (its rows past L read the next batch or TMA's zero fill, and get p = 0). The loop is
FlashAttention-2's (Dao, arXiv:2307.08691): fp32 scores and accumulator, deferred
normalization. FlashAttention-3 (Shah et al., arXiv:2407.08608) gives the Hopper side: TMA,
wgmma, FP8 with V transposed so both operands are K-major, and warp specialization, which
Triton 3.6 offers as ``tl.range(..., warp_specialize=True)`` (Hopper: its automatic producer/
consumer split; the device-side descriptors it needs are built in the kernel). FA3's
ping-pong and intra-warpgroup overlap cannot be written in Triton; two CTAs per SM (``BLOCK_M``
64, 4 warps, or ``maxnreg``) let the hardware overlap one CTA's softmax with another's MMAs.

Precisions (``qk``, ``pv``):

* ``exact``: bf16/fp16 operands, fp32 accumulation and softmax (P rounded to the input dtype
  for P V, as cuDNN and FA do). Error as cuDNN's (2.3e-3 relative L2 vs float64 at the Wan
  shape, random inputs).
* ``qk="e4m3"``: q and k per (token, head) scaled to e4m3, after k is smoothed by its mean
  over tokens (softmax is invariant to it; SageAttention, Zhang et al., arXiv:2410.02367). q's
  scale folds into the per-row scale, k's costs one multiply per score.
* ``qk="int8"``: the same to int8, int32 products, converted to fp32 by the magic-number trick
  (``bits(1.5 * 2^23 + x) = bits(1.5 * 2^23) + x`` for ``|x| < 2^22``; ``D <= 128`` keeps
  ``|q8 . k8| <= 128 * 127^2 < 2^21``) fused with k's scale: an integer add and one FMA per
  score instead of a 16/clock conversion. At D = 16 the 8-bit q and k get 16 zero columns:
  Triton's 8-bit ``tl.dot`` needs a reduction dim of 32 or more on NVIDIA.
* ``pv="e4m3"``: v scaled per (batch, head, channel) to e4m3 and transposed to [B, N, D, L]
  (Hopper's 8-bit wgmma reads B only K-major); p is computed as ``2^(s - m + 8)``, in [0, 256],
  so its e4m3 cast needs no multiply; each tile's product goes to a fresh fp32 accumulator
  (``acc * alpha + P V``: Hopper's FP8 MMA accumulates with fewer bits than fp32).

Error (relative L2 of o vs float64, q, k, v ~ N(0, 1), measured by a torch emulation at
L = 4096, D = 128): exact 1.6e-3; int8 QK 9.4e-3; e4m3 QK 3.7e-2; e4m3 PV 3.7e-2; both e4m3
5.2e-2. With nearly uniform attention the output's relative error is about the relative
rounding error of one product: 3 mantissa bits (e4m3, 2.5% RMS) cannot reach 1e-2, the int8
grid of a token's own maximum (0.6% RMS) can. Trained models' peaked attention differs:
measure on real activations (``wanscope compare-modes``).

Work and bytes at [1, 32760, 12, 128]: 4 B N L^2 D = 6.6e12 FLOP; HBM traffic is q, k, v, o once (~400 MB; K/V re-reads per query tile hit L2).
The 8-bit modes add their quantization passes (Triton, one read of q, k, v each and one of
k for its mean, ~0.6 GB with the 8-bit writes).

Custom op: ``wanscope::attention_flash``. Configuration: ``FlashConfig`` (tiles, warps,
stages, warp specialization, register cap), fixed per call: no autotuning in the hot path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from wanscope.kernels._dispatch import INTERPRET, define_op, use_triton

QK_MODES = ("exact", "e4m3", "int8")
PV_MODES = ("exact", "e4m3")
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
INT8_MAX = 127.0
# Triton's 8-bit tl.dot needs a reduction dim K >= 32 on NVIDIA (backends/nvidia/compiler.py,
# min_dot_size; the interpreter does not check): Q K^T's K is D, P V's is BLOCK_N
MIN_DOT_K_8BIT = 32
P_LOG2_OFFSET = 8.0  # e4m3 P: p = 2^(s - m + 8) in [0, 256]
_LOG2E = 1.4426950408889634
_MIN_AMAX = 1e-12
_MAGIC_BITS = tl.constexpr(0x4B400000)  # fp32 bits of 1.5 * 2^23
_MAGIC = tl.constexpr(12582912.0)
_P_OFFSET = tl.constexpr(P_LOG2_OFFSET)


@dataclass(frozen=True)
class FlashConfig:
    """Launch configuration of the kernel (sweep with ``benchmarks/attention_sweep.py``).

    The defaults are the fastest exact config of the H200 sweep of 2026-11-30 (torch 2.11,
    Triton 3.6.0, [1, 32760, 12, 128] bf16, ``benchmarks/results/attention_sweep-2026-11-30.json``;
    its times against cuDNN's: benchmarks/RESULTS.md, "2026-11-30: attention alone, cuDNN vs our
    Triton FlashAttention configs"), at cuDNN's error.

    Args:
        block_m: query rows per program (64 or 128 on Hopper; >= 16).
        block_n: key tokens per tile (64 or 128; >= 16, >= 32 with ``pv="e4m3"``: the 8-bit
            P V dot's reduction dim).
        num_warps: 4 (one warpgroup) or 8.
        num_stages: TMA pipeline depth of the K/V loop.
        warp_specialize: ``tl.range(warp_specialize=True)`` on the K/V loop, with device-side
            descriptors and every tile masked (one select per score). Triton 3.6 specializes
            on Hopper only with ``num_warps=4`` and ``num_stages > 1``: the CTA then runs a TMA
            producer and two 4-warp consumers of ``block_m / 2`` rows each (12 warps); other
            settings compile the same loop unspecialized (checked with ptxas for sm_90a).
            Exact ``qk`` and ``pv`` and ``num_stages <= 2`` only (else ValueError): in the same
            sweep 3 stages returned NaN (128x64) and int8 ``Q K^T`` (128x128, 2 stages) ended in
            "unspecified launch failure", losing the CUDA context, so the other 8-bit
            combinations never ran. Not bisected further (no GPU at hand); the two exact 2-stage
            configs matched cuDNN's error.
        maxnreg: register cap per thread (0: the compiler's choice); e.g. 128 fits two
            8-warp CTAs per SM.
    """

    block_m: int = 128
    block_n: int = 128
    num_warps: int = 4
    num_stages: int = 2
    warp_specialize: bool = True
    maxnreg: int = 0


# The fastest 8-bit config of the same sweep (not warp-specialized: FlashConfig says why), for
# int8 Q K^T and for e4m3 Q K^T and P V alike
FLASH_8BIT = FlashConfig(block_m=64, block_n=128, num_warps=4, num_stages=2, warp_specialize=False)


@triton.jit
def _descriptor(arg, rows, cols, row_stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # a host TensorDescriptor passes through; a tensor becomes a device-side descriptor
    if isinstance(arg, tl.tensor_descriptor):
        return arg
    else:
        return tl.make_tensor_descriptor(
            arg, shape=[rows, cols], strides=[row_stride, 1], block_shape=[BLOCK_R, BLOCK_C]
        )


@triton.jit
def _attend_tile(
    acc,
    m_i,
    l_i,
    q,
    c_row,
    k_desc,
    v_desc,
    ks_desc,
    bh,
    k_row,
    v_row,
    k_col,
    v_col,
    n0,
    Lk,
    QK_MODE: tl.constexpr,
    PV_FP8: tl.constexpr,
    MASK: tl.constexpr,
    DOT_F32: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    k = k_desc.load([k_row + n0, k_col])  # [BLOCK_N, DK]
    if QK_MODE == 2:
        s = tl.dot(q, k.T, out_dtype=tl.int32)
    elif DOT_F32 and QK_MODE == 0:
        s = tl.dot(q.to(tl.float32), k.to(tl.float32).T)
    else:
        s = tl.dot(q, k.T)
    cols = n0 + tl.arange(0, BLOCK_N)
    if QK_MODE != 0:  # the per-token k scale (zeros past Lk)
        ks = ks_desc.load([bh, n0]).reshape([BLOCK_N])
        if QK_MODE == 2:  # int32 -> fp32 by the magic number, fused with the scale
            s = (s + _MAGIC_BITS).to(tl.float32, bitcast=True) * ks[None, :] - (ks * _MAGIC)[None, :]
        else:
            s = s * ks[None, :]
    if MASK:
        s = tl.where(cols[None, :] < Lk, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1) * c_row)  # c_row > 0
    alpha = tl.exp2(m_i - m_new)
    if PV_FP8:
        p = tl.exp2(s * c_row[:, None] - (m_new - _P_OFFSET)[:, None])
        v = v_desc.load([v_row, n0]).T  # [BLOCK_N, D] from the [D, BLOCK_N] tile of v^T
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    else:
        p = tl.exp2(s * c_row[:, None] - m_new[:, None])
        v = v_desc.load([k_row + n0, v_col])  # [BLOCK_N, D]
        if DOT_F32:
            acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc * alpha[:, None])
        else:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    return acc, m_new, l_i


@triton.jit
def _flash_fwd_kernel(
    q_arg,
    k_arg,
    v_arg,
    qs_arg,
    ks_arg,
    o_ptr,
    vs_ptr,
    B,
    Lq,
    Lk,
    N,
    stride_q,
    stride_k,
    stride_v,
    stride_o,
    stride_qs,
    stride_ks,
    qk_scale,
    D: tl.constexpr,
    DK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    QK_MODE: tl.constexpr,
    PV_FP8: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // N
    h = bh % N
    # q and k rows are DK wide: D, or 32 for 8-bit q, k at D = 16 (zero columns; see _launch)
    q_desc = _descriptor(q_arg, B * Lq, N * DK, stride_q, BLOCK_M, DK)
    k_desc = _descriptor(k_arg, B * Lk, N * DK, stride_k, BLOCK_N, DK)
    if PV_FP8:
        v_desc = _descriptor(v_arg, B * N * D, Lk, stride_v, D, BLOCK_N)  # v^T [B*N*D, Lk]
    else:
        v_desc = _descriptor(v_arg, B * Lk, N * D, stride_v, BLOCK_N, D)

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q = q_desc.load([b * Lq + m0, h * DK])  # [BLOCK_M, DK]; rows past Lq are never stored
    if QK_MODE == 0:
        c_row = tl.full([BLOCK_M], qk_scale, tl.float32)
        ks_desc = ks_arg  # unused
    else:  # the scales come through TMA too: Hopper's warp specialization refuses pointer loads
        qs_desc = _descriptor(qs_arg, B * N, Lq, stride_qs, 1, BLOCK_M)
        c_row = tl.where(offs_m < Lq, qs_desc.load([bh, m0]).reshape([BLOCK_M]), 1.0)
        ks_desc = _descriptor(ks_arg, B * N, Lk, stride_ks, 1, BLOCK_N)

    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    k_row = b * Lk
    v_row = bh * D
    k_col = h * DK
    v_col = h * D
    if WARP_SPECIALIZE:  # one loop, every tile masked: Hopper's warp specialization refuses a branch after it
        for n0 in tl.range(0, Lk, BLOCK_N, warp_specialize=True):
            acc, m_i, l_i = _attend_tile(
                acc,
                m_i,
                l_i,
                q,
                c_row,
                k_desc,
                v_desc,
                ks_desc,
                bh,
                k_row,
                v_row,
                k_col,
                v_col,
                n0,
                Lk,
                QK_MODE,
                PV_FP8,
                True,
                DOT_F32,
                BLOCK_N,
            )
    else:  # full tiles unmasked, then the partial one
        n_full = (Lk // BLOCK_N) * BLOCK_N
        for n0 in tl.range(0, n_full, BLOCK_N):
            acc, m_i, l_i = _attend_tile(
                acc,
                m_i,
                l_i,
                q,
                c_row,
                k_desc,
                v_desc,
                ks_desc,
                bh,
                k_row,
                v_row,
                k_col,
                v_col,
                n0,
                Lk,
                QK_MODE,
                PV_FP8,
                False,
                DOT_F32,
                BLOCK_N,
            )
        if n_full < Lk:
            acc, m_i, l_i = _attend_tile(
                acc,
                m_i,
                l_i,
                q,
                c_row,
                k_desc,
                v_desc,
                ks_desc,
                bh,
                k_row,
                v_row,
                k_col,
                v_col,
                n_full,
                Lk,
                QK_MODE,
                PV_FP8,
                True,
                DOT_F32,
                BLOCK_N,
            )

    out = acc * (1.0 / l_i)[:, None]
    offs_d = tl.arange(0, D)
    if PV_FP8:
        out = out * tl.load(vs_ptr + bh * D + offs_d)[None, :]
    rows = (b * Lq + offs_m).to(tl.int64)
    tl.store(
        o_ptr + rows[:, None] * stride_o + h * D + offs_d[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=(offs_m < Lq)[:, None],
    )


@triton.jit
def _quantize_rows_kernel(
    x_ptr,
    mean_ptr,
    out_ptr,
    scale_ptr,
    R,
    L,
    N,
    stride_b,
    stride_l,
    scale_row,
    mult,
    min_amax,
    INT8: tl.constexpr,
    SMOOTH: tl.constexpr,
    D: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    # rows r = (b L + l) N + h of the [B*L*N, D] output; the input may space its tokens wider
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    live = r < R
    h = r % N
    tok = r // N
    b = tok // L
    l = tok % L
    cols = tl.arange(0, D)
    x = tl.load(
        x_ptr + (b * stride_b + l * stride_l + h * D)[:, None] + cols[None, :], mask=live[:, None], other=0.0
    ).to(tl.float32)
    if SMOOTH:
        x -= tl.load(mean_ptr + ((b * N + h) * D)[:, None] + cols[None, :], mask=live[:, None], other=0.0)
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), min_amax)
    if INT8:
        y = x * (127.0 / amax)[:, None]
        y = tl.where(y >= 0, y + 0.5, y - 0.5).to(tl.int8)  # half away from zero, then truncation
        scale = amax / 127.0
    else:
        y = (x * (448.0 / amax)[:, None]).to(tl.float8e4nv)
        scale = amax / 448.0
    tl.store(out_ptr + r[:, None] * D + cols[None, :], y, mask=live[:, None])
    tl.store(scale_ptr + (b * N + h) * scale_row + l, scale * mult, mask=live)


@triton.jit
def _quantize_v_kernel(
    v_ptr, inv_ptr, vt_ptr, L, N, stride_b, stride_l, vt_row, D: tl.constexpr, BLOCK_L: tl.constexpr
):
    bh = tl.program_id(1)
    b = bh // N
    h = bh % N
    offs_l = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    offs_d = tl.arange(0, D)
    live = (offs_l < L)[:, None]
    v = tl.load(
        v_ptr + b.to(tl.int64) * stride_b + offs_l[:, None].to(tl.int64) * stride_l + h * D + offs_d[None, :],
        mask=live,
        other=0.0,
    ).to(tl.float32)
    y = (v * tl.load(inv_ptr + bh * D + offs_d)[None, :]).to(tl.float8e4nv)  # [BLOCK_L, D]
    tl.store(vt_ptr + (bh * D + offs_d)[None, :].to(tl.int64) * vt_row + offs_l[:, None], y, mask=live)


def _padded_scales(b: int, n: int, l: int, device) -> torch.Tensor:
    """[B, N, L] fp32 view of rows padded to 16 bytes (the TMA row stride the kernel reads)."""
    return torch.empty((b, n, -(-l // 4) * 4), dtype=torch.float32, device=device)[..., :l]


def _quantize_rows(x: torch.Tensor, mean: torch.Tensor | None, int8: bool, mult: float):
    """x [B, L, N, D] per (token, head) to int8 or e4m3 (minus ``mean`` [B, N, D] if given):
    (x8 [B, L, N, D] contiguous, scale [B, N, L] fp32 times ``mult``); Triton or torch ops, the
    same arithmetic (int8: half away from zero; e4m3: to nearest even)."""
    b, l, n, d = x.shape
    qmax = INT8_MAX if int8 else FP8_MAX
    scale = _padded_scales(b, n, l, x.device)
    if not use_triton(x):
        xf = x.float() - (mean[:, None] if mean is not None else 0.0)
        amax = xf.abs().amax(dim=-1).clamp_min(_MIN_AMAX)  # [B, L, N]
        y = xf * (qmax / amax)[..., None]
        x8 = torch.trunc(y + 0.5 * torch.sign(y)).to(torch.int8) if int8 else y.to(FP8)
        scale.copy_((amax / qmax * mult).transpose(1, 2))
        return x8, scale
    if x.stride(3) != 1 or (n > 1 and x.stride(2) != d):
        x = x.contiguous()
    x8 = torch.empty(x.shape, dtype=torch.int8 if int8 else FP8, device=x.device)
    rows, block_r = b * l * n, 16
    if rows:
        _quantize_rows_kernel[(triton.cdiv(rows, block_r),)](
            x,
            mean if mean is not None else x,
            x8,
            scale,
            rows,
            l,
            n,
            x.stride(0),
            x.stride(1),
            scale.stride(1),
            mult,
            _MIN_AMAX,
            INT8=int8,
            SMOOTH=mean is not None,
            D=d,
            BLOCK_R=block_r,
            num_warps=4,
        )
    return x8, scale


def quantize_qk(q: torch.Tensor, k: torch.Tensor, qk: str):
    """q and k to 8 bits per (token, head), k smoothed by its mean over tokens.

    Args:
        q: [B, Lq, N, D]; k: [B, Lk, N, D]; any float dtype, unit last stride.
        qk: ``"e4m3"`` or ``"int8"``.

    Returns:
        (q8 [B, Lq, N, D], qs [B, N, Lq] fp32, k8 [B, Lk, N, D], ks [B, N, Lk] fp32), 8-bit ones
        contiguous, scales views of 16-byte rows, with ``c q.k' ~= qs[i] ks[j] (q8[i] . k8[j])``
        per (batch, head), for ``k' = k - mean_L(k)`` and ``c = log2(e) / sqrt(D)``. A Triton
        kernel on CUDA (one pass over each; the mean is one more over k), torch ops otherwise.
        Rounding: int8 half away from zero, e4m3 to nearest even.
    """
    int8 = qk == "int8"
    mean = torch.mean(k, dim=1, dtype=torch.float32)  # [B, N, D]
    q8, qs = _quantize_rows(q, None, int8, _LOG2E / math.sqrt(q.shape[-1]))
    k8, ks = _quantize_rows(k, mean, int8, 1.0)
    return q8, qs, k8, ks


def quantize_v(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """v to e4m3 per (batch, head, channel), transposed.

    Args:
        v: [B, Lk, N, D], any float dtype, unit last stride.

    Returns:
        (vt e4m3 [B, N, D, Lp], vs [B, N, D] fp32): ``v[b, j, h, d] ~= vt[b, h, d, j] vs[b, h, d]``
        for ``j < Lk``; ``Lp`` = Lk rounded up to 16 (TMA's 16-byte row stride), the columns past
        Lk left unset (the kernel's descriptor ends at Lk: TMA reads zeros there). A Triton
        kernel on CUDA (one pass after the channel maxima's), torch ops otherwise; same rounding.
    """
    b, lk, n, d = v.shape
    amax = torch.linalg.vector_norm(v, ord=math.inf, dim=1).float().clamp_min(_MIN_AMAX)  # [B, N, D]
    inv = FP8_MAX / amax
    vt = torch.empty((b, n, d, -(-lk // 16) * 16), dtype=FP8, device=v.device)
    if not use_triton(v):
        vt[..., :lk] = (v.float() * inv[:, None]).to(FP8).permute(0, 2, 3, 1)
    elif vt.numel():
        if v.stride(3) != 1 or (n > 1 and v.stride(2) != d):
            v = v.contiguous()
        _quantize_v_kernel[(triton.cdiv(lk, 64), b * n)](
            v, inv, vt, lk, n, v.stride(0), v.stride(1), vt.shape[-1], D=d, BLOCK_L=64, num_warps=4
        )
    return vt, amax / FP8_MAX


def _token_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x [B, L, N, D] as TMA rows of a [B*L, N*D] matrix: (x or a contiguous copy, row stride)."""
    b, l, n, d = x.shape
    row = x.stride(1)
    ok = (
        x.stride(3) == 1
        and (n == 1 or x.stride(2) == d)
        and (b == 1 or x.stride(0) == l * row)
        and (row * x.element_size()) % 16 == 0
        and x.data_ptr() % 16 == 0
        and row >= n * d
    )
    if not ok:
        x = x.contiguous()
        row = n * d
    return x, row


def _pad_head_dim(x8: torch.Tensor, dk: int) -> torch.Tensor:
    """8-bit [B, L, N, D] -> [B, L, N, dk], the columns past D zero."""
    out = x8.new_zeros((*x8.shape[:3], dk))
    out[..., : x8.shape[3]] = x8
    return out


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _launch(q, k, v, qk, pv, cfg: FlashConfig):
    b, lq, n, d = q.shape
    lk = k.shape[1]
    out = torch.empty((b, lq, n, d), dtype=q.dtype, device=q.device)
    qk_scale = _LOG2E / math.sqrt(d)
    unused = torch.empty(4, device=q.device)
    qs = ks = unused
    stride_qs = stride_ks = 4
    dk = d
    if qk == "exact":
        (q_in, stride_q), (k_in, stride_k) = _token_rows(q), _token_rows(k)
    else:
        q_in, qs, k_in, ks = quantize_qk(q, k, qk)
        if d < MIN_DOT_K_8BIT:  # zero columns add nothing to q . k
            dk = MIN_DOT_K_8BIT
            q_in, k_in = _pad_head_dim(q_in, dk), _pad_head_dim(k_in, dk)
        stride_q = stride_k = n * dk
        stride_qs, stride_ks = qs.stride(1), ks.stride(1)
    if pv == "e4m3":
        v_in, vs = quantize_v(v)
        stride_v = v_in.shape[-1]
        v_shape, v_block = [b * n * d, lk], [d, cfg.block_n]
    else:
        (v_in, stride_v), vs = _token_rows(v), unused
        v_shape, v_block = [b * lk, n * d], [cfg.block_n, d]
    if cfg.warp_specialize:  # Hopper's warp specialization wants device-side descriptors
        triton.set_allocator(_alloc)
        args = (q_in, k_in, v_in, qs, ks)  # scale views: the kernel reads their rows' first L
    else:
        from triton.tools.tensor_descriptor import TensorDescriptor

        args = (
            TensorDescriptor(q_in, [b * lq, n * dk], [stride_q, 1], [cfg.block_m, dk]),
            TensorDescriptor(k_in, [b * lk, n * dk], [stride_k, 1], [cfg.block_n, dk]),
            TensorDescriptor(v_in, v_shape, [stride_v, 1], v_block),
            TensorDescriptor(qs, [b * n, lq], [stride_qs, 1], [1, cfg.block_m]) if qk != "exact" else qs,
            TensorDescriptor(ks, [b * n, lk], [stride_ks, 1], [1, cfg.block_n]) if qk != "exact" else ks,
        )
    extra = {"maxnreg": cfg.maxnreg} if cfg.maxnreg and not INTERPRET else {}
    grid = (triton.cdiv(lq, cfg.block_m), b * n)
    _flash_fwd_kernel[grid](
        *args,
        out,
        vs,
        b,
        lq,
        lk,
        n,
        stride_q,
        stride_k,
        stride_v,
        out.stride(1),
        stride_qs,
        stride_ks,
        qk_scale,
        D=d,
        DK=dk,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        QK_MODE=QK_MODES.index(qk),
        PV_FP8=pv == "e4m3",
        WARP_SPECIALIZE=cfg.warp_specialize,
        DOT_F32=INTERPRET,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **extra,
    )
    return out


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qk: str = "exact", pv: str = "exact") -> torch.Tensor:
    """The same math in torch ops, fp32, one softmax over all keys: [B, Lq, N, D] in q's dtype.

    ``exact``/``exact``: fp32 SDPA. Otherwise the kernel's quantization (``quantize_qk``,
    ``quantize_v``, P rounded to v's dtype or to e4m3 at 2^8 scale) with the final row maximum
    (the kernel rounds each tile's p against the running one). Materializes [B, N, Lq, Lk] fp32
    scores: small shapes only.
    """
    if qk == "exact" and pv == "exact":
        o = F.scaled_dot_product_attention(
            q.float().transpose(1, 2), k.float().transpose(1, 2), v.float().transpose(1, 2)
        )  # [B, N, Lq, D]
        return o.transpose(1, 2).to(q.dtype)
    if qk == "exact":
        s = torch.einsum("bind,bjnd->bnij", q.float(), k.float()) * (_LOG2E / math.sqrt(q.shape[-1]))
    else:
        q8, qs, k8, ks = quantize_qk(q, k, qk)
        s = torch.einsum("bind,bjnd->bnij", q8.float(), k8.float())  # [B, N, Lq, Lk]
        s = s * qs[..., None] * ks[:, :, None, :]
    p = torch.exp2(s - s.amax(dim=-1, keepdim=True))
    denom = p.sum(dim=-1, keepdim=True)  # [B, N, Lq, 1]
    if pv == "e4m3":
        vt, vs = quantize_v(v)
        p8 = (p * 2.0**P_LOG2_OFFSET).to(FP8).float()
        o = p8 @ vt[..., : v.shape[1]].float().transpose(-1, -2) / (denom * 2.0**P_LOG2_OFFSET) * vs[:, :, None, :]
    else:
        o = p.to(v.dtype).float() @ v.float().transpose(1, 2) / denom  # [B, N, Lq, D]
    return o.transpose(1, 2).to(q.dtype)


def _check_config(c: FlashConfig, qk: str, pv: str) -> None:
    """Raise ValueError for a config the kernel does not take (see ``FlashConfig``)."""
    if min(c.block_m, c.block_n) < 16 or c.num_warps not in (4, 8) or c.num_stages < 1:
        raise ValueError(f"unsupported config {c}")
    if pv == "e4m3" and c.block_n < MIN_DOT_K_8BIT:
        raise ValueError(f"config {c}: pv='e4m3' needs block_n >= {MIN_DOT_K_8BIT} (the 8-bit P V dot's K)")
    if c.warp_specialize and (qk != "exact" or pv != "exact"):
        raise ValueError(
            f"config {c}: warp_specialize takes qk='exact' and pv='exact' only, got qk={qk!r}, "
            f"pv={pv!r} (int8 Q K^T lost the CUDA context on an H200, Triton 3.6)"
        )
    if c.warp_specialize and c.num_stages > 2:
        raise ValueError(
            f"config {c}: warp_specialize takes num_stages <= 2 (3 stages returned NaN on an H200, Triton 3.6)"
        )


def _attention_flash_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qk: str,
    pv: str,
    block_m: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
    warp_specialize: bool,
    maxnreg: int,
) -> torch.Tensor:
    if use_triton(q):
        cfg = FlashConfig(block_m, block_n, num_warps, num_stages, warp_specialize, maxnreg)
        return _launch(q, k, v, qk, pv, cfg)
    return reference(q, k, v, qk, pv)


def _attention_flash_op_fake(q, k, v, qk, pv, block_m, block_n, num_warps, num_stages, warp_specialize, maxnreg):
    return q.new_empty(q.shape)


define_op("attention_flash", _attention_flash_op, _attention_flash_op_fake)


def attention_flash(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qk: str = "exact",
    pv: str = "exact",
    config: FlashConfig | None = None,
) -> torch.Tensor:
    """Softmax attention without mask, scale ``1/sqrt(D)``: see the module docstring.

    Args:
        q: [B, Lq, N, D]; k, v: [B, Lk, N, D]; one dtype (bf16 or fp16 on the Triton path, any
            float on the CPU reference), one device. Token-major with heads side by side
            (``stride(2) == D``, unit last stride) is read in place, v may be a column slice of a
            fused projection; other strides are copied contiguous. D in {16, 32, 64, 128}; Lk >= 1.
        qk: precision of ``Q K^T``: ``"exact"`` (input dtype), ``"e4m3"`` or ``"int8"``.
        pv: precision of ``P V``: ``"exact"`` (input dtype) or ``"e4m3"``.
        config: tiles, warps and stages of the Triton kernel; None: ``FlashConfig()`` for exact
            ``qk`` and ``pv``, ``FLASH_8BIT`` otherwise (the fastest of the H200 sweep for each).

    Returns:
        [B, Lq, N, D] contiguous, dtype of q.

    Raises:
        ValueError: shapes, dtypes, modes or a config outside the above (``FlashConfig``).
    """
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4 or (q.shape[0], q.shape[2:]) != (k.shape[0], k.shape[2:]):
        raise ValueError(
            f"q [B, Lq, N, D] and k, v [B, Lk, N, D] expected, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] not in (16, 32, 64, 128):
        raise ValueError(f"head dim must be 16, 32, 64 or 128, got {q.shape[-1]}")
    if k.shape[1] < 1:
        raise ValueError("attention over zero keys is undefined")
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
        raise ValueError(f"q, k, v must share one float dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if qk not in QK_MODES or pv not in PV_MODES:
        raise ValueError(f"qk must be one of {QK_MODES} and pv one of {PV_MODES}, got {qk!r}, {pv!r}")
    if use_triton(q) and q.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"the Triton kernel takes bf16 or fp16, got {q.dtype}")
    c = config or (FlashConfig() if qk == pv == "exact" else FLASH_8BIT)
    _check_config(c, qk, pv)
    return torch.ops.wanscope.attention_flash(
        q, k, v, qk, pv, c.block_m, c.block_n, c.num_warps, c.num_stages, c.warp_specialize, c.maxnreg
    )
