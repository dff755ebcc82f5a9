"""The VAE decode's speed and error by precision and layout, ours against diffusers (issue 26).

Decodes the latents of a 1.3B 832x480x81 request ([1, 16, 21, 60, 104], standard normal: a
DiT's output is normalized the same way) with our decoder (``wanscope.wan.vae_decoder``) through
``wanscope.wan.vae.decode``, random weights (labelled so), in each variant: fp32 as the official
code decodes; fp32 with ``cudnn.benchmark``; fp32 channels-last 3D (``vae.channels_last``) as the
engine's exact mode decodes on CUDA; bf16; bf16 channels-last as the fast mode decodes, and with
``cudnn.benchmark``; and ``diffusers-fp32``: diffusers' ``AutoencoderKLWan`` holding the same
weights, fp32, the same un-normalization and clamp (``benchmarks/_common.py`` ``diffusers_vae``).
``first_s`` is the first decode of the full shape (after a small one has started cuDNN): the
engine decodes once per process, so that is the time it pays; ``median_s`` the later ones. Each
variant's video is compared with ours in fp32: PSNR over [-1, 1] (peak-to-peak 2; null where the
videos are equal), the largest absolute difference, and the share of uint8 frame values that
differ; ``diffusers-fp32``'s is ours against diffusers. Times are wall-clock medians with a
device sync (CUDA events would miss nothing here: one decode is seconds). The peak memory
includes the weights on the device (for ``diffusers-fp32``, its unused encoder's too) and the
fp32 copy of ours that every variant starts from.

With ``--placements`` it times instead the decode's placements that the memory planner picks
between (``wan/memory_plan.py``): ``all_frames``, ``frame_by_frame`` and the ``tiled`` grids, in
fp32 and bf16 channels-last as the engine decodes on CUDA: the median time, PyTorch's peak
allocation of ``decode`` and ``to_frames`` together above the weights and latents (beside it
the planner's bound of the same activations, ``memory_plan._vae_activations``, before its reserve
factor and margin), and each video against the untiled frame-by-frame one of its dtype.

    python benchmarks/vae_decode.py --out benchmarks/results
    python benchmarks/vae_decode.py --placements --out benchmarks/results
    python benchmarks/vae_decode.py --smoke --out /tmp/r        # tiny VAE on the CPU

``--variants`` runs only the named ones (the first named is then the reference). To compare two
trees, run each tree's copy of this script with the same ``--reference FILE``: the first run
saves its first variant's video there, a later run compares every variant with it as well
(``vs_reference``).
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
from _common import diffusers_vae, sync, version, write_result

from wanscope.wan.config import get_preset
from wanscope.wan.pipeline import latent_shape, to_frames
from wanscope.wan.vae import channels_last as to_channels_last
from wanscope.wan.vae import decode, load_vae

# name: (dtype, channels-last, cudnn.benchmark); the first is the reference
VARIANTS = {
    "fp32": (torch.float32, False, False),
    "fp32-cudnn-benchmark": (torch.float32, False, True),
    "fp32-channels-last": (torch.float32, True, False),
    "bf16": (torch.bfloat16, False, False),
    "bf16-channels-last": (torch.bfloat16, True, False),
    "bf16-channels-last-cudnn-benchmark": (torch.bfloat16, True, True),
    "diffusers-fp32": (torch.float32, False, False),
}


def diffusers_decode(vae, latents: torch.Tensor, cfg) -> torch.Tensor:
    """``wanscope.wan.vae.decode``'s contract with diffusers' ``AutoencoderKLWan``: the same
    un-normalization, its ``decode``, fp32 in [-1, 1]."""
    mean = torch.tensor(cfg.latents_mean, device=latents.device).view(1, -1, 1, 1, 1)
    std = torch.tensor(cfg.latents_std, device=latents.device).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        return vae.decode(latents.float() * std + mean, return_dict=False)[0].float().clamp(-1, 1)


def compare(video: torch.Tensor, frames: torch.Tensor, reference: tuple) -> dict:
    """PSNR over [-1, 1] (None where equal), the largest difference, the uint8 values differing."""
    mse = torch.mean((video - reference[0]) ** 2).item()
    return {
        "psnr_db": round(10 * math.log10(4 / mse), 2) if mse > 0 else None,
        "max_abs_diff": round((video - reference[0]).abs().max().item(), 6),
        "uint8_values_differing": round((frames != reference[1]).float().mean().item(), 6),
    }


def placements(preset, device, latents, state, repeats: int, size: tuple[int, int, int]) -> dict:
    """Each planner placement of the decode, fp32 and bf16 channels-last (module docstring)."""
    from wanscope.wan.memory_plan import GIB, TILES, MemoryPlan, _vae_activations, vae_label

    h, w, f = size
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        vae = to_channels_last(load_vae(None, preset.vae, dtype, device))
        vae.load_state_dict(state)
        halo = vae.decoder.halo()
        reference = None
        for name, tiles in [("frame_by_frame", (1, 1)), ("all_frames", (1, 1)), *(("tiled", t) for t in TILES)]:
            plan = MemoryPlan(None, "resident", "resident", name, {}, tiles)
            times = []
            for _ in range(repeats + 1):  # the first: cuDNN's choices for the shapes
                sync(device)
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                start = time.perf_counter()
                video = decode(vae, latents, preset.vae, plan)
                frames = to_frames(video)
                sync(device)
                times.append(time.perf_counter() - start)
                peak = torch.cuda.max_memory_allocated() - base if device.type == "cuda" else None
                if len(times) <= repeats:
                    del video, frames
            estimate = _vae_activations(preset, h, w, f, dtype, name != "all_frames", tiles, halo)
            label = vae_label(name, tiles)
            row = {
                "first_s": round(times[0], 3),
                "median_s": round(statistics.median(times[1:]), 3),
                "peak_above_weights_gib": None if peak is None else round(peak / GIB, 3),
                "estimate_gib": round(estimate / GIB, 3),
            }
            if reference is None:
                reference = (video, frames)
            else:
                row |= compare(video, frames, reference)
            out[f"{str(dtype).removeprefix('torch.')} {label}"] = row
            print(label, dtype, row, flush=True)
            del video, frames
        del vae, reference
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--placements", action="store_true", help="the memory planner's placements instead")
    p.add_argument("--variants", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    p.add_argument("--reference", type=Path, help="the video to compare with, saved there when absent")
    p.add_argument("--label")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    preset = get_preset("tiny" if args.smoke else "wan2.1-t2v-1.3b")
    device = torch.device("cpu" if args.smoke else "cuda")
    h, w, f = (64, 64, 5) if args.smoke else (480, 832, 81)
    gen = torch.Generator(device=device).manual_seed(0)
    latents = torch.randn(latent_shape(preset, h, w, f), generator=gen, device=device)
    torch.manual_seed(0)
    base = load_vae(None, preset.vae, torch.float32, device)
    state = {k: v.clone() for k, v in base.state_dict().items()}
    # cuDNN's and the allocator's one-time start on a small decode, so that each variant's first
    # call is what a process that has already run its DiT pays for its one decode
    decode(base, latents[:, :, :2, :8, :8], preset.vae)
    if args.placements:
        del base
        results = placements(preset, device, latents, state, args.repeats, (h, w, f))
        args.label = args.label or "placements"
    else:
        results = variants(args, preset, device, latents, base, state)
    result = {
        "benchmark": "vae_decode",
        "date": datetime.date.today().isoformat(),
        "smoke": args.smoke,
        "weights": "random (our decoder's initialization; diffusers' holds the same tensors)",
        "latents": list(latents.shape),
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "torch": torch.__version__,
        "diffusers": version("diffusers"),
        "variants": results,
    }
    print(write_result(args.out, "vae_decode", result, args.label))


def variants(args, preset, device, latents, base, state) -> dict:
    """Each of ``VARIANTS`` (module docstring)."""
    results, reference = {}, None
    names = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants: {', '.join(unknown)}")
    saved = torch.load(args.reference) if args.reference and args.reference.exists() else None
    for name in names:
        dtype, channels_last, benchmark = VARIANTS[name]
        torch.backends.cudnn.benchmark = benchmark
        if name.startswith("diffusers"):  # the last: ours leaves the device for it
            base.to("cpu")
            vae, run = diffusers_vae(preset.vae, state, device), diffusers_decode
        else:
            vae, run = base.to(dtype), decode
            vae.load_state_dict(state)  # the same weights, rounded to ``dtype``
            for m in vae.modules():  # the previous variant's layout undone
                if isinstance(m, torch.nn.Conv3d):
                    m.weight.data = m.weight.data.contiguous()
            if channels_last:
                to_channels_last(vae)  # as the engine does on CUDA
        times = []
        for _ in range(args.repeats + 1):  # the first: cuDNN's choices, allocator growth
            sync(device)
            start = time.perf_counter()
            video = run(vae, latents, preset.vae)
            sync(device)
            times.append(time.perf_counter() - start)
        frames = to_frames(video)
        row = {"first_s": round(times[0], 3), "median_s": round(statistics.median(times[1:]), 3)}
        if reference is None:
            reference = (video, frames)
            if args.reference and saved is None:
                torch.save((video.cpu(), frames), args.reference)
        else:
            row |= compare(video, frames, reference)
        if saved is not None:
            row["vs_reference"] = compare(video.cpu(), frames, saved)
        row["peak_memory_bytes"] = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        results[name] = row
        print(name, row, flush=True)
        del video
    return results


if __name__ == "__main__":
    main()
