"""``wanscope profile``: profile Wan2.1 denoising steps with one command and report what limits them.

Loaded lazily by the top-level group (torch is imported only when this command runs). The
hidden ``--child`` option is how ``--nsys`` and ``--ncu`` re-run the same profile under their
tool; it is not for users.

Under ``torchrun --nproc-per-node N -m wanscope profile ... --parallel MODE`` every rank runs
this command and writes its own ``trace-rank{r}.json.gz``; rank 0 then analyzes all of them
and alone writes the reports and prints.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import click

from wanscope.errors import UsageError
from wanscope.parallel.plan import DEFAULT_TIMEOUT_S, PARALLEL_MODES, check_cfg_parallel
from wanscope.profile import options as defaults
from wanscope.wan.config import CFG_BATCHED_MAX_TOKENS, CFG_MODES, PRESETS


def child_argv(opts, out_dir: Path, role: str, *extra: str) -> list[str]:
    """``python -m wanscope profile`` with ``opts`` in the hidden child ``role`` (nsys or ncu)."""
    return [
        sys.executable,
        "-m",
        "wanscope",
        "profile",
        *opts.cli_args(),
        "--out",
        str(out_dir),
        "--child",
        role,
        *extra,
    ]


@click.command()
@click.option(
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    default=None,
    help=f"Model and default sizes. Default: {defaults.CUDA_PRESET} with CUDA, {defaults.CPU_PRESET} without.",
)
@click.option(
    "--checkpoint", type=click.Path(path_type=Path), help="Wan2.1 checkpoint folder, official or diffusers layout."
)
@click.option(
    "--random-weights",
    is_flag=True,
    help="Random weights and a byte-level stand-in tokenizer (the default without --checkpoint).",
)
@click.option("--size", help="WIDTHxHEIGHT, multiples of 16. Default: the preset's (832x480; tiny 64x64).")
@click.option("--frames", type=int, help="4k+1 video frames. Default: the preset's (81; tiny 5).")
@click.option("--steps", type=int, help="Length of the sampling schedule. Default: the preset's (50; tiny 4).")
@click.option(
    "--warmup",
    type=int,
    default=defaults.WARMUP_STEPS,
    show_default=True,
    help="Denoising steps run before the profiled ones.",
)
@click.option(
    "--profile-steps",
    type=int,
    default=defaults.PROFILE_STEPS,
    show_default=True,
    help="Denoising steps profiled after the warm-up.",
)
@click.option("--compile", "compile_", is_flag=True, help="Regional torch.compile of the repeated DiT block.")
@click.option(
    "--attention",
    type=click.Choice(defaults.ATTENTION_CHOICES),
    default="auto",
    show_default=True,
    help="Attention backend, as for generate: auto runs our Gluon kernel (hopper) on sm_90 GPUs "
    "where it runs and sdpa (PyTorch picks) elsewhere.",
)
@click.option(
    "--cfg",
    type=click.Choice(CFG_MODES),
    default=None,
    help=f"Cond and uncond as two forwards or one B=2 forward. Default: auto, batched up to "
    f"{CFG_BATCHED_MAX_TOKENS:,} DiT tokens (tiny; 416x240x21), sequential above (832x480x81); "
    f"sequential under --parallel cfg.",
)
@click.option(
    "--kernels",
    type=click.Choice(defaults.KERNELS),
    default=None,
    help="DiT ops: the torch reference or the fused Triton kernels (wanscope.kernels). "
    "Default: torch; triton with --mode fast.",
)
@click.option(
    "--mode",
    type=click.Choice(["exact", "fast"]),
    default="exact",
    show_default=True,
    help="fast: profile the fast mode (FP8 GEMMs, INT8 Q K^T on our Hopper kernel), as generate --mode fast.",
)
@click.option(
    "--fast",
    "fast_spec",
    default=None,
    metavar="SPEC",
    help="With --mode fast: its config over the defaults (keys: linears, int8_attention, pv_fp8, "
    "exact_blocks, fast_accum).",
)
@click.option(
    "--legacy-step-lookup",
    is_flag=True,
    help="The sampler finds its step index with a device .item() (one host sync per step).",
)
@click.option("--nsys", is_flag=True, help="Capture with Nsight Systems instead of torch.profiler (needs CUDA).")
@click.option(
    "--ncu",
    type=click.Choice(["attention"]),
    help="Also run Nsight Compute on the self-attention kernel of the backend and diagnose it.",
)
@click.option(
    "--compare-compile",
    is_flag=True,
    help="Profile the same steps eager and compiled (into eager/ and compiled/), then diff them.",
)
@click.option(
    "--parallel",
    type=click.Choice(PARALLEL_MODES),
    help="Under torchrun: CFG branches on 2 ranks, Ulysses token shards on all, or both (2 x N/2); "
    "one trace per rank, rank 0 reports.",
)
@click.option(
    "--dist-timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="With --parallel: seconds any rank may wait for the others before failing.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=defaults.OUT_DIR,
    show_default=True,
    help="Folder for the trace, report.json and report.html.",
)
@click.option("--child", type=click.Choice(["nsys", "ncu"]), hidden=True)
@click.option("--run-info", type=click.Path(dir_okay=False, path_type=Path), hidden=True)
def profile(
    preset,
    checkpoint,
    random_weights,
    size,
    frames,
    steps,
    warmup,
    profile_steps,
    compile_,
    attention,
    cfg,
    kernels,
    mode,
    fast_spec,
    legacy_step_lookup,
    nsys,
    ncu,
    compare_compile,
    parallel,
    dist_timeout,
    out_dir,
    child,
    run_info,
):
    """Profile Wan2.1 denoising steps and report what limits them.

    Runs --warmup denoising steps of the real --steps schedule, profiles the next
    --profile-steps with torch.profiler (CPU and CUDA activities, shapes, stacks), decodes
    with the VAE (for its peak memory), and writes trace.json.gz, report.json (the analyze
    JSON plus a run object) and report.html into --out, then prints the summary. With no
    argument: the 1.3B model at 832x480x81 on a GPU, the tiny preset on a CPU. With --parallel
    under torchrun: trace-rank{r}.json.gz per rank, one report of all ranks from rank 0.
    """
    import torch

    from wanscope.profile.driver import request
    from wanscope.profile.options import resolve

    cuda = torch.cuda.is_available()
    opts = resolve(
        cuda,
        preset,
        checkpoint,
        random_weights,
        size,
        frames,
        steps,
        warmup,
        profile_steps,
        compile_,
        attention,
        cfg,
        legacy_step_lookup,
        kernels,
        parallel,
        mode,
        fast_spec,
    )
    cfg_model = PRESETS[opts.preset]
    request(opts).validate(cfg_model.vae.stride, cfg_model.dit.patch_size)
    dit_cfg = cfg_model.dit
    if checkpoint is not None:
        from wanscope.wan.weights import check_dit, detect_layout

        dit_cfg = check_dit(detect_layout(checkpoint).dit)  # a bad checkpoint fails before any model runs
    if opts.fast is not None:
        from wanscope.wan.precision import FastConfig

        FastConfig.parse(opts.fast).check_blocks(dit_cfg.num_layers)
    if child:
        run_child(opts, child, run_info)
        return
    if parallel:
        if nsys or ncu or compare_compile:
            raise UsageError(
                f"--parallel captures each rank with torch.profiler: not with "
                f"--{'nsys' if nsys else 'ncu' if ncu else 'compare-compile'}"
            )
        if parallel != "ulysses":
            check_cfg_parallel(request(opts).guidance, opts.cfg)  # before any rank waits for another
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UsageError(
            f"launched as {os.environ['WORLD_SIZE']} processes without --parallel; "
            f"give --parallel {'|'.join(PARALLEL_MODES)}"
        )
    if compare_compile:
        from wanscope.profile.compare import check

        if compile_ or nsys or ncu:
            raise UsageError(
                "--compare-compile runs eager and compiled under torch.profiler: not with --compile, --nsys or --ncu"
            )
        check(opts)
    if (nsys or ncu) and not cuda:
        raise UsageError(f"--{'nsys' if nsys else 'ncu'} needs a CUDA GPU; this machine has none")
    from wanscope.wan.attention import check_backend, parse_backend
    from wanscope.wan.pipeline import DTYPES

    check_backend(parse_backend(opts.attention), torch.device(opts.device), DTYPES[opts.dtype], cfg_model.dit.head_dim)
    nsys_exe = None
    if nsys:
        from wanscope.profile.nsys import find_nsys

        nsys_exe = find_nsys()
    if ncu:
        from wanscope.ncu.capture import find_ncu
        from wanscope.profile.ncu import kernel_regex

        find_ncu()
        kernel_regex(opts.attention)
    from wanscope.report.write import prepare_out_dir

    prepare_out_dir(out_dir, ("trace.json.gz", "report.json", "report.html"))
    main = parallel is None or os.environ.get("RANK") == "0"
    if opts.random_weights and main:
        from wanscope.wan.cli import RANDOM_NOTE

        click.echo(f"wanscope: {RANDOM_NOTE}", err=True)

    if compare_compile:
        from wanscope.profile.compare import compare_compile as profile_both
        from wanscope.profile.compare import compile_lines
        from wanscope.report.diff_text import render_diff

        result, files = profile_both(opts, out_dir)
        render_diff(result)
        for line in compile_lines(result):
            click.echo(line)
        click.echo("wrote " + ", ".join(str(f) for f in files))
        return

    from wanscope.profile.result import build_report, render

    if nsys_exe:
        traces, run = _capture_nsys(opts, nsys_exe, out_dir)
    elif parallel:
        from wanscope.profile.kineto import profile_ranks

        ranked = profile_ranks(opts, out_dir, parallel, dist_timeout)
        if ranked is None:  # not rank 0: its trace is written, rank 0 reports
            return
        traces, run = ranked
    else:
        from wanscope.profile.kineto import profile_here

        traces, run = profile_here(opts, out_dir)
    result = build_report(traces, run, out_dir)
    files = [*traces, out_dir / "report.json", out_dir / "report.html"]
    if nsys_exe:
        files.insert(0, out_dir / "trace.nsys-rep")
    render(result, files)
    if ncu:
        _capture_ncu(opts, out_dir, result)


def _capture_nsys(opts, nsys_exe: str, out_dir: Path) -> tuple[list[Path], dict]:
    from wanscope.profile import nsys

    fd, info = tempfile.mkstemp(prefix=".run-info-", suffix=".json", dir=out_dir)
    os.close(fd)
    try:
        _rep, sqlite = nsys.capture(nsys_exe, out_dir, child_argv(opts, out_dir, "nsys", "--run-info", info))
        run = json.loads(Path(info).read_text())
    finally:
        os.unlink(info)
    return [sqlite], run


def _capture_ncu(opts, out_dir: Path, result: dict) -> None:
    """Capture and diagnose the attention kernel; add it to report.json as ``ncu``."""
    from wanscope.clitools import dumps_json
    from wanscope.ncu.cli import emit
    from wanscope.profile.ncu import capture_attention
    from wanscope.report.write import write_atomic

    child = child_argv(opts.with_steps(0, 1), out_dir, "ncu")
    files, diagnoses = capture_attention(child, opts.attention, out_dir)
    result["ncu"] = {
        "report": str(files.report),
        "details_csv": str(files.details_csv),
        "raw_csv": str(files.raw_csv),
        "kernels": [d.to_json() for d in diagnoses],
    }
    write_atomic(out_dir / "report.json", dumps_json(result))
    emit(diagnoses, str(files.report), "table")
    click.echo(f"wrote {files.report}, {files.details_csv}, {files.raw_csv}; report.json has them under 'ncu'")


def run_child(opts, role: str, run_info: Path | None) -> None:
    """The profile inside nsys or ncu: the window is cudaProfilerStart/Stop, no torch.profiler.
    Under ncu (which profiles from the start by default, filtered by kernel name) only the DiT
    runs attention kernels and the VAE is skipped."""
    from wanscope.profile import driver
    from wanscope.profile.run_info import run_object
    from wanscope.profile.window import CudaProfilerWindow

    window = CudaProfilerWindow(opts.warmup, opts.profile_steps)
    if role == "ncu":
        driver.run(opts, window, decode=False, attention_only_in_dit=True)
        return
    m = driver.run(opts, window)
    if run_info is not None:
        run_info.write_text(json.dumps(run_object(opts, "nsys", m)))
