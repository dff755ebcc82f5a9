"""Idle gaps: holes in the union of a device's GPU activity (all streams merged).

Holes of any length count; ``min_gap_ns`` filters. The op that ends a gap (``next_op``)
is the first op of the next busy island and may be a kernel or a memory operation.
Histogram bins (ns): <1 us, 1-10 us, 10-100 us, 0.1-1 ms, >=1 ms.
"""

from __future__ import annotations

from wanscope.analysis.scope import Scope
from wanscope.analysis.stacks import launch_stack

BINS = (
    ("<1us", 0, 1_000),
    ("1-10us", 1_000, 10_000),
    ("10-100us", 10_000, 100_000),
    ("0.1-1ms", 100_000, 1_000_000),
    (">=1ms", 1_000_000, None),
)


def idle_gaps(con, scope: Scope, largest: int, min_gap_ns: int = 0) -> dict[tuple, dict]:
    """(rank, device) -> ``count``, ``total_ns``, ``histogram`` (bin -> {count, total_ns}),
    ``largest``: up to ``largest`` gaps, each ``start_ns``, ``dur_ns``, ``next_op``
    {``name``, ``kind``, ``correlation``, ``stream``}, ``launch`` (see
    :func:`~wanscope.analysis.stacks.launch_stack`) and ``stack`` (outermost first)."""
    bins = " ".join(
        f"WHEN dur_ns >= {lo}" + (f" AND dur_ns < {hi}" if hi else "") + f" THEN '{label}'" for label, lo, hi in BINS
    )
    # The gaps (the macro idle_gaps), computed once: a temporary table, since the islands'
    # window passes are the cost; then binned, and ranked.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _idle_gaps AS "
        f"SELECT * FROM idle_gaps({scope.args}) WHERE dur_ns >= {int(min_gap_ns)}"
    )
    out: dict[tuple, dict] = {}
    try:
        for rank, device, label, n, total in con.execute(
            f"SELECT rank, device, CASE {bins} END AS bin, count(*), sum(dur_ns) FROM _idle_gaps GROUP BY ALL"
        ).fetchall():
            entry = out.setdefault(
                (rank, device),
                {
                    "count": 0,
                    "total_ns": 0,
                    "histogram": {b[0]: {"count": 0, "total_ns": 0} for b in BINS},
                    "largest": [],
                },
            )
            entry["count"] += n
            entry["total_ns"] += int(total)
            entry["histogram"][label] = {"count": n, "total_ns": int(total)}
        first = "(g.start_ns, g.kind <> 'kernel', g.correlation)"  # kernels first at equal starts
        # The ops that end a gap are those of its device that start when it ends: all of
        # them in the next island (islands are the union's maximal intervals).
        rows = con.execute(f"""
            WITH ranked AS (
              SELECT * FROM _idle_gaps
              QUALIFY row_number() OVER (PARTITION BY rank, device ORDER BY dur_ns DESC, start_ns) <= {int(largest)})
            SELECT r.rank, r.device, r.start_ns, r.dur_ns, arg_min(g.name, {first}), arg_min(g.kind, {first}),
                   arg_min(g.correlation, {first}), arg_min(g.stream, {first}), arg_min(g.pid, {first})
            FROM ranked r JOIN gpu_activity({scope.args}) g
              ON g.rank = r.rank AND g.device = r.device AND g.start_ns = r.end_ns
            GROUP BY ALL ORDER BY r.rank, r.device, r.dur_ns DESC, r.start_ns
        """).fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS _idle_gaps")
    for rank, device, start, dur, name, kind, corr, stream, pid in rows:
        launch, stack = launch_stack(con, rank, pid, corr)
        out[(rank, device)]["largest"].append(
            {
                "start_ns": int(start),
                "dur_ns": int(dur),
                "next_op": {"name": name, "kind": kind, "correlation": corr, "stream": stream},
                "launch": launch,
                "stack": stack,
            }
        )
    return out
