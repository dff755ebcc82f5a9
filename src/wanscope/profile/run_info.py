"""The ``run`` object of a profile's report.json: what ran, on what, and what it measured.

Fields (README, ``wanscope profile``): ``note`` (the random-weights warning or None),
``random_weights``, ``checkpoint``, ``preset``, ``dit`` (dim, layers, heads, FFN dim),
``height``, ``width``, ``frames``, ``tokens`` (DiT sequence length per forward),
``schedule_steps``, ``warmup_steps``, ``profiled_steps`` (schedule indices), ``solver``,
``guidance``, ``cfg``, ``attention``, ``compile``, ``legacy_step_lookup``, ``device``,
``dtype``, ``capture`` (torch.profiler or nsys), ``versions`` (python, torch, CUDA, cuDNN,
wanscope), ``gpu`` (name, compute capability, memory, count; None on the CPU),
``peak_memory_bytes`` and ``stage_wall_ns`` per stage (text_encoding, denoising, vae_decode),
``step_wall_ns`` (host time of every step run, index 0 first).
"""

from __future__ import annotations

import platform

import torch

import wanscope
from wanscope.profile.driver import Measurements, request
from wanscope.profile.options import ProfileOptions
from wanscope.wan.cli import RANDOM_NOTE


def versions() -> dict:
    """Python, torch, CUDA and cuDNN (None on a CPU build), and wanscope versions."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": cudnn, "wanscope": wanscope.__version__}


def gpu() -> dict | None:
    """The GPU that ran the profile (device 0), or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "compute_capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
            "memory_bytes": p.total_memory, "count": torch.cuda.device_count()}


def static_info(opts: ProfileOptions, capture: str) -> dict:
    """What is known before the run: the configuration and the machine."""
    req = request(opts)
    return {
        "note": RANDOM_NOTE if opts.random_weights else None,
        "random_weights": opts.random_weights,
        "checkpoint": None if opts.checkpoint is None else str(opts.checkpoint),
        "preset": opts.preset,
        "height": opts.height, "width": opts.width, "frames": opts.frames,
        "schedule_steps": opts.steps, "warmup_steps": opts.warmup, "profiled_steps": opts.profiled_steps,
        "solver": req.solver, "guidance": req.guidance, "cfg": opts.cfg, "attention": opts.attention,
        "kernels": opts.kernels,
        "compile": opts.compile, "legacy_step_lookup": opts.legacy_step_lookup,
        "device": opts.device, "dtype": opts.dtype, "capture": capture,
        "versions": versions(), "gpu": gpu(),
    }


def run_object(opts: ProfileOptions, capture: str, m: Measurements) -> dict:
    """The whole ``run`` object: ``static_info`` plus the measurements."""
    info = static_info(opts, capture)
    info.update({
        "dit": m.dit, "tokens": m.tokens,
        "peak_memory_bytes": m.peak_memory_bytes, "stage_wall_ns": m.stage_wall_ns,
        "step_wall_ns": m.step_wall_ns,
    })
    return info
