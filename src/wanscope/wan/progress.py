"""The denoising progress bar: its estimate comes from the steady steps, not the first.

A run's first step compiles kernels (Triton, cuDNN and cuBLAS choices) and can take ten times a
steady step; tqdm's own rate averages it in and, after the first step, forecasts the run from
it. This bar shows the first step's time on its own and, from the second step on, the mean of
the steps after it and the time the remaining steps take at that rate.
"""

from __future__ import annotations

import sys
import time

BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


class StepProgress:
    """A tqdm bar over ``total`` steps. Call ``step(first=...)`` after each step; ``first``
    marks a step that compiles (the run's first, or each mode's first in ``compare-modes``),
    which the steady rate leaves out. ``clock`` returns seconds (``time.perf_counter``)."""

    def __init__(self, total: int, desc: str, disable: bool = False, clock=time.perf_counter, file=None):
        from tqdm import tqdm

        self.bar = tqdm(
            total=total,
            desc=desc,
            unit="step",
            file=file or sys.stderr,
            dynamic_ncols=True,
            disable=disable,
            bar_format=BAR_FORMAT,
        )
        self.clock = clock
        self.last = clock()
        self.first_s: list[float] = []
        self.steady_s: list[float] = []

    def step(self, first: bool = False) -> None:
        now = self.clock()
        (self.first_s if first else self.steady_s).append(now - self.last)
        self.last = now
        self.bar.update(1)
        self.bar.set_postfix_str(self.postfix())

    def postfix(self) -> str:
        """``first step T s`` then, from the second step on, ``, R s/step, ~L s left``."""
        parts = []
        if self.first_s:
            parts.append(f"first step{'s' if len(self.first_s) > 1 else ''} {sum(self.first_s):.1f} s")
        if self.steady_s:
            rate = sum(self.steady_s) / len(self.steady_s)
            left = (self.bar.total - self.bar.n) * rate
            parts += [f"{rate:.2f} s/step", f"~{left:.0f} s left"]
        return ", ".join(parts)

    def close(self) -> None:
        self.bar.close()
