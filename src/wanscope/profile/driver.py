"""Run the engine's stages for a profile: text encoding, warm-up and profiled denoising steps,
VAE decode, with the capture window around the profiled steps and a progress bar.

The denoising steps are steps of the real ``--steps`` schedule (the sampler's coefficients
differ from step to step), and the run stops after the last profiled one: the VAE then decodes
those partly denoised latents, only to measure the decode stage's peak memory and time. Each
stage loads its model, runs and releases it (``wan/pipeline.py``), so the peak device memory
of each stage is its own.

Under ``--parallel`` (``torchrun``) every rank runs this with its ``ParallelContext``: rank 0
encodes the prompts and broadcasts the text states, the DiT is sharded (Ulysses) or runs one
CFG branch per rank, each rank's window captures its own steps, and only rank 0 decodes with
the VAE and prints.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from torch.nn.attention import SDPBackend, sdpa_kernel

from wanscope.clitools import console as make_console
from wanscope.parallel.group import ParallelContext
from wanscope.parallel.ulysses import shard_dit
from wanscope.profile.options import PROMPT, ProfileOptions
from wanscope.wan.attention import parse_backend
from wanscope.wan.config import get_preset
from wanscope.wan.pipeline import (
    DTYPES,
    Components,
    Request,
    denoise,
    encode_prompts,
    initial_noise,
    latent_shape,
    release,
)
from wanscope.wan.precision import FastConfig
from wanscope.wan.sampler import FlowSampler, flow_schedule


@dataclass
class Measurements:
    """What the driver measured.

    Attributes:
        peak_memory_bytes: stage -> peak device memory allocated by PyTorch in that stage
            (bytes; None without CUDA).
        stage_wall_ns: stage -> host wall time (ns), the device waited for at each stage's end.
        step_wall_ns: host time of each denoising step run, schedule index 0 first (ns): from
            the end of the previous step's hook to the end of the step. On a GPU the host runs
            ahead of the device, so this is host time; the trace has each step's GPU interval.
        dit: the DiT that ran: ``dim``, ``num_layers``, ``num_heads``, ``ffn_dim``.
        tokens: DiT sequence length L per forward (F*H*W latent patches).
        memory_plan: the run's ``MemoryPlan.as_dict()`` (``wan/memory_plan.py``), or None.
    """

    peak_memory_bytes: dict[str, int | None] = field(default_factory=dict)
    stage_wall_ns: dict[str, int] = field(default_factory=dict)
    step_wall_ns: list[int] = field(default_factory=list)
    dit: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    memory_plan: dict | None = None


def request(opts: ProfileOptions) -> Request:
    """The generation request of a profile run (sampling values from the preset)."""
    s = get_preset(opts.preset).sampling
    return Request(
        prompt=PROMPT,
        negative_prompt=s.negative_prompt,
        height=opts.height,
        width=opts.width,
        frames=opts.frames,
        steps=opts.steps,
        guidance=s.guidance,
        shift=s.shift,
        seed=s.seed,
        solver=s.solver,
        cfg=opts.cfg,
        legacy_step_lookup=opts.legacy_step_lookup,
    )


def components(opts: ProfileOptions, device: torch.device | None = None) -> Components:
    """The engine's parts on ``device`` (default: ``opts.device``; a rank's ``cuda:LOCAL_RANK``)."""
    return Components(
        config=get_preset(opts.preset),
        device=device or torch.device(opts.device),
        dtype=DTYPES[opts.dtype],
        checkpoint=opts.checkpoint,
        attention_backend=parse_backend(opts.attention),
        kernels=opts.kernels,
        fast=None if opts.fast is None else FastConfig.parse(opts.fast),
    )


def compile_blocks(dit) -> None:
    """Regional compilation: ``torch.compile`` each repeated DiT block in place. The blocks share
    one code path, so Dynamo compiles it once and reuses it for all of them (seconds, not the
    minutes of a whole-model compile)."""
    for block in dit.blocks:
        block.compile()


def _peak(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    peak = torch.cuda.max_memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    return peak


def _settle(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def _stage(name: str, m: Measurements, device: torch.device, console: Console):
    started = time.perf_counter_ns()
    yield
    _settle(device)
    release()
    m.stage_wall_ns[name] = time.perf_counter_ns() - started
    m.peak_memory_bytes[name] = _peak(device)
    console.print(f"{name.replace('_', ' ')}: {m.stage_wall_ns[name] / 1e9:.2f} s")


def run(
    opts: ProfileOptions,
    window,
    console: Console | None = None,
    decode: bool = True,
    attention_only_in_dit: bool = False,
    parallel: ParallelContext | None = None,
) -> Measurements:
    """Run the stages; ``window`` (``window.py``) sees the profiled steps.

    Args:
        decode: run the VAE decode stage (the ncu capture stops after the DiT).
        attention_only_in_dit: run the text encoder's attention with SDPA's math backend, so
            the only fused attention kernels the process launches are the DiT's (what the ncu
            capture selects by kernel name).
        parallel: this rank's context under ``--parallel``: text states from rank 0, the DiT
            sharded by ``shard_dit``, denoising with ``parallel``, the VAE decode (when
            ``decode``) and the stage lines on rank 0 only.

    Raises:
        UsageError, InputError: a bad request or checkpoint (as ``wan/pipeline.py``).
        ParallelError: a collective failed or timed out.
    """
    main = parallel is None or parallel.is_main
    console = console or make_console(stderr=True, quiet=not main)
    parts, req = components(opts, parallel and parallel.device), request(opts)
    config = parts.config
    req.validate(config.vae.stride, config.dit.patch_size)
    device = parts.device
    m = Measurements()
    if parallel is None:  # before any model loads
        from wanscope.wan.memory_plan import plan_for
        from wanscope.wan.options import dit_config

        parts.plan = plan_for(parts, req, dit_config(opts.checkpoint, config), opts.memory_budget)
        if parts.plan is not None:
            m.memory_plan = parts.plan.as_dict()
            console.print(parts.plan.describe())
    _peak(device)

    with _stage("text_encoding", m, device, console):
        with sdpa_kernel(SDPBackend.MATH) if attention_only_in_dit else contextlib.nullcontext():
            cond, uncond = encode_prompts(parts, req, parallel)  # each [1, Lc, text_dim]

    with _stage("denoising", m, device, console):
        dit = parts.dit()
        if parallel is not None:
            shard_dit(parallel, dit)
        d = dit.cfg
        m.dit = {"dim": d.dim, "num_layers": d.num_layers, "num_heads": d.num_heads, "ffn_dim": d.ffn_dim}
        shape = latent_shape(config, req.height, req.width, req.frames)  # [1, C, F, H, W]
        m.tokens = shape[2] // d.patch_size[0] * (shape[3] // d.patch_size[1]) * (shape[4] // d.patch_size[2])
        if opts.compile:
            compile_blocks(dit)
        cond, uncond = cond.to(dit.dtype), uncond.to(dit.dtype)
        sampler = FlowSampler(flow_schedule(req.steps, req.shift), req.solver, req.legacy_step_lookup)
        latents = initial_noise(shape, req.seed, device)
        latents = _denoise_steps(opts, dit, latents, cond, uncond, sampler, req.guidance, window, m, console, parallel)
        del dit, cond, uncond, sampler

    if decode and main:
        from wanscope.wan.vae import decode as vae_decode

        with _stage("vae_decode", m, device, console), torch.no_grad():
            vae = parts.vae()
            video = vae_decode(vae, latents, config.vae, parts.plan)  # [1, 3, F, H, W]
            del vae, video
    return m


def _denoise_steps(opts, dit, latents, cond, uncond, sampler, guidance, window, m, console, parallel):
    """The warm-up and profiled steps, with the window and the progress bar.

    The bar is redrawn from this thread, and only while the window is not recording (after
    each warm-up step and after the last step): rich's own refresh thread would run Python
    inside the profiled steps, where the profiler's Python tracer records it and it competes
    with the loop for the GIL.
    """
    total = opts.warmup + opts.profile_steps
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, auto_refresh=False) as bar:
        task = bar.add_task("warm-up" if opts.warmup else "profiling", total=total)
        bar.refresh()
        last = time.perf_counter_ns()

        def on_step(index: int, _latents) -> None:
            nonlocal last
            m.step_wall_ns.append(time.perf_counter_ns() - last)
            done = index + 1
            bar.update(task, completed=done, description="warm-up" if done < opts.warmup else "profiling")
            if index < opts.warmup:
                bar.refresh()
            window.after_step(index)
            if done == total:
                bar.refresh()
            last = time.perf_counter_ns()

        window.start()
        try:
            return denoise(
                dit,
                latents,
                cond,
                uncond,
                sampler,
                guidance,
                opts.cfg,
                start=0,
                stop=total,
                on_step=on_step,
                parallel=parallel,
            )
        finally:
            window.stop()
