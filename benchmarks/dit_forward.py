"""Wan2.1 DiT forward: ours vs diffusers' WanTransformer3DModel, same random weights and inputs.

Default: the 1.3B preset at 480x832x81 (latents [1, 16, 21, 60, 104], L = 32,760 tokens), B=1,
bf16 on CUDA. For each variant: warm-up forwards, then ``--repeats`` forwards each timed with
CUDA events (median reported), the peak memory over them, and the relative L2 error of the
output against an fp32 reference (our fp32 model, which matches the official WanModel in fp32;
diffusers' fp32 output is reported against it too). TF32 is off for the fp32 runs. Then one
full CFG step (cond + uncond forwards and a UniPC step) of our denoising loop, sequential and
batched. Achieved TFLOP/s use the analytic FLOPs of a forward (attention core 4*L^2*dim per
layer plus the linear layers) against ``--peak-tflops`` (763: dense bf16 8192^3 matmul
measured on the H200, shared/DESIGN.md).

Writes ``OUT/dit_forward.json`` (temp name, then rename), prints a table, and ends with one
line of machine-readable JSON. ``--smoke`` runs the same code on the tiny preset on the CPU (bf16 too) in seconds.

    python benchmarks/dit_forward.py --out benchmarks/results
    python benchmarks/dit_forward.py --smoke --out /tmp/bench
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

# run from a plain checkout: no install of wanscope needed
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from wanscope.wan.config import DiTConfig, get_preset  # noqa: E402
from wanscope.wan.dit import WanDiT  # noqa: E402
from wanscope.wan.pipeline import denoise  # noqa: E402
from wanscope.wan.sampler import FlowSampler, flow_schedule  # noqa: E402
from wanscope.wan.weights import official_key  # noqa: E402

GIB = 2**30


def diffusers_config(cfg: DiTConfig) -> dict:
    """WanTransformer3DModel arguments for our config."""
    return dict(
        patch_size=cfg.patch_size, num_attention_heads=cfg.num_heads, attention_head_dim=cfg.head_dim,
        in_channels=cfg.in_channels, out_channels=cfg.out_channels, text_dim=cfg.text_dim,
        freq_dim=cfg.freq_dim, ffn_dim=cfg.ffn_dim, num_layers=cfg.num_layers,
        cross_attn_norm=cfg.cross_attn_norm, qk_norm="rms_norm_across_heads", eps=cfg.eps,
    )


def forward_flops(cfg: DiTConfig, tokens: int, text_tokens: int) -> float:
    """Multiply-add FLOPs (x2) of one forward: per layer, q/k/v/o and cross q/o projections on L
    tokens, cross k/v on Lc, the FFN, self-attention core 4*L^2*dim, cross core 4*L*Lc*dim."""
    d, f = cfg.dim, cfg.ffn_dim
    linear = 2 * tokens * (6 * d * d + 2 * d * f) + 2 * text_tokens * 2 * d * d
    core = 4 * tokens * tokens * d + 4 * tokens * text_tokens * d
    return cfg.num_layers * (linear + core)


def diffusers_bf16(model, dtype):
    """Cast as ``from_pretrained(torch_dtype=bf16)`` does: modules named in
    ``_keep_in_fp32_modules`` stay fp32."""
    keep = set(model._keep_in_fp32_modules or [])
    for name, p in model.named_parameters():
        p.data = p.data.to(torch.float32 if keep & set(name.split(".")) else dtype)
    return model


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


class Timer:
    """Per-call wall times in ms: CUDA events on the GPU, perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.pairs = []

    def __call__(self, fn):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            self.pairs.append((start, end))
        else:
            t0 = time.perf_counter()
            out = fn()
            self.pairs.append((t0, time.perf_counter()))
        return out

    def times_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [s.elapsed_time(e) for s, e in self.pairs]
        return [(e - s) * 1e3 for s, e in self.pairs]


def measure(name, fn, device, warmup, repeats, ref, flops, peak_tflops):
    """Warm up, then time ``repeats`` calls; peak memory over the timed calls."""
    for _ in range(warmup):
        out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    timer = Timer(device)
    for _ in range(repeats):
        out = timer(fn)
    times = timer.times_ms()
    median = statistics.median(times)
    row = {
        "name": name,
        "median_ms": round(median, 3),
        "min_ms": round(min(times), 3),
        "times_ms": [round(t, 3) for t in times],
        "rel_l2_vs_fp32": None if ref is None else rel_l2(out, ref),
        "tflops": round(flops / (median * 1e-3) / 1e12, 1),
        "pct_of_peak": round(100 * flops / (median * 1e-3) / (peak_tflops * 1e12), 1),
    }
    if device.type == "cuda":
        row["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
        row["activation_peak_gib"] = round((torch.cuda.max_memory_allocated() - base) / GIB, 2)
    return row, out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for dit_forward.json")
    ap.add_argument("--smoke", action="store_true", help="tiny preset on the CPU, seconds")
    ap.add_argument("--preset", default=None, help="default: wan2.1-t2v-1.3b (tiny with --smoke)")
    ap.add_argument("--size", default=None, help="WIDTHxHEIGHT, default 832x480 (64x64 with --smoke)")
    ap.add_argument("--frames", type=int, default=None, help="default 81 (5 with --smoke)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--text-tokens", type=int, default=40, help="non-padding prompt tokens of the context")
    ap.add_argument("--peak-tflops", type=float, default=763.0)
    ap.add_argument("--attention", default="sdpa", help="our attention backend")
    args = ap.parse_args(argv)
    if args.repeats < 5:
        ap.error("--repeats must be >= 5")

    from diffusers import WanTransformer3DModel, __version__ as diffusers_version

    device = torch.device("cpu" if args.smoke else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("dit_forward: CUDA is not available (use --smoke for a CPU check)")
    dtype = torch.bfloat16
    preset = get_preset(args.preset or ("tiny" if args.smoke else "wan2.1-t2v-1.3b"))
    cfg = preset.dit
    width, height = map(int, (args.size or ("64x64" if args.smoke else "832x480")).split("x"))
    frames = args.frames or (5 if args.smoke else 81)
    sf, sh, sw = preset.vae.stride
    shape = (1, cfg.in_channels, (frames - 1) // sf + 1, height // sh, width // sw)
    tokens = shape[2] * shape[3] * shape[4] // math.prod(cfg.patch_size)
    flops = forward_flops(cfg, tokens, cfg.text_len)

    torch.manual_seed(0)
    g = torch.Generator(device=device).manual_seed(1)
    latents = torch.randn(shape, generator=g, device=device)
    timestep = torch.tensor([500.0], device=device)
    context = torch.zeros(1, cfg.text_len, cfg.text_dim, device=device)
    n_text = min(args.text_tokens, cfg.text_len)
    context[:, :n_text] = torch.randn(1, n_text, cfg.text_dim, generator=g, device=device)

    # fp32 reference: the same random weights in both models, TF32 off
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with torch.device(device):
        theirs = WanTransformer3DModel(**diffusers_config(cfg)).eval().requires_grad_(False)
        ours = WanDiT(cfg).eval().requires_grad_(False)
    ours.load_state_dict({official_key(k): v for k, v in theirs.state_dict().items()}, strict=True)
    with torch.no_grad():
        ref = ours(latents, timestep, context)
        diffusers_fp32_err = rel_l2(theirs(latents, timestep, context, return_dict=False)[0], ref)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default for the timed runs

    state = ours.state_dict()
    del ours
    theirs = diffusers_bf16(theirs, dtype)
    # diffusers' pipeline hands the transformer its inputs in the transformer dtype
    lat_low, ctx_low = latents.to(dtype), context.to(dtype)
    variants = {"diffusers": lambda: theirs(lat_low, timestep, ctx_low, return_dict=False)[0]}
    models = {}
    for label, fp32_residual in (("ours fp32-residual (official)", True), ("ours bf16-residual (diffusers)", False)):
        with torch.device("meta"):
            m = WanDiT(replace(cfg, fp32_residual=fp32_residual))
        m.load_state_dict(state, assign=True)
        m = m.set_dtype(dtype).eval().requires_grad_(False)
        m.attention_backend = args.attention
        models[label] = m
        variants[label] = lambda m=m: m(latents, timestep, context)
    del state

    rows = []
    with torch.no_grad():
        for name, fn in variants.items():
            row, _ = measure(name, fn, device, args.warmup, args.repeats, ref, flops, args.peak_tflops)
            rows.append(row)
        del theirs, variants
        if device.type == "cuda":
            torch.cuda.empty_cache()

        # one full CFG step of our loop (cond + uncond + UniPC step), first step of the schedule
        dit = models["ours fp32-residual (official)"]
        cond = context.to(dit.dtype)
        uncond = torch.zeros_like(cond)
        uncond[:, :n_text] = torch.randn(1, n_text, cfg.text_dim, generator=g, device=device).to(dit.dtype)
        schedule = flow_schedule(preset.sampling.steps, preset.sampling.shift)
        for mode in ("sequential", "batched"):
            def step(mode=mode):
                return denoise(dit, latents, cond, uncond, FlowSampler(schedule), preset.sampling.guidance, mode, stop=1)

            row, _ = measure(f"ours CFG step ({mode})", step, device, args.warmup, args.repeats, None,
                             2 * flops, args.peak_tflops)
            rows.append(row)

    result = {
        "benchmark": "dit_forward",
        "preset": preset.name,
        "dit": asdict(cfg),
        "latents": list(shape),
        "tokens": tokens,
        "text_len": cfg.text_len,
        "dtype": str(dtype).removeprefix("torch."),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "diffusers": diffusers_version,
        "attention": args.attention,
        "flops_per_forward": flops,
        "peak_tflops": args.peak_tflops,
        "floor_ms": round(flops / (args.peak_tflops * 1e12) * 1e3, 2),
        "warmup": args.warmup,
        "repeats": args.repeats,
        "reference": "ours fp32 (TF32 off); diffusers fp32 rel L2 vs it below",
        "diffusers_fp32_rel_l2": diffusers_fp32_err,
        "results": rows,
        "smoke": args.smoke,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "dit_forward.json"
    tmp = args.out / ".dit_forward.json.partial"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)

    print(f"{result['device']}  torch {torch.__version__}  diffusers {diffusers_version}  "
          f"{preset.name}  latents {list(shape)}  L={tokens}  {result['dtype']}")
    print(f"forward: {flops / 1e12:.1f} TFLOP; floor at {args.peak_tflops:.0f} TFLOP/s: {result['floor_ms']} ms; "
          f"diffusers fp32 vs ours fp32 rel L2 {diffusers_fp32_err:.2e}")
    header = f"{'variant':34} {'median ms':>10} {'min ms':>9} {'TFLOP/s':>8} {'% peak':>7} {'rel L2':>9} {'peak GiB':>9}"
    print(header)
    print("-" * len(header))
    for r in rows:
        err = "" if r["rel_l2_vs_fp32"] is None else f"{r['rel_l2_vs_fp32']:.2e}"
        mem = "" if "peak_mem_gib" not in r else f"{r['peak_mem_gib']:.2f}"
        print(f"{r['name']:34} {r['median_ms']:>10.2f} {r['min_ms']:>9.2f} {r['tflops']:>8.1f} "
              f"{r['pct_of_peak']:>7.1f} {err:>9} {mem:>9}")
    print(f"wrote {path}")
    print(json.dumps({"benchmark": "dit_forward", "json": str(path),
                      **{r["name"]: {k: r[k] for k in ("median_ms", "rel_l2_vs_fp32")} for r in rows}}))
    return result


if __name__ == "__main__":
    main()
