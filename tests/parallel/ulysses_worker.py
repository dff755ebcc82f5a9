"""One rank of the Ulysses head-group checks, launched per rank with the torchrun environment
set by ``test_ulysses_pipeline.py`` (DEVICE ``cpu``: gloo) and ``test_nccl.py`` (``cuda``: one
GPU per rank, NCCL)::

    python ulysses_worker.py DEVICE OUT_DIR SPEC [SPEC ...]

For every head-group SPEC (``plan.parse_head_groups``: ``3``, ``2+1``, ...; under CUDA also
``SPEC@copy-engine``: the same grouping over the copy-engine transport, ``parallel/exchange.py``):

1. ``Ulysses.attention`` on seeded q, k, v [2, 13, 6, 8] (B = 2; 13 tokens, so the shards
   differ in length): this rank's rows of the output go to ``OUT_DIR/attention-rank{r}.pt``
   (``{spec: [2, L_r, 6, 8]}``).
2. 3 denoising steps of the tiny DiT with 6 heads (``SIX_HEADS``): rank 0 saves the final
   latents to ``OUT_DIR/latents.pt`` (``{spec: [1, 16, 2, 6, 8]}``), and those of the same
   steps with both CFG branches in one B=2 forward (``cfg="batched"``), grouped by the last
   SPEC, to ``OUT_DIR/latents-batched.pt``.

Everything is fp32 and saved on the CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from wanscope.parallel import setup_from_env
from wanscope.parallel.plan import parse_head_groups
from wanscope.parallel.ulysses import Ulysses, shard_dit, shard_sizes
from wanscope.wan.attention import AttentionBackend
from wanscope.wan.config import get_preset
from wanscope.wan.pipeline import Components, denoise, initial_noise, latent_shape
from wanscope.wan.sampler import FlowSampler, flow_schedule

# the tiny preset has 2 heads, 1 per rank on 2 ranks: nothing to group. 6 heads of 16 give
# 3 per rank on 2 ranks and 2 per rank on 3.
SIX_HEADS = get_preset("tiny", dim=96, num_heads=6)
STEPS, GUIDANCE = 3, 5.0
HEIGHT, WIDTH, FRAMES = 48, 64, 5  # latents [1, 16, 2, 6, 8]: L = 24 tokens
B, L, N, D = 2, 13, 6, 8


def attention_inputs(device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded q, k, v [B, L, N, D] fp32 on ``device``, equal on every rank."""
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(B, L, N, D, generator=g).to(device) for _ in range(3))


def dit_inputs(device: str | torch.device = "cpu"):
    """(dit, noise, cond, uncond) of ``SIX_HEADS`` fp32 on ``device``, seeded."""
    cfg, device = SIX_HEADS, torch.device(device)
    dit = Components(config=cfg, device=device, dtype=torch.float32).dit()
    g = torch.Generator().manual_seed(0)
    cond = torch.randn(1, cfg.dit.text_len, cfg.dit.text_dim, generator=g).to(device)
    uncond = torch.randn(1, cfg.dit.text_len, cfg.dit.text_dim, generator=g).to(device)
    noise = initial_noise(latent_shape(cfg, HEIGHT, WIDTH, FRAMES), 0, device)
    return dit, noise, cond, uncond


def parse_spec(spec: str) -> tuple[int | tuple[int, ...], str | None]:
    """``"2+1@copy-engine"`` -> ((2, 1), "copy-engine"); ``"3"`` -> (3, None): the default transport."""
    groups, _, transport = spec.partition("@")
    return parse_head_groups(groups), transport or None


def main(device_type: str, out_dir: Path, specs: list[str]) -> None:
    with setup_from_env("ulysses", device_type, timeout_s=60, num_heads=N) as ctx:
        q, k, v = attention_inputs(ctx.device)
        rope = torch.ones(L, 1, D // 2, device=ctx.device), torch.zeros(L, 1, D // 2, device=ctx.device)
        rows = {}
        for spec in specs:
            ulysses = Ulysses(ctx, N, *parse_spec(spec))
            ulysses.shard(q.flatten(2), rope)  # records the token split
            start = sum(shard_sizes(L, ctx.world_size)[: ctx.rank])
            mine = slice(start, start + shard_sizes(L, ctx.world_size)[ctx.rank])
            rows[spec] = ulysses.attention(q[:, mine], k[:, mine], v[:, mine], AttentionBackend.SDPA).cpu()
        torch.save(rows, out_dir / f"attention-rank{ctx.rank}.pt")

        latents = {}
        for spec in specs:
            dit, noise, cond, uncond = dit_inputs(ctx.device)
            shard_dit(ctx, dit, *parse_spec(spec))
            sampler = FlowSampler(flow_schedule(STEPS, 5.0))
            latents[spec] = denoise(dit, noise, cond, uncond, sampler, GUIDANCE, parallel=ctx).cpu()
        batched = denoise(
            dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), GUIDANCE, cfg="batched", parallel=ctx
        ).cpu()
        if ctx.is_main:
            torch.save(latents, out_dir / "latents.pt")
            torch.save(batched, out_dir / "latents-batched.pt")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
