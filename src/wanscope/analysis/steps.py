"""Per-step times: each step's CPU range and the GPU interval of the work it launched.

A step is our own range ``wanscope/step#k`` where present, else ``ProfilerStep#N``, never
both (chosen at ingest, ``trace/link.py``). The host runs ahead of the GPU in a sync-free
loop, so CPU and GPU durations differ: both are reported.
"""

from __future__ import annotations

from wanscope.analysis.scope import Scope


def step_times(con, scope: Scope) -> list[dict]:
    """Rows ``rank``, ``step``, ``cpu_start_ns``, ``cpu_dur_ns``, ``gpu_start_ns``,
    ``gpu_dur_ns`` (GPU fields None when the step launched no GPU work)."""
    sql = f"""
    SELECT rank, step, cpu_start_ns, cpu_end_ns - cpu_start_ns, gpu_start_ns, gpu_end_ns - gpu_start_ns
    FROM step_gpu({scope.args}) ORDER BY rank, cpu_start_ns"""
    out = []
    for rank, step, cs, cd, gs, gd in con.execute(sql).fetchall():
        out.append(
            {
                "rank": rank,
                "step": step,
                "cpu_start_ns": int(cs),
                "cpu_dur_ns": int(cd),
                "gpu_start_ns": None if gs is None else int(gs),
                "gpu_dur_ns": None if gd is None else int(gd),
            }
        )
    return out
