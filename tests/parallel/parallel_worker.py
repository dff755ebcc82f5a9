"""One rank of a small parallel denoising run on the CPU, for the tests (launched per rank with
the torchrun environment set by the test): 3 steps of the tiny DiT under torch.profiler with
recorded shapes, one trace per rank, then (after a barrier: every trace is written) the final
latents saved by rank 0.

    python parallel_worker.py MODE OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from wanscope.parallel import setup_from_env, shard_dit
from wanscope.wan.config import PRESETS
from wanscope.wan.pipeline import Components, denoise, initial_noise, latent_shape
from wanscope.wan.sampler import FlowSampler, flow_schedule

CFG = PRESETS["tiny"]
STEPS = 3
GUIDANCE = 5.0
# 48x64 pixels, 5 frames -> latents [1, 16, 2, 6, 8] -> a (2, 3, 4) token grid: L = 24 tokens,
# not equal to the 16 text tokens, so the two lengths cannot be confused in the shapes.
HEIGHT, WIDTH, FRAMES = 48, 64, 5


def tiny_inputs():
    """(dit, noise [1, 16, 2, 6, 8], cond, uncond [1, 16, 32]) fp32 on the CPU, seeded."""
    dit = Components(config=CFG, device=torch.device("cpu"), dtype=torch.float32).dit()
    g = torch.Generator().manual_seed(0)
    cond = torch.randn(1, CFG.dit.text_len, CFG.dit.text_dim, generator=g)
    uncond = torch.randn(1, CFG.dit.text_len, CFG.dit.text_dim, generator=g)
    noise = initial_noise(latent_shape(CFG, HEIGHT, WIDTH, FRAMES), 0, torch.device("cpu"))
    return dit, noise, cond, uncond


def main(mode: str, out_dir: Path) -> None:
    with setup_from_env(mode, "cpu", timeout_s=60, num_heads=CFG.dit.num_heads) as ctx:
        dit, noise, cond, uncond = tiny_inputs()
        shard_dit(ctx, dit)
        sampler = FlowSampler(flow_schedule(STEPS, 5.0))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            latents = denoise(dit, noise, cond, uncond, sampler, GUIDANCE, parallel=ctx)
        prof.export_chrome_trace(str(out_dir / f"rank-{ctx.rank}.json"))
        ctx.barrier("writing the traces")  # as wanscope profile does before rank 0 reads them all
        if ctx.is_main:
            assert sorted(p.name for p in out_dir.glob("rank-*.json")) == [
                f"rank-{r}.json" for r in range(ctx.world_size)
            ]
            torch.save(latents, out_dir / "latents.pt")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
