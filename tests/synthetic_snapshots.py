"""CUDA allocator snapshots built in the tests, in the layout torch's ``_snapshot()`` returns:
``Allocator`` plays a caching allocator's events (segments, allocations, frees, an
out-of-memory error) on one device and writes the trace and the segments at the dump, each
block of a segment as torch lists it (live blocks rounded up to 512 bytes, free ranges as
inactive blocks), so that the two agree as a real snapshot's do."""

from __future__ import annotations

import pickle
from pathlib import Path

MIB = 1 << 20
GIB = 1 << 30
BLOCK = 512


def frames(*where: str) -> list[dict]:
    """Frames, innermost first, from ``"file.py:12:name"`` texts."""
    out = []
    for w in where:
        filename, line, name = w.rsplit(":", 2)
        out.append({"filename": filename, "line": int(line), "name": name})
    return out


TORCH_LINEAR = "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125:forward"
TORCH_MODULE = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1775:_call_impl"


class Allocator:
    """One device's allocator events, in order; ``time_us`` advances by 10 per event."""

    def __init__(self, device: int = 0, start_us: int = 1_000_000):
        self.device = device
        self.events: list[dict] = []
        self.segments: dict[int, int] = {}  # address -> size
        self.live: dict[int, tuple[int, list, str]] = {}  # address -> (requested size, frames, state)
        self.t = start_us

    def _event(self, action: str, **fields) -> dict:
        e = {"action": action, **fields, "stream": fields.get("stream", 0), "time_us": self.t}
        e.setdefault("compile_context", "N/A")
        self.t += 10
        self.events.append(e)
        return e

    def segment(self, addr: int, size: int) -> None:
        self.segments[addr] = size
        self._event("segment_alloc", addr=addr, size=size, frames=[])

    def release(self, addr: int) -> None:
        size = self.segments.pop(addr)
        self._event("segment_free", addr=addr, size=size, frames=[])

    def alloc(self, addr: int, size: int, stack: list | None = None) -> None:
        self.live[addr] = (size, stack or [], "active_allocated")
        self._event("alloc", addr=addr, size=size, frames=stack or [])

    def free(self, addr: int, complete: bool = True) -> None:
        size, stack, _ = self.live[addr]
        self._event("free_requested", addr=addr, size=size, frames=stack)
        if complete:
            del self.live[addr]
            self._event("free_completed", addr=addr, size=size, frames=stack)
        else:
            self.live[addr] = (size, stack, "active_pending_free")

    def oom(self, size: int, device_free: int, stack: list | None = None) -> None:
        self._event("oom", device_free=device_free, size=size, frames=stack or [])

    def blocks(self, addr: int, size: int) -> list[dict]:
        out, at = [], addr
        for a in sorted(x for x in self.live if addr <= x < addr + size):
            requested, stack, state = self.live[a]
            if a > at:
                out.append({"address": at, "size": a - at, "requested_size": 0, "state": "inactive", "frames": []})
            rounded = -(-requested // BLOCK) * BLOCK
            out.append({"address": a, "size": rounded, "requested_size": requested, "state": state, "frames": stack})
            at = a + rounded
        if at < addr + size:
            out.append(
                {"address": at, "size": addr + size - at, "requested_size": 0, "state": "inactive", "frames": []}
            )
        return out

    def dump_segments(self) -> list[dict]:
        return [
            {
                "device": self.device,
                "address": addr,
                "total_size": size,
                "allocated_size": sum(b["size"] for b in self.blocks(addr, size) if b["state"] == "active_allocated"),
                "stream": 0,
                "segment_type": "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": self.blocks(addr, size),
            }
            for addr, size in sorted(self.segments.items())
        ]


def snapshot(*allocators: Allocator, keep_last: int | None = None, recording: dict | None = None) -> dict:
    """The snapshot of the allocators' devices; ``keep_last``: a ring buffer that kept only the
    latest events of each device; ``recording``: the metadata ``wanscope profile`` adds."""
    traces: list[list] = [[] for _ in range(max(a.device for a in allocators) + 1)]
    segments = []
    for a in allocators:
        traces[a.device] = list(a.events if keep_last is None else a.events[-keep_last:])
        segments += a.dump_segments()
    out = {"segments": segments, "device_traces": traces, "allocator_settings": {}, "external_annotations": []}
    if recording is not None:
        out["wanscope_recording"] = recording
    return out


def write(path: Path, obj) -> Path:
    path.write_bytes(pickle.dumps(obj))
    return path
