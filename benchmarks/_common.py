"""Timing and output helpers shared by the benchmark scripts (``dit_forward.py``,
``fast_mode.py``, ``kernels_bench.py``). Imported after each script has set its environment
(compile caches) and put ``src`` on the path."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_ms(fn, device: torch.device, warmup: int, repeats: int) -> tuple[list[float], object]:
    """Per-call times in ms of ``repeats`` calls after ``warmup`` calls (CUDA events on the GPU,
    perf_counter on the CPU), and the last call's result."""
    out = None
    for _ in range(warmup):
        out = fn()
    sync(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            times.append((start, end))
        else:
            t0 = time.perf_counter()
            out = fn()
            times.append((time.perf_counter() - t0) * 1e3)
    sync(device)
    if device.type == "cuda":
        times = [s.elapsed_time(e) for s, e in times]
    return times, out


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64."""
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def version(module: str) -> str | None:
    """``module.__version__``, or None where it is not installed."""
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def write_result(out_dir: Path, name: str, result: dict) -> Path:
    """``result`` as ``out_dir/<name>-<date>[-smoke].json``, written through a temporary name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}-{result['date']}{'-smoke' if result['smoke'] else ''}.json"
    tmp = out_dir / f".{path.name}.partial"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)
    return path
