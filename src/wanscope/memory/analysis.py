"""Replay a CUDA allocator snapshot per device: the peak of allocated memory, or the failed
allocation of an out-of-memory error, and what was live there, grouped by the Python stack
that allocated it. ``docs/memory.md`` has the definitions in prose, ``docs/json.md`` ("memory
JSON") the layout of what ``analyze_snapshot`` returns.

- **Live**: an allocation is *allocated* from its ``alloc`` event to its ``free_requested``
  (the program freed it; ``torch.cuda.memory_allocated`` drops there), then *pending free*
  until its ``free_completed`` (another stream may still use it: the allocator cannot reuse
  it yet). Its size is the size the program requested (the events' ``size``); the allocator
  rounds each request up to its block granularity and may hand out a larger block.
- **Reserved**: the sum of the allocator's segments (``segment_alloc``/``segment_free``, and
  ``segment_map``/``segment_unmap`` for expandable segments). **Reserved but unused** is
  reserved minus allocated minus pending free: free blocks in the segments plus each live
  block's rounding beyond its request (the fragmentation of the caching allocator).
- **The moment**: the device's last ``oom`` event where there is one (the state at the failed
  request: the allocator has already returned its wholly free segments to CUDA by then), else
  the first event after which allocated is at its highest (the peak); with no event at all,
  the dump itself (the ``segments``).
- **Before the trace**: the ring buffer keeps the latest ``max_entries`` events, and a
  recording may start after allocations were made, so the state before the first event is
  rebuilt from the dump: an address whose first event is a free held an allocation already;
  a block live at the dump with no event was live all along; reserved at the start is
  reserved at the dump less the trace's segment changes. Such allocations keep the stack of
  their block at the dump (where they are still live) or, in our own recordings
  (``context='alloc'``, where a free event carries its allocation's stack), of their free.
- **Where**: an allocation's stack (``frames``, innermost first) is grouped by its innermost
  frame outside torch's package, Inductor's generated code and Python's standard library (the
  innermost frame where every frame is one of those); an allocation with no Python frame
  (C++ code, autograd's backward thread, or a recording without stacks) is grouped apart.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass

from wanscope.memory.snapshot import (
    ACTIVE_ALLOCATED,
    ALLOC,
    FREE_COMPLETED,
    FREE_REQUESTED,
    INACTIVE,
    OOM,
    PENDING_FREE,
    RECORDING_KEY,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    SEGMENT_MAP,
    SEGMENT_UNMAP,
)
from wanscope.report.units import fmt_bytes

SCHEMA_VERSION = 1
TIMELINE_POINTS = 400
NO_FRAME = "(no Python frame: C++ code, autograd's backward thread, or recorded without stacks)"
BEFORE_NO_FRAME = "(allocated before the trace's first event; no stack recorded)"
_LIBRARY = re.compile(r"(?:^|/)torch/|/torchinductor_|^<frozen |/lib/python3\.\d+/(?!.*(?:site|dist)-packages/)")
_SITE = re.compile(r"^.*/(?:site|dist)-packages/")
_ADDRESSED = (ALLOC, FREE_REQUESTED, FREE_COMPLETED)
_GROWS = (SEGMENT_ALLOC, SEGMENT_MAP)
_SHRINKS = (SEGMENT_FREE, SEGMENT_UNMAP)


@dataclass(slots=True)
class _Allocation:
    size: int
    frames: list
    pending: bool
    before: bool  # made before the trace's first event


@dataclass(slots=True)
class _Totals:
    allocated: int = 0
    pending: int = 0
    reserved: int = 0
    inconsistent: int = 0  # frees of nothing live, allocations over a live one


def library_frame(filename: str) -> bool:
    """Whether a frame is torch's, Inductor's generated code or Python's own (not the user's)."""
    return bool(_LIBRARY.search(filename))


def short_path(filename: str) -> str:
    """A frame's file without the installation prefix (``.../site-packages/``)."""
    return _SITE.sub("", filename)


def frame_text(frame: dict) -> str:
    return f"{short_path(frame['filename'])}:{frame['line']} in {frame['name']}"


def where(frames: list, before: bool = False) -> tuple[str, dict | None]:
    """(the group's text, its frame) for an allocation's stack: its innermost frame outside
    the libraries (``library_frame``), else its innermost frame, else a text of its own."""
    if not frames:
        return (BEFORE_NO_FRAME if before else NO_FRAME), None
    frame = next((f for f in frames if not library_frame(f["filename"])), frames[0])
    return frame_text(frame), frame


def _frame_json(frame: dict) -> dict:
    return {"filename": frame["filename"], "line": frame["line"], "name": frame["name"]}


def _live_at_dump(segments: list) -> dict[int, dict]:
    """Address -> block, for the blocks live (allocated or pending free) at the dump."""
    out = {}
    for seg in segments:
        address = seg["address"]
        for block in seg["blocks"]:
            address = block.get("address", address)
            if block["state"] != INACTIVE:
                out[address] = block
            address += block["size"]
    return out


def _initial(trace: list, at_dump: dict[int, dict], frees_carry_stacks: bool) -> dict[int, _Allocation]:
    """The allocations live before the trace's first event (see the module's docstring)."""
    first: dict[int, dict] = {}
    for e in trace:
        if e["action"] in _ADDRESSED:
            first.setdefault(e["addr"], e)
    live = {}
    for addr, e in first.items():
        if e["action"] != ALLOC:
            frames = (e.get("frames") or []) if frees_carry_stacks else []
            live[addr] = _Allocation(e["size"], frames, e["action"] == FREE_COMPLETED, True)
    for addr, block in at_dump.items():
        if addr not in first:
            size = block.get("requested_size", block["size"])
            live[addr] = _Allocation(size, block.get("frames") or [], block["state"] != ACTIVE_ALLOCATED, True)
    return live


def _apply(live: dict[int, _Allocation], e: dict, t: _Totals) -> None:
    """One event's change to the live allocations and the totals."""
    action = e["action"]
    if action == ALLOC:
        old = live.get(e["addr"])
        if old is not None:  # an allocation over a live one: the trace lost its free
            t.inconsistent += 1
            if old.pending:
                t.pending -= old.size
            else:
                t.allocated -= old.size
        live[e["addr"]] = _Allocation(e["size"], e.get("frames") or [], False, False)
        t.allocated += e["size"]
    elif action == FREE_REQUESTED:
        a = live.get(e["addr"])
        if a is None or a.pending:
            t.inconsistent += 1
        else:
            a.pending = True
            t.allocated -= a.size
            t.pending += a.size
    elif action == FREE_COMPLETED:
        a = live.pop(e["addr"], None)
        if a is None:
            t.inconsistent += 1
        elif a.pending:
            t.pending -= a.size
        else:
            t.allocated -= a.size
    elif action in _GROWS:
        t.reserved += e["size"]
    elif action in _SHRINKS:
        t.reserved -= e["size"]


def _start_totals(live: dict[int, _Allocation], reserved: int) -> _Totals:
    allocated = sum(a.size for a in live.values() if not a.pending)
    pending = sum(a.size for a in live.values() if a.pending)
    return _Totals(allocated, pending, reserved)


def _dump_state(segments: list) -> dict:
    """What the segments say at the dump (exact: block sizes as the allocator handed them out)."""
    blocks = [b for s in segments for b in s["blocks"]]
    active = [b for b in blocks if b["state"] == ACTIVE_ALLOCATED]
    inactive = [b["size"] for b in blocks if b["state"] == INACTIVE]
    return {
        "segments": len(segments),
        "expandable": any(bool(s.get("is_expandable")) for s in segments),
        "reserved_bytes": sum(s["total_size"] for s in segments),
        "allocated_bytes": sum(b.get("requested_size", b["size"]) for b in active),
        "allocations": len(active),
        "block_bytes": sum(b["size"] for b in active),
        "pending_free_bytes": sum(b["size"] for b in blocks if b["state"] in PENDING_FREE),
        "inactive_bytes": sum(inactive),
        "largest_inactive_block_bytes": max(inactive, default=0),
    }


def _groups(live: dict[int, _Allocation], top: int, allocated: int) -> tuple[list[dict], dict]:
    groups: dict[str, dict] = {}
    for a in live.values():
        if a.pending:
            continue
        text, frame = where(a.frames, a.before)
        g = groups.get(text)
        if g is None:
            g = groups[text] = {
                "where": text,
                "frame": None if frame is None else _frame_json(frame),
                "bytes": 0,
                "pct": None,
                "allocations": 0,
                "largest_bytes": -1,
                "stack": [],
            }
        g["bytes"] += a.size
        g["allocations"] += 1
        if a.size > g["largest_bytes"]:
            g["largest_bytes"] = a.size
            g["stack"] = a.frames
    ordered = sorted(groups.values(), key=lambda g: (-g["bytes"], g["where"]))
    for g in ordered:
        g["pct"] = round(100.0 * g["bytes"] / allocated, 4) if allocated > 0 else None
        g["stack"] = [_frame_json(f) for f in g["stack"]]
    rest = ordered[top:]
    other = {
        "groups": len(rest),
        "allocations": sum(g["allocations"] for g in rest),
        "bytes": sum(g["bytes"] for g in rest),
    }
    return ordered[:top], other


def _timeline(times: list[int] | None, allocated: array, reserved: array, keep: int | None) -> list[list[int]]:
    """At most ``TIMELINE_POINTS`` (x, allocated, reserved) points, x the time in ns after the
    first event (or the event's index without times): equal runs of events, each at its
    highest allocated, plus the moment ``keep``."""
    n = len(allocated)
    if n <= TIMELINE_POINTS:
        chosen = list(range(n))
    else:
        chosen = []
        for k in range(TIMELINE_POINTS):
            lo, hi = k * n // TIMELINE_POINTS, (k + 1) * n // TIMELINE_POINTS
            chosen.append(max(range(lo, hi), key=allocated.__getitem__))
        if keep is not None and keep not in chosen:
            chosen = sorted([*chosen, keep])
    return [[i if times is None else times[i], allocated[i], reserved[i]] for i in chosen]


def _begins_mid_run(trace: list) -> bool:
    """Whether an event frees an allocation or a segment made before the trace's first event."""
    first: dict = {}
    for e in trace:
        action = e["action"]
        if action in _ADDRESSED:
            first.setdefault(("block", e["addr"]), action)
        elif action in _GROWS or action in _SHRINKS:
            first.setdefault(("segment", e["addr"]), action)
    return any(a not in (ALLOC, *_GROWS) for a in first.values())


def _mismatches(live: dict[int, _Allocation], at_dump: dict[int, dict]) -> int:
    """Allocations that differ between the replay's end and the dump (address, size, state)."""
    count = len(live.keys() ^ at_dump.keys())
    for addr in live.keys() & at_dump.keys():
        a, b = live[addr], at_dump[addr]
        if a.size != b.get("requested_size", b["size"]) or a.pending != (b["state"] != ACTIVE_ALLOCATED):
            count += 1
    return count


def _oom(trace: list, ooms: list[int], times: list[int] | None) -> dict:
    """The failed request: the last ``oom`` event."""
    i = ooms[-1]
    e = trace[i]
    frames = e.get("frames") or []
    text, frame = where(frames)
    return {
        "index": i,
        "time_ns": None if times is None else times[i],
        "size_bytes": e["size"],
        "stream": e.get("stream"),
        "device_free_bytes": e["device_free"],
        "where": text,
        "frame": None if frame is None else _frame_json(frame),
        "stack": [_frame_json(f) for f in frames],
        "events": len(ooms),
    }


def _device(snapshot: dict, device: int, top: int, recording: dict | None) -> dict:
    """One device's part of the document (without its notes: ``device_notes``)."""
    segments = [s for s in snapshot["segments"] if s.get("device", 0) == device]
    traces = snapshot["device_traces"]
    trace = traces[device] if device < len(traces) else []
    dump = _dump_state(segments)
    at_dump = _live_at_dump(segments)
    frees_carry_stacks = (recording or {}).get("context") == "alloc"

    def initial() -> dict[int, _Allocation]:
        return _initial(trace, at_dump, frees_carry_stacks)

    change = 0
    for e in trace:
        if e["action"] in _GROWS:
            change += e["size"]
        elif e["action"] in _SHRINKS:
            change -= e["size"]
    start_reserved = dump["reserved_bytes"] - change

    # first pass: the totals after every event, the peak, the out-of-memory events
    live = initial()
    start = _start_totals(live, start_reserved)
    start_count = len(live)
    t = _Totals(start.allocated, start.pending, start.reserved)
    allocated, reserved = array("q"), array("q")
    peak, peak_index, peak_reserved, ooms = start.allocated, None, start.reserved, []
    for i, e in enumerate(trace):
        _apply(live, e, t)
        allocated.append(t.allocated)
        reserved.append(t.reserved)
        if t.allocated > peak:
            peak, peak_index = t.allocated, i
        if t.reserved > peak_reserved:
            peak_reserved = t.reserved
        if e["action"] == OOM:
            ooms.append(i)
    times = None
    if trace and all("time_us" in e for e in trace):
        t0 = trace[0]["time_us"]
        times = [(e["time_us"] - t0) * 1000 for e in trace]

    # second pass: the live allocations at the moment
    if not trace:
        kind, index = "dump", None
        moment = {
            addr: _Allocation(
                b.get("requested_size", b["size"]), b.get("frames") or [], b["state"] != ACTIVE_ALLOCATED, False
            )
            for addr, b in at_dump.items()
        }
        totals = _start_totals(moment, dump["reserved_bytes"])
    else:
        kind, index = ("oom", ooms[-1]) if ooms else ("peak", peak_index)
        moment = initial()
        totals = _start_totals(moment, start_reserved)
        if index is not None:
            for e in trace[: index + 1]:
                _apply(moment, e, totals)
    groups, other = _groups(moment, top, totals.allocated)
    unused = totals.reserved - totals.allocated - totals.pending
    max_entries = (recording or {}).get("max_entries")
    return {
        "device": device,
        "at": {"kind": kind, "index": index, "time_ns": None if times is None or index is None else times[index]},
        "allocated_bytes": totals.allocated,
        "allocations": sum(1 for a in moment.values() if not a.pending),
        "pending_free_bytes": totals.pending,
        "reserved_bytes": totals.reserved,
        "reserved_unused_bytes": unused,
        "reserved_unused_pct": round(100.0 * unused / totals.reserved, 4) if totals.reserved > 0 else None,
        "peak_allocated_bytes": peak,
        "peak_index": peak_index,
        "peak_reserved_bytes": peak_reserved,
        "oom": _oom(trace, ooms, times) if ooms else None,
        "groups": groups,
        "other": other,
        "trace": {
            "events": len(trace),
            "begins_mid_run": _begins_mid_run(trace),
            "ring_buffer_full": len(trace) >= max_entries if _int(max_entries) else None,
            "start_allocations": start_count,
            "start_allocated_bytes": start.allocated,
            "start_reserved_bytes": start_reserved,
            "inconsistent_events": t.inconsistent,
            "dump_mismatches": _mismatches(live, at_dump) if trace else 0,
            "timeline_axis": "event" if times is None else "time_ns",
        },
        "dump": dump,
        "timeline": _timeline(times, allocated, reserved, index),
    }


def device_notes(d: dict) -> list[str]:
    """What a reader must know of one device's numbers: where they come from and what is off."""
    dev, tr = d["device"], d["trace"]
    out = []
    if tr["events"] == 0:
        out.append(
            f"device {dev}: the snapshot has no trace events (recorded with enabled='state', or nothing was "
            "allocated while it recorded): the allocations live at the dump are listed."
        )
    if tr["ring_buffer_full"]:
        out.append(
            f"device {dev}: the trace holds {tr['events']:,} events, the recording's max_entries: its ring "
            "buffer is full and dropped the oldest events."
        )
    if tr["begins_mid_run"]:
        out.append(
            f"device {dev}: the trace begins after allocations were made ({tr['start_allocations']:,} were live "
            "before its first event: the ring buffer keeps only the latest max_entries events, or the recording "
            "started late); the state before it is rebuilt from the segments at the dump, and the peak is the "
            "recorded part's."
        )
    if tr["inconsistent_events"] or tr["dump_mismatches"]:
        out.append(
            f"device {dev}: {tr['inconsistent_events']:,} events do not fit the allocations live before them and "
            f"{tr['dump_mismatches']:,} allocations differ between the replayed trace and the segments at the "
            "dump: the trace and the segments disagree, and the totals may be off by those."
        )
    oom = d["oom"]
    if oom is not None:
        size, free, unused = oom["size_bytes"], oom["device_free_bytes"], d["reserved_unused_bytes"]
        if unused >= size:
            out.append(
                f"device {dev}: the failed allocation asked for {fmt_bytes(size)} while the allocator held "
                f"{fmt_bytes(unused)} reserved but unused: enough in sum, but in pieces each smaller than the "
                "request (fragmentation); PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets a segment grow "
                "instead."
            )
        elif free >= size:
            out.append(
                f"device {dev}: the device reported {fmt_bytes(free)} free, more than the failed request of "
                f"{fmt_bytes(size)}: a per-process limit (torch.cuda.set_per_process_memory_fraction) refused it."
            )
        else:
            out.append(
                f"device {dev}: the failed allocation asked for {fmt_bytes(size)}, more than the device's free "
                f"{fmt_bytes(free)} and the allocator's {fmt_bytes(unused)} reserved but unused: the live "
                "allocations listed fill the memory."
            )
        if oom["events"] > 1:
            out.append(f"device {dev}: {oom['events']} out-of-memory errors in the trace; the last is shown.")
    return out


def _recording(value) -> dict | None:
    if not isinstance(value, dict):
        return None
    keep = {"max_entries": int, "context": str, "stacks": str, "dumped": str, "torch": str}
    return {k: value.get(k) if isinstance(value.get(k), t) else None for k, t in keep.items()}


def analyze_snapshot(snapshot: dict, top: int = 10) -> dict:
    """The memory document of a snapshot checked by ``snapshot.check``: one entry per device
    with trace events or segments, by device (``docs/json.md``, "memory JSON"); ``top``
    groups listed per device before ``other``."""
    recording = _recording(snapshot.get(RECORDING_KEY))
    traces = snapshot["device_traces"]
    devices = sorted({i for i, t in enumerate(traces) if t} | {s.get("device", 0) for s in snapshot["segments"]})
    docs = [_device(snapshot, d, top, recording) for d in devices]
    notes = [n for d in docs for n in device_notes(d)]
    if not docs:
        notes.append("the snapshot is empty: no segments and no trace events (no CUDA allocation while it recorded).")
    return {"schema_version": SCHEMA_VERSION, "recording": recording, "devices": docs, "notes": notes}


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
