"""Where a custom op of this package runs its Triton kernel (see the package docstring)."""

from __future__ import annotations

import os

import torch

# Read once, like Triton itself: ``triton.jit`` picks the interpreter at decoration time.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def use_triton(x: torch.Tensor) -> bool:
    """True for CUDA tensors, and for CPU tensors under Triton's interpreter."""
    return x.is_cuda or (INTERPRET and x.device.type == "cpu")
