"""Time to video: the whole ``wanscope generate`` command in a fresh process, stage by stage
(issue 26).

Each case runs ``python -m wanscope generate`` as a user would, in a new process with the
source tree named by ``--src`` on ``PYTHONPATH``, and is timed from the process's start to its
exit (``wall_s``). The sidecar the command writes gives the rest: the wall time of each stage
(``stage_s``: loading each model, text encoding, denoising, the VAE decode, the video write),
each denoising step (``step_s``, CUDA events) and the peak memory per stage. What is not the
steady steps (``outside_steady_s`` = ``wall_s`` - the steps after the first) is what the
levers of issue 26 reduce. Python's bytecode is cached for every run, as an installed
package's is (``bytecode_cache``).

Per source tree and mode, a cold run (fresh ``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR`` and
``CUDA_CACHE_PATH``: every kernel compiles) comes first, then a warm run on those caches. With
``--checkpoint`` and ``--cold-disk`` the files are evicted from the page cache
(``posix_fadvise(DONTNEED)``) before the cold-cache run and before a third run on warm caches, so
that warm and cold disks are both reported (``benchmarks/write_checkpoint.py`` writes a folder of the real sizes,
either layout, with random values). Without one, the models are random (``--random-weights``)
and every output says so.

    python benchmarks/time_to_video.py --out benchmarks/results                     # 1.3B 480p, 50 steps
    python benchmarks/time_to_video.py --src base=/tmp/base/src --src this=src --steps 8 --out /tmp/r
    python benchmarks/time_to_video.py --smoke --out /tmp/r                          # tiny preset, CPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import git_commit, version, write_result

PROMPT = "A cat walks on the grass, realistic, daytime"
CACHE_VARS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH")
# Imported once into the bytecode cache before the runs (bytecode_cache)
PREWARM = (
    "torch triton numpy safetensors.torch tokenizers imageio_ffmpeg PIL.Image wanscope.cli wanscope.wan.pipeline "
    "wanscope.wan.video wanscope.kernels wanscope.kernels.attention_hopper wanscope.kernels._attention_hopper_gluon"
)


def bytecode_cache(src: Path, folder: Path) -> dict:
    """The environment of a run whose Python bytecode is cached as an installed package's is.

    ``pip install`` compiles a package's bytecode at install time, so no user run compiles
    it; a Python that may not write its caches (``PYTHONDONTWRITEBYTECODE``, a read-only
    site-packages, as on some machines) compiles every module it imports at every start,
    seconds per process. So every run writes and reads its bytecode under ``folder``
    (``PYTHONPYCACHEPREFIX``), filled once here by importing ``PREWARM`` (the modules a run
    imports); the cold-cache runs are cold in Triton's, Inductor's and CUDA's caches only."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONPYCACHEPREFIX=str(folder))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        pass"
    subprocess.run([sys.executable, "-c", code, *PREWARM.split()], env=env, capture_output=True, check=True)
    return env


def evict(root: Path) -> int:
    """Drop every file under ``root`` from the page cache; returns the bytes evicted."""
    total = 0
    for path in sorted(root.rglob("*")):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            total += path.stat().st_size
    return total


def run_case(env: dict, args, mode: str, caches: Path, cold_cache: bool, cold_disk: bool, out: Path) -> dict:
    """One ``generate`` in a fresh process (``env``: ``bytecode_cache``'s); its wall time and
    its sidecar's timings."""
    env = dict(env)
    for var in CACHE_VARS:
        env[var] = str(caches / var.lower())
    evicted = evict(args.checkpoint) if cold_disk and args.checkpoint else 0
    video = out / f"{mode}-{'cold' if cold_cache else 'warm'}.mp4"
    cmd = [sys.executable, "-m", "wanscope", "generate", "--preset", args.preset, "--prompt", PROMPT]
    cmd += ["--checkpoint", str(args.checkpoint)] if args.checkpoint else ["--random-weights"]
    cmd += ["--size", args.size, "--frames", str(args.frames), "--steps", str(args.steps), "--mode", mode]
    cmd += ["--out", str(video)] + (["--device", "cpu"] if args.smoke else [])
    started = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    side = json.loads(video.with_suffix(".json").read_text())
    steps = side.get("step_s") or []
    return {
        "mode": mode,
        "cold_cache": cold_cache,
        "cold_disk": cold_disk,
        "evicted_bytes": evicted,
        "wall_s": round(wall, 3),
        "elapsed_s": side.get("elapsed_s"),
        "stage_s": side.get("stage_s"),
        "first_step_s": steps[0] if steps else None,
        "steady_step_s": round(sorted(steps[1:])[len(steps[1:]) // 2], 4) if len(steps) > 1 else None,
        "steady_steps_s": round(sum(steps[1:]), 3) if steps else None,
        "outside_steady_s": round(wall - sum(steps[1:]), 3) if steps else None,
        "step_s": steps,
        "peak_memory_bytes": side.get("peak_memory_bytes"),
        "kernels_ran": side.get("kernels_ran"),
        "attention_ran": side.get("attention_ran"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", action="append", default=[], metavar="NAME=PATH", help="a source tree (default: this=src)")
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder (default: random weights)")
    p.add_argument("--preset", default="wan2.1-t2v-1.3b")
    p.add_argument("--size", default="832x480")
    p.add_argument("--frames", type=int, default=81)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--modes", default="exact,fast")
    p.add_argument(
        "--cold-disk",
        action="store_true",
        help="evict the checkpoint's files before the cold-cache run and a third, warm-cache run",
    )
    p.add_argument("--smoke", action="store_true", help="tiny preset on the CPU, exact mode, 2 steps")
    p.add_argument("--label")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if args.smoke:
        args.preset, args.size, args.frames, args.steps, args.modes = "tiny", "64x64", 5, 2, "exact"
    srcs = [s.split("=", 1) for s in args.src] or [["this", str(REPO / "src")]]
    runs = []
    with tempfile.TemporaryDirectory(prefix="ttv-") as tmp:
        for name, src in srcs:
            env = bytecode_cache(Path(src).resolve(), Path(tmp) / f"pycache-{name}")
            for mode in args.modes.split(","):
                caches = Path(tmp) / f"caches-{name}-{mode}"
                # cold caches (and a cold disk with --cold-disk), then warm caches on a warm disk,
                # then with --cold-disk warm caches on a cold disk
                for cold_cache, cold_disk in ((True, args.cold_disk), (False, False), (False, True))[
                    : 3 if args.cold_disk else 2
                ]:
                    out = Path(tmp) / f"out-{name}"
                    out.mkdir(exist_ok=True)
                    run = {"src": name, **run_case(env, args, mode, caches, cold_cache, cold_disk, out)}
                    print(json.dumps({k: v for k, v in run.items() if k != "step_s"}), flush=True)
                    runs.append(run)
                    write_result(args.out, "time_to_video", result(args, srcs, runs), args.label)  # so far
    print(write_result(args.out, "time_to_video", result(args, srcs, runs), args.label))


def result(args, srcs: list, runs: list) -> dict:
    import torch

    return {
        "benchmark": "time_to_video",
        "date": datetime.date.today().isoformat(),
        "smoke": args.smoke,
        "commit": git_commit(),
        "weights": str(args.checkpoint) if args.checkpoint else "random (--random-weights)",
        "preset": args.preset,
        "size": args.size,
        "frames": args.frames,
        "steps": args.steps,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "triton": version("triton"),
        "srcs": dict(srcs),
        "bytecode": "cached under PYTHONPYCACHEPREFIX, filled before the runs (bytecode_cache)",
        "runs": runs,
    }


if __name__ == "__main__":
    main()
