"""One Wan2.1-1.3B self-attention call at 480p, for Nsight Compute to capture.

Shape: q, k, v of [B, N, L, D] = [1, 12, 32760, 128] bf16 (B=1, 12 heads, 32,760 tokens =
21 x 30 x 52 latent patches of a 480x832x81 video, head dim 128), non-causal, through
``torch.nn.functional.scaled_dot_product_attention`` with one backend forced:

    flash      FlashAttention-2 (PyTorch's ``flash_fwd_kernel``)
    cudnn      cuDNN's fused attention (``cudnn_generated_fort_native_sdpa_*``)
    efficient  memory-efficient attention (``fmha_cutlassF_*``)

It runs ``--warmup`` untimed calls, then ``--iters`` timed ones, and prints one JSON line:
median milliseconds and TFLOP/s (4 * B * N * L^2 * D FLOPs per call). Under ncu, skip the
warm-up launches: ``--launch-skip`` = warm-up count, ``--launch-count 1``, e.g.

    wanscope ncu-run --kernel flash_fwd --launch-skip 1 --launch-count 1 -o out/fa2 -- \
        python benchmarks/ncu_attention_capture.py --backend flash

Needs torch with CUDA (written against torch 2.11); imports nothing from wanscope.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=sorted(BACKENDS), required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--tokens", type=int, default=32760)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--warmup", type=int, default=1, help="untimed calls first (ncu: --launch-skip this many)")
    p.add_argument("--iters", type=int, default=1, help="timed calls")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("ncu_attention_capture: needs a CUDA GPU")

    shape = (args.batch, args.heads, args.tokens, args.head_dim)  # [B, N, L, D]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    torch.cuda.synchronize()

    with sdpa_kernel(BACKENDS[args.backend]):
        for _ in range(args.warmup):
            F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
        times_ms = []
        for _ in range(args.iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = F.scaled_dot_product_attention(q, k, v)  # [B, N, L, D]
            end.record()
            torch.cuda.synchronize()
            times_ms.append(start.elapsed_time(end))

    flops = 4 * args.batch * args.heads * args.tokens**2 * args.head_dim
    ms = statistics.median(times_ms) if times_ms else None
    print(
        json.dumps(
            {
                "backend": args.backend,
                "shape": list(shape),
                "dtype": "bfloat16",
                "warmup": args.warmup,
                "iters": args.iters,
                "ms_median": ms,
                "tflops": flops / (ms * 1e-3) / 1e12 if ms else None,
                "out_finite": bool(torch.isfinite(out).all()) if times_ms else None,
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(),
            }
        )
    )


if __name__ == "__main__":
    main()
