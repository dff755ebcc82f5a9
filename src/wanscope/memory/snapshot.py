"""Read a CUDA allocator snapshot: the pickle ``torch.cuda.memory._dump_snapshot`` writes.

The snapshot is a dict: ``segments`` (the allocator's segments at the dump, each with its
``blocks``) and ``device_traces`` (per device, the recorded allocator events, oldest first).
It is read with an unpickler that builds only data (dicts, lists, tuples, strings, bytes,
numbers, booleans, None) and refuses every class or function a pickle names, so a hostile
file cannot run code: nothing it names is ever imported or called. Then its layout is checked
(the fields ``analysis.py`` reads, with their types), so that the analysis can trust it.
"""

from __future__ import annotations

import io
import os
import pickle
import stat
from pathlib import Path

from wanscope.errors import InputError, file_kind

# The trace's actions (torch's TraceEntry), and the fields each carries that the replay reads.
ALLOC, FREE_REQUESTED, FREE_COMPLETED = "alloc", "free_requested", "free_completed"
SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP, SEGMENT_UNMAP = (
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
)
OOM, SNAPSHOT = "oom", "snapshot"
_FIELDS = {
    ALLOC: ("addr", "size"),
    FREE_REQUESTED: ("addr", "size"),
    FREE_COMPLETED: ("addr", "size"),
    SEGMENT_ALLOC: ("addr", "size"),
    SEGMENT_FREE: ("addr", "size"),
    SEGMENT_MAP: ("addr", "size"),
    SEGMENT_UNMAP: ("addr", "size"),
    OOM: ("size", "device_free"),
}
# A block's states: in use by a tensor; freed but still used by another stream (torch's
# docstring spells it active_awaiting_free, its snapshot active_pending_free); free.
ACTIVE_ALLOCATED, INACTIVE = "active_allocated", "inactive"
PENDING_FREE = ("active_pending_free", "active_awaiting_free")
BLOCK_STATES = (ACTIVE_ALLOCATED, *PENDING_FREE, INACTIVE)
# The metadata ``wanscope profile --memory-history`` adds (torch's readers pass over it).
RECORDING_KEY = "wanscope_recording"


class Refused(pickle.UnpicklingError):
    """The pickle names a class or function, or a persistent id: not plain data."""


class DataUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only. Every opcode that would import or call
    something (GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE on what they gave, the extension
    registry) goes through ``find_class``, which refuses; persistent ids are refused too."""

    def find_class(self, module, name):
        raise Refused(f"it names {module}.{name}")

    def persistent_load(self, pid):
        raise Refused("it holds a persistent id")


def loads_data(data: bytes):
    """Unpickle ``data`` as plain data. Raises ``Refused`` where it names a class or function,
    ``pickle.UnpicklingError`` (or EOFError, ValueError, ...) where it is not a pickle."""
    return DataUnpickler(io.BytesIO(data)).load()


def read_snapshot(path) -> dict:
    """The snapshot in ``path``, read as data and checked.

    Raises:
        InputError: naming ``path``: not a regular file, unreadable, not a pickle, a pickle
            that names a class or function (refused unread), not a memory snapshot, or a
            snapshot whose fields have the wrong types (with where).
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, f"is {file_kind(st.st_mode)}, not a snapshot file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    try:
        obj = loads_data(data)
    except Refused as e:
        raise InputError(path, f"refused: {e}; a memory snapshot holds only data (nothing was run)") from None
    except RecursionError:
        raise InputError(path, "not a memory snapshot (nested too deeply)") from None
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - any failure to parse means the same to the user
        raise InputError(
            path, "not a pickle (a memory snapshot is the pickle torch.cuda.memory._dump_snapshot writes)"
        ) from None
    try:
        check(obj)
    except ValueError as e:
        raise InputError(path, str(e)) from None
    return obj


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_optional(item: dict, where: str, keys: tuple[str, ...], checked: set[int]) -> None:
    """Raise ValueError naming ``where`` for one of ``keys`` present in ``item`` that is not an
    integer, or ``frames`` present that is not a list of frames."""
    for key in keys:
        if key in item and not _int(item[key]):
            raise ValueError(f"{where}.{key}: not an integer")
    if "frames" in item and not _frames_ok(item["frames"], checked):
        raise ValueError(f"{where}.frames: not a list of frames (filename, line, name)")


def _frames_ok(frames, checked: set[int]) -> bool:
    """A list of frames (``filename``, ``line``, ``name``); lists already checked (torch shares
    one list among the events of one stack) are passed over by their id."""
    if id(frames) in checked:
        return True
    ok = isinstance(frames, list) and all(
        isinstance(f, dict)
        and isinstance(f.get("filename"), str)
        and _int(f.get("line"))
        and isinstance(f.get("name"), str)
        for f in frames
    )
    if ok:
        checked.add(id(frames))
    return ok


def check(obj) -> None:
    """Raise ValueError (its text: what is wrong, and where) unless ``obj`` has the layout of a
    snapshot: ``segments`` a list of segments (``device``, ``address``, ``total_size`` ints,
    ``blocks`` a list of blocks with ``size`` and ``state``, optional ``requested_size``,
    ``address`` and ``frames``), ``device_traces`` a list of lists of events (``action`` a
    string, each action's fields ints, optional ``frames``, ``stream``, ``time_us``)."""
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("segments"), list)
        or not isinstance(obj.get("device_traces"), list)
    ):
        raise ValueError("a pickle, but not a memory snapshot (a dict with 'segments' and 'device_traces' lists)")
    checked: set[int] = set()
    for i, seg in enumerate(obj["segments"]):
        where = f"segments[{i}]"
        if not isinstance(seg, dict):
            raise ValueError(f"{where}: not a segment")
        for key in ("device", "address", "total_size"):
            if not _int(seg.get(key, 0 if key == "device" else None)):
                raise ValueError(f"{where}.{key}: not an integer")
        if not isinstance(seg.get("blocks"), list):
            raise ValueError(f"{where}.blocks: not a list")
        for j, block in enumerate(seg["blocks"]):
            bwhere = f"{where}.blocks[{j}]"
            if not isinstance(block, dict) or not _int(block.get("size")):
                raise ValueError(f"{bwhere}: not a block with a size")
            if block.get("state") not in BLOCK_STATES:
                raise ValueError(f"{bwhere}.state: {block.get('state')!r}, not one of {', '.join(BLOCK_STATES)}")
            _check_optional(block, bwhere, ("requested_size", "address"), checked)
    for d, trace in enumerate(obj["device_traces"]):
        if not isinstance(trace, list):
            raise ValueError(f"device_traces[{d}]: not a list of events")
        for i, e in enumerate(trace):
            where = f"device_traces[{d}][{i}]"
            if not isinstance(e, dict) or not isinstance(e.get("action"), str):
                raise ValueError(f"{where}: not an event with an action")
            for key in _FIELDS.get(e["action"], ()):
                if not _int(e.get(key)):
                    raise ValueError(f"{where}.{key}: not an integer ({e['action']} event)")
            _check_optional(e, where, ("stream", "time_us"), checked)
    recording = obj.get(RECORDING_KEY)
    if recording is not None and not isinstance(recording, dict):
        raise ValueError(f"{RECORDING_KEY}: not a dict")
