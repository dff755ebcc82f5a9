"""Host-device syncs: one record per blocking wait of the host on the device.

The waiting call is a synchronizing API call (stream/device/event synchronize, a blocking
``cudaMemcpy*``, implicit ones such as ``cudaFree`` and ``cudaHostAlloc``) or a
``cudaMemcpyAsync`` whose copy touches pageable host memory (CUDA then blocks the host:
CUDA Runtime API, "API synchronization behavior"). Calls under the same outermost aten op
(``aten::item`` -> ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``) are one wait.
On a rank with no GPU activity (a CPU run) the ops that would sync on a GPU are reported
as ``would_sync`` with their own host time as ``wait_ns``. With a step range, only waits
that overlap a selected step's CPU range count (whole: a wait that began before the step
or ends after it is listed with all of its time).
"""

from __future__ import annotations

from wanscope.analysis.scope import Scope
from wanscope.analysis.stacks import containment_key

SYNC_APIS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaThreadSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpy3D",
    "cudaMemcpyToSymbol",
    "cudaMemcpyFromSymbol",
    "cuMemcpyDtoH",
    "cuMemcpyHtoD",
    "cuMemcpy",
    "cudaFree",
    "cudaFreeHost",
    "cudaHostAlloc",
    "cudaMallocHost",
    "cuMemFree",
    "cuMemFreeHost",
    "cuMemAllocHost",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
)
SYNC_OPS = (
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::is_nonzero",
    "aten::equal",
    "aten::unique",
    "aten::_unique2",
    "aten::masked_select",
    "aten::tolist",
)
# Python frames that belong to torch or the interpreter, skipped when naming the user's
# frame. torch.profiler strips sys.path prefixes, so site-packages appear as bare packages.
_LIBRARY_FRAME = ("torch/", "<", "contextlib.py", "functools.py", "site-packages/", "dist-packages/")


def _quoted(names) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _user_frame(column: str) -> str:
    return " AND ".join(f"NOT starts_with({column}, '{p}')" for p in _LIBRARY_FRAME)


def _long_enough(held: str) -> str:
    """SQL: the ``cpu_ops`` rows lasting at least as long as the shortest row of ``held`` (a
    CTE with start_ns, end_ns). A range that holds another lasts at least as long, so the
    containment joins below probe these alone: most short ranges are dropped before the join."""
    return f"(SELECT * FROM cpu_ops WHERE end_ns - start_ns >= (SELECT min(end_ns - start_ns) FROM {held}))"


def find_syncs(con, gpu_ranks: set[int], scope: Scope | None = None) -> list[dict]:
    """Every blocking wait in the trace (in ``scope``: overlapping a selected step's CPU
    range of the same process), by rank and start time. Each record: ``kind`` (``sync`` or
    ``would_sync``), ``rank``, ``api``, ``op`` (outermost aten op), ``frame`` (innermost
    Python frame outside torch), ``start_ns``, ``wait_ns``, ``gpu_idle_after_ns``."""
    scope = scope or Scope()
    rows = con.execute(f"""
    WITH calls AS (
      SELECT row_number() OVER () AS call_id, c.* FROM api_calls c
      WHERE c.name IN ({_quoted(SYNC_APIS)})
         OR (c.name LIKE '%emcpy%Async%' AND EXISTS (
               SELECT 1 FROM memops m WHERE m.rank = c.rank AND m.pid = c.pid
                 AND m.correlation = c.correlation AND m.name LIKE '%Pageable%'))),
    enc AS (
      SELECT c.call_id, o.id, o.kind, o.name, {containment_key("o")} AS outside FROM calls c
      JOIN {_long_enough("calls")} o ON o.rank = c.rank AND o.pid = c.pid AND o.tid = c.tid
       AND o.start_ns <= c.start_ns AND o.end_ns >= c.end_ns),
    named AS (
      SELECT call_id,
             arg_min(name, outside) FILTER (kind = 'op' AND name LIKE 'aten::%') AS op,
             arg_min(id, outside) FILTER (kind = 'op' AND name LIKE 'aten::%') AS op_id,
             arg_max(name, outside) FILTER (kind = 'python' AND {_user_frame("name")}) AS frame
      FROM enc GROUP BY call_id),
    nexts AS (
      SELECT c.call_id, a.start_ns AS next_start FROM calls c
      ASOF JOIN (SELECT rank, start_ns FROM gpu_activity()) a
        ON a.rank = c.rank AND a.start_ns >= c.end_ns)
    SELECT * FROM (
      SELECT c.rank, c.pid, c.tid, coalesce(n.op_id, -c.call_id) AS wait_key,
             arg_max(c.name, c.dur_ns) AS api, any_value(n.op) AS op, any_value(n.frame) AS frame,
             min(c.start_ns) AS start_ns, max(c.end_ns) AS end_ns, sum(c.dur_ns) AS wait_ns,
             max(x.next_start) - max(c.end_ns) AS idle_after
      FROM calls c LEFT JOIN named n USING (call_id) LEFT JOIN nexts x USING (call_id)
      GROUP BY ALL) w
    WHERE {scope.overlaps_steps("w.rank", "w.pid", "w.start_ns", "w.end_ns")}
    ORDER BY start_ns
    """).fetchall()
    out = [
        {
            "kind": "sync",
            "rank": r[0],
            "api": r[4],
            "op": r[5],
            "frame": r[6],
            "start_ns": int(r[7]),
            "wait_ns": int(r[9]),
            "gpu_idle_after_ns": None if r[10] is None else max(int(r[10]), 0),
        }
        for r in rows
    ]
    # would_sync only on ranks without GPU activity: on a GPU trace, no self-join of cpu_ops
    cpu_ranks = [r for (r,) in con.execute("SELECT DISTINCT rank FROM cpu_ops").fetchall() if r not in gpu_ranks]
    if cpu_ranks:
        out += _would_syncs(con, cpu_ranks, scope)
    return sorted(out, key=lambda s: (s["rank"], s["start_ns"]))


def _would_syncs(con, ranks: list[int], scope: Scope) -> list[dict]:
    """The outermost sync-causing aten ops (``SYNC_OPS``) of ``ranks`` in ``scope``, as
    ``would_sync`` records with their own host time as ``wait_ns``."""
    rows = con.execute(f"""
    WITH hits AS (
      SELECT o.* FROM cpu_ops o LEFT JOIN cpu_ops p ON p.id = o.parent_id
      WHERE o.name IN ({_quoted(SYNC_OPS)}) AND (p.name IS NULL OR p.name NOT IN ({_quoted(SYNC_OPS)}))
        AND o.rank IN ({", ".join(str(int(r)) for r in ranks)})
        AND {scope.overlaps_steps("o.rank", "o.pid", "o.start_ns", "o.end_ns")}),
    frames AS (
      SELECT h.id, arg_max(f.name, {containment_key("f")}) AS frame FROM hits h
      JOIN {_long_enough("hits")} f ON f.rank = h.rank AND f.pid = h.pid AND f.tid = h.tid AND f.kind = 'python'
       AND f.start_ns <= h.start_ns AND f.end_ns >= h.end_ns AND {_user_frame("f.name")}
      GROUP BY h.id)
    SELECT h.rank, h.name, fr.frame, h.start_ns, h.dur_ns FROM hits h LEFT JOIN frames fr USING (id)
    ORDER BY h.start_ns
    """).fetchall()
    return [
        {
            "kind": "would_sync",
            "rank": r[0],
            "api": None,
            "op": r[1],
            "frame": r[2],
            "start_ns": int(r[3]),
            "wait_ns": int(r[4]),
            "gpu_idle_after_ns": None,
        }
        for r in rows
    ]
