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
from wanscope.profile import options as defaults
from wanscope.profile.command import ENGINE_ONLY, STEP_RULES, Window
from wanscope.wan import cli_options as opt
from wanscope.wan.options import RANDOM_NOTE, engine_allocator, require_engine


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


@click.command(context_settings={"allow_interspersed_args": False})
@opt.preset_option()
@opt.checkpoint_option()
@opt.random_weights_option(default_without_checkpoint=True)
@opt.size_option()
@opt.frames_option()
@opt.steps_option()
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
@opt.attention_option()
@opt.cfg_option()
@opt.kernels_option()
@opt.mode_option()
@opt.fast_option()
@opt.legacy_step_lookup_option()
@opt.memory_budget_option()
@click.option(
    "--nsys",
    is_flag=True,
    help="Capture with Nsight Systems instead of torch.profiler (needs CUDA; a COMMAND runs again under it).",
)
@click.option(
    "--ncu",
    metavar="attention|REGEX",
    help="Also run Nsight Compute and diagnose the kernel: our engine's self-attention kernel (attention), "
    "or with a COMMAND, run again, the first launch in the profiled steps of a kernel whose demangled name "
    "matches REGEX.",
)
@click.option(
    "--compare-compile",
    is_flag=True,
    help="Profile the same steps eager and compiled (into eager/ and compiled/), then diff them.",
)
@opt.parallel_option()
@opt.dist_timeout_option()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=defaults.OUT_DIR,
    show_default=True,
    help="Folder for the trace, report.json and report.html.",
)
@click.option(
    "--step-rule",
    type=click.Choice(STEP_RULES),
    default="auto",
    show_default=True,
    help="With a COMMAND: how its steps are found. marker: its wanscope.step() calls or wanscope/step#k "
    "ranges; diffusers: a diffusers pipeline's denoising steps; optimizer: torch.optim.Optimizer.step "
    "calls; auto: the first of these to see a step; none: no steps, the time window of --delay and "
    "--duration (default: the whole run).",
)
@click.option(
    "--delay",
    type=float,
    metavar="SECONDS",
    help="With a COMMAND and --step-rule none: start the window this long after the program starts.",
)
@click.option(
    "--duration",
    type=float,
    metavar="SECONDS",
    help="With a COMMAND and --step-rule none: the window's length (default: to the program's end).",
)
@click.option("--memory", is_flag=True, help="With a COMMAND: record PyTorch's memory events too.")
@click.option(
    "--memory-history",
    is_flag=True,
    help="Record the CUDA allocator's history (from the start of the run, or of the program's CUDA use) and "
    "write memory_snapshot.pickle at the end or at an out-of-memory error; prints `wanscope memory` of it.",
)
@click.option("--child", type=click.Choice(["nsys", "ncu"]), hidden=True)
@click.option("--run-info", type=click.Path(dir_okay=False, path_type=Path), hidden=True)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def profile(
    ctx,
    warmup,
    profile_steps,
    compile_,
    fast_spec,
    nsys,
    ncu,
    compare_compile,
    out_dir,
    step_rule,
    delay,
    duration,
    memory,
    memory_history,
    command,
    child,
    run_info,
    **engine,
):
    """Profile Wan2.1 denoising steps, or any PyTorch program (COMMAND), and report what limits them.

    With a COMMAND (`wanscope profile [OPTIONS] -- python train.py ...`, `python -m pkg`, or a
    script whose #! line runs a Python with torch; wanscope need not be installed there): the
    program runs unmodified, torch.profiler records steps --warmup .. --warmup + --profile-steps - 1
    as --step-rule finds them, and the same files are written. It runs once per capture, with
    its side effects.

    Runs --warmup denoising steps of the real --steps schedule, profiles the next
    --profile-steps with torch.profiler (CPU and CUDA activities, shapes, stacks), decodes
    with the VAE (for its peak memory), and writes trace.json.gz, report.json (the analyze
    JSON plus a run object) and report.html into --out, then prints the summary. With no
    argument: the 1.3B model at 832x480x81 on a GPU, the tiny preset on a CPU. With --parallel
    under torchrun: trace-rank{r}.json.gz per rank, one report of all ranks from rank 0.
    """
    if command:
        given = [f"--{name.rstrip('_').replace('_', '-')}" for name in ENGINE_ONLY if _given(ctx, name)]
        window = Window(warmup, profile_steps, step_rule, memory, delay, duration, memory_history)
        profile_command(list(command), out_dir, window, given, nsys, ncu)
        return
    extra = [name for name in ("step_rule", "delay", "duration", "memory") if _given(ctx, name)]
    if extra:
        raise UsageError(f"--{extra[0].replace('_', '-')} applies to a COMMAND (wanscope profile [OPTIONS] -- COMMAND)")
    if ncu is not None and ncu != "attention":
        raise UsageError(f"--ncu {ncu!r}: our engine's run takes --ncu attention; a kernel regex goes with a COMMAND")
    require_engine("profile")
    engine_allocator()
    import torch

    from wanscope.profile.options import resolve

    cuda = torch.cuda.is_available()
    dist_timeout = engine.pop("dist_timeout")  # the ranks' setup's, not the resolved options'
    parallel = engine["parallel"]
    if parallel and (nsys or ncu or compare_compile):
        raise UsageError(
            f"--parallel captures each rank with torch.profiler: not with "
            f"--{'nsys' if nsys else 'ncu' if ncu else 'compare-compile'}"
        )
    opts = resolve(
        torch.cuda.device_count(),
        warmup=warmup,
        profile_steps=profile_steps,
        compile=compile_,
        fast=fast_spec,
        **engine,
    )
    if child:
        run_child(opts, child, run_info)
        return
    if compare_compile:
        from wanscope.profile.compare import check

        if compile_ or nsys or ncu:
            raise UsageError(
                "--compare-compile runs eager and compiled under torch.profiler: not with --compile, --nsys or --ncu"
            )
        check(opts)
    if (nsys or ncu) and not cuda:
        raise UsageError(f"--{'nsys' if nsys else 'ncu'} needs a CUDA GPU; this machine has none")
    if memory_history:
        _check_memory_history(cuda, nsys, compare_compile, parallel)
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

    prepare_out_dir(out_dir, ("trace.json.gz", "report.json", "report.html", SNAPSHOT))
    main = parallel is None or os.environ.get("RANK") == "0"
    if opts.random_weights and main:
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
        traces, run = _profile_here(opts, out_dir, memory_history)
    memory_doc = _memory_doc(out_dir / SNAPSHOT) if memory_history else None
    result = build_report(traces, run, out_dir, memory_doc)
    files = [*traces, out_dir / "report.json", out_dir / "report.html"]
    if nsys_exe:
        files.insert(0, out_dir / "trace.nsys-rep")
    if memory_doc is not None:
        files.append(out_dir / SNAPSHOT)
    render(result, files, memory=memory_doc)
    if ncu:
        _capture_ncu(opts, out_dir, result)


SNAPSHOT = "memory_snapshot.pickle"  # wanscope.memory.record.SNAPSHOT_NAME (which imports torch)


def _check_memory_history(cuda: bool, nsys: bool, compare_compile: bool, parallel) -> None:
    """Refuse ``--memory-history`` where it cannot record: without CUDA (it is the CUDA caching
    allocator's history), or with the captures that run the engine elsewhere."""
    if not cuda:
        raise UsageError(
            "--memory-history records the CUDA caching allocator's history: it needs a CUDA GPU; this machine has none"
        )
    other = "--nsys" if nsys else "--compare-compile" if compare_compile else "--parallel" if parallel else None
    if other:
        raise UsageError(f"--memory-history records in the torch.profiler run of this process: not with {other}")


def _profile_here(opts, out_dir: Path, memory_history: bool) -> tuple[list[Path], dict]:
    """``profile_here``, under the allocator's recording with ``memory_history``. An
    out-of-memory error becomes one line; with ``memory_history`` its snapshot is written and
    summarized first."""
    import contextlib

    import torch

    from wanscope.profile.kineto import profile_here

    recording = contextlib.nullcontext()
    if memory_history:
        from wanscope.memory.record import recorded

        recording = recorded(out_dir / SNAPSHOT)
    try:
        with recording:
            return profile_here(opts, out_dir)
    except torch.cuda.OutOfMemoryError as e:
        raise _out_of_memory(e, out_dir / SNAPSHOT if memory_history else None) from None


def _out_of_memory(e: Exception, snapshot: Path | None) -> UsageError:
    """The one line for an out-of-memory error of our engine's run, after the summary of its
    snapshot (where one was recorded)."""
    what = str(e).split(". GPU ")[0].splitlines()[0][:200] if str(e) else "CUDA out of memory"
    if snapshot is None:
        return UsageError(f"{what}; --memory-history records what held the memory")
    from wanscope.clitools import console
    from wanscope.memory.text import render_memory

    doc = _memory_doc(snapshot)
    if doc is not None:
        render_memory(doc, console())
    return UsageError(f"{what}; the allocator's history is in {snapshot} (wanscope memory {snapshot})")


def _memory_doc(snapshot: Path) -> dict | None:
    """``wanscope memory`` of a snapshot just written, or None (with a line saying why) where it
    cannot be read."""
    from wanscope.errors import InputError
    from wanscope.memory.cli import snapshot_doc

    try:
        return snapshot_doc(snapshot)
    except InputError as e:
        click.echo(f"wanscope: the memory snapshot could not be read: {e}", err=True)
        return None


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
    from wanscope.profile.ncu import capture_attention

    child = child_argv(opts.with_steps(0, 1), out_dir, "ncu")
    _add_ncu(result, out_dir, *capture_attention(child, opts.attention, out_dir))


def _add_ncu(result: dict, out_dir: Path, files, diagnoses) -> None:
    """An ncu capture's diagnoses into report.json as ``ncu``, and on the terminal."""
    from wanscope.clitools import dumps_json
    from wanscope.ncu.cli import emit
    from wanscope.report.write import write_atomic

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


def _render_memory(docs: list[dict]) -> None:
    from wanscope.clitools import console
    from wanscope.memory.text import render_memory

    for doc in docs:
        render_memory(doc, console())


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE


def profile_command(argv, out_dir: Path, window, given, nsys: bool, ncu) -> None:
    """``wanscope profile -- COMMAND``: run the program under our bootstrap (under Nsight Systems
    with ``nsys``), then analyze and report its trace; with ``ncu`` (a kernel regex), run it again
    under Nsight Compute and add the kernel's diagnosis. Exits with the program's status where it
    failed."""
    from wanscope.profile import command as cmd
    from wanscope.profile.result import build_report, render
    from wanscope.report.write import prepare_out_dir

    cmd.check_command(argv, given, window, ncu)
    nsys_exe = None
    if nsys:
        from wanscope.profile.nsys import find_nsys

        nsys_exe = find_nsys()
    if ncu:
        from wanscope.ncu.capture import find_ncu

        find_ncu()
    prepare_out_dir(out_dir, ("trace.json.gz", "trace.sqlite", "report.json", "report.html", SNAPSHOT))
    if nsys_exe:
        result = cmd.nsys_run(nsys_exe, argv, out_dir, window)
    else:
        result = cmd.run_command(argv, out_dir, window)
    if any(r.get("error") == cmd.OWN_PROFILER for r in result.records):
        raise cmd.own_profiler_error(argv)
    status = cmd.exit_status(result.exit_code)
    memory_docs = [d for d in map(_memory_doc, result.snapshots) if d is not None]
    if window.memory_history and not result.snapshots:
        click.echo(
            f"wanscope: --memory-history: {argv[0]} started no CUDA device, so there is no allocator history "
            "to write (it is the CUDA caching allocator's)",
            err=True,
        )
    if not result.traces:
        _render_memory(memory_docs)
        why = cmd.no_trace_reason(result, window, status)
        click.echo(f"wanscope: error: {argv[0]} left no trace to analyze: {why}", err=True)
        sys.exit(status or 2)
    if status:
        click.echo(f"wanscope: {argv[0]} exited with status {status}; analyzing what was captured", err=True)
    run = cmd.run_object(argv, result, window, "nsys" if nsys_exe else "torch.profiler")
    report = build_report(result.traces, run, out_dir, memory_docs[0] if memory_docs else None)
    files = [*result.traces, out_dir / "report.json", out_dir / "report.html"]
    if nsys_exe:
        files.insert(0, out_dir / "trace.nsys-rep")
    _render_memory(memory_docs[1:])
    render(report, [*files, *result.snapshots], memory=memory_docs[0] if memory_docs else None)
    if ncu:
        _add_ncu(report, out_dir, *cmd.ncu_run(ncu, argv, out_dir, window))
    if status:
        sys.exit(status)
