"""The Triton kernel of ``causal_norm_silu``: silu(rms_norm(x)) over the channels of
channels-last 3-D frames. Apart from the op's module so that the op, and the VAE decoder that
calls it, import without Triton (the CPU wheel of torch brings none): only a tensor that runs the
kernel (``_dispatch.use_triton``) imports this."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

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


def norm_silu_into(x: torch.Tensor, gamma: torch.Tensor, eps: float, out: torch.Tensor) -> None:
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
