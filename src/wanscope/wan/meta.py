"""Models built on the meta device (shapes and dtypes, no storage), their initializers skipped.

A module's constructor runs its parameters' initializers (``nn.Embedding``'s ``normal_``,
``nn.Linear``'s ``kaiming_uniform_``). On the meta device they have no values to write, and some
of them run PyTorch's Python reference implementations there, whose first call imports
``torch._dynamo`` and sympy: seconds of imports in a process that never compiles. Inside
``meta_device()`` the ``torch.nn.init`` functions that dispatch through ``__torch_function__``
(``uniform_``, ``normal_``, ``constant_``, ``kaiming_uniform_``: those of ``nn.Linear``,
``nn.Conv*`` and ``nn.Embedding``) return their meta tensor untouched; the others (e.g.
``kaiming_normal_``) still run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.overrides import TorchFunctionMode


class _SkipInitOnMeta(TorchFunctionMode):
    """``torch.nn.init`` functions given a meta tensor return it; every other call runs as is."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


@contextmanager
def meta_device() -> Iterator[None]:
    """Modules constructed inside are on the meta device, their initializers not run."""
    with torch.device("meta"), _SkipInitOnMeta():
        yield


def materialize(module: nn.Module, device: torch.device | str) -> nn.Module:
    """``module.to_empty(device=device)``: storage on ``device`` for every parameter and buffer
    of a meta-device module, values unset, shapes and dtypes kept (tied parameters come out
    untied, as there). A contiguous tensor is made with ``torch.empty``: ``to_empty``'s
    ``empty_like`` of a meta tensor runs PyTorch's Python reference, whose first call imports
    sympy; any other keeps ``empty_like``'s layout."""

    def empty(t: torch.Tensor) -> torch.Tensor:
        if t.is_contiguous():
            return torch.empty(t.shape, dtype=t.dtype, device=device)
        return torch.empty_like(t, device=device)

    return module._apply(empty)
