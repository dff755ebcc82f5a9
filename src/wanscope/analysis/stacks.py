"""The CPU call stack behind a piece of GPU work.

GPU op -> its launch (the API call with the same correlation id in the same process, in
``api_calls``) -> the ``cpu_ops`` enclosing the launch on the launching thread at launch
time (aten ops, Python frames, annotations), outermost first (docs/design.md, "Call stack
behind a gap").

Host ranges open at one instant are ordered by containment, from their times alone: by
start, the longer first at equal starts, and at equal start and end a ``record_function``
or NVTX range outside a Python frame outside an aten op. Not by ``cpu_ops.depth``: the ranges
open at an instant need not be one chain of ancestors (a ``record_function`` range opens
inside the Python call that enters it and outlives it), while their times always order them
(docs/design.md).
"""

from __future__ import annotations


def containment_key(alias: str = "") -> str:
    """SQL: a sort key of the ``cpu_ops`` row ``alias`` under which, among ranges open at one
    instant, an enclosing range sorts before the ranges it encloses (then ``depth`` and
    ``id``: the ingest's order of ranges with the same times and kind)."""
    p = f"{alias}." if alias else ""
    kind = f"CASE {p}kind WHEN 'python' THEN 1 WHEN 'op' THEN 2 ELSE 0 END"
    return f"[{p}start_ns, -{p}end_ns, {kind}, {p}depth, {p}id]"


def launch_of(con, rank: int, pid: int | None, correlation: int | None) -> tuple | None:
    """(pid, tid, start_ns, name) of the API call that launched the GPU op, or None."""
    if correlation is None:
        return None
    rows = con.execute(
        """SELECT pid, tid, start_ns, name FROM api_calls
           WHERE rank = ? AND correlation = ? AND (? IS NULL OR pid = ?)
           ORDER BY start_ns LIMIT 1""",
        [rank, correlation, pid, pid],
    ).fetchall()
    return rows[0] if rows else None


def stack_at(con, rank: int, pid: int, tid: int, t_ns: int) -> list[str]:
    """Names of the host ranges open on thread (rank, pid, tid) at ``t_ns``, outermost first
    (``containment_key``)."""
    rows = con.execute(
        f"""SELECT name FROM cpu_ops
           WHERE rank = ? AND pid = ? AND tid = ? AND start_ns <= ? AND end_ns >= ?
           ORDER BY {containment_key()}""",
        [rank, pid, tid, t_ns, t_ns],
    ).fetchall()
    return [r[0] for r in rows]


def launch_stack(con, rank: int, pid: int | None, correlation: int | None) -> tuple[dict | None, list[str]]:
    """The launch of a GPU op ({``api``, ``pid``, ``tid``, ``start_ns``}) and the host
    stack open at that moment, outermost first; (None, []) when the launch is not in the
    trace."""
    launch = launch_of(con, rank, pid, correlation)
    if launch is None:
        return None, []
    lpid, tid, start_ns, api = launch
    return ({"api": api, "pid": lpid, "tid": tid, "start_ns": int(start_ns)}, stack_at(con, rank, lpid, tid, start_ns))
