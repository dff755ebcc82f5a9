"""Record the CUDA caching allocator's history in this process (needs torch; the engine's
``wanscope profile --memory-history``; the bootstrap of ``profile -- COMMAND`` does the same
with the standard library alone, ``profile/bootstrap/_wanscope_boot.py``).

The history is torch's ``_record_memory_history(enabled="all", context="alloc",
stacks="python", max_entries=MAX_ENTRIES)``: every allocator event with the Python stack of
the allocation it concerns (a free carries its allocation's stack: ``context="alloc"`` records
no stack of its own for it), in a ring buffer of the latest ``MAX_ENTRIES`` events per device.
The snapshot is torch's ``_snapshot()`` with ``RECORDING_KEY`` added (these settings, and when
it was dumped), pickled through a temporary name and a rename.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
from pathlib import Path

import torch

from wanscope.memory.snapshot import RECORDING_KEY

MAX_ENTRIES = 100_000  # _wanscope_boot.MEMORY_MAX_ENTRIES
CONTEXT, STACKS = "alloc", "python"
SNAPSHOT_NAME = "memory_snapshot.pickle"


def start() -> None:
    """Start recording (initializes CUDA)."""
    torch.cuda.memory._record_memory_history(enabled="all", context=CONTEXT, stacks=STACKS, max_entries=MAX_ENTRIES)


def stop() -> None:
    """Stop recording; torch drops the history."""
    torch.cuda.memory._record_memory_history(enabled=None)


def recording_info(dumped: str) -> dict:
    """The ``RECORDING_KEY`` entry: the recording's settings, ``dumped`` (``end``, ``oom``,
    ``exit``) and torch's version (a plain str: torch's str subclass, pickled, would name its
    class, which ``wanscope memory`` refuses to load)."""
    return {
        "max_entries": MAX_ENTRIES,
        "context": CONTEXT,
        "stacks": STACKS,
        "dumped": dumped,
        "torch": str(torch.__version__),
    }


def dump(path: Path, dumped: str) -> Path:
    """Write the snapshot to ``path`` (through a temporary name in its folder); returns it."""
    snapshot = torch.cuda.memory._snapshot()
    snapshot[RECORDING_KEY] = recording_info(dumped)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(snapshot, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def recorded(path: Path):
    """Record the allocator's history inside the block and dump it to ``path`` at its end, or,
    where the block raises ``torch.cuda.OutOfMemoryError``, before that propagates (the failing
    frames, held by the exception, still hold their tensors); then stop recording. Another
    error or an interrupt dumps nothing."""
    start()
    try:
        yield
    except torch.cuda.OutOfMemoryError:
        dump(path, "oom")
        raise
    else:
        dump(path, "end")
    finally:
        stop()
