"""Peak device memory and speed of ``wanscope generate`` under ``--memory-budget`` (issue 25).

For each model (``--models``: 1.3B at 832x480x81, 14B at 1280x720x81) the benchmark writes a
checkpoint of the real sizes with random values (``write_checkpoint.py``; the 1.3B set in each
``--layouts``, the 14B in the official one; one set at a time, deleted after), then runs
``generate`` on it uncapped and at each budget, each in a fresh process (``--child``) that:

- reads the device memory in use before CUDA starts (NVML through ``nvidia-smi``) and after
  the CUDA context is created (the context's own memory);
- enforces the budget with ``torch.cuda.set_per_process_memory_fraction`` set to the budget
  minus that context, so a plan that overshoots fails with an out-of-memory error;
- polls NVML every 20 ms while ``generate --memory-budget B`` runs in the process;
- reports ``peak_gib`` (NVML in use at its peak minus before CUDA started), the same per stage
  (``stage_peak_gib``: each stage's window, from the pipeline's stage timer) and the process's
  resident memory per stage (``stage_host_gib``, ``/proc/self/statm`` read with each NVML
  sample), the sidecar's
  ``max_memory_allocated`` and ``max_memory_reserved`` per stage, the plan, the median steady step (``step_s``: the steps
  after the first), the loads (``load_s``: the three models' load stages) and its own peak
  RSS (``host_peak_gib``).

The weights are random (labelled so in every output); the timings and memory are a
checkpoint's.

    python benchmarks/memory.py --out benchmarks/results --steps 3
    python benchmarks/memory.py --models 1.3b --budgets 8,12 --layouts official --out /tmp/r
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

from _common import git_commit, version, write_result

GIB = 1 << 30
PROMPT = "A cat walks on the grass, realistic, daytime"
MODELS = {  # name: (preset, size, default budgets in GiB)
    "1.3b": ("wan2.1-t2v-1.3b", "832x480", (8, 12, 16, 24)),
    "14b": ("wan2.1-t2v-14b", "1280x720", (24, 48)),
}


def nvml_used(index: int = 0) -> int:
    """Device memory in use (bytes), all processes, as NVML reports it."""
    out = subprocess.run(
        ["nvidia-smi", f"--id={index}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.split()[0]) << 20  # MiB


def child(spec: dict) -> dict:
    """One ``generate`` in this process under ``spec["budget_gib"]`` (None: uncapped)."""
    before = nvml_used()
    from wanscope.wan.options import engine_allocator

    engine_allocator()  # as the command sets it, before this process starts CUDA
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")
    context = nvml_used() - before
    total = torch.cuda.get_device_properties(0).total_memory
    budget = spec["budget_gib"]
    if budget is not None:
        torch.cuda.set_per_process_memory_fraction(max(budget * GIB - context, 0) / total)
    done = threading.Event()
    samples, windows = [], []

    def poll():
        while not done.is_set():
            rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            samples.append((time.perf_counter(), nvml_used(), rss))
            time.sleep(0.02)

    from wanscope.wan import timing

    timed = timing.StageTimes.__call__

    @contextlib.contextmanager
    def windowed(self, name):  # each stage's window, for its NVML peak
        start = time.perf_counter()
        try:
            with timed(self, name):
                yield
        finally:  # the stage that fails too
            windows.append((name, start, time.perf_counter()))

    timing.StageTimes.__call__ = windowed
    sampler = threading.Thread(target=poll, daemon=True)
    sampler.start()
    from wanscope.cli import main

    argv = ["generate", "--preset", spec["preset"], "--checkpoint", spec["checkpoint"], "--prompt", PROMPT]
    argv += ["--size", spec["size"], "--frames", "81", "--steps", str(spec["steps"]), "--mode", spec["mode"]]
    argv += ["--out", spec["video"]] + ([] if budget is None else ["--memory-budget", str(budget)])
    error = None
    started = time.perf_counter()
    try:
        main(argv)
    except SystemExit as e:
        if e.code:
            error = f"exit {e.code}"
    except torch.cuda.OutOfMemoryError as e:
        error = f"out of memory: {str(e).splitlines()[0]}"
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    stage_peak = {
        name: round((max((u for t, u, _ in samples if a <= t <= b), default=before) - before) / GIB, 3)
        for name, a, b in windows
    }
    stage_host = {
        name: round(max((r for t, _, r in samples if a <= t <= b), default=0) / GIB, 3) for name, a, b in windows
    }
    result = {
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        # since the pipeline's last per-stage reset: the failing stage's where the run failed
        "last_stage_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 3),
        "context_gib": round(context / GIB, 3),
        "peak_gib": round((max(u for _, u, _ in samples) - before) / GIB, 3),
        "stage_peak_gib": stage_peak,
        "stage_host_gib": stage_host,
        "host_peak_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 3),
        "wall_s": round(wall, 3),
        "error": error,
    }
    side = Path(spec["video"]).with_suffix(".json")
    if error is None and side.is_file():
        info = json.loads(side.read_text())
        steps, stages = info["step_s"], info["stage_s"]
        result.update(
            plan=info.get("memory_plan"),
            allocated_gib={k: None if v is None else round(v / GIB, 3) for k, v in info["peak_memory_bytes"].items()},
            reserved_gib={k: None if v is None else round(v / GIB, 3) for k, v in info["peak_reserved_bytes"].items()},
            step_s=round(statistics.median(steps[1:] or steps), 4),
            first_step_s=steps[0],
            load_s=round(sum(stages[k] for k in ("text_encoder_load", "dit_load", "vae_load")), 3),
            stage_s=stages,
        )
    return result


def run_child(spec: dict) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, env=dict(os.environ)
    )
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"error": f"child failed ({r.returncode}): {r.stderr[-1500:]}"}
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--models", default="1.3b,14b")
    p.add_argument("--budgets", help="GiB, comma-separated (default: the model's)")
    p.add_argument("--layouts", default="official,diffusers", help="the 1.3B set's layouts")
    p.add_argument("--modes", default="exact")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--workdir", type=Path, help="where the checkpoints are written (default: a temp folder)")
    p.add_argument("--label")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if not args.child and args.out is None:
        p.error("the following arguments are required: --out")
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return
    import torch
    from write_checkpoint import write

    from wanscope.wan.config import get_preset

    cases = []
    work = Path(tempfile.mkdtemp(prefix="wanscope-memory-", dir=args.workdir))
    try:
        for model in args.models.split(","):
            preset, size, budgets = MODELS[model]
            if args.budgets:
                budgets = tuple(float(b) for b in args.budgets.split(","))
            for layout in args.layouts.split(",") if model == "1.3b" else ("official",):
                folder = work / f"{model}-{layout}"
                started = time.perf_counter()
                write(get_preset(preset), layout, folder, torch.device("cuda"))
                torch.cuda.empty_cache()
                written = round(time.perf_counter() - started, 1)
                for mode in args.modes.split(","):
                    uncapped = None
                    for budget in (None, *budgets):
                        spec = {
                            "preset": preset,
                            "checkpoint": str(folder),
                            "size": size,
                            "steps": args.steps,
                            "mode": mode,
                            "budget_gib": budget,
                            "video": str(work / f"{model}-{layout}-{mode}-{budget}.mp4"),
                        }
                        case = {"model": model, "layout": layout, "mode": mode, "size": size, "budget_gib": budget}
                        case.update(run_child(spec), checkpoint_write_s=written)
                        if budget is None:
                            uncapped = case.get("step_s")
                        case["uncapped_step_s"] = uncapped
                        if uncapped and case.get("step_s"):
                            case["step_ratio"] = round(case["step_s"] / uncapped, 3)
                        print(json.dumps(case), flush=True)
                        cases.append(case)
                        write_result(args.out, "memory", result(args, cases), args.label)  # so far
                shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(write_result(args.out, "memory", result(args, cases), args.label))


def result(args, cases: list) -> dict:
    import torch

    return {
        "benchmark": "memory",
        "date": datetime.date.today().isoformat(),
        "commit": os.environ.get("WANSCOPE_COMMIT") or git_commit(),
        "weights": "random values in checkpoint files of the real sizes (write_checkpoint.py)",
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": version("triton"),
        "steps": args.steps,
        "frames": 81,
        "cases": cases,
    }


if __name__ == "__main__":
    main()
