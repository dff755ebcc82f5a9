"""Start-up work of a ``generate`` process moved off its critical path, onto daemon threads.

Before its first model loads, the command spends its time importing the engine's modules, Python
work that holds the GIL; two pieces of start-up work that it would do later, one after the
other, wait on the driver or hash files, which release the GIL:

- CUDA's initialization and the device's primary context (``begin``: ``torch.cuda.synchronize``
  on it, the driver's ``cuInit`` and context creation, no memory allocated), otherwise made at
  the memory plan's first CUDA call;
- Triton's key of its own install (``hash_triton``: ``triton.runtime.cache.triton_key``, a hash
  of Triton's sources and library that every kernel's cache lookup needs, computed once per
  process), otherwise computed inside the first denoising step.

Their cost and what the overlap saves: ``benchmarks/RESULTS.md``, "2026-12-06: time to video,
the start-up and exit levers".
Results are the same either way: the threads only make process-wide state ready earlier. A main
thread that needs CUDA first waits for the initialization (torch's lazy initialization holds a
lock); one that needs Triton's key first computes it itself. A failure on a thread is ignored:
the main thread meets the same error where it would have anyway.
"""

from __future__ import annotations

import os
import sys
import threading


def _cuda_context(index: int | None) -> None:
    import torch

    try:
        if torch.cuda.is_available():
            torch.cuda.synchronize(index)  # CUDA's init and the primary context of that device
    except RuntimeError:  # the main thread meets it where it needs the device
        pass


def _triton_key() -> None:
    try:
        from triton.runtime.cache import triton_key  # internal to Triton; imported already

        triton_key()  # functools.lru_cache'd: the kernels' first cache lookup reuses it
    except (ImportError, OSError, RuntimeError):  # the main thread meets it where it needs it
        pass


def _daemon(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=f"wanscope{target.__name__}", daemon=True)
    thread.start()
    return thread


def device_index(device: str | None) -> int | None:
    """The CUDA device that ``--device`` names (None: the current one), or -1 where it names
    none (``cpu``, or a name that ``parse_device`` will refuse later)."""
    if device is None or device == "cuda":
        return None
    if device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    return -1


def begin(device: str | None, parallel: str | None) -> threading.Thread | None:
    """Start CUDA's initialization and the primary context of ``--device`` ``device`` on a
    daemon thread; call it right after ``import torch``, before the engine's other imports.

    Nothing starts under ``--parallel`` or torchrun (``LOCAL_RANK`` set: each rank's device is
    chosen later, and a context on another rank's GPU would cost that GPU memory) or where
    ``device`` names no CUDA device. Returns the thread (callers need not join it), or None.
    """
    index = device_index(device)
    if parallel is not None or "LOCAL_RANK" in os.environ or index == -1:
        return None
    return _daemon(_cuda_context, index)


def hash_triton() -> threading.Thread | None:
    """Start computing Triton's key on a daemon thread, where Triton is imported. Call it once
    the engine's modules are imported and where the main thread mostly waits (``pipeline``:
    during the text encoding and the DiT's load): the key walks Triton's packages with
    ``pkgutil.walk_packages``, which imports them, and two threads importing the same modules at
    once can deadlock in Python's import locks (once, a run that hashed beside the main thread's
    imports ran SDPA instead of our Hopper kernel); beside the text encoder's load it slowed the
    load by about as much as it saved. Returns the thread, or None."""
    if "triton" not in sys.modules:
        return None
    return _daemon(_triton_key)
