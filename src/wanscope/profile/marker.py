"""``wanscope.step()``: mark your program's steps, for ``wanscope profile -- COMMAND`` (its
``marker`` step rule) and for any torch.profiler trace of it.

``wanscope.step()`` begins a step here (ending the one open); ``with wanscope.step(): ...`` makes
the block one step. Under ``wanscope profile`` the bootstrap in the program's process counts the
steps and opens the profiler's window on them; elsewhere each step is a torch.profiler range
``wanscope/step#k`` (k from 0), which ``wanscope analyze`` takes as the step. Importing this
module imports nothing; the first step outside ``wanscope profile`` imports torch.
"""

from __future__ import annotations

import sys

STEP_RANGE = "wanscope/step#"  # analysis/steps.py reads the same name


class _Ranges:
    """The steps outside ``wanscope profile``: the open range and the next step's index."""

    open = None
    next_index = 0


def _boot():
    return sys.modules.get("_wanscope_boot")  # loaded by the bootstrap's sitecustomize


class step:  # lower case: used as a function, wanscope.step()
    """A step of the program: it begins when this is called and ends at the next call, or at
    the end of the ``with`` block."""

    def __init__(self) -> None:
        boot = _boot()
        if boot is not None:
            boot.begin_step("marker")
            return
        _end_range()
        from torch.autograd.profiler import record_function

        _Ranges.open = record_function(f"{STEP_RANGE}{_Ranges.next_index}")
        _Ranges.next_index += 1
        _Ranges.open.__enter__()

    def __enter__(self) -> step:
        return self

    def __exit__(self, *exc) -> None:
        boot = _boot()
        if boot is not None:
            boot.end_step("marker")
        else:
            _end_range()


def _end_range() -> None:
    if _Ranges.open is not None:
        rng, _Ranges.open = _Ranges.open, None
        rng.__exit__(None, None, None)
