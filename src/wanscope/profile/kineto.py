"""One profile run in this process under torch.profiler: the window, the stages, the run object.

Under ``--parallel`` (``torchrun``) each rank runs ``profile_here`` with its context and writes
its own ``trace-rank{r}.json.gz``; torch.profiler stores ``distributedInfo`` (backend, rank,
world size) in each, which is where wanscope's Kineto ingest reads the rank from.
``profile_ranks`` wraps that: the process group, the per-rank runs, a barrier once every trace
is written, and rank 0 gets the list of all of them.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from wanscope.parallel.group import ParallelContext, setup_from_env
from wanscope.profile import driver
from wanscope.profile.options import ProfileOptions
from wanscope.profile.run_info import run_object, static_info
from wanscope.profile.window import KinetoWindow

CAPTURE = "torch.profiler"


def trace_name(rank: int | None) -> str:
    """``trace.json.gz`` for a single process, ``trace-rank{rank}.json.gz`` for a rank."""
    return "trace.json.gz" if rank is None else f"trace-rank{rank}.json.gz"


def profile_here(
    opts: ProfileOptions, out_dir: Path, parallel: ParallelContext | None = None
) -> tuple[list[Path], dict]:
    """Run the stages with the profiled steps traced into ``out_dir``/``trace_name(rank)``.

    Returns:
        ([this process's trace], the ``run`` object).
    """
    trace = out_dir / trace_name(None if parallel is None else parallel.rank)
    window = KinetoWindow(
        trace, opts.warmup, opts.profile_steps, opts.device == "cuda", static_info(opts, CAPTURE, parallel)
    )
    m = driver.run(opts, window, parallel=parallel)
    return [trace], run_object(opts, CAPTURE, m, parallel)


def profile_ranks(opts: ProfileOptions, out_dir: Path, mode: str, timeout_s: float) -> tuple[list[Path], dict] | None:
    """This rank's part of a ``--parallel`` profile launched by ``torchrun``.

    Args:
        mode: ``cfg``, ``ulysses`` or ``cfg+ulysses``.
        timeout_s: seconds any rank may wait for the others (``--dist-timeout``).

    Returns:
        On rank 0, (every rank's trace in rank order, rank 0's ``run`` object), once every
        rank has written its trace; None on the other ranks.

    Raises:
        UsageError: not launched by torchrun, a world size the mode cannot use, heads that do
            not split (``setup_from_env``).
        ParallelError: ranks started with different options, a rank died, or a wait timed out.
    """
    with setup_from_env(mode, opts.device, timeout_s) as ctx:  # heads: checked by resolve_engine
        ctx.agree(**{**asdict(opts), "checkpoint": str(opts.checkpoint)}, out=str(out_dir))
        _, run = profile_here(opts, out_dir, ctx)
        ctx.barrier("writing the rank traces")
    if not ctx.is_main:
        return None
    return [out_dir / trace_name(r) for r in range(ctx.world_size)], run
