"""A heartbeat between the ranks of an NCCL run: a rank whose peer died or froze ends with one
line and exit code 2 instead of hanging.

Under gloo a dead peer closes its sockets and the next collective fails at once
(``ParallelContext.collective`` makes that one line). Under NCCL nothing tells a rank that
its peer is gone: its kernels spin on the GPU, its host blocks at the next synchronization,
and only NCCL's watchdog ends the process, after the timeout, with a C++ abort several lines
long. torchrun's agent ends the other ranks when one exits, but not when one freezes, and
other launchers may not at all. So each rank of an NCCL run also keeps a heartbeat: a daemon
thread that joins a 4-byte all-reduce of a separate gloo group every ``HEARTBEAT_S`` seconds.
A peer that dies resets the gloo connections (the all-reduce fails within a second); one that
stops answering (stopped, deadlocked) lets it time out after ``timeout_s``. Either way the
thread prints one line (on a line of its own, after rank 0's progress bar) and ends the
process with ``os._exit(2)``: the main thread may be blocked in CUDA and never see an
exception.

A rank leaving normally (rank 1 after its last collective while rank 0 still decodes the
video) says so in its last beat: the all-reduce carries a leaving flag, and every rank stops
beating once any rank has set it, so an orderly exit is never taken for a death.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

HEARTBEAT_S = 1.0
# NCCL's watchdog aborts a collective after the group's timeout; NCCL groups get this much more
# than --dist-timeout, so that a frozen peer is reported by the heartbeat's one line (after
# --dist-timeout and at most one beat) and not by the watchdog's abort.
NCCL_GRACE_S = 30.0


class Heartbeat:
    """This rank's heartbeat thread over a new gloo group (every rank must create it, in the
    same order as their other groups).

    Args:
        rank, world_size: this rank's place, for the error line.
        timeout_s: how long a beat may wait for a peer before the peer counts as lost.
        on_lost: called with the error line when a peer is lost (default: print it to stderr
            and ``os._exit(2)``).
    """

    def __init__(self, rank: int, world_size: int, timeout_s: float, on_lost=None, interval_s: float = HEARTBEAT_S):
        self.rank, self.world_size, self.timeout_s, self.interval_s = rank, world_size, timeout_s, interval_s
        self._on_lost = on_lost or _exit_with
        self._group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        self._leaving = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wanscope-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from wanscope.parallel.group import _first_line

        flag = torch.zeros(1, dtype=torch.int32)
        try:
            while True:
                leaving = self._leaving.wait(self.interval_s)
                flag.fill_(int(leaving))
                try:
                    dist.all_reduce(flag, group=self._group)
                except RuntimeError as e:
                    if not leaving:
                        self._on_lost(
                            f"rank {self.rank}/{self.world_size}: lost contact with another rank: {_first_line(e)} "
                            f"(a rank died, or stopped answering for --dist-timeout {self.timeout_s:g} s)"
                        )
                    return
                if flag.item():  # a rank (maybe this one) is leaving: no more beats from anyone
                    return
        finally:
            self._done.set()

    def stop(self) -> None:
        """Leave: tell the other ranks in one last beat (waiting for it at most a few beats;
        a peer already lost does not hold this rank back)."""
        self._leaving.set()
        self._done.wait(timeout=5 * self.interval_s + 5)


def _exit_with(line: str) -> None:
    from wanscope.cli import _one_line

    # The line starts with "\n": rank 0's progress bar (tqdm, redrawn with "\r") leaves the
    # cursor at the end of its last update, and the main thread that would close the bar is
    # blocked in CUDA or is never returned to. Without it the error continues the bar's line.
    print(f"\nwanscope: error: {_one_line(line)}", file=sys.stderr, flush=True)
    os._exit(2)
