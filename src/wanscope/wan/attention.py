"""One attention dispatch with backends chosen by name.

The SDPA backends run PyTorch's ``scaled_dot_product_attention``; the named ones pin its kernel
(``torch.nn.attention.sdpa_kernel``) so profiles and benchmarks compare like with like.
``sdpa`` lets PyTorch pick (on an H200 with torch 2.11 it picks cuDNN) and is always available;
``math`` is the unfused reference. ``triton`` is our own FlashAttention kernel for Hopper
(``wanscope.kernels.attention_flash``, exact bf16 with fp32 softmax; its launch configuration is
``FlashConfig``'s default), reading the token-major q, k, v without a transpose; off CUDA it runs
that op's torch reference (or the kernel under Triton's interpreter).
"""

from __future__ import annotations

from enum import Enum

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from wanscope.errors import UsageError


class AttentionBackend(str, Enum):
    SDPA = "sdpa"
    CUDNN = "cudnn"
    FLASH = "flash"
    EFFICIENT = "efficient"
    MATH = "math"
    TRITON = "triton"


_PINNED = {
    AttentionBackend.CUDNN: SDPBackend.CUDNN_ATTENTION,
    AttentionBackend.FLASH: SDPBackend.FLASH_ATTENTION,
    AttentionBackend.EFFICIENT: SDPBackend.EFFICIENT_ATTENTION,
    AttentionBackend.MATH: SDPBackend.MATH,
}


def parse_backend(name: str | AttentionBackend) -> AttentionBackend:
    """The backend called ``name``.

    Raises:
        UsageError: unknown name (the message lists the known ones).
    """
    try:
        return AttentionBackend(name)
    except ValueError:
        known = ", ".join(b.value for b in AttentionBackend)
        raise UsageError(f"unknown attention backend {name!r}; known: {known}") from None


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: AttentionBackend = AttentionBackend.SDPA
) -> torch.Tensor:
    """Softmax attention without mask, scale ``1/sqrt(D)``.

    Args:
        q: [B, Lq, N, D]; k, v: [B, Lk, N, D], one dtype.
        backend: which kernel runs it.

    Returns:
        [B, Lq, N, D] in the dtype of ``q``.

    Raises:
        RuntimeError: from PyTorch, when a pinned backend cannot run these inputs.
        ValueError: ``triton`` with inputs it does not take (``attention_flash``: fp32 on CUDA,
            head dims other than 16/32/64/128).
    """
    if backend is AttentionBackend.TRITON:
        # imports triton: only when chosen
        from wanscope.kernels.attention_flash import attention_flash

        return attention_flash(q, k, v)
    # SDPA wants [B, N, L, D]; a transposed view is accepted by every backend without a copy.
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, N, L, D]
    if backend is AttentionBackend.SDPA:
        out = F.scaled_dot_product_attention(q, k, v)
    else:
        with sdpa_kernel(_PINNED[backend]):
            out = F.scaled_dot_product_attention(q, k, v)
    return out.transpose(1, 2)  # [B, Lq, N, D]
