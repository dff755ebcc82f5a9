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
the start-up and exit levers". Results are the same either way: the threads only make process-wide state ready earlier. A main
thread that needs CUDA first waits for the initialization (torch's lazy initialization holds a
lock); one that needs Triton's key first computes it itself. A failure on a thread is ignored:
the main thread meets the same error where it would have anyway.
"""

from __future__ import annotations

import os
import sys
import threading


def _cuda_context(device: str | None) -> None:
    import torch

    from wanscope.wan.options import parse_device  # imported already by the command

    try:
        name = parse_device(device, torch.cuda.device_count())
        if name != "cpu":
            torch.cuda.synchronize(torch.device(name))  # CUDA's init and the device's primary context
    except Exception:  # noqa: BLE001 - the main thread meets it (or refuses the name) where it needs the device
        pass


def _triton_key() -> None:
    try:
        from triton.runtime.cache import triton_key  # internal to Triton; imported already

        triton_key()  # functools.lru_cache'd: the kernels' first cache lookup reuses it
    except Exception:  # noqa: BLE001 - the main thread meets it where it needs it
        pass


def _daemon(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=f"wanscope{target.__name__}", daemon=True)
    thread.start()
    return thread


_STARTED: list[threading.Thread] = []  # begin's thread, for settle


def begin(device: str | None, parallel: str | None) -> threading.Thread | None:
    """Start CUDA's initialization and the primary context of ``--device`` ``device`` on a
    daemon thread; call it right after ``import torch``, before the engine's other imports. The
    thread checks the name as the command does (``options.parse_device``) and does nothing for
    ``cpu`` or a name the command will refuse.

    Nothing starts under ``--parallel`` or torchrun (``LOCAL_RANK`` set: each rank's device is
    chosen later, and a context on another rank's GPU would cost that GPU memory) or for
    ``--device cpu``. Returns the thread, or None.
    """
    if parallel is not None or "LOCAL_RANK" in os.environ or (device or "").strip() == "cpu":
        return None
    thread = _daemon(_cuda_context, device)
    _STARTED.append(thread)
    return thread


def settle(timeout: float = 60.0) -> None:
    """Wait (up to ``timeout`` s) for ``begin``'s thread: before a failed run ends, so that the
    process does not exit while the thread is inside the driver's initialization."""
    while _STARTED:
        _STARTED.pop().join(timeout)


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
