"""The shape of a parallel run, without torch: modes, degrees, head checks, the timeout.

Imported by command modules that must not import torch when loaded (``wan/cli.py``).
"""

from __future__ import annotations

from wanscope.errors import UsageError

PARALLEL_MODES = ("cfg", "ulysses", "cfg+ulysses")
# Long enough for rank 0 to load and run the UMT5-XXL text encoder (11 GB of weights) while
# the other ranks wait for its broadcast; short enough that a lost rank is not a hang.
DEFAULT_TIMEOUT_S = 300.0


def degrees(mode: str, world_size: int) -> tuple[int, int]:
    """(cfg_degree, ulysses_degree) of ``mode`` on ``world_size`` ranks.

    ``cfg`` needs 2 ranks; ``ulysses`` uses every rank; ``cfg+ulysses`` splits an even world
    of at least 4 ranks into 2 CFG branches of ``world_size / 2`` Ulysses ranks.

    Raises:
        UsageError: unknown mode, or a world size the mode cannot use.
    """
    if mode == "cfg":
        if world_size != 2:
            raise UsageError(f"--parallel cfg runs on 2 processes (cond and uncond), got a world size of {world_size}; "
                             f"use --parallel cfg+ulysses for more")
        return 2, 1
    if mode == "ulysses":
        if world_size < 2:
            raise UsageError(f"--parallel ulysses needs at least 2 processes, got a world size of {world_size}")
        return 1, world_size
    if mode == "cfg+ulysses":
        if world_size < 4 or world_size % 2:
            raise UsageError(f"--parallel cfg+ulysses needs an even world size of at least 4 "
                             f"(2 CFG branches x Ulysses), got {world_size}")
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
    worlds = f" (world sizes {', '.join(str(cfg_degree * d) for d in working)} with cfg+ulysses)" if cfg_degree > 1 else ""
    raise UsageError(
        f"Ulysses degree {ulysses_degree} does not divide the model's {num_heads} attention heads; "
        f"degrees that work: {', '.join(map(str, working))}{worlds}"
    )


def check_cfg_parallel(guidance: float, cfg_mode: str) -> None:
    """CFG parallel needs two branches, each a B=1 forward on its own rank.

    Raises:
        UsageError: guidance <= 1 (only the cond branch runs) or ``--cfg batched``.
    """
    if guidance <= 1.0:
        raise UsageError(f"CFG parallel needs guidance > 1 (two branches), got {guidance:g}; use --parallel ulysses")
    if cfg_mode != "sequential":
        raise UsageError(f"CFG parallel runs each branch on its own rank; --cfg {cfg_mode} does not apply")
