"""Start-up work of a ``generate`` process moved off its critical path, on side threads.

Before its first model loads, the command spends its time importing the engine's modules, which
is Python work holding the GIL; two pieces of start-up work it would do later, one after the
other, are waiting on the driver or hashing files, which release the GIL. So ``begin`` starts
them on a daemon thread right after ``import torch``:

- CUDA's initialization and the device's primary context (``torch.cuda.synchronize`` on it:
  the driver's ``cuInit`` and context creation, no memory allocated);
- Triton's key of its own install (``triton.runtime.cache.triton_key``, a hash of Triton's source
  and libraries that every kernel's cache lookup needs and that is computed once per process, at
  the first kernel's launch).

``read_ahead`` has the kernel read a checkpoint's files ahead of the loads, on another.

The first two would otherwise run on the main thread: the context at the memory plan's first CUDA call,
the key inside the first denoising step. Their cost and what the overlap saves, on an H200:
``benchmarks/RESULTS.md``, "2026-12-06: time to video". Results are the same either way: the
thread only makes process-wide state ready earlier. A main thread that needs CUDA first waits
for the thread's initialization (torch's lazy initialization holds a lock); one that needs
Triton's key first computes it itself. A failure on the thread is ignored: the main thread meets
the same error where it would have anyway.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path


def _warm(index: int | None) -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize(index)  # CUDA's init and the primary context of that device
            from triton.runtime.cache import triton_key  # internal to Triton

            triton_key()  # functools.lru_cache'd: the kernels' first cache lookup reuses it
    except (ImportError, OSError, RuntimeError):  # the main thread meets it where it needs it
        pass


def device_index(device: str | None) -> int | None:
    """The CUDA device that ``--device`` names (None: the current one), or -1 where it names
    none (``cpu``, or a name that ``parse_device`` will refuse later)."""
    if device is None or device == "cuda":
        return None
    if device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    return -1


def begin(device: str | None, parallel: str | None) -> threading.Thread | None:
    """Start the module docstring's work for ``--device`` ``device`` on a daemon thread.

    Nothing starts under ``--parallel`` or torchrun (``LOCAL_RANK`` set: each rank's device is
    chosen later, and a context on another rank's GPU would cost that GPU memory) or where
    ``device`` names no CUDA device. Returns the thread (callers need not join it), or None.
    """
    index = device_index(device)
    if parallel is not None or "LOCAL_RANK" in os.environ or index == -1:
        return None
    thread = threading.Thread(target=_warm, args=(index,), name="wanscope-warm-start", daemon=True)
    thread.start()
    return thread


def _read_ahead(paths: list[Path]) -> None:
    for root in paths:
        files = sorted(root.glob("*.safetensors")) if root.is_dir() else [root]
        for path in files:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:  # the load reports it
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


def read_ahead(paths: Iterable[Path]) -> threading.Thread | None:
    """Have the kernel read the checkpoint's files into the page cache, ``paths`` (files, or
    folders: the ``.safetensors`` files in each) in the order given, the order the stages load them, on a
    daemon thread (``posix_fadvise(POSIX_FADV_WILLNEED)``: the kernel reads ahead of the loads'
    page faults, so a model's file is read from disk while the models before it load and run).
    Files already in the page cache cost nothing. Returns the thread, or None where the system
    has no ``posix_fadvise`` (macOS, Windows)."""
    if not hasattr(os, "posix_fadvise"):
        return None
    thread = threading.Thread(target=_read_ahead, args=(list(paths),), name="wanscope-read-ahead", daemon=True)
    thread.start()
    return thread
