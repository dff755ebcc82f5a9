"""Multi-GPU inference over ``torch.distributed``: CFG parallel and Ulysses sequence parallel.

Launched with ``torchrun --nproc-per-node N -m wanscope generate|profile ... --parallel MODE``.
Modules: ``plan`` (modes, degrees and head checks, without torch), ``group`` (process-group
setup, timeouts, one-line errors), ``cfg`` (the two CFG branches on two ranks), ``ulysses``
(token shards and all-to-alls around self-attention), ``text`` (text states encoded on rank 0
and broadcast).

A caller (``wanscope generate``, ``wanscope profile``) does::

    with setup_from_env(mode, device.type, timeout_s, num_heads) as ctx:
        cond, uncond = encode_prompts(parts, req, ctx)   # wan/pipeline.py
        dit = parts.dit(); shard_dit(ctx, dit)
        latents = denoise(dit, ..., parallel=ctx)         # every rank; equal latents after
        if ctx.is_main: ...                               # decode, write, report

The names below load their module (and torch) on first use, so importing this package from a
command module costs nothing.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DEFAULT_TIMEOUT_S": "plan",
    "PARALLEL_MODES": "plan",
    "ParallelContext": "group",
    "ParallelError": "group",
    "setup_from_env": "group",
    "shard_dit": "ulysses",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
