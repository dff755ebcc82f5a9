"""Checkpoint tensors from host memory to the GPU through pinned staging buffers.

A memory-mapped tensor's ``.to("cuda")`` is a pageable copy: the driver stages it through a
small pinned buffer of its own while the host thread waits, one tensor at a time. Here the
bytes of many tensors are packed, by torch's multithreaded CPU copy (which also takes the page
faults of the mapping), into one of two pinned buffers while the other buffer's bytes travel to
the device as one asynchronous copy per piece on the current stream: the host-side copy and the
transfer overlap, and the host holds only the two buffers beside the page cache. A tensor whose
dtype is to change is copied as stored and cast on the device.
"""

from __future__ import annotations

import torch

STAGE_BYTES = 64 << 20  # per staging buffer; two of them (a few tens of ms to pin, once per process)


def to_device(tensors: list[torch.Tensor], dtypes: list[torch.dtype], device: torch.device | str) -> list[torch.Tensor]:
    """``tensors[i].to(device, dtypes[i])`` for each i, through pinned staging on CUDA.

    Args:
        tensors: CPU tensors (memory-mapped or not), any dtypes and shapes.
        dtypes: the dtype of each result, one per tensor.
        device: where the results go; off CUDA each is a plain ``.to`` (no copy where nothing
            changes).

    Returns:
        The tensors on ``device`` in ``dtypes``, equal to ``.to``'s; on CUDA contiguous, their
        copies queued on ``device``'s current stream (ordered before later work on that stream;
        another stream must wait for it).

    Raises:
        ValueError: ``tensors`` and ``dtypes`` differ in length.
    """
    if len(tensors) != len(dtypes):
        raise ValueError(f"{len(tensors)} tensors but {len(dtypes)} dtypes")
    device = torch.device(device)
    if device.type != "cuda":
        return [t.to(device=device, dtype=d) for t, d in zip(tensors, dtypes, strict=True)]
    total = sum(t.numel() * t.element_size() for t in tensors)
    if not total:
        return [torch.empty(t.shape, dtype=d, device=device) for t, d in zip(tensors, dtypes, strict=True)]
    with torch.cuda.device(device):  # events and streams are the current device's
        return staged_copy(tensors, dtypes, device, pin_memory=True, stage_bytes=min(STAGE_BYTES, total))


def staged_copy(
    tensors: list[torch.Tensor],
    dtypes: list[torch.dtype],
    device: torch.device,
    pin_memory: bool,
    stage_bytes: int = STAGE_BYTES,
) -> list[torch.Tensor]:
    """The copy of ``to_device`` through two staging buffers of ``stage_bytes`` (>= 1; pinned
    with ``pin_memory``): on CUDA (``device`` the current device) a buffer is refilled once an
    event after its last transfer has passed; elsewhere each copy is synchronous (how the packing
    is tested on the CPU). Each tensor is cast, where its dtype changes, right after its bytes
    are queued, so the device holds one uncast tensor at a time.

    Raises:
        ValueError: ``stage_bytes`` < 1.
    """
    if stage_bytes < 1:
        raise ValueError(f"stage_bytes must be >= 1, not {stage_bytes}")
    cuda = device.type == "cuda"
    buffers = [torch.empty(stage_bytes, dtype=torch.uint8, pin_memory=pin_memory) for _ in range(2)]
    in_flight: list[torch.cuda.Event | None] = [None, None]
    slot, fill = 0, 0
    out = []
    for t, dtype in zip(tensors, dtypes, strict=True):
        dst = torch.empty(t.shape, dtype=t.dtype, device=device)
        src = t.contiguous().reshape(-1).view(torch.uint8)
        dst_bytes = dst.reshape(-1).view(torch.uint8)
        done, n = 0, src.numel()
        while done < n:
            if fill == stage_bytes:  # this buffer is full: mark it, take the other one
                if cuda:
                    in_flight[slot] = torch.cuda.Event()
                    in_flight[slot].record()
                slot, fill = 1 - slot, 0
                if in_flight[slot] is not None:
                    in_flight[slot].synchronize()
                    in_flight[slot] = None
            size = min(n - done, stage_bytes - fill)
            piece = buffers[slot][fill : fill + size]
            piece.copy_(src[done : done + size])
            dst_bytes[done : done + size].copy_(piece, non_blocking=cuda)
            done += size
            fill += size
        out.append(dst if dst.dtype == dtype else dst.to(dtype))
    return out
