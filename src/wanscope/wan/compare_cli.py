"""``wanscope compare-modes``: PSNR and SSIM of the fast mode against the exact mode, per prompt,
on a real checkpoint (``wan/compare.py``). Loaded lazily by the top-level group."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import click

from wanscope.clitools import format_option
from wanscope.errors import InputError
from wanscope.wan import cli_options as opt
from wanscope.wan.options import engine_allocator, require_engine

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
@opt.checkpoint_option(required=True)
@opt.prompt_option(multiple=True)
@click.option(
    "--prompts-file",
    type=click.Path(path_type=Path),
    help="UTF-8 text, one prompt per line (blank lines and # comments skipped); after any --prompt.",
)
@opt.preset_option()
@opt.negative_prompt_option()
@opt.size_option()
@opt.frames_option()
@opt.steps_option()
@opt.seed_option()
@opt.fast_option(always_fast=True)
@opt.attention_option()
@opt.device_option()
@opt.dtype_option()
@opt.memory_budget_option()
@format_option("table", "json")
def compare_modes(prompts, prompts_file, fast_spec, fmt, **engine):
    """PSNR and SSIM of the fast mode's videos against the exact mode's, per prompt and overall."""
    require_engine("compare-modes")
    engine_allocator()
    import torch

    from wanscope.wan.attention import parse_backend
    from wanscope.wan.compare import as_json
    from wanscope.wan.compare import compare_modes as run
    from wanscope.wan.options import resolve_engine
    from wanscope.wan.pipeline import DTYPES, Components

    # every check before a model loads: a bad input costs no minutes
    prompts = list(prompts) + (read_prompts(prompts_file) if prompts_file is not None else [])
    prompts = prompts or [DEFAULT_PROMPT]
    opts = resolve_engine(
        cuda_devices=torch.cuda.device_count(),
        prompt=prompts[0],
        mode="fast",
        fast=fast_spec,
        compare_modes=True,
        **engine,
    )
    requests = [replace(opts.request, prompt=p) for p in prompts]
    for req in requests[1:]:
        req.validate(opts.config.vae.stride, opts.config.dit.patch_size)
    fast, device, preset, dtype = opts.fast, torch.device(opts.device), opts.preset, opts.dtype
    checkpoint, attention = opts.checkpoint, opts.attention
    parts = Components(
        config=opts.config,
        device=device,
        dtype=DTYPES[dtype],
        checkpoint=checkpoint,
        attention_backend=parse_backend(attention),
    )
    from wanscope.wan.memory_plan import plan_for

    # planned for the fast mode's DiT, the larger (its FP8 copies beside the weights)
    parts.plan = plan_for(parts, opts.request, opts.dit, opts.memory_budget, fast=fast)
    if parts.plan is not None:
        click.echo(f"wanscope: {parts.plan.describe()}", err=True)

    from wanscope.wan.progress import StepProgress

    bar = StepProgress(2 * sum(r.steps for r in requests), "exact, then fast")
    started = time.perf_counter()
    try:
        # each mode's first step compiles its kernels
        result = run(parts, requests, fast, progress=lambda _mode, i, step: bar.step(first=i == 0 and step == 0))
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
        "memory_plan": None if parts.plan is None else parts.plan.as_dict(),
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
