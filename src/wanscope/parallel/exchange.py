"""How Ulysses' all-to-alls move data between the ranks: NCCL kernels or copy engines.

Both transports give ``parallel/ulysses.py`` the same three calls on the same buffers
(``HeadGroup``): ``head_groups`` (empty send and receive buffers of one self-attention
call), ``send`` (start moving q, k or v to every rank) and ``send_output`` (start moving an
attention output back); what they start is waited for with ``wait()`` on the compute
stream, never on the host.

- ``NcclTransport``: ``all_to_all_single`` on the Ulysses group (the only one under gloo). NCCL copies with kernels, on SMs: while Ulysses overlaps
  a transfer with attention, NCCL's blocks take SMs from attention's.
- ``CopyEngineTransport`` (CUDA only): every rank's send buffers live in one workspace of
  CUDA symmetric memory (``torch.distributed._symmetric_memory``: each rank maps every other
  rank's workspace), and the data moves by ``cudaMemcpyAsync`` between mapped buffers, which
  the GPU's copy engines carry over NVLink without taking an SM. q, k, v are pulled (each
  rank copies its chunk out of every peer's send buffer); outputs are pushed (each rank
  copies its rows into every peer's receive buffer, so no copy of the output into the
  workspace is needed).

Ordering of the copy-engine transport. Every exchange runs on the transport's own stream,
in the same order on every rank: the stream waits for the compute stream (the data to send
is written), then a barrier (symmetric memory's signal-pad barrier, a one-block kernel:
every rank has reached this exchange), then the copies, then (pushes only) a second
barrier (every rank's copies into this rank's buffer have landed), then an event the
consumer waits on. A buffer is written again only after a later barrier, which no rank
passes before its copies out of that buffer ended (its stream runs them first): q, k, v
send buffers are rewritten in the next block, after the output exchange's barriers; a
receive buffer for outputs after the consumer read it, which precedes its next barrier in
stream order.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from wanscope.errors import UsageError
from wanscope.parallel.group import ParallelContext
from wanscope.parallel.watch import NCCL_GRACE_S

TRANSPORTS = ("nccl", "copy-engine")


@dataclass
class HeadGroup:
    """One head group's buffers in one self-attention call.

    Attributes:
        first: its first head within each rank's block of N/P heads.
        send: [3, P, L_r, B, hg, D] q, k, v; chunk j goes to rank j: heads ``j N/P + first``..
            of this rank's tokens (a view; chunks may lie apart in memory).
        recv: [3, L, B, hg, D] every rank's tokens of this rank's heads ``first``.., in order.
        works: what to wait for before ``recv`` is read, one per ``send`` call.
        offset: where ``send`` and the output receive buffer start in the copy-engine
            workspace (elements; unused by NCCL).
    """

    first: int
    send: torch.Tensor
    recv: torch.Tensor
    works: list
    offset: tuple[int, int] = (0, 0)


def make_transport(name: str, ctx: ParallelContext):
    """The transport ``name`` (one of ``TRANSPORTS``) for ``ctx``'s Ulysses group.

    Raises:
        UsageError: unknown name, or ``copy-engine`` on a CPU run.
    """
    if name == "nccl":
        return NcclTransport(ctx)
    if name == "copy-engine":
        if ctx.device.type != "cuda":
            raise UsageError("the copy-engine Ulysses transport needs CUDA devices; use nccl (gloo on the CPU)")
        return CopyEngineTransport(ctx)
    raise UsageError(f"unknown Ulysses transport {name!r}; known: {', '.join(TRANSPORTS)}")


class NcclTransport:
    """``all_to_all_single`` on the Ulysses group (NCCL on GPUs, gloo on CPUs)."""

    def __init__(self, ctx: ParallelContext):
        self.group, self.degree = ctx.ulysses_group, ctx.ulysses_degree

    def head_groups(self, sizes: list[int], rank: int, b: int, group_sizes: list[int], d: int,
                    dtype: torch.dtype, device: torch.device) -> list[HeadGroup]:
        """Empty buffers of every head group for one call (``sizes``: tokens per rank)."""
        firsts = [sum(group_sizes[:g]) for g in range(len(group_sizes))]
        return [HeadGroup(first, torch.empty((3, self.degree, sizes[rank], b, hg, d), dtype=dtype, device=device),
                          torch.empty((3, sum(sizes), b, hg, d), dtype=dtype, device=device), [])
                for first, hg in zip(firsts, group_sizes)]

    def send(self, groups: list[HeadGroup], tensors: tuple[int, ...], sizes: list[int], rank: int) -> None:
        """Start the all-to-alls of ``tensors`` (indices into q, k, v) of every group, group by
        group (c10d orders them after the compute stream's work issued so far)."""
        n_local = sizes[rank]
        for g in groups:
            for i in tensors:
                # one call per tensor, so each lands contiguous [L, B, hg, D] rather than
                # interleaved with the other two: cuDNN's attention is slower on interleaved
                # rows (wan/fused.py measured 3% for a strided v alone)
                g.works.append(dist.all_to_all_single(g.recv[i], g.send[i].flatten(0, 1), sizes,
                                                      [n_local] * self.degree, group=self.group, async_op=True))

    def send_output(self, o: torch.Tensor, g: HeadGroup, sizes: list[int], rank: int):
        """Start sending ``o`` [B, L, hg, D] (group ``g``'s attention output, every token)
        back: rank j gets its tokens. Returns ([P, L_r, B, hg, D] received, rank j's rows of
        head group j first; the work to wait for)."""
        b, _, hg, d = o.shape
        back = o.new_empty((self.degree, sizes[rank], b, hg, d))
        work = dist.all_to_all_single(back.flatten(0, 1), o.transpose(0, 1).contiguous(), [sizes[rank]] * self.degree,
                                      sizes, group=self.group, async_op=True)
        return back, work


class _Done:
    """A copy-engine exchange's end: ``wait()`` makes the current stream wait for it."""

    def __init__(self, event: torch.cuda.Event):
        self.event = event

    def wait(self) -> None:
        torch.cuda.current_stream().wait_event(self.event)


class CopyEngineTransport:
    """Ulysses' exchanges as copies between symmetric-memory buffers (module docstring).

    The workspace holds, per head group, the q, k, v send buffer [3, P, L_max, B, hg, D] and
    the output receive buffer [P, L_max, B, hg, D] (L_max: the longest shard, so offsets are
    equal on every rank): 4 L_max B N D elements, 201 MB at 1.3B 832x480x81 on 2 ranks in
    bf16. It is allocated at the first call and again, on every rank at the same call,
    when a call needs more (``torch.distributed._symmetric_memory.rendezvous`` is a
    collective).
    """

    def __init__(self, ctx: ParallelContext):
        from torch.distributed import _symmetric_memory as symm_mem

        self._symm_mem = symm_mem
        with warnings.catch_warnings():  # torch < 2.9 needs it; later ones say it is no longer needed
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(ctx.ulysses_group.group_name)
        self.ctx, self.degree = ctx, ctx.ulysses_degree
        self.stream = torch.cuda.Stream(ctx.device, priority=-1)  # its barriers start ahead of attention's blocks
        self.timeout_ms = int((ctx.timeout_s + NCCL_GRACE_S) * 1000)
        self._buffer: torch.Tensor | None = None
        self._handle = None

    def _workspace(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        if self._buffer is None or self._buffer.numel() < numel or self._buffer.dtype != dtype:
            if self._buffer is not None:  # no copy may still read or write the old one
                torch.cuda.synchronize(self.ctx.device)
                dist.barrier(group=self.ctx.ulysses_group)
            self._buffer = self._handle = None
            buffer = self._symm_mem.empty(numel, dtype=dtype, device=self.ctx.device)
            self._handle = self._symm_mem.rendezvous(buffer, self.ctx.ulysses_group.group_name)
            self._buffer = buffer
        return self._buffer

    def head_groups(self, sizes: list[int], rank: int, b: int, group_sizes: list[int], d: int,
                    dtype: torch.dtype, device: torch.device) -> list[HeadGroup]:
        """Buffers of every head group for one call: send buffers in the workspace (views of
        this rank's L_r rows), receive buffers for q, k, v allocated per call."""
        p, lmax = self.degree, max(sizes)
        offsets, end = [], 0
        for hg in group_sizes:
            offsets.append((end, end + 3 * p * lmax * b * hg * d))
            end += 4 * p * lmax * b * hg * d
        ws = self._workspace(end, dtype)
        groups, first = [], 0
        for (send_at, _), hg in zip(offsets, group_sizes):
            send = ws[send_at : send_at + 3 * p * lmax * b * hg * d].view(3, p, lmax, b, hg, d)[:, :, : sizes[rank]]
            recv = torch.empty((3, sum(sizes), b, hg, d), dtype=dtype, device=device)
            groups.append(HeadGroup(first, send, recv, [], offsets[len(groups)]))
            first += hg
        return groups

    def _peer(self, j: int, shape: tuple[int, ...], offset: int) -> torch.Tensor:
        return self._handle.get_buffer(j, shape, self._buffer.dtype, offset)

    def send(self, groups: list[HeadGroup], tensors: tuple[int, ...], sizes: list[int], rank: int) -> None:
        """Pull this rank's chunk of ``tensors`` of every group from every rank's send
        buffer, one barrier for all, an event after each group's copies."""
        ready = torch.cuda.Event()
        ready.record()
        _, p, _, b, _, d = groups[0].send.shape
        lmax = max(sizes)
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(ready)
            self._handle.barrier(channel=0, timeout_ms=self.timeout_ms)
            for g in groups:
                hg = g.send.shape[4]
                for i in tensors:
                    row = 0
                    for j, n in enumerate(sizes):
                        chunk = g.offset[0] + (i * p + rank) * lmax * b * hg * d
                        g.recv[i, row : row + n].copy_(self._peer(j, (n, b, hg, d), chunk))
                        row += n
                done = torch.cuda.Event()
                done.record(self.stream)
                g.works.append(_Done(done))

    def send_output(self, o: torch.Tensor, g: HeadGroup, sizes: list[int], rank: int):
        """Push each rank's rows of ``o`` [B, L, hg, D] into its receive buffer; return this
        rank's receive buffer [P, L_r, B, hg, D] (rank j's rows of head group j) and the
        exchange's end."""
        b, _, hg, d = o.shape
        p, lmax = self.degree, max(sizes)
        rows = o.transpose(0, 1).contiguous()  # [L, B, hg, D]: a view for B = 1
        rows.record_stream(self.stream)  # the copies read it after the compute stream moved on
        ready = torch.cuda.Event()
        ready.record()
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(ready)
            self._handle.barrier(channel=0, timeout_ms=self.timeout_ms)  # every rank read what it received last
            start = 0
            for j, n in enumerate(sizes):
                self._peer(j, (n, b, hg, d), g.offset[1] + rank * lmax * b * hg * d).copy_(rows[start : start + n])
                start += n
            self._handle.barrier(channel=0, timeout_ms=self.timeout_ms)  # every rank's rows landed here
            done = torch.cuda.Event()
            done.record(self.stream)
        back = self._buffer[g.offset[1] : g.offset[1] + p * lmax * b * hg * d].view(p, lmax, b, hg, d)
        return back[:, : sizes[rank]], _Done(done)
