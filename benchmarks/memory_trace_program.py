"""The program ``analyze_bench.py``'s second trace was captured from: a user's loop of Wan2.1 1.3B
DiT forwards (our engine's ``WanDiT``, random bf16 weights, 832x480x81 latents, one B=1
forward per step), each step marked with ``wanscope.step()``; the DiT's own ranges
(``wanscope/block/...``) are the user ranges. Captured on an H200 with

    wanscope profile --memory --warmup 1 --profile-steps 2 --out DIR -- python3 benchmarks/memory_trace_program.py 3

so the trace has steps, user ranges, PyTorch's memory events, kernels and Python stacks.
Random weights: the times are real, the outputs are not.
"""

from __future__ import annotations

import contextlib
import sys

import torch

from wanscope.wan.config import get_preset
from wanscope.wan.dit import WanDiT


def run_dit(frames: int, height: int, width: int, forwards: int, step=contextlib.nullcontext) -> None:
    """Build the 1.3B DiT (random bf16 weights) on the GPU and run ``forwards`` forwards on
    latents [1, 16, frames, height, width] with 512 text tokens, each inside ``step()``."""
    torch.manual_seed(0)
    cfg = get_preset("wan2.1-t2v-1.3b").dit
    with torch.device("cuda"):
        dit = WanDiT(cfg).set_dtype(torch.bfloat16).eval()
    latents = torch.randn(1, cfg.in_channels, frames, height, width, device="cuda", dtype=torch.bfloat16)
    context = torch.randn(1, 512, cfg.text_dim, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for i in range(forwards):
            with step():
                t = torch.full((1,), 1000.0 * (1 - i / forwards), device="cuda")
                latents = latents + 0.02 * dit(latents, t, context).to(latents.dtype)
    torch.cuda.synchronize()


if __name__ == "__main__":
    import wanscope

    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    run_dit(21, 60, 104, steps, wanscope.step)  # 832x480x81
    print(f"{steps} steps done")
