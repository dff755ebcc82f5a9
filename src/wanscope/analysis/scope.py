"""What an analysis looks at: the steps in scope, as the arguments of the SQL macros.

The definitions (GPU activity, windows, steps' GPU intervals, busy islands) are DuckDB macros
(``stdlib.sql``, docs/sql.md), each taking the step bounds ``step_from`` and ``step_to``; a
:class:`Scope` writes its step range as their arguments (:attr:`Scope.args`).
"""

from __future__ import annotations

from dataclasses import dataclass

from wanscope.errors import UsageError


def parse_step_range(text: str | None) -> tuple[int | None, int | None] | None:
    """Parse ``A:B`` (half-open, as a Python slice; either end may be omitted).

    Raises:
        UsageError: not of the form A:B with integers.
    """
    if text is None:
        return None
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            raise ValueError
        bounds = (int(lo) if lo.strip() else None, int(hi) if hi.strip() else None)
    except ValueError:
        raise UsageError(f"--step-range {text!r}: expected A:B with integer step numbers, e.g. 2:5") from None
    if None not in bounds and bounds[0] >= bounds[1]:
        raise UsageError(f"--step-range {text!r} selects no step: A <= step < B needs A below B")
    return bounds


def step_list(steps: list[int]) -> str:
    """Step numbers written with runs joined: ``[1, 2, 3, 7]`` -> ``1-3, 7``."""
    runs: list[list[int]] = []
    for n in sorted(set(steps)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)


@dataclass(frozen=True)
class Scope:
    """The slice of the trace being analyzed.

    Attributes:
        step_range: half-open ``(A, B)`` of step numbers, or None for the whole trace.
    """

    step_range: tuple[int | None, int | None] | None = None

    def bounds(self) -> tuple[int | None, int | None] | None:
        """The macros' ``(step_from, step_to)``; None for the whole trace. ``:`` (every step) is
        ``(0, None)``: step numbers are never negative, and both bounds NULL would be the whole
        trace."""
        if self.step_range is None:
            return None
        lo, hi = self.step_range
        return (0 if lo is None and hi is None else lo, hi)

    @property
    def args(self) -> str:
        """The step range as a table macro's arguments (``FROM gpu_activity({scope.args})``):
        ``step_from := 2, step_to := 5`` for 2:5, ``step_to := 5`` for :5, empty for the whole
        trace."""
        bounds = self.bounds() or (None, None)
        return ", ".join(f"{name} := {int(v)}" for name, v in zip(("step_from", "step_to"), bounds) if v is not None)

    def check(self, con) -> None:
        """Refuse a step range that selects none of the trace's steps (an empty analysis would
        read as a trace without GPU activity).

        Raises:
            UsageError: naming the range and the trace's steps, or saying it has none.
        """
        if self.step_range is None:
            return
        steps = [int(n) for (n,) in con.execute("SELECT DISTINCT step FROM steps WHERE step IS NOT NULL").fetchall()]
        lo, hi = self.step_range
        if any((lo is None or n >= lo) and (hi is None or n < hi) for n in steps):
            return
        text = f"{'' if lo is None else lo}:{'' if hi is None else hi}"
        have = (
            f"the trace's steps are {step_list(steps)}"
            if steps
            else "the trace has no steps (no wanscope/step#k or ProfilerStep#N ranges)"
        )
        raise UsageError(f"--step-range {text} selects no step: {have}")

    def overlaps_steps(self, rank: str, pid: str, start_ns: str, end_ns: str) -> str:
        """SQL condition: the host interval ``start_ns``..``end_ns`` of process ``pid`` of
        ``rank`` overlaps a selected step's CPU range (the macro ``overlaps_steps``); TRUE
        without a step range. The four are qualified column expressions (``o.rank``)."""
        bounds = self.bounds()
        if bounds is None:
            return "TRUE"
        lo, hi = ("NULL" if v is None else str(int(v)) for v in bounds)
        return f"overlaps_steps({rank}, {pid}, {start_ns}, {end_ns}, {lo}, {hi})"
