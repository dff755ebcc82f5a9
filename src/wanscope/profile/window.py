"""The profiled window: which denoising steps a capture sees, and how it is switched on and off.

The driver calls ``start()`` before the first denoising step, ``after_step(i)`` after each
step (outside the step's range) and ``stop()`` once the loop ends or fails. Steps
``warmup .. warmup + profile_steps - 1`` are captured:

- ``KinetoWindow``: torch.profiler (CPU, and CUDA activities where there is a GPU; shapes and
  Python stacks) on a ``schedule``; the last warm-up step doubles as the profiler's own warm-up,
  so the first profiled step does not carry the profiler's start-up cost.
- ``CudaProfilerWindow``: ``cudaProfilerStart``/``cudaProfilerStop`` around the profiled steps,
  for ``nsys profile --capture-range=cudaProfilerApi``. No torch.profiler in that process: CUPTI
  takes one subscriber per process.

On a GPU the host runs ahead of the device in the sync-free loop, so both wait for the device
before the window opens (the warm-up's queued kernels stay out of it). Before the window
closes, torch.profiler synchronizes by itself and ``CudaProfilerWindow`` does the same, so the
last profiled step's kernels are in the capture: that one ``cudaDeviceSynchronize`` after the
last profiled step is the profiler's, not the engine's.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch


class KinetoWindow:
    """torch.profiler over the profiled steps; the trace goes to ``trace_path`` (a ``.json.gz``)
    through a temporary name and a rename, and only when every profiled step completed.

    Args:
        trace_path: where the Chrome-JSON trace goes.
        warmup, profile_steps: steps before the window, steps in it.
        cuda: record CUDA activities and wait for the device before the window opens.
        metadata: JSON-ready values stored in the trace's top level under ``wanscope_run``.
    """

    def __init__(self, trace_path: Path, warmup: int, profile_steps: int, cuda: bool, metadata: dict):
        self.trace_path = trace_path
        self.warmup = warmup
        self.last = warmup + profile_steps - 1
        self.cuda = cuda
        self.metadata = metadata
        self._complete = False
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=max(warmup - 1, 0), warmup=min(warmup, 1), active=profile_steps, repeat=1
            ),
            on_trace_ready=self._export,
            record_shapes=True,
            with_stack=True,
        )

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self._prof.start()

    def after_step(self, index: int) -> None:
        if index == self.warmup - 1 and self.cuda:
            torch.cuda.synchronize()  # still in the profiler's warm-up: not recorded
        if index == self.last:
            self._prof.add_metadata_json("wanscope_run", json.dumps(self.metadata, default=str))
            self._complete = True
        self._prof.step()

    def stop(self) -> None:
        self._prof.stop()  # without every profiled step (an error, Ctrl-C), _export writes nothing

    def _export(self, prof) -> None:
        if not self._complete:
            return
        # the name must end in .gz for torch to compress it
        fd, tmp = tempfile.mkstemp(prefix=".trace-", suffix=".json.gz", dir=self.trace_path.parent)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.trace_path)
        except BaseException:
            os.unlink(tmp)
            raise


class CudaProfilerWindow:
    """``cudaProfilerStart`` before the first profiled step, ``cudaProfilerStop`` after the last
    (Nsight Systems and Nsight Compute capture ranges)."""

    def __init__(self, warmup: int, profile_steps: int):
        self.warmup = warmup
        self.last = warmup + profile_steps - 1
        self._open = False

    def start(self) -> None:
        if self.warmup == 0:
            self._begin()

    def after_step(self, index: int) -> None:
        if index == self.warmup - 1:
            self._begin()
        elif index == self.last:
            self.stop()

    def stop(self) -> None:
        if self._open:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            self._open = False

    def _begin(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        self._open = True
