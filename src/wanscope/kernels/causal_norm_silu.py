"""The input of one of the VAE decoder's causal 3-D convolutions in one pass: the frames it
keeps from before, then RMS norm over the channels and SiLU of the new frames.

For new frames ``x`` [B, C, T, H, W], the convolution's history ``before`` [B, C, P, H, W] (P <=
``front``, or None: P = 0) and ``front`` = the temporal kernel less one, the result is
[B, C, front + T, H, W]::

    out[:, :, :front - P]     = 0                                  # before the video's first frame
    out[:, :, front - P:front] = before
    out[:, :, front:]          = silu(x / max(||x||_2, eps) * sqrt(C) * gamma)   # norm over C

without ``gamma`` the new frames are copied as they are. The arithmetic is fp32 (float64 stays
float64), rounded once to ``x``'s dtype. Source: the official Wan2.1 ``vae.py`` (``RMS_norm``:
``F.normalize(x, dim=1) * dim**0.5 * gamma``; ``ResidualBlock``: norm, SiLU, ``CausalConv3d``,
whose front zero padding and cached frames are the first two lines).

The torch path (``F.pad``, ``torch.cat``, then the norm's five elementwise passes) moves each new
frame through memory about a dozen times; here the history is copied once and the new frames are
read once and written once. The result is channels-last 3-D (C stride 1) when ``x`` is, as the
decoder's activations are on CUDA, where the Triton kernel runs: it reads ``x`` through its
strides (a spatial crop, as the tiled decode takes, is fine) and needs C stride 1; anything else
runs the torch reference, the same formula.

Custom op: ``wanscope::causal_norm_silu``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from wanscope.kernels._dispatch import define_op, use_triton

BLOCK_C = 128  # channels per load: the decoder's widths (96, 192, 384) in one to three chunks


# The sizes only index rows and chunks (divisions, masks, the loop's bound): one compiled kernel
# per dtype for every width, frame size and frame count, not one per Triton specialization of
# each (==1, divisible by 16) or per power-of-two block of the width; a cold cache compiles it
# once per decode's dtype.
@triton.jit(do_not_specialize=["rows", "C", "T", "H", "W"])
def _norm_silu_kernel(
    x_ptr,
    g_ptr,
    out_ptr,
    rows,
    C,
    T,
    H,
    W,
    sxb,
    sxt,
    sxh,
    sxw,
    sob,
    sot,
    soh,
    sow,
    scale,
    eps,
    F64: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)  # rows: (b, t, h, w) positions
    rmask = r < rows
    w = r % W
    h = (r // W) % H
    t = (r // (W * H)) % T
    b = r // (W * H * T)
    x_row = (b * sxb + t * sxt + h * sxh + w * sxw)[:, None]
    out_row = (b * sob + t * sot + h * soh + w * sow)[:, None]
    acc = tl.float64 if F64 else tl.float32
    cols = tl.arange(0, BLOCK_C)
    squares = tl.zeros([BLOCK_R], dtype=acc)
    for c0 in range(0, C, BLOCK_C):  # the sum of squares over the width, chunk by chunk
        mask = rmask[:, None] & (c0 + cols < C)[None, :]
        x = tl.load(x_ptr + x_row + (c0 + cols)[None, :], mask=mask, other=0.0).to(acc)
        squares += tl.sum(x * x, axis=1)
    inv = (scale / tl.maximum(tl.sqrt(squares), eps))[:, None]
    for c0 in range(0, C, BLOCK_C):  # then each chunk normalized (read again: from the cache)
        cmask = c0 + cols < C
        mask = rmask[:, None] & cmask[None, :]
        x = tl.load(x_ptr + x_row + (c0 + cols)[None, :], mask=mask, other=0.0).to(acc)
        g = tl.load(g_ptr + c0 + cols, mask=cmask, other=0.0).to(acc)
        y = x * inv * g[None, :]
        y = y / (1.0 + tl.exp(-y))  # SiLU
        tl.store(out_ptr + out_row + (c0 + cols)[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def _norm_silu_into(x: torch.Tensor, gamma: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    """``out`` (x's shape, C stride 1) = silu(rms_norm(x)) by the kernel; x with C stride 1."""
    b, c, t, h, w = x.shape
    rows = b * t * h * w
    if not rows:
        return
    block_r = 32
    _norm_silu_kernel[(triton.cdiv(rows, block_r),)](
        x,
        gamma.reshape(-1),
        out,
        rows,
        c,
        t,
        h,
        w,
        x.stride(0),
        x.stride(2),
        x.stride(3),
        x.stride(4),
        out.stride(0),
        out.stride(2),
        out.stride(3),
        out.stride(4),
        c**0.5,
        eps,
        F64=x.dtype == torch.float64,
        BLOCK_R=block_r,
        BLOCK_C=BLOCK_C,
        num_warps=4,
    )


def reference_norm_silu(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """``silu(x / max(||x||_2, eps) * sqrt(C) * gamma)`` over dim 1 in torch ops, fp32 arithmetic
    for a half-precision ``x`` (its own otherwise), the result in ``x``'s dtype."""
    low = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    y = F.normalize(low, dim=1, eps=eps) * x.shape[1] ** 0.5 * gamma.reshape(-1, 1, 1, 1).to(low.dtype)
    return F.silu(y).to(x.dtype)


def _causal_norm_silu(
    x: torch.Tensor, before: torch.Tensor | None, gamma: torch.Tensor | None, front: int, eps: float
) -> torch.Tensor:
    if x.ndim != 5:
        raise ValueError(f"x must be [B, C, T, H, W], got {tuple(x.shape)}")
    b, c, t, h, w = x.shape
    kept = 0 if before is None else before.shape[2]
    if before is not None and (before.shape[:2] != x.shape[:2] or before.shape[3:] != x.shape[3:] or kept > front):
        raise ValueError(f"before {tuple(before.shape)} does not fit x {tuple(x.shape)} with front {front}")
    channels_last = x.stride(1) == 1
    fmt = torch.channels_last_3d if channels_last else torch.contiguous_format
    out = torch.empty((b, c, front + t, h, w), dtype=x.dtype, device=x.device, memory_format=fmt)
    out[:, :, : front - kept].zero_()
    if kept:
        out[:, :, front - kept : front].copy_(before)
    new = out[:, :, front:]
    if gamma is None:
        new.copy_(x)
    elif channels_last and use_triton(x):
        _norm_silu_into(x, gamma, eps, new)
    else:
        new.copy_(reference_norm_silu(x, gamma, eps))
    return out


def _causal_norm_silu_fake(x, before, gamma, front, eps):
    b, c, t, h, w = x.shape
    fmt = torch.channels_last_3d if x.stride(1) == 1 else torch.contiguous_format
    return torch.empty((b, c, front + t, h, w), dtype=x.dtype, device=x.device, memory_format=fmt)


define_op("causal_norm_silu", _causal_norm_silu, _causal_norm_silu_fake)


def causal_norm_silu(
    x: torch.Tensor, before: torch.Tensor | None, gamma: torch.Tensor | None, front: int, eps: float = 1e-12
) -> torch.Tensor:
    """The module docstring's ``out``. ``eps`` is ``F.normalize``'s default, as the official
    norm uses.

    Args:
        x: [B, C, T, H, W], any float dtype.
        before: [B, C, P, H, W] with P <= ``front``, x's dtype, or None.
        gamma: [C] or [C, 1, 1, 1], or None (no norm, no SiLU).
        front: frames in front of the new ones (>= 0).

    Returns:
        [B, C, front + T, H, W] in x's dtype, channels-last 3-D when x's C stride is 1.

    Raises:
        ValueError: x not 5-D, or ``before`` of another batch, width or frame size, or longer
            than ``front``.
    """
    return torch.ops.wanscope.causal_norm_silu(x, before, gamma, front, eps)
