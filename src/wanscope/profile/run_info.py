"""The ``run`` object of a profile's report.json: what ran, on what, and what it measured.

Fields (docs/json.md, "profile JSON"): ``note`` (the random-weights warning or None),
``random_weights``, ``checkpoint``, ``preset``, ``dit`` (dim, layers, heads, FFN dim),
``height``, ``width``, ``frames``, ``tokens`` (DiT sequence length per forward),
``schedule_steps``, ``warmup_steps``, ``profiled_steps`` (schedule indices), ``solver``,
``guidance``, ``cfg`` (the mode that ran), ``cfg_auto`` (chosen by ``--cfg auto``),
``attention``, ``kernels``, ``compile``, ``legacy_step_lookup``, ``device``,
``dtype``, ``capture`` (torch.profiler or nsys), ``versions`` (python, torch, CUDA, cuDNN,
wanscope), ``gpu`` (name, compute capability, memory, count; None on the CPU),
``peak_memory_bytes`` and ``stage_wall_ns`` per stage (text_encoding, denoising, vae_decode),
``step_wall_ns`` (host time of every step run, index 0 first), ``memory_plan`` (where each
stage's model lived, ``wan/memory_plan.py``; None on the CPU without a budget); under ``--parallel`` also
``parallel`` (``parallel_info``), and the measurements are rank 0's.
"""

from __future__ import annotations

import platform

import torch

import wanscope
from wanscope.parallel.group import ParallelContext
from wanscope.profile.driver import Measurements, request
from wanscope.profile.options import ProfileOptions
from wanscope.wan.options import RANDOM_NOTE


def versions() -> dict:
    """Python, torch, CUDA and cuDNN (None on a CPU build), and wanscope versions."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "wanscope": wanscope.__version__,
    }


def gpu() -> dict | None:
    """The GPU that ran the profile (device 0), or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(0)
    return {
        "name": p.name,
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "memory_bytes": p.total_memory,
        "count": torch.cuda.device_count(),
    }


def parallel_info(ctx: ParallelContext) -> dict:
    """``mode``, ``world_size``, ``cfg_degree``, ``ulysses_degree``, ``rank`` (the rank whose
    run this is) and ``timeout_s`` (``--dist-timeout``, seconds)."""
    return {
        "mode": ctx.mode,
        "world_size": ctx.world_size,
        "cfg_degree": ctx.cfg_degree,
        "ulysses_degree": ctx.ulysses_degree,
        "rank": ctx.rank,
        "timeout_s": ctx.timeout_s,
    }


def static_info(opts: ProfileOptions, capture: str, parallel: ParallelContext | None = None) -> dict:
    """What is known before the run: the configuration and the machine (and, under
    ``--parallel``, the process group as ``parallel``)."""
    req = request(opts)
    info = {
        "note": RANDOM_NOTE if opts.random_weights else None,
        "random_weights": opts.random_weights,
        "checkpoint": None if opts.checkpoint is None else str(opts.checkpoint),
        "preset": opts.preset,
        "height": opts.height,
        "width": opts.width,
        "frames": opts.frames,
        "schedule_steps": opts.steps,
        "warmup_steps": opts.warmup,
        "profiled_steps": opts.profiled_steps,
        "solver": req.solver,
        "guidance": req.guidance,
        "cfg": opts.cfg,
        "cfg_auto": opts.cfg_auto,
        "attention": opts.attention,
        "kernels": opts.kernels,
        "mode": "exact" if opts.fast is None else "fast",
        "fast": opts.fast,
        "compile": opts.compile,
        "legacy_step_lookup": opts.legacy_step_lookup,
        "device": opts.device,
        "dtype": opts.dtype,
        "capture": capture,
        "versions": versions(),
        "gpu": gpu(),
    }
    if parallel is not None:
        info["parallel"] = parallel_info(parallel)
    return info


def run_object(opts: ProfileOptions, capture: str, m: Measurements, parallel: ParallelContext | None = None) -> dict:
    """The whole ``run`` object: ``static_info`` plus the measurements."""
    info = static_info(opts, capture, parallel)
    info.update(
        {
            "dit": m.dit,
            "tokens": m.tokens,
            "peak_memory_bytes": m.peak_memory_bytes,
            "stage_wall_ns": m.stage_wall_ns,
            "step_wall_ns": m.step_wall_ns,
            "memory_plan": m.memory_plan,
        }
    )
    return info
