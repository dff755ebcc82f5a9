"""Capture a torch.profiler trace of one diffusers Wan2.1 1.3B DiT forward on a GPU.

Random weights (labeled as such in the trace's file name and in the JSON that this script
prints), bf16, B=1, latent 16x21x60x104 (480x832x81), 512 text tokens: the same setup as
the eager H200 fixture. ``--compile regional`` compiles the repeated transformer block
(diffusers' ``compile_repeated_blocks(fullgraph=True)``) and warms it up before profiling,
so the trace holds Inductor's fused Triton kernels.

    python benchmarks/capture_diffusers_trace.py --compile regional --out DIR
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile", choices=["none", "regional"], default="none")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    model = (
        WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=12,
            attention_head_dim=128,
            in_channels=16,
            out_channels=16,
            text_dim=4096,
            freq_dim=256,
            ffn_dim=8960,
            num_layers=30,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=1e-6,
        )
        .to("cuda", torch.bfloat16)
        .eval()
    )
    x = torch.randn(1, 16, 21, 60, 104, device="cuda", dtype=torch.bfloat16)
    t = torch.tensor([999.0], device="cuda")
    ctx = torch.randn(1, 512, 4096, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    if args.compile == "regional":
        model.compile_repeated_blocks(fullgraph=True)
    with torch.no_grad():
        for _ in range(2):
            model(x, t, ctx, return_dict=False)
        torch.cuda.synchronize()
        warmup_s = time.perf_counter() - t0
        times = []
        for _ in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            model(x, t, ctx, return_dict=False)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
            model(x, t, ctx, return_dict=False)
            torch.cuda.synchronize()
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"h200_diffusers_wan21_1p3b_{'compiled' if args.compile == 'regional' else 'eager'}_forward.json"
    prof.export_chrome_trace(str(args.out / name))
    times.sort()
    print(
        json.dumps(
            {
                "trace": name,
                "compile": args.compile,
                "weights": "random",
                "warmup_s": round(warmup_s, 1),
                "forward_ms": [round(v, 1) for v in times],
                "median_ms": round(times[1], 1),
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(),
            }
        )
    )


if __name__ == "__main__":
    main()
