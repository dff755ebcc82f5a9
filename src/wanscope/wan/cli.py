"""``wanscope generate``: text to video with the Wan2.1 engine.

Loaded lazily by the top-level group, so torch is imported only when this command runs.
Under ``torchrun --nproc-per-node N -m wanscope generate ... --parallel MODE`` every rank runs
it; rank 0 alone prints and writes the outputs.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import click

from wanscope.clitools import skip_teardown
from wanscope.errors import InputError, UsageError
from wanscope.wan import cli_options as opt
from wanscope.wan import warm_start
from wanscope.wan.options import RANDOM_NOTE, engine_allocator, require_engine


def check_latents_path(path: Path, out: Path) -> None:
    """Refuse a ``--save-latents`` path that cannot be written or that is one of the outputs."""
    from wanscope.wan.video import check_target, side_paths

    if path.resolve() in {p.resolve() for p in (out, *side_paths(out))}:
        raise InputError(path, "is one of the video's outputs; give another path")
    check_target(path)


@contextlib.contextmanager
def saved_tensor(tensor, path: Path):
    """``torch.save`` of ``tensor`` to a temporary name beside ``path``, moved to ``path`` when
    the block ends without an error and removed otherwise, so that the latents appear with the
    video's outputs or not at all.

    Raises:
        InputError: the save failed (torch's error, or the system's, as one line).
    """
    import torch

    tmp = path.with_name(f".{path.name}.partial")
    try:
        try:
            torch.save(tensor, tmp)
        except (OSError, RuntimeError) as e:  # torch's writer raises RuntimeError for I/O errors
            problem = getattr(e, "strerror", None) or str(e).splitlines()[0]
            raise InputError(path, f"cannot save the latents: {problem}") from None
        yield
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@click.command()
@opt.checkpoint_option()
@opt.random_weights_option(default_without_checkpoint=False)
@opt.preset_option()
@opt.prompt_option()
@opt.negative_prompt_option()
@opt.size_option()
@opt.frames_option()
@opt.steps_option()
@opt.guidance_option()
@opt.shift_option()
@opt.seed_option()
@opt.solver_option()
@opt.cfg_option()
@opt.attention_option()
@opt.kernels_option()
@opt.mode_option()
@opt.fast_option()
@opt.device_option()
@opt.dtype_option()
@opt.legacy_step_lookup_option()
@opt.memory_budget_option()
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
@opt.parallel_option()
@opt.dist_timeout_option()
def generate(out, save_latents, fast_spec, **engine):
    """Generate a video from a text prompt (Wan2.1 T2V)."""
    require_engine("generate")
    engine_allocator()
    from wanscope.report.write import make_dir, remove_dirs
    from wanscope.wan.video import check_outputs

    # The output's folder is made (as profile --out and report --out make theirs) and the
    # outputs checked before torch is imported; a run that fails removes the folders it made.
    created = make_dir(out.parent)
    try:
        check_outputs(out)
        if save_latents is not None:
            check_latents_path(save_latents, out)
        _generate(out, save_latents, fast_spec, **engine)
    except BaseException:
        remove_dirs(created)
        warm_start.settle()
        raise


def _generate(out, save_latents, fast_spec, **engine):
    import torch

    warm_start.begin(engine["device"], engine["parallel"])  # before the engine's other imports
    from wanscope.wan.attention import parse_backend, resolve_backend
    from wanscope.wan.config import dit_tokens
    from wanscope.wan.options import resolve_engine
    from wanscope.wan.pipeline import DTYPES, Components
    from wanscope.wan.pipeline import generate as run
    from wanscope.wan.video import write_outputs

    opts = resolve_engine(cuda_devices=torch.cuda.device_count(), weights_required=True, fast=fast_spec, **engine)
    if opts.kernels == "triton" and opts.device == "cpu":
        raise UsageError(
            "--kernels triton needs a CUDA device (on cpu the fused ops would run as their torch references); "
            "use auto (the default)" + ("" if opts.fast else " or torch")
        )
    device = torch.device(opts.device)
    ctx = None
    if opts.parallel is not None:
        from wanscope.parallel import setup_from_env

        ctx = setup_from_env(opts.parallel, device.type, opts.dist_timeout)  # heads: checked by resolve_engine
        device = ctx.device
    main = ctx is None or ctx.is_main
    torch_dtype = DTYPES[opts.dtype]
    backend = parse_backend(opts.attention)
    parts = Components(
        config=opts.config,
        device=device,
        dtype=torch_dtype,
        checkpoint=opts.checkpoint,
        attention_backend=backend,
        kernels=opts.kernels,
        fast=opts.fast,
    )
    attention_ran = resolve_backend(backend, device, torch_dtype, opts.dit.head_dim).value
    if ctx is None:  # before any model loads; a plan that cannot fit stops here
        from wanscope.wan.memory_plan import plan_for

        parts.plan = plan_for(parts, opts.request, opts.dit, opts.memory_budget)
    note = RANDOM_NOTE if opts.random_weights else None
    if note and main:
        click.echo(f"wanscope: {note}", err=True)
    if parts.plan is not None:
        click.echo(f"wanscope: {parts.plan.describe()}", err=True)

    from wanscope.wan.progress import StepProgress

    req = opts.request
    bar = StepProgress(req.steps, "denoising", disable=not main)
    started = time.perf_counter()
    try:
        with ctx or contextlib.nullcontext():
            result = run(parts, req, on_step=lambda i, _latents: bar.step(first=i == 0), parallel=ctx)
    finally:
        bar.close()
    elapsed_s = time.perf_counter() - started
    if not main:
        return

    info = {
        "note": note,
        "random_weights": opts.random_weights,
        "checkpoint": None if opts.checkpoint is None else str(opts.checkpoint),
        "preset": opts.preset,
        "prompt": req.prompt,
        "negative_prompt": req.negative_prompt,
        "height": req.height,
        "width": req.width,
        "frames": req.frames,
        "tokens": dit_tokens(opts.config, req.height, req.width, req.frames),
        "steps": req.steps,
        "guidance": req.guidance,
        "shift": req.shift,
        "seed": req.seed,
        "solver": req.solver,
        "cfg": req.cfg,
        "cfg_auto": opts.cfg_auto,
        "attention": opts.attention,
        "attention_ran": attention_ran,
        "kernels": opts.kernels,
        "kernels_ran": result.kernels,
        "mode": opts.mode,
        "fast": None if opts.fast is None else opts.fast.spec(),
        "parallel": opts.parallel,
        "world_size": 1 if ctx is None else ctx.world_size,
        "device": str(device),
        "dtype": opts.dtype,
        "vae_dtype": next(name for name, t in DTYPES.items() if t == parts.vae_dtype),
        "torch": torch.__version__,
        "elapsed_s": round(elapsed_s, 3),
        "memory_plan": None if parts.plan is None else parts.plan.as_dict(),
        "peak_memory_bytes": result.peak_memory_bytes,
        "peak_reserved_bytes": result.peak_reserved_bytes,
        "stage_s": result.stage_s,
        "step_s": result.step_s,
    }
    with saved_tensor(result.latents, save_latents) if save_latents is not None else contextlib.nullcontext():
        paths, fallback = write_outputs(result.frames.numpy(), out, opts.config.sampling.fps, info)
    if fallback:
        click.echo(f"wanscope: {fallback}", err=True)
    for p in paths:
        click.echo(str(p))
    if save_latents is not None:
        click.echo(str(save_latents))
    skip_teardown()  # every output is written and closed
