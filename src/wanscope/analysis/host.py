"""The host side of any trace: time by op with self time per thread, the Python frames with most
self time, and launch overhead (CUDA API time, launch rate, launch queue).

Definitions (docs/design.md, "Host time and self time"):

- Host ranges: ``cpu_ops`` (aten and other dispatcher ops, Python frames, ``record_function``
  and NVTX ranges) and ``api_calls`` (CUDA runtime and driver calls, kinds ``runtime`` and
  ``driver``), nested per thread by ``nest_ranges``.
- Window: the union of the steps' CPU ranges per rank (the selected steps with a step range)
  when the trace has steps, else the whole trace. A range counts with the part of it inside
  the window (``total_ns``), and at all if any of it is inside (a zero-length one: if it lies
  inside).
- Self time: ``self_ns``, the time in which the range is the innermost open on its thread
  (``nest_ranges``); a thread's ``busy_ns`` is the sum of its ranges' self times, which is the
  union of its outermost ranges inside the window.
- Launches: API calls that share a correlation id with a kernel in their process. Launch
  queue per (rank, device): kernels launched (their API call started) but not yet started on
  the GPU, over time, as Holistic Trace Analysis's queue length counts a stream's
  outstanding operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wanscope.analysis.scope import Scope

QUEUE_POINTS = 200
TOP_CALLS = 5


def nest_ranges(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray, rank_in_order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The parent of each host range and the end of the time in which it is the innermost range.

    The parent: the range on its thread that encloses it and started last, as torch.profiler's
    own event tree (``key_averages``) picks it. Unlike a nesting by counting open ranges, it
    stays right where ranges overlap without nesting, as a ``record_function`` range does that
    outlives the Python call that opened it. In the order (thread, start, end descending, tie)
    a range's parent is its previous greater-or-equal end on its thread, found by pointer
    jumping (each candidate jumps to its own candidate while it ends earlier: everything in
    between ends earlier still), in about log2 of the longest chain of vectorized rounds.

    The cut end: where the next range under the same parent starts inside a range, the later
    one is the innermost from there (a sampling profiler would see it on top of the stack), so
    the earlier one is cut at that start; then each range is cut at its parent's cut end, never
    before its own start, walking down only from the ranges that were cut. Ranges cut so nest
    with disjoint siblings: self times computed from them are never negative and add up to the
    union of the outermost ranges.

    Args: int64 arrays [n]: ``thread`` (equal for the ranges of one thread), ``start``/``end``
        (ns), ``rank_in_order``: each range's position in that order (a permutation of 0..n-1;
        ingest's ``cpu_ops.id``).
    Returns: (parent int64 [n], an index into the inputs or -1 at the top; cut end int64 [n], ns).
    """
    n = len(start)
    order = np.empty(n, np.int64)
    order[rank_in_order] = np.arange(n)
    th, s, e = thread[order], start[order], end[order]
    first = np.ones(n, bool)  # a thread's first range
    first[1:] = th[1:] != th[:-1]
    cand = np.arange(-1, n - 1, dtype=np.int64)
    cand[first] = -1
    _jump_to_enclosing(cand, e, e)
    # siblings: same parent, or the top ranges of one thread; in order within each group
    group = np.where(cand >= 0, cand, -1 - np.cumsum(first))
    sib = np.argsort(group, kind="stable")
    grouped = group[sib]
    same = grouped[1:] == grouped[:-1]
    cut = e.copy()
    earlier, later = sib[:-1][same], sib[1:][same]
    cut[earlier] = np.minimum(cut[earlier], np.maximum(s[later], s[earlier]))
    front = earlier[cut[earlier] < e[earlier]]
    while len(front):  # the children of ranges just cut, cut at their parent's end
        lo = np.searchsorted(grouped, front, "left")
        hi = np.searchsorted(grouped, front, "right")
        kids = sib[_ranges(lo, hi)]
        new = np.maximum(s[kids], np.minimum(cut[kids], cut[cand[kids]]))
        moved = new < cut[kids]
        kids = kids[moved]
        cut[kids] = new[moved]
        front = np.unique(kids)
    parent = np.full(n, -1, np.int64)
    found = cand >= 0
    parent[order[found]] = order[cand[found]]
    cut_end = np.empty(n, np.int64)
    cut_end[order] = cut
    return parent, cut_end


def _jump_to_enclosing(cand: np.ndarray, e: np.ndarray, need: np.ndarray, parent: np.ndarray | None = None) -> None:
    """In place: move each candidate ``cand[i]`` (an index into ``e``, -1 for none) back until
    ``e[cand[i]] >= need[i]``, jumping to ``parent`` of the candidate (default: the candidates'
    own candidates, ``cand`` itself: pointer jumping)."""
    up = cand if parent is None else parent
    live = np.flatnonzero(cand >= 0)
    live = live[e[cand[live]] < need[live]]
    while len(live):
        cand[live] = up[cand[live]]
        live = live[cand[live] >= 0]
        live = live[e[cand[live]] < need[live]]


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` over i, int64."""
    lengths = hi - lo
    total = int(lengths.sum())
    if not total:
        return np.empty(0, np.int64)
    starts = np.cumsum(lengths) - lengths
    return np.repeat(lo - starts, lengths) + np.arange(total)


def attach_leaves(
    parent_of_range: np.ndarray,
    order: np.ndarray,
    thread: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    leaf_thread: np.ndarray,
    leaf_start: np.ndarray,
    leaf_end: np.ndarray,
) -> np.ndarray:
    """The parent of each leaf range (an API call, which encloses nothing): the range of its
    thread that encloses it and started last, as an index into the ranges, -1 for none.

    Args: the ranges (``order``: their indices sorted as ``nest_ranges`` orders them;
        ``parent_of_range`` from it) and the leaves' thread, start and end, int64 [m].
    """
    m = len(leaf_start)
    out = np.full(m, -1, np.int64)
    if not m or not len(order):
        return out
    th, s, e = thread[order], start[order], end[order]
    pos_parent = np.full(len(order), -1, np.int64)  # parents as positions in the order
    where = np.empty(len(order), np.int64)
    where[order] = np.arange(len(order))
    has = parent_of_range[order] >= 0
    pos_parent[has] = where[parent_of_range[order][has]]
    cuts = np.flatnonzero(np.r_[True, th[1:] != th[:-1], True])
    cand = np.full(m, -1, np.int64)
    for a, b in zip(cuts[:-1], cuts[1:], strict=False):  # per thread: the last range starting at or before
        mine = np.flatnonzero(leaf_thread == th[a])
        if len(mine):
            cand[mine] = a + np.searchsorted(s[a:b], leaf_start[mine], "right") - 1
            cand[mine[cand[mine] < a]] = -1
    _jump_to_enclosing(cand, e, leaf_end, pos_parent)
    found = cand >= 0
    out[found] = order[cand[found]]
    return out


def _windows(con, scope: Scope) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """rank -> (starts, ends, time before each) of the window's disjoint intervals, sorted; None
    when the trace has no steps (the window is the whole trace)."""
    lo, hi = scope.step_range or (None, None)
    rows = con.execute(
        "SELECT rank, start_ns, end_ns FROM steps WHERE ($lo IS NULL OR step >= $lo) AND ($hi IS NULL OR step < $hi) "
        "ORDER BY rank, start_ns, end_ns",
        {"lo": lo, "hi": hi},
    ).fetchall()
    if not rows:
        return None
    merged: dict[int, list[list[int]]] = {}
    for rank, s, e in rows:
        out = merged.setdefault(rank, [])
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    windows = {}
    for rank, iv in merged.items():
        a = np.array(iv, np.int64)
        before = np.concatenate(([0], np.cumsum(a[:, 1] - a[:, 0])[:-1]))
        windows[rank] = (a[:, 0].copy(), a[:, 1].copy(), before)
    return windows


def _inside(windows, rank: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(window time before each instant ``t``, whether ``t`` lies inside the window), int64 ns
    and bool [n]; ranks without steps have no window."""
    before = np.zeros(len(t), np.int64)
    inside = np.zeros(len(t), bool)
    for r, (ws, we, wb) in windows.items():
        rows = np.flatnonzero(rank == r)
        tr = t[rows]
        i = np.searchsorted(ws, tr, side="right") - 1
        ok = i >= 0
        j = np.maximum(i, 0)
        before[rows] = np.where(ok, wb[j] + np.minimum(tr, we[j]) - ws[j], 0)
        inside[rows] = ok & (tr <= we[j])
    return before, inside


@dataclass
class HostRanges:
    """Every host range with its time inside the window, in each table's scan order.

    Attributes:
        windows: ``_windows``' result (None: the whole trace).
        tables: ``_API`` table -> (``total_ns`` int64 ns: the range's time inside the window;
            ``self_ns`` int64 ns; ``counted`` bool; ``parent`` int64: the enclosing
            ``cpu_ops`` range as a scan position, -1 at the top), arrays [rows].
    """

    windows: dict | None
    tables: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]

    def register(self, con) -> None:
        """Register ``_host_<table>`` (total_ns, self_ns, counted), to join positionally."""
        for table, (total, self_ns, counted, _) in self.tables.items():
            con.register(f"_host_{table}", {"total_ns": total, "self_ns": self_ns, "counted": counted})

    def unregister(self, con) -> None:
        for table in self.tables:
            con.unregister(f"_host_{table}")


def host_ranges(con, scope: Scope) -> HostRanges:
    """Nest the host ranges of ``con`` (``nest_ranges``, API calls as leaves), cut them to the
    window and compute their self times."""
    cpu = con.execute(
        "SELECT (hash(rank, pid, tid) >> 1)::BIGINT AS th, rank, start_ns, end_ns, id FROM cpu_ops"
    ).fetchnumpy()
    api = con.execute(
        "SELECT (hash(rank, pid, tid) >> 1)::BIGINT AS th, rank, start_ns, end_ns FROM api_calls"
    ).fetchnumpy()
    c = {k: np.asarray(v, np.int64) for k, v in cpu.items()}
    a = {k: np.asarray(v, np.int64) for k, v in api.items()}
    del cpu, api
    parent, cut_end = nest_ranges(c["th"], c["start_ns"], c["end_ns"], c["id"])
    order = np.empty(len(c["id"]), np.int64)
    order[c["id"]] = np.arange(len(c["id"]))
    # API calls are leaves: under the range that encloses them, cut at its cut end
    a_parent = attach_leaves(parent, order, c["th"], c["start_ns"], c["end_ns"], a["th"], a["start_ns"], a["end_ns"])
    a_cut = a["end_ns"].copy()
    has = a_parent >= 0
    a_cut[has] = np.maximum(a["start_ns"][has], np.minimum(a_cut[has], cut_end[a_parent[has]]))
    windows = _windows(con, scope)
    out = []
    for rows, cut_e in ((c, cut_end), (a, a_cut)):
        if windows is None:
            total, cut, counted = rows["end_ns"] - rows["start_ns"], cut_e - rows["start_ns"], None
        else:
            before, in_start = _inside(windows, rows["rank"], rows["start_ns"])
            total = _inside(windows, rows["rank"], rows["end_ns"])[0] - before
            cut = _inside(windows, rows["rank"], cut_e)[0] - before
            counted = (total > 0) | in_start
        out.append([total, cut, np.ones(len(total), bool) if counted is None else counted])
    n = len(parent)
    weights = np.zeros(n)  # bincount of no values would give integers
    weights += np.bincount(parent[parent >= 0], weights=out[0][1][parent >= 0], minlength=n)
    weights += np.bincount(a_parent[has], weights=out[1][1][has], minlength=n)
    out[0][1] = out[0][1] - np.rint(weights).astype(np.int64)  # self = cut time less the children's
    return HostRanges(windows, {"cpu_ops": (*out[0], parent), "api_calls": (*out[1], a_parent)})


_OPS_SQL = """
SELECT rank, pid, tid, kind, name, count(*) AS count, sum(total_ns) AS total_ns, sum(self_ns) AS self_ns
FROM (SELECT rank, pid, tid, kind, name, x.* FROM cpu_ops POSITIONAL JOIN _host_cpu_ops x
      UNION ALL
      SELECT rank, pid, tid, kind, name, x.* FROM api_calls POSITIONAL JOIN _host_api_calls x)
WHERE counted GROUP BY ALL
ORDER BY rank, pid, tid, self_ns DESC, total_ns DESC, kind, name
"""
_API_IN_WINDOW = (
    "(SELECT a.*, x.total_ns, x.counted FROM api_calls a POSITIONAL JOIN _host_api_calls x WHERE x.counted)"
)

_LAUNCH_SQL = f"""
WITH a AS {_API_IN_WINDOW},
launched AS (
  SELECT DISTINCT a.rank, a.pid, a.correlation FROM a
  JOIN kernels k ON k.rank = a.rank AND k.pid = a.pid AND k.correlation = a.correlation),
n AS (SELECT rank, pid, count(*) AS launches FROM launched GROUP BY ALL)
SELECT a.rank, a.pid, count(*), sum(a.total_ns), coalesce(any_value(n.launches), 0)
FROM a LEFT JOIN n ON n.rank = a.rank AND n.pid = a.pid
GROUP BY a.rank, a.pid ORDER BY a.rank, a.pid
"""
_TOP_CALLS_SQL = f"""
SELECT rank, pid, name, count(*) AS n, sum(total_ns) AS t FROM {_API_IN_WINDOW}
GROUP BY ALL ORDER BY rank, pid, t DESC, name
"""

# +1 when a kernel's launch starts, -1 when the kernel starts (not before its launch: a
# kernel recorded as starting earlier is a clock artifact); at one instant the starts first.
_QUEUE_SQL = f"""
CREATE OR REPLACE TEMP TABLE _host_queue AS
WITH launch AS (
  SELECT rank, pid, correlation, min(start_ns) AS start_ns FROM {_API_IN_WINDOW}
  WHERE correlation IS NOT NULL GROUP BY ALL),
l AS (SELECT k.rank, k.device, l.start_ns AS t0, greatest(k.start_ns, l.start_ns) AS t1
      FROM kernels k JOIN launch l ON k.rank = l.rank AND k.pid = l.pid AND k.correlation = l.correlation),
e AS (SELECT rank, device, t0 AS t, 1 AS d FROM l UNION ALL SELECT rank, device, t1, -1 FROM l)
SELECT rank, device, t, sum(d) OVER w AS len, lead(t) OVER w AS t_next, row_number() OVER w AS seq
FROM e WINDOW w AS (PARTITION BY rank, device ORDER BY t, d ROWS UNBOUNDED PRECEDING)
"""
_QUEUE_SUMMARY_SQL = """
SELECT rank, device, count(*) // 2, max(len), min(t), max(t), sum(len * coalesce(t_next - t, 0))
FROM _host_queue GROUP BY ALL ORDER BY rank, device
"""
_QUEUE_BUCKETS_SQL = """
SELECT least(((t - $t0)::HUGEINT * $points // $span), $points - 1)::INTEGER AS b, max(len), arg_max(len, seq)
FROM _host_queue WHERE rank = $rank AND device = $device GROUP BY b ORDER BY b
"""


def _top(rows: list[dict], top: int, keys: tuple[str, ...], **fixed) -> list[dict]:
    """The first ``top`` rows, then one ``other`` row summing ``keys`` over the rest (with
    the ``fixed`` fields)."""
    out = rows[:top]
    rest = rows[top:]
    if rest:
        out.append({"name": "other", **fixed, **{k: sum(r[k] for r in rest) for k in keys}})
    return out


def _queue_timeline(con, rank: int, device: int, t0: int, t1: int) -> list[list[int]]:
    """[time_ns, length] points: the span cut in ``QUEUE_POINTS`` intervals (fewer for a span of
    fewer ns), each at its largest queue length (an interval without events carries the length
    before it)."""
    span = max(t1 - t0, 1)
    points = min(QUEUE_POINTS, span)
    rows = con.execute(
        _QUEUE_BUCKETS_SQL, {"t0": t0, "span": span, "points": points, "rank": rank, "device": device}
    ).fetchall()
    by_bucket = {b: (int(hi), int(last)) for b, hi, last in rows}
    out, carried = [], 0
    for b in range(points):
        hi, last = by_bucket.get(b, (carried, carried))
        out.append([t0 + b * span // points, max(hi, carried)])
        carried = last
    return out


def _launch_queue(con) -> list[dict]:
    con.execute(_QUEUE_SQL)
    queue = []
    for r, d, launches, hi, t0, t1, area in con.execute(_QUEUE_SUMMARY_SQL).fetchall():
        span = int(t1 - t0)
        queue.append(
            {
                "rank": r,
                "device": d,
                "launches": int(launches),
                "start_ns": int(t0),
                "end_ns": int(t1),
                "max": int(hi),
                "mean": float(area) / span if span else float(hi),
                "timeline": _queue_timeline(con, r, d, int(t0), int(t1)),
            }
        )
    con.execute("DROP TABLE _host_queue")
    return queue


def host(con, scope: Scope | None = None, top: int = 10) -> dict:
    """The host side of the trace in ``con``.

    Args:
        con: DuckDB connection with the canonical tables.
        scope: steps to restrict to (default: all of them, or the whole trace without steps).
        top: ops listed per thread, Python frames and API calls listed, before ``other``.

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
    ranges = host_ranges(con, scope)
    windows = ranges.windows
    ranges.register(con)
    try:
        ops = con.execute(_OPS_SQL).fetchall()
        launch_rows = con.execute(_LAUNCH_SQL).fetchall()
        call_rows = con.execute(_TOP_CALLS_SQL).fetchall()
        queue = _launch_queue(con)
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
        window_ns = dict(
            con.execute(
                "SELECT rank, max(e) - min(s) FROM (SELECT rank, start_ns AS s, end_ns AS e FROM cpu_ops "
                "UNION ALL SELECT rank, start_ns, end_ns FROM api_calls) GROUP BY rank"
            ).fetchall()
        )
    else:
        window_ns = {r: int((we - ws).sum()) for r, (ws, we, _) in windows.items()}
    calls: dict[tuple, list[dict]] = {}
    for r, p, name, n, t in call_rows:
        calls.setdefault((r, p), []).append({"name": name, "count": int(n), "total_ns": int(t)})
    launch = []
    for r, p, n_calls, api_ns, launches in launch_rows:
        w = int(window_ns.get(r) or 0)
        launch.append(
            {
                "rank": r,
                "pid": p,
                "window_ns": w,
                "api_calls": int(n_calls),
                "api_ns": int(api_ns),
                "api_pct": 100 * api_ns / w if w else None,
                "launches": int(launches),
                "launches_per_s": launches * 1e9 / w if w else None,
                "top_calls": _top(calls.get((r, p), []), TOP_CALLS, ("count", "total_ns")),
            }
        )
    return {
        "window": "trace" if windows is None else "steps",
        "threads": thread_rows,
        "python_frames": _top(frame_rows, top, ("count", "total_ns", "self_ns")),
        "launch": launch,
        "launch_queue": queue,
    }


# Kernels per launching API call (its process and correlation id), by scan position
_LAUNCHED_SQL = """
SELECT a.i, count(*), sum(k.dur_ns)
FROM (SELECT row_number() OVER () - 1 AS i, rank, pid, correlation FROM api_calls) a
JOIN kernels k ON k.rank = a.rank AND k.pid = a.pid AND k.correlation = a.correlation
GROUP BY a.i
"""
_KIND_CODE = {"op": 1, "python": 2}
_OP_TOTALS_SQL = """
SELECT kind, name, count(*), sum(total_ns), sum(self_ns), sum(kernels), sum(kernel_ns)
FROM (SELECT kind, name, x.* FROM cpu_ops POSITIONAL JOIN _host_op_totals x)
WHERE counted AND kind IN ('op', 'python') GROUP BY ALL
"""


def op_totals(con, scope: Scope | None = None) -> list[dict]:
    """Every aten op and Python frame of the trace, over all threads, inside the window.

    Returns:
        Rows ``kind`` (``op`` or ``python``), ``name``, ``count``, ``total_ns``, ``self_ns``
        (as in ``host``), ``kernels`` and ``kernel_ns``: the kernels (and their GPU time) whose
        launching API call has the range as its innermost enclosing range of its kind.
    """
    ranges = host_ranges(con, scope or Scope())
    total, self_ns, counted, parent = ranges.tables["cpu_ops"]
    a_parent = ranges.tables["api_calls"][3]
    kind = np.zeros(len(parent), np.int8)
    if len(parent):
        codes = con.execute(
            "SELECT CASE kind WHEN 'op' THEN 1 WHEN 'python' THEN 2 ELSE 0 END AS k FROM cpu_ops"
        ).fetchnumpy()["k"]
        kind = np.asarray(codes, np.int8)
    launched = con.execute(_LAUNCHED_SQL).fetchnumpy()
    calls = np.asarray(launched["i"], np.int64)
    n_kernels = np.asarray(launched["count_star()"], np.int64)
    k_ns = np.asarray(launched["sum(k.dur_ns)"], np.float64)
    kernels = np.zeros(len(parent), np.float64)
    kernel_ns = np.zeros(len(parent), np.float64)
    for code in _KIND_CODE.values():
        at = a_parent[calls].copy() if len(calls) else np.empty(0, np.int64)
        live = np.flatnonzero(at >= 0)
        live = live[kind[at[live]] != code]
        while len(live):  # up to the innermost enclosing range of this kind
            at[live] = parent[at[live]]
            live = live[at[live] >= 0]
            live = live[kind[at[live]] != code]
        ok = at >= 0
        kernels += np.bincount(at[ok], weights=n_kernels[ok], minlength=len(parent))
        kernel_ns += np.bincount(at[ok], weights=k_ns[ok], minlength=len(parent))
    con.register(
        "_host_op_totals",
        {
            "total_ns": total,
            "self_ns": self_ns,
            "counted": counted,
            "kernels": np.rint(kernels).astype(np.int64),
            "kernel_ns": np.rint(kernel_ns).astype(np.int64),
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
