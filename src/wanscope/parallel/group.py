"""Process-group setup for multi-GPU inference: the groups, timeouts and one-line errors.

A run is launched by ``torchrun`` (or anything that sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``). The world is a grid of
``cfg_degree x ulysses_degree`` ranks, rank = ``cfg_rank * ulysses_degree + ulysses_rank``:
the ranks of one CFG branch form a Ulysses group (contiguous ranks, so on one host its
all-to-alls stay between neighbouring GPUs), and the ranks with the same ``ulysses_rank``
form a CFG group (2 ranks that exchange velocities once per step).

Everything that can be checked without talking to the other ranks (world size, degrees,
heads) is checked before the process group starts, so a bad launch fails at once on every
rank. Every wait has a timeout (``timeout_s``): the rendezvous, each gloo collective, and
NCCL's watchdog. A failed collective becomes a ``ParallelError`` (one line naming the rank
and what it was doing); a peer that dies closes its sockets, so under gloo the other ranks
fail at their next collective instead of waiting for the timeout. Under NCCL a dead peer
goes unnoticed by the collectives, so each rank also keeps a gloo heartbeat (``watch.py``)
that ends it with one line when a peer dies (at once) or stops answering (after
``timeout_s``); NCCL's own watchdog, which aborts with a multi-line C++ message, is given
``NCCL_GRACE_S`` more so that the heartbeat speaks first.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist

from wanscope.errors import UsageError, WanscopeError
from wanscope.parallel.plan import DEFAULT_TIMEOUT_S, check_heads, check_launcher, degrees
from wanscope.parallel.watch import NCCL_GRACE_S, Heartbeat


class ParallelError(WanscopeError):
    """A distributed run failed: setup, a lost peer, a timeout or ranks that disagree."""


def _first_line(error: BaseException) -> str:
    """The gist of a c10d/gloo message: its first line, without the ``[file.cc:N]`` prefix and
    without gloo's generic advice ("This is typically caused by ...")."""
    text = str(error).strip()
    text = text.splitlines()[0] if text else error.__class__.__name__
    text = re.sub(r"^(\[[^\]]*\]\s*)+", "", text)
    return text.split(" This is typically caused")[0].strip().rstrip(".")


@dataclass(frozen=True)
class ParallelContext:
    """This rank's place in a running process group.

    Use it as a context manager: leaving it destroys the process group, and a
    ``torch.distributed`` error escaping it becomes a one-line ``ParallelError``.

    Attributes:
        mode: one of ``PARALLEL_MODES``.
        rank, world_size, local_rank: from the launcher's environment.
        local_world_size: ranks on this host (``LOCAL_WORLD_SIZE``, which torchrun sets; 1
            without it: unknown, so no transport assumes its peers share the host).
        cfg_degree, ulysses_degree: the grid; their product is ``world_size``.
        device: ``cuda:LOCAL_RANK`` or ``cpu``.
        timeout_s: seconds any wait may take before it fails.
        cfg_group, ulysses_group: this rank's subgroups (None where the degree is 1).
        heartbeat: the thread that ends this rank when a peer is lost (under NCCL), stopped
            on leaving the context.
    """

    mode: str
    rank: int
    world_size: int
    local_rank: int
    cfg_degree: int
    ulysses_degree: int
    device: torch.device
    timeout_s: float
    cfg_group: dist.ProcessGroup | None
    ulysses_group: dist.ProcessGroup | None
    heartbeat: Heartbeat | None = None
    local_world_size: int = 1

    @property
    def cfg_rank(self) -> int:
        """0 runs the cond branch, 1 the uncond branch."""
        return self.rank // self.ulysses_degree

    @property
    def ulysses_rank(self) -> int:
        """Which token shard and head group this rank holds."""
        return self.rank % self.ulysses_degree

    @property
    def is_main(self) -> bool:
        """Rank 0: encodes the prompts, decodes the video, prints and writes outputs."""
        return self.rank == 0

    @contextmanager
    def collective(self, what: str):
        """Turn a failure of the collective run inside into a one-line ``ParallelError``."""
        try:
            yield
        except RuntimeError as e:  # gloo raises plain RuntimeError; c10d's DistError subclasses it
            raise ParallelError(
                f"rank {self.rank}/{self.world_size}: {what} failed: {_first_line(e)} "
                f"(another rank died, hung past --dist-timeout {self.timeout_s:g} s, or was started differently)"
            ) from None

    def agree(self, **values) -> None:
        """Check that every rank was started with the same ``values`` (one small gather).

        Raises:
            ParallelError: naming the first value on which a rank differs from rank 0.
        """
        gathered: list = [None] * self.world_size
        with self.collective("comparing the ranks' arguments"):
            dist.all_gather_object(gathered, values)
        for rank, theirs in enumerate(gathered):
            for key, value in gathered[0].items():
                if theirs.get(key) != value:
                    raise ParallelError(
                        f"rank {rank} was started with {key}={theirs.get(key)!r} but rank 0 with "
                        f"{key}={value!r}: launch every rank with the same arguments"
                    )

    def barrier(self, what: str) -> None:
        """Wait until every rank gets here (e.g. rank 0 reading the traces the others wrote).

        Raises:
            ParallelError: a rank died or did not arrive within the timeout.
        """
        with self.collective(f"waiting for every rank ({what})"):
            dist.barrier()

    def __enter__(self) -> ParallelContext:
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if dist.is_initialized():
            dist.destroy_process_group()
        if isinstance(exc, dist.DistError):  # e.g. an NCCL error surfacing at a later sync
            raise ParallelError(f"rank {self.rank}/{self.world_size}: {_first_line(exc)}") from None
        return False


def comm_options(backend: str, high_priority: bool):
    """Options for a new group of ``backend``: under NCCL, whether its kernels run on a
    high-priority stream (None elsewhere, and for NCCL's defaults).

    Ulysses' all-to-alls run while attention runs (``ulysses.py``). Attention launches more
    blocks than the GPU holds at once; the block scheduler gives blocks of a higher-priority
    stream the next free SMs, so the transfer starts when one attention block ends rather
    than after attention's last wave has started.
    """
    if backend != "nccl" or not high_priority:
        return None
    return dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)


def setup_from_env(
    mode: str,
    device_type: str = "cuda",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    num_heads: int | None = None,
    heartbeat: bool | None = None,
) -> ParallelContext:
    """Start the process group described by the launcher's environment (``torchrun``).

    NCCL on CUDA (one GPU per process, ``cuda:LOCAL_RANK``), gloo on the CPU.

    Args:
        mode: ``cfg``, ``ulysses`` or ``cfg+ulysses``.
        device_type: ``cuda`` or ``cpu``.
        timeout_s: limit in seconds for the rendezvous and for every collective.
        num_heads: the DiT's attention heads, checked against the Ulysses degree before any
            process group starts (``check_heads``).
        heartbeat: keep a ``watch.Heartbeat`` (default: under NCCL only; under gloo the
            collectives themselves notice a lost peer).

    Raises:
        UsageError: not launched by torchrun, a world size the mode cannot use, heads that
            do not split, or a CUDA device that does not exist.
        ParallelError: the rendezvous failed or timed out (e.g. ranks started with different
            world sizes).
    """
    check_launcher(mode)
    rank, world_size, local_rank = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    cfg_degree, ulysses_degree = degrees(mode, world_size)
    if num_heads is not None:
        check_heads(num_heads, ulysses_degree, cfg_degree)
    if device_type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise UsageError(
                f"rank {rank} has LOCAL_RANK {local_rank} but this host has {torch.cuda.device_count()} CUDA devices"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    timeout = _comm_timeout(backend, timeout_s)
    stage = "process group setup"
    try:
        dist.init_process_group(backend, timeout=timeout, device_id=device if backend == "nccl" else None)
        # every rank creates every subgroup, in the same order (torch.distributed.new_group)
        stage = "subgroup setup"
        ulysses_group = _new_ulysses_group(rank, cfg_degree, ulysses_degree, timeout, high_priority=True)
        cfg_group = None
        for u in range(ulysses_degree if cfg_degree > 1 else 0):
            group = dist.new_group([c * ulysses_degree + u for c in range(cfg_degree)], timeout=timeout)
            if u == rank % ulysses_degree:
                cfg_group = group
        stage = "heartbeat setup"
        beat = (
            Heartbeat(rank, world_size, timeout_s) if (backend == "nccl" if heartbeat is None else heartbeat) else None
        )
    except RuntimeError as e:
        if dist.is_initialized():
            dist.destroy_process_group()
        raise ParallelError(
            f"rank {rank}/{world_size}: {stage} failed: {_first_line(e)} (check that every rank was started with "
            f"the same WORLD_SIZE and MASTER_ADDR:MASTER_PORT, and that all {world_size} started)"
        ) from None
    return ParallelContext(
        mode=mode,
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        cfg_degree=cfg_degree,
        ulysses_degree=ulysses_degree,
        device=device,
        timeout_s=timeout_s,
        cfg_group=cfg_group,
        ulysses_group=ulysses_group,
        heartbeat=beat,
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    )


def _comm_timeout(backend: str, timeout_s: float) -> timedelta:
    """The timeout of a group: ``timeout_s``, plus ``NCCL_GRACE_S`` under NCCL (module docstring)."""
    return timedelta(seconds=timeout_s + (NCCL_GRACE_S if backend == "nccl" else 0))


def _new_ulysses_group(
    rank: int, cfg_degree: int, ulysses_degree: int, timeout: timedelta, high_priority: bool
) -> dist.ProcessGroup | None:
    """This rank's Ulysses group (None with a Ulysses degree of 1), after every rank created
    every one of them, in the same order (``torch.distributed.new_group``)."""
    mine = None
    for c in range(cfg_degree if ulysses_degree > 1 else 0):
        group = dist.new_group(
            [c * ulysses_degree + u for u in range(ulysses_degree)],
            timeout=timeout,
            pg_options=comm_options(dist.get_backend(), high_priority),
        )
        if c == rank // ulysses_degree:
            mine = group
    return mine


def with_ulysses_priority(ctx: ParallelContext, high_priority: bool) -> ParallelContext:
    """A copy of ``ctx`` whose Ulysses all-to-alls run on new groups of the given stream
    priority (``comm_options``), for comparing the two. Every rank must call it.

    Raises:
        ParallelError: the new groups could not be set up.
    """
    with ctx.collective("setting up Ulysses groups"):
        group = _new_ulysses_group(
            ctx.rank,
            ctx.cfg_degree,
            ctx.ulysses_degree,
            _comm_timeout(dist.get_backend(), ctx.timeout_s),
            high_priority,
        )
    return replace(ctx, ulysses_group=group)


# torch 2.13 renamed all_gather_into_tensor to all_gather_single and deprecated the old name;
# the H200 image's torch 2.11 has only the old one.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def all_gather_dim0(out: torch.Tensor, tensor: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Gather ``tensor`` [n, ...] of every rank of ``group`` into ``out`` [group size * n, ...],
    in group-rank order (group ranks follow global ranks)."""
    _all_gather_single(out, tensor, group)
    return out
