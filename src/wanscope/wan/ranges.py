"""Named ranges around the engine's steps, CFG branches and block parts.

Each range is emitted both as a ``torch.profiler.record_function`` (seen by torch.profiler)
and as an NVTX range (seen by Nsight Systems). Names are the ones the trace analysis keys
on: ``wanscope/step#k``, ``wanscope/cfg/cond``, ``wanscope/cfg/uncond``,
``wanscope/cfg/batched``, ``wanscope/block/self_attn``, ``wanscope/block/cross_attn``,
``wanscope/block/ffn``. Outside a profiler a range costs a few microseconds of host time and
no device work, so it stays on.

Inside a region that ``torch.compile`` traces (``Block.compile()``) a range does nothing:
Dynamo will not trace into ``record_function.__enter__``, so each range would break the block
into separate graphs (and re-compile its ``__enter__``/``__exit__`` until the recompile limit),
and a compiled block fuses work across its parts anyway. Ranges around compiled regions
(steps, CFG branches) still appear.
"""

from __future__ import annotations

import torch

# NVTX exists only in CUDA builds of torch; on the CPU build range_push raises.
_NVTX = torch.cuda.is_available()

STEP = "wanscope/step#{}"
DENOISE = "wanscope/denoise"
CFG_COND = "wanscope/cfg/cond"
CFG_UNCOND = "wanscope/cfg/uncond"
CFG_BATCHED = "wanscope/cfg/batched"
SELF_ATTN = "wanscope/block/self_attn"
CROSS_ATTN = "wanscope/block/cross_attn"
FFN = "wanscope/block/ffn"


class named_range:
    """Context manager: one ``record_function`` range plus one NVTX range named ``name``
    (none while ``torch.compile`` traces it)."""

    __slots__ = ("name", "_on", "_rf")

    def __init__(self, name: str):
        self.name = name
        self._on = not torch.compiler.is_compiling()
        self._rf = torch.profiler.record_function(name) if self._on else None

    def __enter__(self):
        if self._on:
            self._rf.__enter__()
            if _NVTX:
                torch.cuda.nvtx.range_push(self.name)
        return self

    def __exit__(self, *exc):
        if self._on:
            if _NVTX:
                torch.cuda.nvtx.range_pop()
            self._rf.__exit__(*exc)
