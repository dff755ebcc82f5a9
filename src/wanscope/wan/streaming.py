"""A model's blocks run from host memory through two device slots, the next block's copy
overlapping the current block's compute.

``BlockStream(blocks, device)`` moves every tensor of each block (parameters and buffers,
views of one storage kept views of it) into host memory: one pinned buffer per block
(``pin=True``, for a model run many times, as the DiT is once per step) or left where the
model's loader put it, e.g. a memory-mapped checkpoint (``pin=False``, for one pass, as the
text encoder's). The device then holds two slots of one block's size. Iterating the stream
yields the blocks in order; before block ``i`` is yielded its bytes are in a slot and its
tensors point into it, and the copy of the next block into the other slot is queued on a side
stream behind the compute that last read that slot (CUDA events order the two streams; no
host sync). The blocks run the same kernels in the same order as resident ones, so the output
is bit-identical.

While streamed, a block's tensors are valid only inside the iteration that yielded it: read
its weights (``state_dict``) before streaming, not after.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import weakref
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

ALIGN = 256  # bytes: each storage's offset in a packed buffer (any element size divides it)


def _tensors(block: nn.Module) -> list[torch.Tensor]:
    """Every parameter and buffer of ``block``, each once."""
    seen: dict[int, torch.Tensor] = {}
    for m in block.modules():
        for t in (*m._parameters.values(), *m._buffers.values()):
            if t is not None:
                seen.setdefault(id(t), t)
    return list(seen.values())


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """The bytes [start, end) of ``t``'s storage that ``t`` reads."""
    start = t.storage_offset() * t.element_size()
    if t.numel() == 0:
        return start, start
    last = sum((n - 1) * s for n, s in zip(t.size(), t.stride(), strict=True))
    return start, start + (last + 1) * t.element_size()


def _file_mappings() -> list[tuple[int, int]]:
    """The address ranges [lo, hi) of this process's memory-mapped regular files none of whose
    pages it has written (``/proc/self/smaps``: a path, ``Anonymous: 0 kB``; not ``/dev/``
    files, ``memfd:`` or deleted files, which may stand for anonymous memory), sorted; empty
    where there are none (not Linux)."""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return []
    ranges, current = [], None
    for line in lines:
        fields = line.split(maxsplit=5)
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's first line
            path = fields[5] if len(fields) == 6 else ""
            current = None
            if path.startswith("/") and not path.startswith(("/dev/", "/memfd:")) and not path.endswith("(deleted)"):
                lo, hi = fields[0].split("-")
                current = (int(lo, 16), int(hi, 16))
        elif current is not None and fields[0] == "Anonymous:" and fields[1] == "0":
            ranges.append(current)
    return sorted(ranges)


_LIBC = ctypes.CDLL(None, use_errno=True) if hasattr(mmap, "MADV_DONTNEED") else None


def _drop_file_pages(src: torch.Tensor, files: list[tuple[int, int]]) -> None:
    """Tell the kernel this process no longer needs the whole pages of ``src`` (CPU bytes) if an
    unwritten memory-mapped file backs them (``_file_mappings``; ``madvise(MADV_DONTNEED)``):
    they leave the process's resident memory and stay in the page cache, and a later read
    faults them in from the file again. So packing a checkpoint's blocks holds the packed copy
    and one block of the file, not the file twice. Memory no such file backs is left alone
    (DONTNEED would zero it, or undo writes to a private map); a refusal changes nothing."""
    addr, end = src.data_ptr(), src.data_ptr() + src.numel()
    i = bisect.bisect_right(files, (addr, float("inf"))) - 1
    if _LIBC is None or i < 0 or not files[i][0] <= addr < end <= files[i][1]:
        return
    page = mmap.PAGESIZE
    lo, hi = -(-addr // page) * page, end // page * page
    if hi > lo:
        _LIBC.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), mmap.MADV_DONTNEED)


class _Layout:
    """One block's tensors and where each lies in its packed bytes.

    The part of each storage the block's tensors read (from an ``ALIGN``-aligned start: a
    memory-mapped checkpoint's tensors may share one storage of the whole file) goes at an
    ``ALIGN``-aligned offset. ``sources``: (uint8 view of that part, its offset in the block's
    bytes); ``places``: (tensor, element offset into the block's bytes, size, stride)."""

    def __init__(self, block: nn.Module):
        tensors = _tensors(block)
        spans: dict[int, list] = {}  # storage data_ptr -> [storage, lo, hi]
        for t in tensors:
            start, end = _extent(t)
            span = spans.setdefault(t.untyped_storage().data_ptr(), [t.untyped_storage(), start, end])
            span[1], span[2] = min(span[1], start), max(span[2], end)
        self.sources: list[tuple[torch.Tensor, int]] = []
        at: dict[int, tuple[int, int]] = {}  # storage data_ptr -> (lo, offset)
        size = 0
        for key, (storage, lo, hi) in spans.items():
            lo -= lo % ALIGN
            whole = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
            self.sources.append((whole[lo:hi], size))
            at[key] = (lo, size)
            size += -(-(hi - lo) // ALIGN) * ALIGN
        self.places = []
        for t in tensors:
            lo, offset = at[t.untyped_storage().data_ptr()]
            start = t.storage_offset() * t.element_size()
            self.places.append((t, (offset + start - lo) // t.element_size(), t.size(), t.stride()))
        self.nbytes = size
        self.slot = -1  # the slot the tensors point into (-1: none)

    def point_into(self, buffer: torch.Tensor) -> None:
        """Each tensor a view of ``buffer`` (uint8, ``ALIGN``-aligned) at its place, on
        ``buffer``'s device (``.data`` is swapped: the modules keep their tensor objects)."""
        storage, base, device = buffer.untyped_storage(), buffer.storage_offset(), buffer.device
        with torch.no_grad():
            for t, offset, size, stride in self.places:
                view = torch.empty(0, dtype=t.dtype, device=device)
                t.data = view.set_(storage, base // t.element_size() + offset, size, stride)


class BlockStream:
    """Iterate to run ``blocks`` (same-structured modules, e.g. a DiT's) streamed onto ``device``.

    Args:
        blocks: the blocks, their tensors on any device (moved out of it here).
        device: where they run; a CUDA device copies on a side stream, any other copies in line.
        pin: pack each block into one pinned host buffer (copied once here; the pages of a
            memory-mapped checkpoint read for it leave the process as each block is packed:
            ``_drop_file_pages``); False: keep each block's storages where they are (they must
            be in host memory).

    Attributes:
        slot_bytes: the device memory of one slot (the largest block, storages aligned to
            ``ALIGN``); two are held.
        host_bytes: the host memory the blocks occupy.

    Raises:
        ValueError: ``pin=False`` with a block's tensor outside host memory.
    """

    def __init__(self, blocks: nn.ModuleList, device: torch.device | str, pin: bool = True):
        self.blocks = list(blocks)
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.layouts = [_Layout(b) for b in self.blocks]
        self.host_bytes = sum(layout.nbytes for layout in self.layouts)
        if pin:
            host = self._pinned(self.host_bytes)
            files = _file_mappings()
            at = 0
            for layout in self.layouts:
                buf = host[at : at + layout.nbytes]
                for src, offset in layout.sources:
                    buf[offset : offset + len(src)].copy_(src)
                    _drop_file_pages(src, files)
                layout.point_into(buf)
                layout.sources = [(buf, 0)]
                at += layout.nbytes
        for layout in self.layouts:
            for src, _ in layout.sources:
                if src.device.type != "cpu":
                    raise ValueError(f"pin=False streams blocks that are in host memory; one is on {src.device}")
        self.host = [layout.sources for layout in self.layouts]
        self.slot_bytes = max((layout.nbytes for layout in self.layouts), default=0)
        self.slots = [torch.empty(self.slot_bytes, dtype=torch.uint8, device=self.device) for _ in range(2)]
        self.holds = [-1, -1]  # the block each slot holds (or is being filled with)
        self.loads = 0  # copies queued so far: the next goes to slot loads % 2
        if self.cuda:
            self.copy_stream = torch.cuda.Stream(self.device)
            self.ready = [torch.cuda.Event() for _ in range(2)]
            self.free = [torch.cuda.Event() for _ in range(2)]

    def _pinned(self, nbytes: int) -> torch.Tensor:
        """``nbytes`` of host memory, page-locked where the device is CUDA (registered with
        ``cudaHostRegister``, exactly its size: torch's pinned allocator rounds a request up to
        a power of two) and unregistered when the stream is collected."""
        buf = torch.empty(nbytes, dtype=torch.uint8)
        if self.cuda and nbytes:
            cudart = torch.cuda.cudart()
            if int(cudart.cudaHostRegister(buf.data_ptr(), nbytes, 0)) == 0:
                weakref.finalize(self, cudart.cudaHostUnregister, buf.data_ptr())
        return buf

    def __len__(self) -> int:
        return len(self.blocks)

    def _load(self, i: int) -> None:
        """Queue block ``i``'s copy into the next slot, after the compute that read it last."""
        s = self.loads % 2
        self.loads += 1
        self.holds[s] = i
        slot = self.slots[s]
        if not self.cuda:
            for src, offset in self.host[i]:
                slot[offset : offset + len(src)].copy_(src)
            return
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(self.free[s])
            for src, offset in self.host[i]:
                slot[offset : offset + len(src)].copy_(src, non_blocking=True)
            self.ready[s].record(self.copy_stream)

    def __iter__(self) -> Iterator[nn.Module]:
        n = len(self.blocks)
        for i, block in enumerate(self.blocks):
            if i not in self.holds:
                self._load(i)
            s = self.holds.index(i)
            if self.cuda:
                torch.cuda.current_stream(self.device).wait_event(self.ready[s])
            if self.layouts[i].slot != s:
                self.layouts[i].point_into(self.slots[s])
                self.layouts[i].slot = s
            nxt = (i + 1) % n
            if nxt not in self.holds:  # the next block, or the next forward's first
                self._load(nxt)
            yield block
            if self.cuda:
                self.free[s].record(torch.cuda.current_stream(self.device))


def stream_blocks(
    model: nn.Module, blocks: nn.ModuleList, device: torch.device | str, pin: bool, on_host: tuple[nn.Module, ...] = ()
) -> BlockStream:
    """Run ``model`` (its tensors in host memory) on ``device`` with ``blocks`` streamed: every
    other tensor moves to ``device`` except those of the ``on_host`` modules (e.g. an embedding
    looked up on the host). Returns the ``BlockStream``; the caller sets it on the model."""
    keep = {id(t) for m in (*blocks, *on_host) for t in _tensors(m)}
    with torch.no_grad():
        for m in model.modules():
            for group in (m._parameters, m._buffers):
                for name, t in group.items():
                    if t is not None and id(t) not in keep:
                        if isinstance(t, nn.Parameter):
                            t.data = t.data.to(device)
                        else:
                            group[name] = t.to(device)
    return BlockStream(blocks, device, pin=pin)
