"""The host side of any trace: time by op with self time per thread, the Python frames with most
self time, and launch overhead (CUDA API time, launch rate, launch queue).

Definitions (docs/design.md, "Host time and self time"):

- Host ranges, the window and self time: ``analysis/host_ranges.py``. A thread's ``busy_ns``
  is the sum of its ranges' self times, which is the union of its outermost ranges inside the
  window.
- Launches: API calls that share a correlation id with a kernel in their process; the launch
  queue: ``analysis/launches.py``.
"""

from __future__ import annotations

import numpy as np

from wanscope.analysis.host_ranges import KINDS, HostRanges, host_ranges
from wanscope.analysis.launches import LAUNCHED_SQL, distinct_per, groups, launch_queue
from wanscope.analysis.scope import Scope
from wanscope.trace.link import memory_limit
from wanscope.trace.load import NEST_MEMORY_LIMIT

TOP_CALLS = 5

# by thread and kind as one integer (the ``key`` column of ``HostRanges.register``), then name:
# grouping by the VARCHAR kind beside the name took twice as long
_OPS_SQL = """
SELECT x.key, name, count(*) AS count, sum(total_ns) AS total_ns, sum(self_ns) AS self_ns
FROM cpu_ops POSITIONAL JOIN _host_cpu_ops x WHERE counted GROUP BY x.key, name
"""
_API_OPS_SQL = """
SELECT rank, pid, tid, kind, name, count(*) AS count, sum(total_ns) AS total_ns, sum(self_ns) AS self_ns
FROM api_calls POSITIONAL JOIN _host_api_calls x WHERE counted GROUP BY ALL
"""


def _top(rows: list[dict], top: int, keys: tuple[str, ...], **fixed) -> list[dict]:
    """The first ``top`` rows, then one ``other`` row summing ``keys`` over the rest (with
    the ``fixed`` fields)."""
    out = rows[:top]
    rest = rows[top:]
    if rest:
        out.append({"name": "other", **fixed, **{k: sum(r[k] for r in rest) for k in keys}})
    return out


def host(con, scope: Scope | None = None, top: int = 10, ranges: HostRanges | None = None) -> dict:
    """The host side of the trace in ``con``.

    Args:
        con: DuckDB connection with the canonical tables.
        scope: steps to restrict to (default: all of them, or the whole trace without steps).
        top: ops listed per thread, Python frames and API calls listed, before ``other``.
        ranges: ``host_ranges(con, scope)`` where the caller has it (computed here otherwise).

    Returns:
        A dict (docs/json.md, "analyze JSON", ``host``): ``window`` ("steps" or "trace");
        ``threads``, busiest first: ``rank``, ``pid``, ``tid``, ``busy_ns`` and ``ops``, the
        ``top`` (kind, name) by self time, then ``other``: ``name``, ``kind``, ``count``,
        ``total_ns``, ``self_ns``, ``self_pct`` (% of the thread's ``busy_ns``);
        ``python_frames``: the ``top`` Python frames by self time over all threads (``name``,
        ``count``, ``total_ns``, ``self_ns``); ``launch`` per (rank, pid) with CUDA API calls:
        ``window_ns``, ``api_calls``, ``api_ns``, ``api_pct`` (% of ``window_ns``),
        ``launches``, ``launches_per_s``, ``top_calls`` (``name``, ``count``, ``total_ns``);
        ``launch_queue`` per (rank, device) with launched kernels: ``launches``, ``start_ns``,
        ``end_ns``, ``max``, ``mean`` (time-weighted over ``start_ns``..``end_ns``) and
        ``timeline`` ([time_ns, length] points). Times in ns.
    """
    scope = scope or Scope()
    scope.check(con)
    with memory_limit(con, NEST_MEMORY_LIMIT):  # DuckDB's buffers shrunk beside the arrays, as ingest's nesting
        if ranges is None:
            ranges = host_ranges(con, scope)
            ranges.cpu_parent = ranges.api_parent = None  # only the per-op totals need them
    return _host(con, ranges, top)


def _host(con, ranges: HostRanges, top: int) -> dict:
    windows = ranges.windows
    ranges.register(con)
    try:
        width = len(KINDS) + 1
        ops = [
            (*ranges.threads[key // width], KINDS[key % width] if key % width < len(KINDS) else None, *rest)
            for key, *rest in con.execute(_OPS_SQL).fetchall()
        ]
        ops += con.execute(_API_OPS_SQL).fetchall()
        launched = con.execute(LAUNCHED_SQL).fetchnumpy()
    finally:
        ranges.unregister(con)
    threads: dict[tuple, list[dict]] = {}
    frames: dict[str, list[int]] = {}
    for r, p, t, kind, name, n, total, self_ns in ops:
        threads.setdefault((r, p, t), []).append(
            {"name": name, "kind": kind, "count": int(n), "total_ns": int(total), "self_ns": int(self_ns)}
        )
        if kind == "python":
            f = frames.setdefault(name, [0, 0, 0])
            f[0], f[1], f[2] = f[0] + int(n), f[1] + int(total), f[2] + int(self_ns)
    thread_rows = []
    for (r, p, t), rows in threads.items():
        rows.sort(key=lambda op: (-op["self_ns"], -op["total_ns"], op["kind"] or "", op["name"]))
        busy = sum(op["self_ns"] for op in rows)
        listed = _top(rows, top, ("count", "total_ns", "self_ns"), kind=None)
        for op in listed:
            op["self_pct"] = 100 * op["self_ns"] / busy if busy else None
        thread_rows.append({"rank": r, "pid": p, "tid": t, "busy_ns": busy, "ops": listed})
    thread_rows.sort(key=lambda row: (-row["busy_ns"], row["rank"], row["pid"] or 0, row["tid"] or 0))
    frame_rows = sorted(
        ({"name": k, "count": v[0], "total_ns": v[1], "self_ns": v[2]} for k, v in frames.items()),
        key=lambda f: (-f["self_ns"], f["name"]),
    )
    if windows is None:
        window_ns = ranges.span_ns
    else:  # a rank without steps counts its whole time
        window_ns = {**ranges.span_ns, **{r: int((we - ws).sum()) for r, (ws, we, _) in windows.items()}}
    calls: dict[tuple, list[dict]] = {}
    api_self: dict[tuple, int] = {}  # (rank, pid) -> time in API calls (self times: nested calls once)
    for r, p, _, kind, name, n, total, self_ns in ops:
        if kind in ("runtime", "driver"):
            calls.setdefault((r, p), []).append({"name": name, "count": int(n), "total_ns": int(total)})
            api_self[(r, p)] = api_self.get((r, p), 0) + int(self_ns)
    cols = {k: np.asarray(v, np.int64) for k, v in launched.items()}
    launches = distinct_per(cols["rank"], cols["pid"], cols["correlation"])
    launch = []
    for (r, p), rows in sorted(calls.items(), key=lambda kv: (kv[0][0], kv[0][1] if kv[0][1] is not None else -1)):
        rows.sort(key=lambda c: (-c["total_ns"], c["name"]))
        w = int(window_ns.get(r) or 0)
        api_ns, n_launches = api_self[(r, p)], launches.get((r, p), 0)
        launch.append(
            {
                "rank": r,
                "pid": p,
                "window_ns": w,
                "api_calls": sum(c["count"] for c in rows),
                "api_ns": api_ns,
                "api_pct": 100 * api_ns / w if w else None,
                "launches": n_launches,
                "launches_per_s": n_launches * 1e9 / w if w else None,
                "top_calls": _top(rows, TOP_CALLS, ("count", "total_ns")),
            }
        )
    queue = [
        {"rank": r, "device": d, **launch_queue(cols["launch_ns"][rows], cols["start_ns"][rows])}
        for (r, d), rows in groups(cols["rank"], cols["device"])
    ]
    return {
        "window": "trace" if windows is None else "steps",
        "threads": thread_rows,
        "python_frames": _top(frame_rows, top, ("count", "total_ns", "self_ns")),
        "launch": launch,
        "launch_queue": queue,
    }


_OP_TOTALS_SQL = """
SELECT kind, name, count(*), sum(total_ns), sum(self_ns), sum(kernels), sum(kernel_ns)
FROM (SELECT kind, name, x.* FROM cpu_ops POSITIONAL JOIN _host_op_totals x)
WHERE counted AND kind IN ('op', 'python') GROUP BY ALL
"""


def op_totals(con, scope: Scope | None = None, steps: bool = True) -> list[dict]:
    """Every aten op and Python frame of the trace, over all threads, inside the window
    (``steps`` False: over the whole trace).

    Returns:
        Rows ``kind`` (``op`` or ``python``), ``name``, ``count``, ``total_ns``, ``self_ns``
        (as in ``host``), ``kernels`` and ``kernel_ns``: the kernels (and their GPU time) whose
        launching API call lies in the window and has the range as its innermost enclosing
        range of its kind.

    Raises:
        UsageError: ``scope`` selects none of the trace's steps.
    """
    scope = scope or Scope()
    scope.check(con)
    with memory_limit(con, NEST_MEMORY_LIMIT):
        return _op_totals(con, scope, steps)


def _op_totals(con, scope: Scope, steps: bool) -> list[dict]:
    ranges = host_ranges(con, scope, steps)
    total, self_ns, counted = ranges.tables["cpu_ops"]
    inv, parent, a_parent = ranges.position, ranges.cpu_parent, ranges.api_parent
    n = len(parent)
    ranges.register(con)
    try:
        launched = con.execute(LAUNCHED_SQL).fetchnumpy()
    finally:
        ranges.unregister(con)
    calls = np.asarray(launched["call"], np.int64)  # one row per kernel: its launch's scan position
    k_ns = np.asarray(launched["dur_ns"], np.float64)
    kernels = np.zeros(n)
    kernel_ns = np.zeros(n)
    for code in (KINDS.index("op"), KINDS.index("python")):
        at = a_parent[calls]
        live = np.flatnonzero(at >= 0)
        live = live[ranges.kind[at[live]] != code]
        while len(live):  # up to the innermost enclosing range of this kind
            at[live] = parent[at[live]]
            live = live[at[live] >= 0]
            live = live[ranges.kind[at[live]] != code]
        ok = at >= 0
        kernels += np.bincount(at[ok], minlength=n)
        kernel_ns += np.bincount(at[ok], weights=k_ns[ok], minlength=n)
    con.register(
        "_host_op_totals",
        {
            "total_ns": total,
            "self_ns": self_ns,
            "counted": counted,
            "kernels": np.rint(kernels[inv]).astype(np.int64),
            "kernel_ns": np.rint(kernel_ns[inv]).astype(np.int64),
        },
    )
    try:
        rows = con.execute(_OP_TOTALS_SQL).fetchall()
    finally:
        con.unregister("_host_op_totals")
    return [
        {
            "kind": k,
            "name": name,
            "count": int(n),
            "total_ns": int(t),
            "self_ns": int(sf),
            "kernels": int(kn),
            "kernel_ns": int(kt),
        }
        for k, name, n, t, sf, kn, kt in rows
    ]
