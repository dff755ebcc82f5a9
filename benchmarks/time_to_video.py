"""Time to video: the whole ``wanscope generate`` command in a fresh process, stage by stage
(issue 26).

Each case runs ``python -m wanscope generate`` as a user would, in a new process with the
source tree named by ``--src`` on ``PYTHONPATH``, and is timed from the process's start to its
exit (``wall_s``). The sidecar the command writes gives the rest: the wall time of each stage
(``stage_s``: loading each model, text encoding, denoising, the VAE decode, the video write),
each denoising step (``step_s``, CUDA events) and the peak memory per stage. What is not the
steady steps (``outside_steady_s`` = ``wall_s`` - the steps after the first) is what the
levers of issue 26 reduce. Mode ``diffusers`` times diffusers' ``WanPipeline`` the same way,
from the same weights in the diffusers layout (``diffusers_child``): the anchor. Python's
bytecode is cached for every run, as an installed package's is (``bytecode_cache``).

Per source tree and mode, a cold run (fresh ``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR`` and
``CUDA_CACHE_PATH``: every kernel compiles) comes first, then a warm run on those caches. With
``--checkpoint`` and ``--cold-disk`` the files are evicted from the page cache
(``posix_fadvise(DONTNEED)``) before the cold-cache run and before a third run on warm caches,
so that warm and cold disks are both reported (``benchmarks/write_checkpoint.py`` writes a
folder of the real sizes, either layout, with random values). Without one, the models are
random (``--random-weights``) and every output says so.

    python benchmarks/time_to_video.py --out benchmarks/results                     # 1.3B 480p, 50 steps
    python benchmarks/time_to_video.py --src base=/tmp/base/src --src this=src --steps 8 --out /tmp/r
    python benchmarks/time_to_video.py --smoke --out /tmp/r                          # tiny preset, CPU
    python benchmarks/time_to_video.py --checkpoint OFFICIAL --diffusers-checkpoint DIFFUSERS \
        --modes exact,fast,diffusers --cold-disk --out /tmp/r                          # with the anchor
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
DIFFUSERS = "diffusers"  # the anchor's name in --modes
# Imported once into the bytecode cache before the runs (bytecode_cache)
PREWARM = (
    "torch triton numpy safetensors.torch tokenizers imageio_ffmpeg PIL.Image wanscope.cli wanscope.wan.pipeline "
    "wanscope.wan.video wanscope.wan.warm_start wanscope.kernels wanscope.kernels.attention_hopper wanscope.kernels._attention_hopper_gluon"
)
PREWARM_DIFFUSERS = (  # what the anchor imports (diffusers' pipeline modules load lazily)
    "diffusers diffusers.pipelines.wan.pipeline_wan diffusers.models.autoencoders.autoencoder_kl_wan "
    "diffusers.models.transformers.transformer_wan diffusers.utils.export_utils transformers.models.umt5.modeling_umt5"
)


def bytecode_cache(src: Path, folder: Path, modules: str = PREWARM) -> dict:
    """The environment of a run whose Python bytecode is cached as an installed package's is.

    ``pip install`` compiles a package's bytecode at install time, so no user run compiles
    it; a Python that may not write its caches (``PYTHONDONTWRITEBYTECODE``, a read-only
    site-packages, as on some machines) compiles every module it imports at every start,
    seconds per process. So every run writes and reads its bytecode under ``folder``
    (``PYTHONPYCACHEPREFIX``), filled once here by importing ``modules`` (those a run
    imports); the cold-cache runs are cold in Triton's, Inductor's and CUDA's caches only."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONPYCACHEPREFIX=str(folder))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        pass"
    subprocess.run([sys.executable, "-c", code, *modules.split()], env=env, capture_output=True, check=True)
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
    folder = args.diffusers_checkpoint if mode == DIFFUSERS else args.checkpoint
    evicted = evict(folder) if cold_disk and folder else 0
    video = out / f"{mode}-{'cold' if cold_cache else 'warm'}-{'cold' if cold_disk else 'warm'}.mp4"
    if mode == DIFFUSERS:
        spec = {"folder": str(folder), "size": args.size, "frames": args.frames, "steps": args.steps}
        cmd = [sys.executable, __file__, "--diffusers-child", json.dumps({**spec, "video": str(video)})]
    else:
        cmd = [sys.executable, "-m", "wanscope", "generate", "--preset", args.preset, "--prompt", PROMPT]
        cmd += ["--checkpoint", str(folder)] if folder else ["--random-weights"]
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


def diffusers_child(spec: dict) -> None:
    """Diffusers' ``WanPipeline`` end to end, as its documentation loads Wan2.1 (the VAE in
    fp32, the rest in bf16), from the diffusers-layout folder ``spec["folder"]``: the same
    prompt, the official negative prompt, size, frames, steps, guidance 5.0 and the folder's
    scheduler (UniPC, flow shift of the preset); frames written with diffusers'
    ``export_to_video`` at 16 fps. Writes a sidecar beside the video as ``generate`` does:
    ``stage_s`` (``import``, ``load``, ``text_encoding`` and ``vae_decode`` timed around
    ``encode_prompt`` and ``vae.decode`` inside the call, ``denoising`` the rest of the call,
    ``video_write``), ``step_s`` (between ``callback_on_step_end`` calls, each after a device
    sync; the first from the end of text encoding) and ``elapsed_s`` (from the imports to the
    video's end)."""
    started = time.perf_counter()
    import torch
    from diffusers import AutoencoderKLWan, WanPipeline
    from diffusers.utils import export_to_video

    from wanscope.wan.config import OFFICIAL_NEGATIVE_PROMPT

    stages: dict[str, float] = {"import": time.perf_counter() - started}
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def sync() -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    t = sync()
    vae = AutoencoderKLWan.from_pretrained(spec["folder"], subfolder="vae", torch_dtype=torch.float32)
    pipe = WanPipeline.from_pretrained(spec["folder"], vae=vae, torch_dtype=torch.bfloat16).to(device)
    pipe.set_progress_bar_config(disable=True)
    stages["load"] = sync() - t
    marks: list[float] = []

    def timed(name, fn):
        def call(*a, **k):
            t0 = sync()
            out = fn(*a, **k)
            stages[name] = stages.get(name, 0.0) + sync() - t0
            if name == "text_encoding":
                marks.append(time.perf_counter())
            return out

        return call

    pipe.encode_prompt = timed("text_encoding", pipe.encode_prompt)
    pipe.vae.decode = timed("vae_decode", pipe.vae.decode)

    def on_step(_pipe, _i, _t, kwargs):
        marks.append(sync())
        return kwargs

    width, height = (int(v) for v in spec["size"].split("x"))
    t = sync()
    frames = pipe(
        PROMPT,
        negative_prompt=OFFICIAL_NEGATIVE_PROMPT,
        height=height,
        width=width,
        num_frames=spec["frames"],
        num_inference_steps=spec["steps"],
        guidance_scale=5.0,
        output_type="np",
        callback_on_step_end=on_step,
    ).frames[0]
    stages["denoising"] = sync() - t - stages["text_encoding"] - stages["vae_decode"]
    t = time.perf_counter()
    export_to_video(frames, spec["video"], fps=16)
    stages["video_write"] = time.perf_counter() - t
    side = {
        "elapsed_s": round(time.perf_counter() - started, 3),
        "stage_s": {k: round(v, 4) for k, v in stages.items()},
        "step_s": [round(b - a, 4) for a, b in zip(marks, marks[1:], strict=False)],
    }
    Path(spec["video"]).with_suffix(".json").write_text(json.dumps(side))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--diffusers-child":
        diffusers_child(json.loads(sys.argv[2]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", action="append", default=[], metavar="NAME=PATH", help="a source tree (default: this=src)")
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder (default: random weights)")
    p.add_argument("--preset", default="wan2.1-t2v-1.3b")
    p.add_argument("--size", default="832x480")
    p.add_argument("--frames", type=int, default=81)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--modes", default="exact,fast", help=f"ours (exact, fast) and {DIFFUSERS!r}, the anchor")
    p.add_argument(
        "--diffusers-checkpoint", type=Path, help=f"the same weights in the diffusers layout (for {DIFFUSERS!r})"
    )
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
        args.preset, args.size, args.frames, args.steps = "tiny", "64x64", 5, 2
        args.modes = "exact" + (f",{DIFFUSERS}" if args.diffusers_checkpoint else "")
    if DIFFUSERS in args.modes.split(",") and args.diffusers_checkpoint is None:
        p.error(f"--modes {DIFFUSERS} needs --diffusers-checkpoint")
    srcs = [s.split("=", 1) for s in args.src] or [["this", str(REPO / "src")]]
    runs = []
    with tempfile.TemporaryDirectory(prefix="ttv-") as tmp:
        for name, src in srcs:
            anchor = name == srcs[0][0] and DIFFUSERS in args.modes.split(",")
            modules = PREWARM + (" " + PREWARM_DIFFUSERS if anchor else "")
            env = bytecode_cache(Path(src).resolve(), Path(tmp) / f"pycache-{name}", modules)
            for mode in args.modes.split(","):
                if mode == DIFFUSERS and name != srcs[0][0]:
                    continue  # the anchor runs once
                caches = Path(tmp) / f"caches-{name}-{mode}"
                # cold caches (and a cold disk with --cold-disk), then warm caches on a warm disk,
                # then with --cold-disk warm caches on a cold disk
                for cold_cache, cold_disk in ((True, args.cold_disk), (False, False), (False, True))[
                    : 3 if args.cold_disk else 2
                ]:
                    out = Path(tmp) / f"out-{name}"
                    out.mkdir(exist_ok=True)
                    run = {"src": DIFFUSERS if mode == DIFFUSERS else name}
                    run.update(run_case(env, args, mode, caches, cold_cache, cold_disk, out))
                    print(json.dumps({k: v for k, v in run.items() if k != "step_s"}), flush=True)
                    runs.append(run)
                    write_result(args.out, "time_to_video", result(args, srcs, runs), args.label)  # so far
    print(write_result(args.out, "time_to_video", result(args, srcs, runs), args.label))


def result(args, srcs: list, runs: list) -> dict:
    import torch

    ours = set(args.modes.split(",")) - {DIFFUSERS}
    weights = str(args.checkpoint) if args.checkpoint else "random (--random-weights)" if ours else None
    return {
        "benchmark": "time_to_video",
        "date": datetime.date.today().isoformat(),
        "smoke": args.smoke,
        "commit": git_commit(),
        "weights": weights,
        "diffusers_weights": str(args.diffusers_checkpoint) if args.diffusers_checkpoint else None,
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
