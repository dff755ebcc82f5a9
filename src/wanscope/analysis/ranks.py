"""Across ranks: communication kernel time, how much of it overlaps compute, the slowest rank.

Definitions (all per (rank, device), over the kernels in scope):

- **Communication kernels**: category ``communication`` (``categories.csv``: NCCL and RCCL,
  e.g. ``ncclDevKernel_AllGather_RING_LL``, torch's symmetric-memory kernels, custom
  all-reduces); every other kernel is **compute**. Memory operations are neither.
- ``communication_ns``: the plain sum of communication kernel durations;
  ``communication_busy_ns``: the length of their union (streams merged).
- ``overlap_ns``: the length of the intersection of the communication union with the compute
  union, computed as ``|C| + |K| - |C u K|`` (C communication, K compute); ``overlap_pct`` is
  its share of ``communication_busy_ns``. ``exposed_communication_ns = |C| - overlap_ns``: time
  in which the device ran communication and nothing else.

Slowest rank of a step: under collectives every rank's step lasts about as long as the slowest
one's, because the others wait for it inside the communication kernels, so raw step times
cannot single it out. Each rank's **work** in a step is its step GPU interval minus the exposed
communication clipped to that interval (the kernels of all its devices together); the slowest
rank has the most work. Steps without GPU work (a CPU-only trace) are compared by CPU time.
Only steps that at least two ranks ran are listed.
"""

from __future__ import annotations

from wanscope.analysis.scope import Scope

# Union length of each interval set: sum of what each interval adds past the latest end of the
# intervals that start before it (sorted by start).
_UNION_SQL = """
  _ordered_sets AS (
    SELECT *, max(end_ns) OVER (PARTITION BY {keys}, kind_set ORDER BY start_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM {source}),
  {name} AS (
    SELECT {keys}, kind_set,
           sum(greatest(end_ns - greatest(start_ns, coalesce(prev_end, start_ns)), 0)) AS union_ns
    FROM _ordered_sets GROUP BY ALL)
"""


def _sets(source: str, keys: str) -> str:
    """Rows of ``source`` twice: once in the set ``all`` and once in ``communication`` or
    ``compute``."""
    return f"""
    SELECT {keys}, 'all' AS kind_set, start_ns, end_ns FROM {source}
    UNION ALL
    SELECT {keys}, CASE WHEN comm THEN 'communication' ELSE 'compute' END, start_ns, end_ns FROM {source}"""


def communication(con, scope: Scope) -> list[dict]:
    """One row per (rank, device) with kernels: ``rank``, ``device``, ``communication_count``,
    ``communication_ns``, ``communication_busy_ns``, ``compute_busy_ns``, ``overlap_ns``,
    ``overlap_pct`` (None without communication), ``exposed_communication_ns`` (times in ns)."""
    keys = "rank, device"
    sql = f"""
    WITH k AS (SELECT rank, device, start_ns, end_ns, dur_ns, category = 'communication' AS comm
               FROM gpu_activity({scope.args}) WHERE kind = 'kernel'),
    _sets AS ({_sets("k", keys)}),
    {_UNION_SQL.format(keys=keys, source="_sets", name="unions")},
    counts AS (SELECT rank, device, count(*) FILTER (comm) AS n, coalesce(sum(dur_ns) FILTER (comm), 0) AS total
               FROM k GROUP BY ALL)
    SELECT c.rank, c.device, c.n, c.total,
           coalesce(max(u.union_ns) FILTER (u.kind_set = 'communication'), 0),
           coalesce(max(u.union_ns) FILTER (u.kind_set = 'compute'), 0),
           max(u.union_ns) FILTER (u.kind_set = 'all')
    FROM counts c JOIN unions u USING (rank, device)
    GROUP BY ALL ORDER BY c.rank, c.device
    """
    out = []
    for rank, device, n, total, comm_busy, compute_busy, all_busy in con.execute(sql).fetchall():
        overlap = int(comm_busy + compute_busy - all_busy)
        out.append(
            {
                "rank": rank,
                "device": device,
                "communication_count": n,
                "communication_ns": int(total),
                "communication_busy_ns": int(comm_busy),
                "compute_busy_ns": int(compute_busy),
                "overlap_ns": overlap,
                "overlap_pct": round(100.0 * overlap / comm_busy, 4) if comm_busy else None,
                "exposed_communication_ns": int(comm_busy) - overlap,
            }
        )
    return out


def slowest_ranks(con, scope: Scope) -> list[dict]:
    """One row per step that two or more ranks ran: ``step``, ``basis`` (``gpu`` or ``cpu``),
    ``slowest_rank``, ``spread_ns`` (most minus least work) and ``ranks``: per rank ``rank``,
    ``dur_ns`` (the step's GPU, else CPU, duration), ``exposed_communication_ns`` and
    ``work_ns`` (``dur_ns`` minus exposed communication), slowest first."""
    keys = "rank, step"
    sql = f"""
    WITH chosen AS (FROM step_gpu({scope.args})),
    k AS (SELECT rank, start_ns, end_ns, category = 'communication' AS comm
          FROM gpu_activity({scope.args}) WHERE kind = 'kernel'),
    clipped AS (
      SELECT s.rank, s.step, k.comm, greatest(k.start_ns, s.gpu_start_ns) AS start_ns,
             least(k.end_ns, s.gpu_end_ns) AS end_ns
      FROM chosen s JOIN k ON k.rank = s.rank AND k.end_ns > s.gpu_start_ns AND k.start_ns < s.gpu_end_ns),
    _sets AS ({_sets("clipped", keys)}),
    {_UNION_SQL.format(keys=keys, source="_sets", name="unions")},
    exposed AS (
      SELECT rank, step, coalesce(max(union_ns) FILTER (kind_set = 'all'), 0)
                         - coalesce(max(union_ns) FILTER (kind_set = 'compute'), 0) AS exposed_ns
      FROM unions GROUP BY ALL)
    SELECT s.rank, s.step, s.cpu_end_ns - s.cpu_start_ns, s.gpu_end_ns - s.gpu_start_ns, coalesce(e.exposed_ns, 0)
    FROM chosen s LEFT JOIN exposed e USING (rank, step)
    ORDER BY s.step, s.rank
    """
    by_step: dict[int, list[tuple]] = {}
    for rank, step, cpu_dur, gpu_dur, exposed in con.execute(sql).fetchall():
        by_step.setdefault(step, []).append((rank, cpu_dur, gpu_dur, exposed))
    out = []
    for step, rows in sorted(by_step.items()):
        if len({r[0] for r in rows}) < 2:
            continue
        gpu = all(r[2] is not None for r in rows)
        ranks = [
            {
                "rank": rank,
                "dur_ns": int(gpu_dur if gpu else cpu_dur),
                "exposed_communication_ns": int(exposed) if gpu else 0,
                "work_ns": int(gpu_dur - exposed) if gpu else int(cpu_dur),
            }
            for rank, cpu_dur, gpu_dur, exposed in rows
        ]
        ranks.sort(key=lambda r: (-r["work_ns"], r["rank"]))
        out.append(
            {
                "step": step,
                "basis": "gpu" if gpu else "cpu",
                "slowest_rank": ranks[0]["rank"],
                "spread_ns": ranks[0]["work_ns"] - ranks[-1]["work_ns"],
                "ranks": ranks,
            }
        )
    return out


def rank_count(con) -> int:
    """Distinct ranks in the database (files, kernels and steps)."""
    return con.execute(
        "SELECT count(DISTINCT rank) FROM (SELECT rank FROM sources UNION ALL "
        "SELECT rank FROM kernels UNION ALL SELECT rank FROM steps)"
    ).fetchone()[0]


def rank_summary(con, scope: Scope, communication_rows: list[dict] | None = None) -> dict:
    """The ``ranks`` section of ``analyze``: ``communication`` (``communication()``, or the
    rows given, which ``analyze`` has already queried) and ``steps`` (``slowest_ranks()``)."""
    rows = communication(con, scope) if communication_rows is None else communication_rows
    return {"communication": rows, "steps": slowest_ranks(con, scope)}
