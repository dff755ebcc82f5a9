"""What an analysis looks at: the GPU activity in scope and its window, as SQL.

Definitions (docs/design.md, "Definitions"):
- GPU activity: kernels, memcpy and memset records with valid times (ingest already
  dropped zero-timestamp and negative-duration records and counted them; records of zero
  duration are activity).
- Window: first GPU activity start to last GPU activity end per (rank, device); with a
  step range, the union of the selected steps' GPU intervals.
- A step's GPU interval runs from the first start to the last end of the GPU activity
  launched inside its CPU range (launch = the API call with the same correlation id in the
  same process).
"""

from __future__ import annotations

from dataclasses import dataclass

from wanscope.analysis.categories import OTHER, sql_case
from wanscope.errors import UsageError

# A kernel's category depends on its name only: classified once per distinct name (a few
# hundred regular-expression CASEs instead of one per launch).
ACTIVITY_SQL = f"""
  SELECT k.rank, k.device, k.stream, k.start_ns, k.end_ns, k.dur_ns, k.name, 'kernel' AS kind,
         k.correlation, k.pid, coalesce(c.category, '{OTHER}') AS category
  FROM kernels k
  LEFT JOIN (SELECT name, {sql_case("name")} AS category FROM (SELECT DISTINCT name FROM kernels)) c
    ON c.name = k.name
  UNION ALL
  SELECT rank, device, stream, start_ns, end_ns, dur_ns, name, kind, correlation, pid,
         CASE WHEN kind = 'memcpy' THEN 'memcpy_' || coalesce(copy_kind, 'unknown') ELSE 'memset' END
  FROM memops
"""

STEP_GPU_SQL = """
  SELECT s.rank, s.step, s.pid, s.tid, s.start_ns AS cpu_start_ns, s.end_ns AS cpu_end_ns,
         min(a.start_ns) AS gpu_start_ns, max(a.end_ns) AS gpu_end_ns, count(a.start_ns) AS gpu_ops
  FROM steps s
  LEFT JOIN api_calls c ON c.rank = s.rank AND c.pid = s.pid AND c.start_ns BETWEEN s.start_ns AND s.end_ns
  LEFT JOIN _all_activity a ON a.rank = c.rank AND a.pid = c.pid AND a.correlation = c.correlation
  GROUP BY ALL
"""


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

    def _step_filter(self) -> str:
        lo, hi = self.step_range
        parts = ["TRUE"]
        if lo is not None:
            parts.append(f"step >= {int(lo)}")
        if hi is not None:
            parts.append(f"step < {int(hi)}")
        return " AND ".join(parts)

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

    def in_steps(self, rank: str, pid: str, start_ns: str) -> str:
        """SQL condition: host time ``start_ns`` of process ``pid`` of ``rank`` falls inside
        a selected step's CPU range; TRUE without a step range. The three are qualified
        column expressions (``o.rank``): a bare ``rank`` would name the step's own."""
        if self.step_range is None:
            return "TRUE"
        return (
            f"EXISTS (SELECT 1 FROM steps _s WHERE _s.rank = {rank} AND _s.pid = {pid} "
            f"AND {start_ns} BETWEEN _s.start_ns AND _s.end_ns AND {self._step_filter()})"
        )

    def overlaps_steps(self, rank: str, pid: str, start_ns: str, end_ns: str) -> str:
        """SQL condition: the host interval ``start_ns``..``end_ns`` of process ``pid`` of
        ``rank`` overlaps a selected step's CPU range (ends included); TRUE without a step
        range. Qualified column expressions, as for :meth:`in_steps`."""
        if self.step_range is None:
            return "TRUE"
        return (
            f"EXISTS (SELECT 1 FROM steps _s WHERE _s.rank = {rank} AND _s.pid = {pid} "
            f"AND {start_ns} <= _s.end_ns AND {end_ns} >= _s.start_ns AND {self._step_filter()})"
        )

    def ctes(self) -> str:
        """``WITH`` clauses defining ``activity`` (in scope) and ``windows``
        (rank, device, window_start_ns, window_end_ns, window_ns)."""
        base = f"WITH _all_activity AS ({ACTIVITY_SQL}), step_gpu AS ({STEP_GPU_SQL})"
        if self.step_range is None:
            return (
                base
                + """,
            activity AS (SELECT * FROM _all_activity),
            windows AS (
              SELECT rank, device, min(start_ns) AS window_start_ns, max(end_ns) AS window_end_ns,
                     max(end_ns) - min(start_ns) AS window_ns
              FROM activity GROUP BY ALL)
            """
            )
        return (
            base
            + f""",
            chosen AS (SELECT * FROM step_gpu WHERE {self._step_filter()}),
            activity AS (
              SELECT DISTINCT a.* FROM _all_activity a
              JOIN api_calls c ON a.rank = c.rank AND a.pid = c.pid AND a.correlation = c.correlation
              JOIN chosen s ON s.rank = c.rank AND s.pid = c.pid AND c.start_ns BETWEEN s.cpu_start_ns AND s.cpu_end_ns),
            _step_dev AS (
              SELECT DISTINCT a.rank, a.device, s.gpu_start_ns AS lo, s.gpu_end_ns AS hi
              FROM chosen s JOIN activity a ON a.rank = s.rank AND a.start_ns >= s.gpu_start_ns AND a.end_ns <= s.gpu_end_ns),
            _step_union AS (
              SELECT rank, device, min(lo) AS lo, max(hi) AS hi FROM (
                SELECT *, sum(CASE WHEN prev_hi IS NULL OR lo > prev_hi THEN 1 ELSE 0 END)
                            OVER (PARTITION BY rank, device ORDER BY lo, hi ROWS UNBOUNDED PRECEDING) AS grp
                FROM (SELECT *, max(hi) OVER (PARTITION BY rank, device ORDER BY lo, hi
                                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_hi
                      FROM _step_dev))
              GROUP BY rank, device, grp),
            windows AS (
              SELECT rank, device, min(lo) AS window_start_ns, max(hi) AS window_end_ns, sum(hi - lo) AS window_ns
              FROM _step_union GROUP BY ALL)
            """
        )


# The union of a device's activity intervals, as islands. GROUPED_SQL numbers them:
# ``_grouped`` is (rank, device, start_ns, end_ns, island) of each activity; overlapping and
# touching intervals (on any stream) share an island. Only the times go through the window
# passes (the op names with them made those ~6x slower). ISLANDS_OF aggregates such rows
# into (rank, device, island, start_ns, end_ns); ISLANDS_SQL does both as CTEs ending in
# ``islands``.
GROUPED_SQL = """
  _ordered AS (
    SELECT rank, device, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY rank, device ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM activity),
  _grouped AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                OVER (PARTITION BY rank, device ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM _ordered)
"""
ISLANDS_OF = "SELECT rank, device, island, min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM {} GROUP BY ALL"
ISLANDS_SQL = f"{GROUPED_SQL.rstrip()},\n  islands AS ({ISLANDS_OF.format('_grouped')})\n"
