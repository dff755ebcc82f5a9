"""The denoising bar's estimate leaves out the first step, which compiles kernels."""

import io

from wanscope.wan.progress import StepProgress


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_the_estimate_comes_from_the_steady_steps():
    clock = Clock()
    out = io.StringIO()
    bar = StepProgress(50, "denoising", clock=clock, file=out)
    clock.t += 11.1  # the first step compiles
    bar.step(first=True)
    assert bar.postfix() == "first step 11.1 s"
    clock.t += 0.9
    bar.step()
    assert bar.postfix() == "first step 11.1 s, 0.90 s/step, ~43 s left"  # 48 steps at 0.9 s
    clock.t += 1.1
    bar.step()
    assert bar.postfix() == "first step 11.1 s, 1.00 s/step, ~47 s left"
    bar.close()
    assert "first step 11.1 s, 1.00 s/step, ~47 s left" in out.getvalue()
    assert "3/50" in out.getvalue()


def test_two_modes_each_have_a_first_step():
    clock = Clock()
    bar = StepProgress(4, "exact, then fast", clock=clock, file=io.StringIO())
    for first, dt in ((True, 10.0), (False, 1.0), (True, 12.0)):
        clock.t += dt
        bar.step(first=first)
    assert bar.postfix() == "first steps 22.0 s, 1.00 s/step, ~1 s left"
