"""Text states computed once, on rank 0, and broadcast: the other ranks never load UMT5.

UMT5-XXL is 11 GB of bf16 weights and its output for two prompts is 8.4 MB
(``[2, 512, 4096]`` bf16), so loading it once and sending its output is cheaper in memory,
disk reads and time than encoding on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from wanscope.parallel.group import ParallelContext


def broadcast_text_states(
    ctx: ParallelContext, states: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype
) -> torch.Tensor:
    """Rank 0's text states on every rank.

    Args:
        states: [n_prompts, Lc, text_dim] on ``ctx.device`` on rank 0; ignored elsewhere.
        shape, dtype: what rank 0 sends (every rank knows them from the config).

    Returns:
        [n_prompts, Lc, text_dim] on ``ctx.device``.

    Raises:
        ParallelError: the broadcast failed or timed out.
    """
    if not ctx.is_main:
        states = torch.empty(shape, dtype=dtype, device=ctx.device)
    with ctx.collective("the broadcast of the text states"):
        dist.broadcast(states, src=0)
    return states
