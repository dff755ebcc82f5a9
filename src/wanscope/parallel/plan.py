"""The shape of a parallel run, without torch: modes, degrees, head checks, the timeout,
Ulysses' head groups and transport.

Imported by modules that must not import torch when loaded (``wan/options.py``, ``wan/cli_options.py``).
"""

from __future__ import annotations

import os

from wanscope.errors import UsageError

PARALLEL_MODES = ("cfg", "ulysses", "cfg+ulysses")
# Long enough for rank 0 to load and run the UMT5-XXL text encoder (11 GB of weights) while
# the other ranks wait for its broadcast; short enough that a lost rank is not a hang.
DEFAULT_TIMEOUT_S = 300.0
# Ulysses splits each rank's N/P heads into groups and pipelines them: the transfer of group
# g+1's inputs (and group g's output) runs while group g's attention does (parallel/ulysses.py);
# 1 group is the plain, unpipelined path. The count per transport (parallel/exchange.py),
# the fastest of benchmarks/multi_gpu.py's sweeps on 2x H200 (1.3B, 832x480x81, bf16): over
# NCCL 2 groups (more, smaller attention calls cost more than they hide, NCCL's kernels taking
# SMs from each; benchmarks/RESULTS.md, "2026-11-30: multi-GPU, Ulysses head-group sweep"); over
# copy engines 3, tied with 6 ("2026-11-30: multi-GPU, Ulysses over copy engines", 80be663).
DEFAULT_ULYSSES_HEAD_GROUPS = {"nccl": 2, "copy-engine": 3}
TRANSPORTS = ("nccl", "copy-engine")
TRANSPORT_ENV = "WANSCOPE_ULYSSES_TRANSPORT"


def ulysses_transport(device_type: str, local_world_size: int, ulysses_degree: int, peer_access: bool) -> str:
    """The transport of Ulysses' all-to-alls (``parallel/exchange.py``) when none is named.

    ``copy-engine`` on CUDA when every Ulysses group lies on one host (its ranks are
    consecutive, so when ``ulysses_degree`` divides ``local_world_size``, the ranks per host)
    and its GPUs can address each other's memory (``peer_access``): faster than NCCL on 2x H200
    (benchmarks/RESULTS.md, "2026-11-30: multi-GPU, Ulysses over copy engines"); ``nccl``
    otherwise (gloo on the CPU). The environment variable ``WANSCOPE_ULYSSES_TRANSPORT`` (one of
    ``TRANSPORTS``) overrides the choice.

    Raises:
        UsageError: the environment variable names no transport.
    """
    if os.environ.get(TRANSPORT_ENV):
        name = os.environ[TRANSPORT_ENV]
        if name not in TRANSPORTS:
            raise UsageError(f"{TRANSPORT_ENV}={name!r} is not a Ulysses transport; known: {', '.join(TRANSPORTS)}")
        return name
    if device_type == "cuda" and local_world_size % ulysses_degree == 0 and peer_access:
        return "copy-engine"
    return "nccl"


def degrees(mode: str, world_size: int) -> tuple[int, int]:
    """(cfg_degree, ulysses_degree) of ``mode`` on ``world_size`` ranks.

    ``cfg`` needs 2 ranks; ``ulysses`` uses every rank; ``cfg+ulysses`` splits an even world
    of at least 4 ranks into 2 CFG branches of ``world_size / 2`` Ulysses ranks.

    Raises:
        UsageError: unknown mode, or a world size the mode cannot use.
    """
    if mode == "cfg":
        if world_size != 2:
            raise UsageError(
                f"--parallel cfg runs on 2 processes (cond and uncond), got a world size of {world_size}; "
                f"use --parallel cfg+ulysses for more"
            )
        return 2, 1
    if mode == "ulysses":
        if world_size < 2:
            raise UsageError(f"--parallel ulysses needs at least 2 processes, got a world size of {world_size}")
        return 1, world_size
    if mode == "cfg+ulysses":
        if world_size < 4 or world_size % 2:
            raise UsageError(
                f"--parallel cfg+ulysses needs an even world size of at least 4 "
                f"(2 CFG branches x Ulysses), got {world_size}"
            )
        return 2, world_size // 2
    raise UsageError(f"unknown --parallel mode {mode!r}; known: {', '.join(PARALLEL_MODES)}")


def check_heads(num_heads: int, ulysses_degree: int, cfg_degree: int = 1) -> None:
    """Ulysses gives each rank ``num_heads / ulysses_degree`` whole heads.

    Raises:
        UsageError: the degree does not divide the heads; the message lists the degrees that
            do (and, with a CFG degree, the world sizes they make).
    """
    if num_heads % ulysses_degree == 0:
        return
    working = [d for d in range(2, num_heads + 1) if num_heads % d == 0]
    worlds = (
        f" (world sizes {', '.join(str(cfg_degree * d) for d in working)} with cfg+ulysses)" if cfg_degree > 1 else ""
    )
    raise UsageError(
        f"Ulysses degree {ulysses_degree} does not divide the model's {num_heads} attention heads; "
        f"degrees that work: {', '.join(map(str, working))}{worlds}"
    )


def check_cfg_parallel(guidance: float, cfg_mode: str) -> None:
    """CFG parallel needs two branches, each a B=1 forward on its own rank (``--cfg auto``
    resolves to ``sequential`` there: ``wan/config.py`` ``resolve_cfg``).

    Raises:
        UsageError: guidance <= 1 (only the cond branch runs) or ``--cfg batched``.
    """
    if guidance <= 1.0:
        raise UsageError(f"CFG parallel needs guidance > 1 (two branches), got {guidance:g}; use --parallel ulysses")
    if cfg_mode == "batched":
        raise UsageError(f"CFG parallel runs each branch on its own rank; --cfg {cfg_mode} does not apply")


def head_group_sizes(heads_per_rank: int, groups: int | tuple[int, ...]) -> list[int]:
    """Heads in each of the Ulysses pipeline's head groups, in order.

    Args:
        heads_per_rank: N/P, the heads each rank attends over.
        groups: a count G (``min(G, heads_per_rank)`` groups whose sizes differ by at most one,
            the larger ones first), or the sizes themselves (e.g. ``(1, 4, 1)``: a small first
            group shortens the wait for the first transfer, a small last one the wait for the
            last output).

    Raises:
        UsageError: a count below 1, or sizes that are not positive or do not add up to
            ``heads_per_rank``.
    """
    if isinstance(groups, int):
        if groups < 1:
            raise UsageError(f"Ulysses head groups must be at least 1, got {groups}")
        count = min(groups, heads_per_rank)
        base, extra = divmod(heads_per_rank, count)
        return [base + (i < extra) for i in range(count)]
    sizes = [int(n) for n in groups]
    if not sizes or min(sizes) < 1 or sum(sizes) != heads_per_rank:
        raise UsageError(
            f"Ulysses head group sizes {'+'.join(map(str, sizes)) or '(none)'} must be positive and add "
            f"up to the {heads_per_rank} heads each rank holds"
        )
    return sizes


def parse_head_groups(text: str) -> int | tuple[int, ...]:
    """``"3"`` -> 3 groups; ``"1+4+1"`` -> group sizes (1, 4, 1).

    Raises:
        UsageError: not a count or sizes joined by ``+``.
    """
    try:
        parts = tuple(int(part) for part in text.split("+"))
    except ValueError:
        raise UsageError(f"Ulysses head groups {text!r}: expected a count (3) or sizes joined by + (1+4+1)") from None
    return parts[0] if len(parts) == 1 else parts


LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def check_launcher(mode: str) -> None:
    """A ``--parallel`` run needs the environment ``torchrun`` sets, with numbers where numbers go.

    Raises:
        UsageError: a variable missing (not launched by torchrun) or not a number.
    """
    missing = [k for k in LAUNCHER_ENV if k not in os.environ]
    if missing:
        raise UsageError(
            f"--parallel {mode} needs a launcher: run it as `torchrun --nproc-per-node N -m wanscope ...` "
            f"({', '.join(missing)} not set)"
        )
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        if not os.environ[key].isdigit():
            raise UsageError(f"{key}={os.environ[key]!r} in the environment: not a number")
    if int(os.environ["RANK"]) >= int(os.environ["WORLD_SIZE"]):
        raise UsageError(f"RANK {os.environ['RANK']} is not below WORLD_SIZE {os.environ['WORLD_SIZE']}")
