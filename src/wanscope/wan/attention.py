"""One attention dispatch with backends chosen by name.

The SDPA backends run PyTorch's ``scaled_dot_product_attention``; the named ones pin its kernel
(``torch.nn.attention.sdpa_kernel``) so profiles and benchmarks compare like with like.
``sdpa`` lets PyTorch pick (on an H200 with torch 2.11 it picks cuDNN) and is always available;
``math`` is the unfused reference. ``triton`` is our own FlashAttention kernel for Hopper
(``wanscope.kernels.attention_flash``, exact bf16 with fp32 softmax; its launch configuration is
``FlashConfig``'s default), reading the token-major q, k, v without a transpose; off CUDA it runs
that op's torch reference (or the kernel under Triton's interpreter). ``hopper`` is our
FlashAttention-3-style Gluon kernel (``wanscope.kernels.attention_hopper``: bf16/fp16, D 64 or
128, sm_90 GPUs with Triton's Gluon Hopper module only; ValueError elsewhere).

``auto`` (the DiT's, the pipeline's and the CLI's default) picks by ``resolve_backend``:
``hopper`` where it runs (the inputs' device is an sm_90 GPU where Gluon's Hopper module imports,
bf16/fp16, a head dim it takes), else ``sdpa``. ``WanDiT`` resolves it once per forward, outside
its blocks (which may be compiled); ``attention`` resolves it per call for direct callers. Why the
default: on an H200 the 1.3B DiT forward at 480x832x81 is faster with ``hopper`` than with cuDNN
through ``sdpa``, at the same error (benchmarks/RESULTS.md, "2026-11-30: DiT forward with our
Hopper attention").

Modules that name a backend import no Triton: the kernels are imported when first used.
"""

from __future__ import annotations

from enum import Enum

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from wanscope.errors import UsageError


class AttentionBackend(str, Enum):  # noqa: UP042 - str() and f-strings give the member name, as callers expect
    SDPA = "sdpa"
    CUDNN = "cudnn"
    FLASH = "flash"
    EFFICIENT = "efficient"
    MATH = "math"
    TRITON = "triton"
    HOPPER = "hopper"
    AUTO = "auto"


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


def resolve_backend(
    backend: AttentionBackend, device: torch.device, dtype: torch.dtype, head_dim: int
) -> AttentionBackend:
    """The backend that runs for ``backend`` on inputs of this device, dtype and head dim:
    ``auto`` becomes ``hopper`` where that kernel takes them and the installed Triton is a
    release it was tested on (``attention_hopper.TESTED_TRITON``: Gluon's API moves between
    releases, and a failed JIT must not break the default), else ``sdpa``; any other backend
    is itself. Off CUDA, Triton is not imported; on CUDA the device's capability and Gluon's
    import are looked up once per process."""
    if backend is not AttentionBackend.AUTO:
        return backend
    # off CUDA first: the check below imports triton
    if device.type == "cuda" and _hopper_unsupported(device, dtype, head_dim) is None:
        from wanscope.kernels.attention_hopper import triton_tested

        if triton_tested():
            return AttentionBackend.HOPPER
    return AttentionBackend.SDPA


def _hopper_unsupported(device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why our ``hopper`` kernel cannot run inputs of this device, dtype and head dim here
    (None: it can): no Triton, or ``attention_hopper.unsupported``'s reason."""
    try:  # imports triton (through wanscope.kernels), not Gluon
        from wanscope.kernels.attention_hopper import unsupported
    except ImportError as e:  # e.g. a CUDA build of torch without Triton
        return f"needs Triton ({e})"
    return unsupported(device, dtype, head_dim)


def check_backend(backend: AttentionBackend, device: torch.device, dtype: torch.dtype, head_dim: int) -> None:
    """Refuse, before any work, a backend named explicitly that cannot run here: ``hopper``
    off an sm_90 GPU with Gluon, or in a dtype or head dim it does not take; ``cudnn``, ``flash``
    and ``efficient`` (PyTorch's CUDA kernels) off CUDA. ``auto`` never needs this: it falls back.

    Raises:
        UsageError: the reason, and what to pick instead.
    """
    if backend in (AttentionBackend.CUDNN, AttentionBackend.FLASH, AttentionBackend.EFFICIENT):
        if device.type != "cuda":
            raise UsageError(f"--attention {backend.value} needs a CUDA device; use auto (the default), sdpa or math")
        return
    if backend is not AttentionBackend.HOPPER:
        return
    reason = _hopper_unsupported(device, dtype, head_dim)
    if reason is not None:
        raise UsageError(f"--attention hopper {reason}; use auto (the default) or sdpa")


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
        ValueError: ``triton`` or ``hopper`` with inputs it does not take (``attention_flash``:
            fp32 on CUDA, head dims other than 16/32/64/128; ``attention_hopper``: see there).
    """
    backend = resolve_backend(backend, q.device, q.dtype, q.shape[-1])
    if backend is AttentionBackend.HOPPER:
        # imports triton: only when chosen
        from wanscope.kernels.attention_hopper import attention_hopper

        return attention_hopper(q, k, v)
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
