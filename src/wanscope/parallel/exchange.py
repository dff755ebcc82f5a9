"""How Ulysses' all-to-alls move data between the ranks: NCCL kernels or copy engines.

``parallel/ulysses.py`` decides what moves when; a transport decides where q, k, v and the
attention output live and how they cross. Per self-attention call it opens an exchange
(``start``) whose calls Ulysses makes in this order: ``project``/``store`` (q, k or v of this
rank's tokens, every head), ``send`` (start moving them: rank j gets its heads of them),
then per head group ``inputs`` (wait for the group's q, k, v of every token), attention,
``send_output`` (start moving the group's output back: rank j gets its tokens), and last
``output`` (this rank's tokens, every head, [B, L_r, N, D]). On GPUs streams wait for the
transfers, never the host (gloo's waits block it).

- ``nccl``: ``all_to_all_single`` on the Ulysses group (the only one under gloo). An
  all-to-all needs each destination's chunk contiguous, so q, k, v are stored in send order
  ([P, L_r, B, hg, D] per head group: a strided pass, which in bf16 is also RoPE's rounding
  to the model dtype) and the received output is copied back into token order: one layout
  copy per block on the compute stream (2 E s in ``ulysses.py``'s count; the fused path adds
  q, k and v's), and NCCL's copy kernels take SMs from the attention they overlap.
- ``copy-engine`` (CUDA only): q, k, v and the output live token-major ([B, L_r, N, D]) in a
  workspace of CUDA symmetric memory (``torch.distributed._symmetric_memory``: every rank
  maps every other rank's workspace), and the data moves by ``cudaMemcpy2DAsync``, a
  strided copy that the GPU's copy engines carry over NVLink: each rank pulls its heads of
  every peer's tokens (rows of ``hg D`` elements, ``N D`` apart) into its receive buffer, and
  pushes each peer's tokens of its attention output into that peer's output rows. No layout
  copy, no SM spent on moving data (``store``, the fused path's, is still a plain copy).

Ordering of the copy-engine transport. Every exchange runs on the transport's own stream, in
the same order on every rank: the stream waits for the compute stream (the data to send is
written), a barrier (symmetric memory's signal-pad barrier, a one-block kernel: every rank
got here), the copies, for pushes a second barrier (every rank's copies into this rank's
output have landed), then an event that the compute stream waits on. A buffer is written
again only after a later barrier, which no rank passes before the copies out of it ended
(its stream runs them first): q, k, v in the next block, after the output's barriers; the
output after this rank's output projection read it, which precedes its next push barrier.
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from contextlib import contextmanager

import torch
import torch.distributed as dist

from wanscope.errors import UsageError
from wanscope.parallel.group import ParallelContext
from wanscope.parallel.plan import TRANSPORTS
from wanscope.parallel.watch import NCCL_GRACE_S


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


def peer_access(ctx: ParallelContext) -> bool:
    """Whether the GPUs of this rank's Ulysses group can address each other's memory (NVLink
    or PCIe peer access), the copy-engine transport's need. The group's ranks are consecutive
    and each uses ``cuda:LOCAL_RANK`` (``rank % local_world_size``), so every rank of the group
    computes the same answer."""
    first = ctx.rank - ctx.ulysses_rank
    devices = [(first + j) % ctx.local_world_size for j in range(ctx.ulysses_degree)]
    if max(devices) >= torch.cuda.device_count():  # each process sees only its own GPU
        return False
    return all(torch.cuda.can_device_access_peer(a, b) for a in devices for b in devices if a != b)


class _Call:
    """What every exchange knows: the token split, this rank, the head groups.

    Attributes:
        sizes: tokens per rank; rank: this rank in the Ulysses group; h: heads per rank.
        groups: (first head, heads) of each head group within a rank's h heads.
        recv: per group, [3, L, B, hg, D]: q, k, v of every token, this rank's heads.
        works: per group, what to wait for before its ``recv`` is read.
    """

    def __init__(
        self,
        sizes: list[int],
        rank: int,
        b: int,
        group_sizes: list[int],
        d: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        self.sizes, self.rank, self.h = sizes, rank, sum(group_sizes)
        self.groups = [(sum(group_sizes[:g]), hg) for g, hg in enumerate(group_sizes)]
        self.recv = [torch.empty((3, sum(sizes), b, hg, d), dtype=dtype, device=device) for hg in group_sizes]
        self.works: list[list] = [[] for _ in group_sizes]

    def inputs(self, g: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Group ``g``'s q, k, v [B, L, hg, D] once they arrived: views of token-major rows,
        which cuDNN reads without a copy and answers with an output in the same layout (the
        hopper kernel too at B = 1; at B > 1 it copies them, its TMA rows needing each batch's
        tokens one after another)."""
        for work in self.works[g]:
            work.wait()
        return tuple(self.recv[g][i].transpose(0, 1) for i in range(3))


class NcclTransport:
    """``all_to_all_single`` on the Ulysses group (NCCL on GPUs, gloo on CPUs)."""

    def __init__(self, ctx: ParallelContext):
        self.group, self.degree = ctx.ulysses_group, ctx.ulysses_degree

    def start(
        self,
        sizes: list[int],
        rank: int,
        b: int,
        group_sizes: list[int],
        d: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> _NcclCall:
        """The exchange of one self-attention call (``sizes``: tokens per rank)."""
        return _NcclCall(self, sizes, rank, b, group_sizes, d, dtype, device)


class _NcclCall(_Call):
    """Send buffers in send order, [3, P, L_r, B, hg, D] per group: chunk j holds heads
    ``j h + first``.. of this rank's tokens, for rank j."""

    def __init__(self, transport: NcclTransport, sizes, rank, b, group_sizes, d, dtype, device):
        super().__init__(sizes, rank, b, group_sizes, d, dtype, device)
        self.t, p = transport, transport.degree
        self.send_buffers = [
            torch.empty((3, p, sizes[rank], b, hg, d), dtype=dtype, device=device) for hg in group_sizes
        ]
        self.out = torch.empty((b, sizes[rank], p, self.h, d), dtype=dtype, device=device)  # heads split by rank
        self.pending: list = []  # (first head, received output, its transfer) not yet unpacked

    def store(self, i: int, t: torch.Tensor) -> None:
        """Write ``t`` [B, L_r, N, D] (any dtype: rounded to the buffers') as tensor ``i``."""
        heads = t.unflatten(2, (self.t.degree, -1))  # [B, L_r, P, h, D]
        for (first, hg), send in zip(self.groups, self.send_buffers):
            send[i].permute(2, 1, 0, 3, 4).copy_(heads[:, :, :, first : first + hg])

    def project(self, i: int, linear: torch.nn.Linear, x: torch.Tensor) -> None:
        """Tensor ``i`` as ``linear(x)`` (x: [B, L_r, dim]), one GEMM per head group, rank and
        batch row, each writing its chunk in place (the rows of one chunk's heads are
        contiguous in the weight). Inference only: ``out=`` records no gradients."""
        weight, bias = linear.weight, linear.bias
        d = self.send_buffers[0].shape[5]
        for (first, hg), send in zip(self.groups, self.send_buffers):
            for j in range(self.t.degree):
                rows = slice((j * self.h + first) * d, (j * self.h + first + hg) * d)
                for row in range(x.shape[0]):
                    # [L_r, hg * D]: contiguous for B = 1, rows B * hg * D apart otherwise
                    torch.addmm(bias[rows], x[row], weight[rows].t(), out=send[i, j, :, row].flatten(1))

    def send(self, tensors: tuple[int, ...]) -> None:
        """Start the all-to-alls of ``tensors`` (indices into q, k, v), group by group."""
        n_local = self.sizes[self.rank]
        for g, send in enumerate(self.send_buffers):
            for i in tensors:
                # one call per tensor, so each lands contiguous [L, B, hg, D] rather than
                # interleaved with the other two: cuDNN's attention is slower on interleaved
                # rows (a strided v alone: benchmarks/RESULTS.md, "2026-11-30: DiT forward with
                # fused Triton kernels vs torch.compile", kernels_bench)
                self.works[g].append(
                    dist.all_to_all_single(
                        self.recv[g][i],
                        send[i].flatten(0, 1),
                        self.sizes,
                        [n_local] * self.t.degree,
                        group=self.t.group,
                        async_op=True,
                    )
                )

    def send_output(self, g: int, o: torch.Tensor) -> None:
        """Start sending group ``g``'s output ``o`` [B, L, hg, D] back (rank j gets its tokens),
        and unpack the previous group's, which crossed while this group's attention ran."""
        b, _, hg, d = o.shape
        back = o.new_empty((self.t.degree, self.sizes[self.rank], b, hg, d))  # rank j's rows of head group j
        work = dist.all_to_all_single(
            back.flatten(0, 1),
            o.transpose(0, 1).contiguous(),
            [self.sizes[self.rank]] * self.t.degree,
            self.sizes,
            group=self.t.group,
            async_op=True,
        )
        self._unpack()
        self.pending = [(self.groups[g][0], back, work)]

    def output(self) -> torch.Tensor:
        """[B, L_r, N, D]: every head of this rank's tokens."""
        self._unpack()
        return self.out.flatten(2, 3)

    def _unpack(self) -> None:
        """Wait for the pending output transfer and copy it into its heads of ``out``: the
        layout copy of the received output."""
        for first, back, work in self.pending:
            work.wait()
            self.out[:, :, :, first : first + back.shape[3]].copy_(back.permute(2, 1, 0, 3, 4))
        self.pending = []


@functools.cache
def _memcpy2d():
    """``cudaMemcpy2DAsync`` of the CUDA runtime torch loaded (found in /proc/self/maps).

    Raises:
        UsageError: no CUDA runtime library in this process.
    """
    with open("/proc/self/maps") as maps:
        paths = [line.split()[-1] for line in maps if "libcudart.so" in line]
    if not paths:
        raise UsageError(
            "the copy-engine Ulysses transport needs the CUDA runtime library (libcudart), which "
            "this torch did not load; use nccl"
        )
    fn = ctypes.CDLL(paths[0]).cudaMemcpy2DAsync
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_void_p,
    ]
    fn.restype = ctypes.c_int
    return fn


_DEVICE_TO_DEVICE = 3  # cudaMemcpyDeviceToDevice: a peer's buffer is mapped into this device's addresses


def copy_rows(dst: torch.Tensor, src: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """``dst.copy_(src)`` for [rows, width] views with contiguous rows, as one
    ``cudaMemcpy2DAsync`` on ``stream`` (the copy engines do it; CUDA Runtime API,
    "Memory Management").

    Raises:
        RuntimeError: the copy could not be queued (with the CUDA error code).
    """
    rows, width = src.shape
    if rows == 0:
        return
    size = src.element_size()
    row_bytes = width * size
    code = _memcpy2d()(
        dst.data_ptr(),
        max(dst.stride(0) * size, row_bytes),
        src.data_ptr(),
        max(src.stride(0) * size, row_bytes),
        row_bytes,
        rows,
        _DEVICE_TO_DEVICE,
        stream.cuda_stream,
    )
    if code:
        raise RuntimeError(f"cudaMemcpy2DAsync failed with CUDA error {code}")


class CopyEngineTransport:
    """Ulysses' exchanges as strided copies between symmetric-memory buffers (module docstring).

    The workspace holds q, k, v and the output, each [B, L_max, N, D] (L_max: the longest
    shard, so offsets are equal on every rank): 4 B L_max N D elements, 201 MB at 1.3B
    832x480x81 on 2 ranks in bf16. It is allocated at the first call, and again, on every
    rank at the same call, when a call needs more or another dtype (its rendezvous is a
    collective).
    """

    def __init__(self, ctx: ParallelContext):
        from torch.distributed import _symmetric_memory as symm_mem

        self._symm_mem = symm_mem
        _memcpy2d()  # a missing runtime fails here, on every rank, not inside an exchange
        with warnings.catch_warnings():  # torch < 2.9 needs it; later ones say it is no longer needed
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(ctx.ulysses_group.group_name)
        self.ctx, self.degree = ctx, ctx.ulysses_degree
        self.stream = torch.cuda.Stream(ctx.device, priority=-1)  # its barriers start ahead of attention's blocks
        self.timeout_ms = int((ctx.timeout_s + NCCL_GRACE_S) * 1000)
        self.buffer: torch.Tensor | None = None
        self.handle = None

    def workspace(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """This rank's symmetric buffer of at least ``numel`` elements of ``dtype``."""
        if self.buffer is None or self.buffer.numel() < numel or self.buffer.dtype != dtype:
            if self.buffer is not None:  # no copy may still read or write the old one
                torch.cuda.synchronize(self.ctx.device)
                dist.barrier(group=self.ctx.ulysses_group)
            self.buffer = self.handle = None
            buffer = self._symm_mem.empty(numel, dtype=dtype, device=self.ctx.device)
            self.handle = self._symm_mem.rendezvous(buffer, self.ctx.ulysses_group.group_name)
            self.buffer = buffer
        return self.buffer

    def start(
        self,
        sizes: list[int],
        rank: int,
        b: int,
        group_sizes: list[int],
        d: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> _CopyEngineCall:
        """The exchange of one self-attention call (``sizes``: tokens per rank)."""
        return _CopyEngineCall(self, sizes, rank, b, group_sizes, d, dtype, device)

    def barrier(self) -> None:
        self.handle.barrier(channel=0, timeout_ms=self.timeout_ms)


class _CopyEngineCall(_Call):
    """q, k, v and the output token-major in the workspace: ``tensor(j, i)`` is rank j's
    tensor i (0-2: q, k, v; 3: output), [B, L_j, N, D]."""

    def __init__(self, transport: CopyEngineTransport, sizes, rank, b, group_sizes, d, dtype, device):
        super().__init__(sizes, rank, b, group_sizes, d, dtype, device)
        self.t = transport
        self.shape = (b, max(sizes), transport.degree * self.h, d)  # one tensor's slot
        self.slot = b * max(sizes) * transport.degree * self.h * d
        ws = transport.workspace(4 * self.slot, dtype)
        self.mine = [ws[i * self.slot : (i + 1) * self.slot].view(self.shape)[:, : sizes[rank]] for i in range(4)]
        self.done: list = []  # each group's output push

    def tensor(self, j: int, i: int) -> torch.Tensor:
        if j == self.rank:
            return self.mine[i]
        return self.t.handle.get_buffer(j, self.shape, self.t.buffer.dtype, i * self.slot)[:, : self.sizes[j]]

    def store(self, i: int, t: torch.Tensor) -> None:
        """Write ``t`` [B, L_r, N, D] (any dtype: rounded to the workspace's) as tensor ``i``."""
        self.mine[i].copy_(t)

    def project(self, i: int, linear: torch.nn.Linear, x: torch.Tensor) -> None:
        """Tensor ``i`` as ``linear(x)`` (x: [B, L_r, dim]), one GEMM per batch row into the
        workspace. Inference only: ``out=`` records no gradients."""
        for row in range(x.shape[0]):
            torch.addmm(linear.bias, x[row], linear.weight.t(), out=self.mine[i][row].flatten(1))

    @contextmanager
    def _after_barrier(self):
        """Queue what the block queues on the transport's stream, after the compute stream's
        work so far and a barrier of every rank."""
        self.t.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.t.stream):
            self.t.barrier()
            yield

    def _event(self) -> torch.cuda.Event:
        """An event at this point of the transport's stream; its ``wait()`` makes the current
        stream wait for it."""
        done = torch.cuda.Event()
        done.record(self.t.stream)
        return done

    def send(self, tensors: tuple[int, ...]) -> None:
        """Pull this rank's heads of ``tensors`` of every rank's tokens, group by group, one
        barrier for all, an event after each group's copies."""
        heads = self.rank * self.h
        with self._after_barrier():
            for g, (first, hg) in enumerate(self.groups):
                for i in tensors:
                    start = 0
                    for j, n in enumerate(self.sizes):
                        src = self.tensor(j, i)[:, :, heads + first : heads + first + hg]  # [B, n, hg, D]
                        for b in range(src.shape[0]):
                            copy_rows(
                                self.recv[g][i, start : start + n, b].flatten(1), src[b].flatten(1), self.t.stream
                            )
                        start += n
                self.works[g].append(self._event())

    def send_output(self, g: int, o: torch.Tensor) -> None:
        """Push each rank's tokens of group ``g``'s output ``o`` [B, L, hg, D] into that rank's
        output, at this rank's heads."""
        if o.stride(3) != 1 or o.stride(2) != o.shape[3]:
            o = o.contiguous()
        o.record_stream(self.t.stream)  # the copies read it after the compute stream moved on
        first, hg = self.groups[g]
        heads = self.rank * self.h + first
        with self._after_barrier():
            start = 0
            for j, n in enumerate(self.sizes):
                dst = self.tensor(j, 3)[:, :, heads : heads + hg]  # [B, n, hg, D]
                for b in range(o.shape[0]):
                    copy_rows(dst[b].flatten(1), o[b, start : start + n].flatten(1), self.t.stream)
                start += n
            self.t.barrier()  # every rank's rows have landed in this rank's output
            self.done.append(self._event())

    def output(self) -> torch.Tensor:
        """[B, L_r, N, D]: every head of this rank's tokens, in the workspace."""
        for done in self.done:
            done.wait()
        return self.mine[3]
