"""CFG parallel: the cond and uncond DiT forwards of a step on two different ranks.

Rank ``cfg_rank`` 0 runs the cond branch, 1 the uncond branch; one all-gather of the two
velocities per step (``[1, C, F, H, W]`` fp32 each: 8.4 MB at 832x480x81) gives both ranks both
branches, and each applies the guidance and the sampler step itself. The two ranks then hold
bitwise-equal latents, because they run the same operations on the same values: no second
exchange is needed. Sequential single-process CFG computes the same formula on the same
velocities, so the result equals it too.
"""

from __future__ import annotations

import torch

from wanscope.parallel.group import ParallelContext, all_gather_dim0
from wanscope.wan import ranges

EXCHANGE = "wanscope/parallel/cfg_exchange"


def cfg_velocity(
    ctx: ParallelContext,
    dit: torch.nn.Module,
    latents: torch.Tensor,
    timestep: torch.Tensor,
    cond: torch.Tensor,
    uncond: torch.Tensor,
    guidance: float,
) -> torch.Tensor:
    """The guided velocity ``uncond + guidance * (cond - uncond)``, this rank running one branch.

    Args:
        latents: [1, C, F, H, W] fp32, equal on both ranks of the CFG group.
        timestep: [1].
        cond, uncond: [1, Lc, text_dim] text states (only this rank's branch is used).

    Returns:
        [1, C, F, H, W] fp32, equal on both ranks.

    Raises:
        ParallelError: the exchange failed (the other rank died or timed out).
    """
    name, context = (ranges.CFG_COND, cond) if ctx.cfg_rank == 0 else (ranges.CFG_UNCOND, uncond)
    with ranges.named_range(name):
        mine = dit(latents, timestep, context)  # [1, C, F, H, W] fp32
    both = mine.new_empty((2, *mine.shape[1:]))  # [2, C, F, H, W]: cond, uncond
    with ranges.named_range(EXCHANGE), ctx.collective("the CFG exchange of velocities"):
        all_gather_dim0(both, mine, ctx.cfg_group)
    v_cond, v_uncond = both[0:1], both[1:2]
    return v_uncond + guidance * (v_cond - v_uncond)
