"""``wanscope generate``: text to video with the Wan2.1 engine.

Loaded lazily by the top-level group, so torch is imported only when this command runs.
Under ``torchrun --nproc-per-node N -m wanscope generate ... --parallel MODE`` every rank runs
it; rank 0 alone prints and writes the outputs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
import time
from pathlib import Path

import click

from wanscope.errors import InputError, UsageError
from wanscope.parallel.plan import DEFAULT_TIMEOUT_S, PARALLEL_MODES, check_cfg_parallel
from wanscope.wan.config import (
    ATTENTION_CHOICES,
    CFG_BATCHED_MAX_TOKENS,
    CFG_MODES,
    KERNEL_CHOICES,
    PRESETS,
    dit_tokens,
    get_preset,
)

RANDOM_NOTE = "RANDOM WEIGHTS (no checkpoint): timing/profiling run, not a real video"


def parse_size(text: str) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` (as the official CLI: ``832x480``) -> (height, width).

    Raises:
        UsageError: not two positive integers joined by ``x``.
    """
    m = re.fullmatch(r"\s*(\d+)\s*[xX*]\s*(\d+)\s*", text)
    if not m:
        raise UsageError(f"--size {text!r}: expected WIDTHxHEIGHT, e.g. 832x480")
    width, height = int(m.group(1)), int(m.group(2))
    return height, width


def parse_device(name: str | None):
    """``--device`` as a ``torch.device``: default cuda when available, else cpu.

    Raises:
        UsageError: not a device name, a type other than cpu and cuda, or cuda without a GPU.
    """
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UsageError(f"--device {name!r}: expected cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name!r}: expected cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: no CUDA device is available here")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: there are {torch.cuda.device_count()} CUDA devices")
    return device


def require_triton(what: str) -> None:
    """Refuse, before any model loads, a run whose fused kernels need Triton where it is not
    installed (the engine's CPU install has none; CUDA builds of torch bring it).

    Raises:
        UsageError: "``what`` the fused Triton kernels ...: pip install triton".
    """
    if importlib.util.find_spec("triton") is None:
        raise UsageError(f"{what} the fused Triton kernels (their torch references on a CPU): pip install triton")


def fast_mode(mode: str, spec: str | None, kernels: str | None, parallel: str | None):
    """The fast mode's ``FastConfig`` from ``--mode``/``--fast`` (None for ``--mode exact``), with
    the checks that generate and profile share, before any model loads. Imports torch (through
    ``wan/precision.py``) only for ``--mode fast``.

    Raises:
        UsageError: ``--fast`` without ``--mode fast``, a bad spec, no Triton installed,
            ``--kernels torch`` (the fast mode runs the fused kernels), or a Ulysses ``--parallel``
            mode (the fast blocks bypass its all-to-alls).
    """
    if spec is not None and mode != "fast":
        raise UsageError("--fast SPEC configures the fast mode: add --mode fast")
    if mode != "fast":
        return None
    from wanscope.wan.precision import FastConfig

    fast = FastConfig.parse(spec or "")
    require_triton("--mode fast runs")
    if kernels == "torch":
        raise UsageError("--mode fast runs the fused Triton kernels; drop --kernels torch")
    if parallel in ("ulysses", "cfg+ulysses"):
        raise UsageError(f"--mode fast does not run under --parallel {parallel} (Ulysses) yet; use --parallel cfg")
    return fast


def check_latents_path(path: Path, out: Path) -> None:
    """Refuse a ``--save-latents`` path that cannot be written or that is one of the outputs."""
    from wanscope.wan.video import check_target, side_paths

    if path.resolve() in {p.resolve() for p in (out, *side_paths(out))}:
        raise InputError(path, "is one of the video's outputs; give another path")
    check_target(path)


def save_tensor(tensor, path: Path) -> None:
    """``torch.save`` through a temporary name beside ``path`` (removed if the save fails)."""
    import torch

    tmp = path.with_name(f".{path.name}.partial")
    try:
        torch.save(tensor, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def build_request(
    cfg,
    prompt: str,
    *,
    negative_prompt=None,
    size=None,
    frames=None,
    steps=None,
    guidance=None,
    shift=None,
    seed=None,
    solver=None,
    cfg_mode=None,
    legacy_step_lookup=False,
):
    """A validated ``Request`` from the CLI's options; None takes the preset's sampling default.

    Raises:
        UsageError: a bad size or a bad request value (``Request.validate``).
    """
    from wanscope.wan.pipeline import Request

    s = cfg.sampling
    height, width = parse_size(size) if size else (s.height, s.width)
    req = Request(
        prompt=prompt,
        negative_prompt=s.negative_prompt if negative_prompt is None else negative_prompt,
        height=height,
        width=width,
        frames=s.frames if frames is None else frames,
        steps=s.steps if steps is None else steps,
        guidance=s.guidance if guidance is None else guidance,
        shift=s.shift if shift is None else shift,
        seed=s.seed if seed is None else seed,
        solver=solver or s.solver,
        cfg=cfg_mode or s.cfg,
        legacy_step_lookup=legacy_step_lookup,
    )
    req.validate(cfg.vae.stride, cfg.dit.patch_size)
    return req


@click.command()
@click.option(
    "--checkpoint", type=click.Path(path_type=Path), help="Wan2.1 checkpoint folder, official or diffusers layout."
)
@click.option(
    "--random-weights",
    is_flag=True,
    help="No checkpoint: random weights and a byte-level stand-in tokenizer (timing/profiling).",
)
@click.option(
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    default=None,
    help="Model sizes for --random-weights and the text encoder/VAE; a checkpoint's config.json sets "
    "the DiT. Default: wan2.1-t2v-1.3b, or tiny with --random-weights on a machine without CUDA.",
)
@click.option("--prompt", required=True, help="What to generate.")
@click.option("--negative-prompt", default=None, help="Default: the official T2V negative prompt.")
@click.option("--size", default=None, help="WIDTHxHEIGHT, multiples of 16. Default: the preset's (832x480).")
@click.option("--frames", type=int, default=None, help="4k+1 frames. Default: the preset's (81).")
@click.option("--steps", type=int, default=None, help="Sampling steps. Default: the preset's (50).")
@click.option("--guidance", type=float, default=None, help="Classifier-free guidance scale. Default: 5.0.")
@click.option("--shift", type=float, default=None, help="Flow shift of the sigma schedule. Default: 5.0.")
@click.option("--seed", type=int, default=None, help="Noise seed. Default: 0.")
@click.option("--solver", type=click.Choice(["unipc", "euler"]), default=None, help="Default: unipc.")
@click.option(
    "--cfg",
    "cfg_mode",
    type=click.Choice(CFG_MODES),
    default=None,
    help=f"Run cond and uncond as two forwards or one B=2 forward. Default: auto, batched up to "
    f"{CFG_BATCHED_MAX_TOKENS:,} DiT tokens (e.g. 416x240x21), sequential above (832x480x81); "
    f"sequential under --parallel cfg.",
)
@click.option(
    "--attention",
    type=click.Choice(ATTENTION_CHOICES),
    default="auto",
    show_default=True,
    help="Attention kernel. auto: ours (hopper) on an sm_90 GPU with Triton's Gluon, else sdpa.",
)
@click.option(
    "--kernels",
    type=click.Choice(KERNEL_CHOICES),
    default="auto",
    show_default=True,
    help="DiT ops. auto: the fused Triton kernels on CUDA, the torch reference ops elsewhere.",
)
@click.option(
    "--mode",
    type=click.Choice(["exact", "fast"]),
    default="exact",
    show_default=True,
    help="fast: FP8 GEMMs and INT8 Q K^T attention where they pay (the fast mode, FastConfig; "
    "not exact: measure its cost on your weights with compare-modes).",
)
@click.option(
    "--fast",
    "fast_spec",
    default=None,
    metavar="SPEC",
    help="With --mode fast: its config over the defaults, e.g. 'linears=ffn,qkv exact_blocks=0,-1' "
    "(keys: linears, int8_attention, pv_fp8, exact_blocks, fast_accum).",
)
@click.option("--device", default=None, help="Default: cuda if available, else cpu.")
@click.option("--dtype", type=click.Choice(["bf16", "fp32"]), default=None, help="Default: bf16 on CUDA, fp32 on CPU.")
@click.option(
    "--legacy-step-lookup", is_flag=True, help="Find the step index with a device .item() (syncs once per step)."
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("video.mp4"),
    show_default=True,
    help="MP4 path; a .png contact sheet and a .json sidecar are written next to it.",
)
@click.option(
    "--save-latents",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also save the final latents [1, 16, F, H, W] fp32 here (torch.save; rank 0).",
)
@click.option(
    "--parallel",
    type=click.Choice(PARALLEL_MODES),
    help="Under torchrun: CFG branches on 2 ranks, Ulysses token shards on all, or both (2 x N/2).",
)
@click.option(
    "--dist-timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds any rank may wait for the others (rendezvous, each collective) before failing.",
)
def generate(
    checkpoint,
    random_weights,
    preset,
    prompt,
    negative_prompt,
    size,
    frames,
    steps,
    guidance,
    shift,
    seed,
    solver,
    cfg_mode,
    attention,
    kernels,
    mode,
    fast_spec,
    device,
    dtype,
    legacy_step_lookup,
    out,
    save_latents,
    parallel,
    dist_timeout,
):
    """Generate a video from a text prompt (Wan2.1 T2V)."""
    import torch

    from wanscope.wan.attention import check_backend, parse_backend, resolve_backend
    from wanscope.wan.pipeline import DTYPES, Components
    from wanscope.wan.pipeline import generate as run
    from wanscope.wan.video import check_outputs, write_outputs

    if (checkpoint is None) == (not random_weights):
        raise UsageError("give exactly one of --checkpoint DIR or --random-weights")
    check_outputs(out)
    if save_latents is not None:
        check_latents_path(save_latents, out)
    fast = fast_mode(mode, fast_spec, kernels, parallel)
    if parallel is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UsageError(
            f"launched as {os.environ['WORLD_SIZE']} processes without --parallel; "
            f"give --parallel {'|'.join(PARALLEL_MODES)}"
        )
    device = parse_device(device)
    if preset is None:  # random 1.3B weights on a CPU would take minutes per step: tiny, as profile does
        preset = "tiny" if random_weights and device.type == "cpu" else "wan2.1-t2v-1.3b"
    cfg = get_preset(preset)
    dtype = dtype or ("bf16" if device.type == "cuda" else "fp32")
    req = build_request(
        cfg,
        prompt,
        negative_prompt=negative_prompt,
        size=size,
        frames=frames,
        steps=steps,
        guidance=guidance,
        shift=shift,
        seed=seed,
        solver=solver,
        cfg_mode=cfg_mode,
        legacy_step_lookup=legacy_step_lookup,
    )
    cfg_parallel = parallel is not None and parallel != "ulysses"
    cfg_auto = req.cfg == "auto"
    req = req.with_cfg_resolved(cfg, cfg_parallel)
    dit_cfg = cfg.dit
    if checkpoint is not None:
        from wanscope.wan.weights import check_dit, detect_layout

        dit_cfg = check_dit(detect_layout(checkpoint).dit)  # a bad checkpoint fails before any model runs
    if fast is not None:
        fast.check_blocks(dit_cfg.num_layers)
    ctx = None
    if parallel is not None:
        from wanscope.parallel import setup_from_env

        if cfg_parallel:
            check_cfg_parallel(req.guidance, req.cfg)  # before any rank waits for another
        ctx = setup_from_env(parallel, device.type, dist_timeout, num_heads=cfg.dit.num_heads)
        device = ctx.device
    main = ctx is None or ctx.is_main
    torch_dtype = DTYPES[dtype]
    backend = parse_backend(attention)
    check_backend(backend, device, torch_dtype, cfg.dit.head_dim)  # before a model loads
    if kernels == "triton" and device.type != "cuda":
        raise UsageError(
            f"--kernels triton needs a CUDA device (on {device.type} the fused ops would run as "
            "their torch references); use auto (the default)" + ("" if fast else " or torch")
        )
    parts = Components(
        config=cfg,
        device=device,
        dtype=torch_dtype,
        checkpoint=checkpoint,
        attention_backend=backend,
        kernels=kernels,
        fast=fast,
    )
    attention_ran = resolve_backend(backend, device, torch_dtype, cfg.dit.head_dim).value
    note = RANDOM_NOTE if random_weights else None
    if note and main:
        click.echo(f"wanscope: {note}", err=True)

    from tqdm import tqdm

    bar = tqdm(total=req.steps, unit="step", desc="denoising", file=sys.stderr, dynamic_ncols=True, disable=not main)
    started = time.perf_counter()
    try:
        with ctx or contextlib.nullcontext():
            result = run(parts, req, on_step=lambda i, _latents: bar.update(1), parallel=ctx)
    finally:
        bar.close()
    elapsed_s = time.perf_counter() - started
    if not main:
        return

    info = {
        "note": note,
        "random_weights": random_weights,
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "preset": preset,
        "prompt": req.prompt,
        "negative_prompt": req.negative_prompt,
        "height": req.height,
        "width": req.width,
        "frames": req.frames,
        "tokens": dit_tokens(cfg, req.height, req.width, req.frames),
        "steps": req.steps,
        "guidance": req.guidance,
        "shift": req.shift,
        "seed": req.seed,
        "solver": req.solver,
        "cfg": req.cfg,
        "cfg_auto": cfg_auto,
        "attention": attention,
        "attention_ran": attention_ran,
        "kernels": kernels,
        "kernels_ran": result.kernels,
        "mode": mode,
        "fast": None if fast is None else fast.spec(),
        "parallel": parallel,
        "world_size": 1 if ctx is None else ctx.world_size,
        "device": str(device),
        "dtype": dtype,
        "torch": torch.__version__,
        "elapsed_s": round(elapsed_s, 3),
        "peak_memory_bytes": result.peak_memory_bytes,
    }
    paths, fallback = write_outputs(result.frames.numpy(), out, cfg.sampling.fps, info)
    if save_latents is not None:
        save_tensor(result.latents, save_latents)
    if fallback:
        click.echo(f"wanscope: {fallback}", err=True)
    for p in paths:
        click.echo(str(p))
    if save_latents is not None:
        click.echo(str(save_latents))
