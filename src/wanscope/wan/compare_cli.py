"""``wanscope compare-modes``: PSNR and SSIM of the fast mode against the exact mode, per prompt,
on a real checkpoint (``wan/compare.py``). Loaded lazily by the top-level group."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import click

from wanscope.errors import InputError
from wanscope.wan.cli import build_request, parse_device, require_triton
from wanscope.wan.config import ATTENTION_CHOICES, PRESETS, get_preset

# Wan2.1's own T2V example prompt (official generate.py, EXAMPLE_PROMPT["t2v-1.3B"])
DEFAULT_PROMPT = (
    "Two anthropomorphic cats in comfy boxing gear and bright gloves fight intensely on a spotlighted stage."
)


def read_prompts(path: Path) -> list[str]:
    """The prompts of a UTF-8 text file, one per line; blank lines and lines starting with ``#``
    are skipped.

    Raises:
        InputError: missing, not a regular file, unreadable, not UTF-8, or without a prompt.
    """
    if not path.is_file():
        raise InputError(path, "no such file" if not path.exists() else "not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "not UTF-8 text") from None
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    prompts = [line.strip() for line in text.splitlines()]
    prompts = [p for p in prompts if p and not p.startswith("#")]
    if not prompts:
        raise InputError(path, "no prompts (one per line; blank lines and # comments are skipped)")
    return prompts


def _db(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.2f}"


@click.command("compare-modes")
@click.option(
    "--checkpoint",
    required=True,
    type=click.Path(path_type=Path),
    help="Wan2.1 checkpoint folder, official or diffusers layout.",
)
@click.option("--prompt", "prompt_args", multiple=True, help="A prompt; repeat for several.")
@click.option(
    "--prompts-file",
    type=click.Path(path_type=Path),
    help="UTF-8 text, one prompt per line (blank lines and # comments skipped); after any --prompt.",
)
@click.option(
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    default="wan2.1-t2v-1.3b",
    show_default=True,
    help="Text encoder and VAE sizes and sampling defaults; the checkpoint's config.json sets the DiT.",
)
@click.option("--negative-prompt", default=None, help="Default: the official T2V negative prompt.")
@click.option("--size", default=None, help="WIDTHxHEIGHT, multiples of 16. Default: the preset's (832x480).")
@click.option("--frames", type=int, default=None, help="4k+1 frames. Default: the preset's (81).")
@click.option("--steps", type=int, default=None, help="Sampling steps. Default: the preset's (50).")
@click.option("--seed", type=int, default=None, help="Noise seed, the same for both modes. Default: 0.")
@click.option(
    "--fast",
    "fast_spec",
    default="",
    metavar="SPEC",
    help="The fast mode's config over its defaults, e.g. 'linears=ffn,qkv exact_blocks=0,-1 pv_fp8=no' "
    "(keys: linears, int8_attention, pv_fp8, exact_blocks, fast_accum).",
)
@click.option(
    "--attention",
    type=click.Choice(ATTENTION_CHOICES),
    default="auto",
    show_default=True,
    help="Attention kernel of the exact mode (and of the fast mode's exact parts). auto: ours (hopper) "
    "on an sm_90 GPU with Triton's Gluon, else sdpa.",
)
@click.option("--device", default=None, help="Default: cuda if available, else cpu.")
@click.option("--dtype", type=click.Choice(["bf16", "fp32"]), default=None, help="Default: bf16 on CUDA, fp32 on CPU.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def compare_modes(
    checkpoint,
    prompt_args,
    prompts_file,
    preset,
    negative_prompt,
    size,
    frames,
    steps,
    seed,
    fast_spec,
    attention,
    device,
    dtype,
    fmt,
):
    """PSNR and SSIM of the fast mode's videos against the exact mode's, per prompt and overall."""
    import torch

    from wanscope.wan.attention import check_backend, parse_backend
    from wanscope.wan.compare import as_json
    from wanscope.wan.compare import compare_modes as run
    from wanscope.wan.pipeline import DTYPES, Components
    from wanscope.wan.precision import FastConfig
    from wanscope.wan.weights import check_dit, detect_layout

    # every check before a model loads: a bad input costs no minutes
    fast = FastConfig.parse(fast_spec)
    prompts = list(prompt_args) + (read_prompts(prompts_file) if prompts_file is not None else [])
    cfg = get_preset(preset)
    requests = [
        build_request(cfg, p, negative_prompt=negative_prompt, size=size, frames=frames, steps=steps, seed=seed)
        for p in prompts or [DEFAULT_PROMPT]
    ]
    fast.check_blocks(check_dit(detect_layout(checkpoint).dit).num_layers)
    require_triton("both modes run")
    device = parse_device(device)
    dtype = dtype or ("bf16" if device.type == "cuda" else "fp32")
    torch_dtype = DTYPES[dtype]
    backend = parse_backend(attention)
    check_backend(backend, device, torch_dtype, cfg.dit.head_dim)
    parts = Components(config=cfg, device=device, dtype=torch_dtype, checkpoint=checkpoint, attention_backend=backend)

    from tqdm import tqdm

    steps_total = 2 * sum(r.steps for r in requests)
    bar = tqdm(total=steps_total, unit="step", desc="exact, then fast", file=sys.stderr, dynamic_ncols=True)
    started = time.perf_counter()
    try:
        result = run(parts, requests, fast, progress=lambda *_: bar.update(1))
    finally:
        bar.close()
    req = requests[0]
    doc = {
        "checkpoint": str(checkpoint),
        "preset": preset,
        "height": req.height,
        "width": req.width,
        "frames": req.frames,
        "steps": req.steps,
        "seed": req.seed,
        "guidance": req.guidance,
        "shift": req.shift,
        "solver": req.solver,
        "attention": attention,
        "device": str(device),
        "dtype": dtype,
        "exact": "DiT on the fused kernels (kernels=triton) in the model dtype",
        "fast": {
            "spec": fast.spec(),
            "linears": list(fast.linears),
            "int8_attention": fast.int8_attention,
            "pv_fp8": fast.pv_fp8,
            "exact_blocks": list(fast.exact_blocks),
            "fast_accum": fast.fast_accum,
        },
        "metrics": "fast against exact on RGB in [0, 1]: PSNR = 10 log10(1/MSE), overall from the MSE pooled "
        "over prompts (null: identical); SSIM of Wang et al. 2004 (11x11 Gaussian, sigma 1.5, K1 0.01, "
        "K2 0.03), mean over channels, windows and frames, overall the mean over prompts",
        **as_json(result),
        "elapsed_s": round(time.perf_counter() - started, 3),
        "torch": torch.__version__,
    }
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(
        f"{checkpoint}  {req.width}x{req.height}x{req.frames}, {req.steps} steps, seed {req.seed}, {dtype} on {device}"
    )
    click.echo(f"exact: fused kernels; fast: {fast.spec()}")
    overall = "overall (pooled MSE; mean SSIM)"
    width = max(len(overall), min(60, max(len(s.prompt) for s in result.scores)))
    click.echo(f"{'prompt':{width}}  {'PSNR dB':>8}  {'SSIM':>7}")
    for s in result.scores:
        text = s.prompt if len(s.prompt) <= width else s.prompt[: width - 3] + "..."
        click.echo(f"{text:{width}}  {_db(s.psnr_db):>8}  {s.ssim:>7.4f}")
    click.echo(f"{overall:{width}}  {_db(result.psnr_db):>8}  {result.ssim:>7.4f}")
    if len(result.scores) > 1:
        click.echo(f"{'worst prompt':{width}}  {_db(result.worst_psnr_db):>8}  {result.worst_ssim:>7.4f}")
