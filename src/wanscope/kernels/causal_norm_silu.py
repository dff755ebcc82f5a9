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

from wanscope.kernels._dispatch import define_op, use_triton


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
        from wanscope.kernels._causal_norm_silu_triton import norm_silu_into

        norm_silu_into(x, gamma, eps, new)
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
