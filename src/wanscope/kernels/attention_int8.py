"""Softmax attention with INT8 ``Q K^T`` and FP8 (or bf16) ``P V``, online softmax in fp32.

For one (batch, head), q, k, v [L, D], scale ``c = log2(e) / sqrt(D)``::

    k'      = k - mean_L(k)                                   # smoothing: softmax is unchanged,
                                                              # q.mean_k is constant per row
    q8, sq  = int8 per (token, head): sq = c * max|q| / 127,   q ~= q8 * sq / c
    k8, sk  = int8 per (token, head): sk = max|k'| / 127
    s[i, j] = sq[i] sk[j] (q8[i] . k8[j])                     # int32 products, exact; log2 units
    p[i, j] = 2^(s[i, j] - m[i])                              # m: running row max (online softmax)
    o[i]    = sum_j p[i, j] v[j] / sum_j p[i, j]              # PV: bf16, or e4m3 (below)

FP8 PV (``pv_fp8=True``): v is scaled per (head, channel) to e4m3, ``sv[d] = max_L |v[:, d]| / 448``,
stored transposed [B, N, D, L] so both wgmma operands are K-major (Hopper's 8-bit wgmma reads B
only K-major), and each tile's p (in [0, 1]) is multiplied by 448 before its e4m3 cast; the
output is rescaled by ``sv / 448``.

Ideas from SageAttention (Zhang et al., arXiv:2410.02367: INT8 QK^T, smoothing K by its mean
over tokens) and FlashAttention-3 (Shah et al., arXiv:2407.08608: FP8 on Hopper, V transposed
for K-major operands). Our own kernel: per-token (not per-block) q/k scales, since the scale is
a vector multiply per tile either way and a token's own maximum loses less. The loop follows
FlashAttention-2 (arXiv:2307.08691): one program per BLOCK_M query rows of one head, K/V tiles
streamed, the rescaling by ``2^(m_old - m_new)`` in fp32; the last, partial K tile is masked.

Work and bytes at [1, 12, 32760, 128]: 4 L^2 N D = 6.6e12 FLOP (int8 and e4m3 tensor cores
peak at 2x bf16); per program K and V are re-read from L2, HBM traffic is q, k, v, o once
(~400 MB including the quantized copies and the quantize passes).

Error (relative L2 of o against float64, random q, k, v ~ N(0, 1) after RMSNorm-like scale,
measured by the tests and ``benchmarks/fast_mode.py``): INT8 rounding of q and k is <= half a
step of max|row|/127 per element (RMS ~0.6% of the row's RMS for D = 128), so logits move by
about 0.01 (log2 units); e4m3 P and V add ~2% RMS per element, averaged over the keys. Tests
bound the output at <= 4e-2 relative L2 with FP8 PV and <= 2.5e-2 with bf16 PV at tiny shapes
(few keys average less); cuDNN's bf16 error at the full shape is 2.3e-3.

Custom op: ``wanscope::attention_int8``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from wanscope.kernels._dispatch import INTERPRET, define_op, use_triton

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
_MIN_AMAX = 1e-12
_LOG2E = 1.4426950408889634


@triton.jit
def _quantize_int8_rows_kernel(
    x_ptr,
    mean_ptr,
    q_ptr,
    scale_ptr,
    R,
    LN,
    N,
    D,
    mult,
    min_amax,
    SMOOTH: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # rows r of the [B*L*N, D] view of a contiguous [B, L, N, D]: batch r // LN, head r % N
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < R) & (cols[None, :] < D)
    x = tl.load(x_ptr + rows[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if SMOOTH:
        mrow = (rows // LN) * N + rows % N  # [B, N, D] mean table
        x -= tl.load(mean_ptr + mrow[:, None] * D + cols[None, :], mask=mask, other=0.0)
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), min_amax)
    y = x * (127.0 / amax)[:, None]
    y = tl.where(y >= 0, y + 0.5, y - 0.5)  # round half away from zero, then truncate
    tl.store(q_ptr + rows[:, None] * D + cols[None, :], y.to(tl.int8), mask=mask)
    tl.store(scale_ptr + rows, amax / 127.0 * mult, mask=rows < R)


@triton.jit
def _attn_tile(
    acc,
    m_i,
    l_i,
    q,
    qs,
    k_base,
    ks_base,
    v_base,
    start_n,
    L,
    N,
    offs_n,
    offs_d,
    D,
    stride_kl,
    stride_vl,
    stride_vd,
    FP8_PV: tl.constexpr,
    MASK: tl.constexpr,
):
    cols = start_n + offs_n
    kv_mask = offs_d[None, :] < D
    if MASK:
        kv_mask = kv_mask & (cols[:, None] < L)
    k = tl.load(k_base + cols[:, None] * stride_kl + offs_d[None, :], mask=kv_mask, other=0)  # [BN, BD] int8
    ks = tl.load(ks_base + cols * N, mask=cols < L, other=0.0)
    s = tl.dot(q, tl.trans(k), out_dtype=tl.int32).to(tl.float32) * qs[:, None] * ks[None, :]  # log2 units
    if MASK:
        s = tl.where(cols[None, :] < L, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None]
    v = tl.load(v_base + cols[:, None] * stride_vl + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
    if FP8_PV:
        acc = tl.dot((p * 448.0).to(v.dtype), v, acc)
    else:
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


def _configs():
    if INTERPRET:  # one small config: tiles small enough that test shapes have partial tiles
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=1)]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in ((128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (64, 64, 4, 4))
    ]


def _prune_tall_tiles(configs, named_args, **kwargs):
    """Configs whose BLOCK_M exceeds L rounded up to a power of two only add masked rows: dropped
    (the shortest kept if none fits). Short sequences then compile and time one config, not five
    (a new L tunes anew: each test shape did)."""
    rows = triton.next_power_of_2(named_args["L"])
    fit = [c for c in configs if c.kwargs["BLOCK_M"] <= rows]
    return fit or [min(configs, key=lambda c: (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]))]


@triton.autotune(
    configs=_configs(), key=["L", "BLOCK_D", "FP8_PV"], prune_configs_by={"early_config_prune": _prune_tall_tiles}
)
@triton.jit
def _attention_int8_kernel(
    q_ptr,
    qs_ptr,
    k_ptr,
    ks_ptr,
    v_ptr,
    vs_ptr,
    o_ptr,
    L,
    N,
    D,
    stride_vb,
    stride_vh,
    stride_vl,
    stride_vd,
    stride_ol,
    FP8_PV: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b, h = bh // N, bh % N
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_l = N * D  # q8/k8 are contiguous [B, L, N, D]; scales [B, L, N]
    q_mask = (offs_m[:, None] < L) & (offs_d[None, :] < D)
    q = tl.load(q_ptr + (b * L + offs_m[:, None]) * row_l + h * D + offs_d[None, :], mask=q_mask, other=0)
    qs = tl.load(qs_ptr + (b * L + offs_m) * N + h, mask=offs_m < L, other=0.0)
    k_base = k_ptr + b * L * row_l + h * D
    ks_base = ks_ptr + b * L * N + h
    v_base = v_ptr + b * stride_vb + h * stride_vh

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    l_full = (L // BLOCK_N) * BLOCK_N
    for start_n in range(0, l_full, BLOCK_N):
        acc, m_i, l_i = _attn_tile(
            acc,
            m_i,
            l_i,
            q,
            qs,
            k_base,
            ks_base,
            v_base,
            start_n,
            L,
            N,
            offs_n,
            offs_d,
            D,
            row_l,
            stride_vl,
            stride_vd,
            FP8_PV=FP8_PV,
            MASK=False,
        )
    if l_full < L:
        acc, m_i, l_i = _attn_tile(
            acc,
            m_i,
            l_i,
            q,
            qs,
            k_base,
            ks_base,
            v_base,
            l_full,
            L,
            N,
            offs_n,
            offs_d,
            D,
            row_l,
            stride_vl,
            stride_vd,
            FP8_PV=FP8_PV,
            MASK=True,
        )
    out = acc / l_i[:, None]
    if FP8_PV:
        out *= tl.load(vs_ptr + bh * D + offs_d, mask=offs_d < D, other=0.0)[None, :] / 448.0
    o_mask = (offs_m[:, None] < L) & (offs_d[None, :] < D)
    tl.store(
        o_ptr + (b * L + offs_m[:, None]) * stride_ol + h * D + offs_d[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=o_mask,
    )


def quantize_qk(x: torch.Tensor, mult: float, smooth: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """INT8 per (token, head) of q or k: [B, L, N, D] -> (int8 [B, L, N, D], scale [B, L, N] fp32).

    ``x ~= (q8 * scale / mult) (+ mean_L x if smooth)``: the scale carries ``mult`` (the softmax
    scale in log2 units for q). ``smooth`` subtracts each (batch, head, channel)'s mean over L.
    Triton kernel on CUDA (or under the interpreter), torch ops otherwise; same rounding (half
    away from zero). Reads x once (twice with ``smooth``: the mean), writes 1 byte per element.
    """
    b, l, n, d = x.shape
    x = x.contiguous()
    mean = x.float().mean(dim=1).contiguous() if smooth else None  # [B, N, D]
    if not use_triton(x):
        xf = x.float() - (mean[:, None] if smooth else 0.0)
        amax = xf.abs().amax(dim=-1).clamp_min(_MIN_AMAX)  # [B, L, N]
        y = xf * (127.0 / amax)[..., None]
        return torch.trunc(y + 0.5 * torch.sign(y)).to(torch.int8), amax / 127.0 * mult
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty((b, l, n), dtype=torch.float32, device=x.device)
    rows, block_r = b * l * n, 16
    if rows:
        _quantize_int8_rows_kernel[(triton.cdiv(rows, block_r),)](
            x,
            mean if smooth else x,
            q,
            scale,
            rows,
            l * n,
            n,
            d,
            mult,
            _MIN_AMAX,
            SMOOTH=smooth,
            BLOCK_R=block_r,
            BLOCK_D=triton.next_power_of_2(d),
            num_warps=4,
        )
    return q, scale


def quantize_v_fp8(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 per (batch, head, channel), transposed: [B, L, N, D] -> (e4m3 [B, N, D, L], scale
    [B, N, D] fp32), ``v[b, l, h, d] ~= v8[b, h, d, l] * scale[b, h, d]``. Torch ops."""
    scale = v.abs().amax(dim=1).float().clamp_min(_MIN_AMAX) / FP8_MAX  # [B, N, D]
    v8 = (v.float() / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)  # [B, L, N, D]
    return v8.permute(0, 2, 3, 1).contiguous(), scale


def _launch(q, k, v, pv_fp8):
    b, l, n, d = q.shape
    q8, qs = quantize_qk(q, _LOG2E / math.sqrt(d), smooth=False)
    k8, ks = quantize_qk(k, 1.0, smooth=True)
    if pv_fp8:
        v_in, vs = quantize_v_fp8(v)  # [B, N, D, L]
        strides = (v_in.stride(0), v_in.stride(1), v_in.stride(3), v_in.stride(2))
    else:
        v_in, vs = v, qs  # vs unused
        strides = (v.stride(0), v.stride(2), v.stride(1), v.stride(3))
    out = torch.empty((b, l, n, d), dtype=q.dtype, device=q.device)
    if out.numel():

        def grid(meta):
            return (triton.cdiv(l, meta["BLOCK_M"]), b * n)

        # Triton's 8-bit tl.dot needs K >= 32 on NVIDIA (backends/nvidia/compiler.py,
        # min_dot_size): D = 16 runs in a 32-wide tile, the masked columns loading as zeros
        _attention_int8_kernel[grid](
            q8,
            qs,
            k8,
            ks,
            v_in,
            vs,
            out,
            l,
            n,
            d,
            *strides,
            out.stride(1),
            FP8_PV=pv_fp8,
            BLOCK_D=max(32, triton.next_power_of_2(d)),
        )
    return out


def reference(q, k, v, pv_fp8):
    """The same quantization in torch ops and one softmax over all keys (the kernel rounds each
    tile's p against the running maximum instead of the final one): [B, L, N, D] contiguous, in q's
    dtype."""
    d = q.shape[-1]
    c = _LOG2E / math.sqrt(d)
    q8, qs = quantize_qk(q, c, smooth=False)
    k8, ks = quantize_qk(k, 1.0, smooth=True)
    s = torch.einsum("bind,bjnd->bnij", q8.float(), k8.float())  # [B, N, L, L], exact integers
    s = s * qs.permute(0, 2, 1)[..., None] * ks.permute(0, 2, 1)[:, :, None, :]
    p = torch.exp2(s - s.amax(dim=-1, keepdim=True))
    denom = p.sum(dim=-1, keepdim=True)  # [B, N, L, 1]
    if pv_fp8:
        v8, vs = quantize_v_fp8(v)  # [B, N, D, L], [B, N, D]
        p8 = (p * FP8_MAX).to(FP8).float()
        o = p8 @ v8.float().transpose(-1, -2) / denom * (vs[:, :, None, :] / FP8_MAX)
    else:
        o = p.to(v.dtype).float() @ v.float().transpose(1, 2) / denom  # [B, N, L, D]
    # [B, N, L, D] -> [B, L, N, D]: one copy into the contiguous layout the op promises (and its
    # fake declares); a plain ``.to`` would keep the transposed strides
    return o.transpose(1, 2).to(q.dtype, memory_format=torch.contiguous_format)


def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pv_fp8: bool) -> torch.Tensor:
    if use_triton(q):
        return _launch(q, k, v, pv_fp8)
    return reference(q, k, v, pv_fp8)


def _attention_op_fake(q, k, v, pv_fp8):
    return q.new_empty(q.shape)


define_op("attention_int8", _attention_op, _attention_op_fake)


def attention_int8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pv_fp8: bool = True) -> torch.Tensor:
    """Softmax attention, no mask, scale ``1/sqrt(D)``, in INT8/FP8: see the module docstring.

    Args:
        q, k, v: [B, L, N, D] bf16 or fp16 (fp32 on the CPU reference), one length L for all
            (self-attention); q and k any strides (copied contiguous if not), v any strides.
            D a power of two in [16, 128].
        pv_fp8: P V in e4m3 (else in v's dtype).

    Returns:
        [B, L, N, D] contiguous, dtype of q.

    Raises:
        ValueError: shapes outside the above.
    """
    if q.ndim != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(
            f"q, k, v must be one [B, L, N, D] shape, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    d = q.shape[-1]
    if d not in (16, 32, 64, 128):
        raise ValueError(f"head dim must be 16, 32, 64 or 128, got {d}")
    return torch.ops.wanscope.attention_int8(q, k, v, pv_fp8)
