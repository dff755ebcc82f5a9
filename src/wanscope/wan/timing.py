"""Where a generation's time goes: wall time per stage and the time of each denoising step.

Stages (loading each model, text encoding, denoising, the VAE decode) are timed on the host
clock with the device synchronized at each stage's end, outside the denoising loop. Steps are
timed without a sync in the loop: on CUDA an event is recorded after each step and the
elapsed times are read once the loop is over; elsewhere the host clock is read after each step.
"""

from __future__ import annotations

import contextlib
import time

import torch


class StageTimes:
    """``with times("name"): ...`` records the block's wall time in ``times.s[name]`` (seconds),
    ``device`` synchronized before the clock is read."""

    def __init__(self, device: torch.device):
        self.device = device
        self.s: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        yield
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.s[name] = round(time.perf_counter() - start, 4)


class StepTimes:
    """``start()`` before the loop, ``mark()`` after each step, ``seconds()`` after the loop: the
    time of each step in seconds (CUDA events on CUDA: the GPU's time from one step's end to the
    next's, the first from ``start``)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def _now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def start(self) -> None:
        self.marks = [self._now()]

    def mark(self) -> None:
        self.marks.append(self._now())

    def seconds(self) -> list[float]:
        if self.cuda:
            self.marks[-1].synchronize()
            return [round(a.elapsed_time(b) / 1e3, 4) for a, b in zip(self.marks, self.marks[1:])]
        return [round(b - a, 4) for a, b in zip(self.marks, self.marks[1:])]
