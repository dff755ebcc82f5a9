"""The operators of this package (namespace ``wanscope``) and where each runs its Triton kernel
(see the package docstring)."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

# Read once, like Triton itself: ``triton.jit`` picks the interpreter at decoration time.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

_LIB = torch.library.Library("wanscope", "DEF")  # holds the registrations for the process's life


def use_triton(x: torch.Tensor) -> bool:
    """True for CUDA tensors, and for CPU tensors under Triton's interpreter."""
    return x.is_cuda or (INTERPRET and x.device.type == "cpu")


def define_op(name: str, impl: Callable, fake: Callable) -> None:
    """Register ``wanscope::name``: its schema inferred from ``impl``'s annotations
    (``torch.library.infer_schema``, no argument mutated), ``impl`` its one kernel for every
    device (``CompositeExplicitAutograd``), ``fake`` the shapes and dtypes it returns, for
    ``torch.compile``; tagged ``pt2_compliant_tag``. No backward formula: a backward through the
    op raises (the engine runs without gradients).

    ``torch.library.custom_op`` would do the same, but its kernel wrapper imports
    ``torch._dynamo`` at the op's first call: seconds of imports in a process that never
    compiles. The profiler records these ops by name (``wanscope::name``) either way.

    Raises:
        RuntimeError: the name is already registered (PyTorch's error).
    """
    qualname = f"wanscope::{name}"
    _LIB.define(name + torch.library.infer_schema(impl, mutates_args=()), tags=(torch.Tag.pt2_compliant_tag,))
    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(qualname, fake, lib=_LIB)

    def backward(ctx, *grads):
        raise RuntimeError(f"{qualname} has no backward formula: wanscope's operators run without gradients")

    torch.library.register_autograd(qualname, backward, lib=_LIB)
