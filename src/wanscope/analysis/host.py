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

from collections import Counter
from dataclasses import dataclass

import numpy as np

from wanscope.analysis.scope import Scope
from wanscope.trace.link import memory_limit
from wanscope.trace.load import NEST_MEMORY_LIMIT

QUEUE_POINTS = 200
TOP_CALLS = 5


CHUNK = 1 << 18  # rows per step of the passes that would otherwise hold temporaries of every row


def nest_ranges(s: np.ndarray, e: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The parent of each host range and the end of the time in which it is the innermost range.

    The ranges come sorted by (thread, start, end descending, tie), as ingest numbers them
    (``cpu_ops.id``). The parent: the range on its thread that encloses it and started last,
    as torch.profiler's own event tree (``key_averages``) picks it. Unlike a nesting by counting
    open ranges, it stays right where ranges overlap without nesting, as a ``record_function``
    range does that outlives the Python call that opened it. In that order a range's parent is
    its previous greater-or-equal end on its thread, found by pointer jumping (each candidate
    jumps to its own candidate while it ends earlier: everything in between ends earlier still),
    in about log2 of the longest chain of vectorized rounds.

    The cut end: where the next range under the same parent starts inside a range, the later
    one is the innermost from there (a sampling profiler would see it on top of the stack), so
    the earlier one is cut at that start; then each range is cut at its parent's cut end, never
    before its own start, walking down only from the ranges that were cut. Ranges cut so nest
    with disjoint siblings: self times computed from them are never negative and add up to the
    union of the outermost ranges.

    Args:
        s, e: int64 [n], start and end (ns) in that order.
        first: bool [n], True at each thread's first range.

    Returns:
        (parent int32 [n], a position in the order or -1 at the top; cut end int64 [n], ns).
    """
    n = len(s)
    cand = np.arange(-1, n - 1, dtype=np.int32)
    cand[first] = -1
    _jump_to_enclosing(cand, e, e)
    # siblings: same parent, or the top ranges of one thread; in order within each group
    group = cand.copy()
    top = np.flatnonzero(cand < 0)
    group[top] = -1 - np.cumsum(first, dtype=np.int32)[top]
    sib = np.argsort(group, kind="stable").astype(np.int32)
    grouped = group[sib]
    del group, top
    cut = e.copy()
    front = []
    for lo in range(0, max(n - 1, 0), CHUNK):
        a, b = sib[lo : lo + CHUNK], sib[lo + 1 : lo + 1 + CHUNK]
        same = grouped[lo : lo + len(b)] == grouped[lo + 1 : lo + 1 + len(b)]
        earlier, later = a[: len(b)][same], b[same]
        cut[earlier] = np.minimum(cut[earlier], np.maximum(s[later], s[earlier]))
        front.append(earlier[cut[earlier] < e[earlier]])
    front = np.concatenate(front) if front else np.empty(0, np.int32)
    while len(front):  # the children of ranges just cut, cut at their parent's end
        lo = np.searchsorted(grouped, front, "left")
        hi = np.searchsorted(grouped, front, "right")
        kids = sib[_ranges(lo, hi)]
        new = np.maximum(s[kids], np.minimum(cut[kids], cut[cand[kids]]))
        moved = new < cut[kids]
        kids = kids[moved]
        cut[kids] = new[moved]
        front = np.unique(kids)
    return cand, cut


def _jump_to_enclosing(cand: np.ndarray, e: np.ndarray, need: np.ndarray, parent: np.ndarray | None = None) -> None:
    """In place: move each candidate ``cand[i]`` (an index into ``e``, -1 for none) back until
    ``e[cand[i]] >= need[i]``, jumping to ``parent`` of the candidate (default: the candidates'
    own candidates, ``cand`` itself: pointer jumping)."""
    up = cand if parent is None else parent
    live = np.flatnonzero(cand >= 0).astype(np.int32)
    at = cand[live]
    keep = e[at] < need[live]
    live, at = live[keep], at[keep]
    while len(live):
        at = up[at]
        cand[live] = at
        keep = at >= 0
        live, at = live[keep], at[keep]
        keep = e[at] < need[live]
        live, at = live[keep], at[keep]


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` over i, int64."""
    lengths = hi - lo
    total = int(lengths.sum())
    if not total:
        return np.empty(0, np.int64)
    starts = np.cumsum(lengths) - lengths
    return np.repeat(lo - starts, lengths) + np.arange(total)


def attach_leaves(
    s: np.ndarray,
    e: np.ndarray,
    parent: np.ndarray,
    block_lo: np.ndarray,
    block_hi: np.ndarray,
    leaf_start: np.ndarray,
    leaf_end: np.ndarray,
) -> np.ndarray:
    """The parent of each leaf range (an API call, which encloses nothing): the range of its
    thread that encloses it and started last, -1 for none.

    Args:
        s, e, parent: the ranges in ``nest_ranges``' order and their parents.
        block_lo, block_hi: int64 [m], the positions [lo, hi) of each leaf's thread's ranges
            (-1 where its thread has none).
        leaf_start, leaf_end: int64 [m], ns.

    Returns:
        int32 [m], positions in the order.
    """
    m = len(leaf_start)
    cand = np.full(m, -1, np.int32)
    by_block = np.argsort(block_lo, kind="stable")
    los, starts = np.unique(block_lo[by_block], return_index=True)
    for k, lo in enumerate(los.tolist()):
        mine = by_block[starts[k] : starts[k + 1] if k + 1 < len(starts) else m]
        hi = int(block_hi[mine[0]])
        if lo >= 0:  # the last range of the thread starting at or before the leaf
            at = lo + np.searchsorted(s[lo:hi], leaf_start[mine], "right") - 1
            cand[mine] = np.where(at >= lo, at, -1)
    _jump_to_enclosing(cand, e, leaf_end, parent)
    return cand


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


def _before(window, t: np.ndarray) -> np.ndarray:
    """Window time before each instant ``t`` (int64 ns); ``window`` None: a rank without steps
    (no window: 0)."""
    if window is None:
        return np.zeros(len(t), np.int64)
    ws, we, wb = window
    j = np.searchsorted(ws, t, side="right") - 1
    ok = j >= 0
    j = np.maximum(j, 0)
    return np.where(ok, wb[j] + np.minimum(t, we[j]) - ws[j], 0)


def _clip(windows, rank_of, s, e, cut) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In place over ``e`` and ``cut``: each range's time inside the window (from ``e``) and its
    cut time inside it (from ``cut``), and whether it counts (some time inside, or a
    zero-length range lying inside). ``rank_of(lo, hi)``: the rank of rows lo..hi, chunk by
    chunk."""
    counted = np.ones(len(s), bool)
    if windows is None:
        np.subtract(e, s, out=e)
        np.subtract(cut, s, out=cut)
        return e, cut, counted
    for lo in range(0, len(s), CHUNK):
        hi = min(lo + CHUNK, len(s))
        for rank, rows in rank_of(lo, hi):
            w = windows.get(rank)
            t, te, tc = s[rows], e[rows], cut[rows]
            if w is None:
                e[rows], cut[rows], counted[rows] = 0, 0, False
                continue
            j = np.searchsorted(w[0], t, side="right") - 1
            inside = j >= 0
            j = np.maximum(j, 0)
            inside &= t <= w[1][j]
            # most ranges lie in one window interval: their time there is their own
            whole = inside & (te <= w[1][j])
            total, cut_in = te - t, tc - t
            part = np.flatnonzero(~whole)
            if len(part):
                before = _before(w, t[part])
                total[part] = _before(w, te[part]) - before
                cut_in[part] = _before(w, tc[part]) - before
            e[rows], cut[rows] = total, cut_in
            counted[rows] = (total > 0) | inside
    return e, cut, counted


@dataclass
class HostRanges:
    """Every host range with its time inside the window, in each table's scan order.

    Attributes:
        windows: ``_windows``' result (None: the whole trace).
        tables: table (``cpu_ops``, ``api_calls``) -> (``total_ns`` int64 ns: the range's time
            inside the window; ``self_ns`` int64 ns (an API call's: its cut time); ``counted``
            bool), arrays [rows].
        position: int32 [cpu_ops rows], each scan row's position in the nesting order (its ``id``);
        cpu_parent: int32 [cpu_ops rows], by position: the parent's position, -1 at the top;
        api_parent: int32 [api_calls rows], in scan order: the enclosing ``cpu_ops`` range's
            position, -1 for none.
        threads: (rank, pid, tid) of each thread with ``cpu_ops`` ranges, in the nesting order.
        key: int32 [cpu_ops rows], in scan order: thread index * (len(KINDS) + 1) + kind code,
            for grouping by thread and kind with an integer.
        span_ns: rank -> first start to last end of its host ranges (ns).
    """

    windows: dict | None
    tables: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    position: np.ndarray
    cpu_parent: np.ndarray
    api_parent: np.ndarray
    threads: list[tuple]
    key: np.ndarray
    span_ns: dict[int, int]

    def register(self, con) -> None:
        """Register ``_host_<table>`` (total_ns, self_ns, counted; cpu_ops also key), to join
        positionally."""
        for table, (total, self_ns, counted) in self.tables.items():
            cols = {"total_ns": total, "self_ns": self_ns, "counted": counted}
            if table == "cpu_ops":
                cols["key"] = self.key
            con.register(f"_host_{table}", cols)

    def unregister(self, con) -> None:
        for table in self.tables:
            con.unregister(f"_host_{table}")


KINDS = ("op", "python", "annotation", "nvtx")  # cpu_ops.kind as a code (its index; another kind: 4)
_KIND_CODE_SQL = (
    "CASE kind " + " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(KINDS)) + f" ELSE {len(KINDS)} END"
)
# rowid: the row's place in a scan, which POSITIONAL JOIN follows
_PIECE_SQL = f"SELECT rowid, id, start_ns, end_ns, ({_KIND_CODE_SQL})::TINYINT AS kind FROM cpu_ops WHERE rowid >= ? AND rowid < ?"
_THREADS_SQL = "SELECT rank, pid, tid, min(id) AS lo, max(id) + 1 AS hi FROM cpu_ops GROUP BY ALL ORDER BY lo"
_API_SQL = """
SELECT a.rowid, a.rank, a.start_ns, a.end_ns, coalesce(t.lo, -1) AS lo, coalesce(t.hi, -1) AS hi
FROM api_calls a LEFT JOIN _host_threads t
  ON a.rank = t.rank AND a.pid IS NOT DISTINCT FROM t.pid AND a.tid IS NOT DISTINCT FROM t.tid
"""


def host_ranges(con, scope: Scope) -> HostRanges:
    """Nest the host ranges of ``con`` (``nest_ranges``, API calls as leaves), cut them to the
    window and compute their self times. Works in ``cpu_ops.id`` order (ingest's nesting order:
    each thread's ranges in one block) with int32 positions and a few arrays of every row at a
    time; DuckDB's buffers are best shrunk meanwhile (``memory_limit``), as ``host`` does."""
    n, limit = con.execute("SELECT count(*), coalesce(max(rowid) + 1, 0) FROM cpu_ops").fetchone()
    inv = np.empty(n, np.int32)  # scan row -> position in the order
    kind = np.empty(n, np.int8)  # by scan row
    s, e = np.empty(n, np.int64), np.empty(n, np.int64)
    for lo in range(0, limit, CHUNK):  # in pieces: DuckDB holds one piece's result at a time
        piece = con.execute(_PIECE_SQL, [lo, lo + CHUNK]).fetchnumpy()
        at, rows = np.asarray(piece["id"], np.int64), np.asarray(piece["rowid"], np.int64)
        inv[rows], kind[rows] = at, piece["kind"]
        s[at], e[at] = piece["start_ns"], piece["end_ns"]
    con.execute(f"CREATE OR REPLACE TEMP TABLE _host_threads AS {_THREADS_SQL}")
    thread_rows = con.execute("SELECT * FROM _host_threads ORDER BY lo").fetchall()
    threads = {k: np.array([row[i] for row in thread_rows], np.int64) for i, k in ((0, "rank"), (3, "lo"), (4, "hi"))}
    first = np.zeros(n, bool)
    first[threads["lo"]] = True
    thread = (np.cumsum(first, dtype=np.int32) - 1)[inv]  # by scan row: the thread's index in ``threads``
    parent, cut = nest_ranges(s, e, first)
    del first
    try:
        fetched = con.execute(_API_SQL).fetchnumpy()
    finally:
        con.execute("DROP TABLE _host_threads")
    api = {}
    rows = np.asarray(fetched.pop("rowid"), np.int64)
    for k, v in fetched.items():  # in scan order, for POSITIONAL JOIN
        api[k] = np.empty(len(rows), np.int64)
        api[k][rows] = v
    del fetched, rows
    a_parent = attach_leaves(s, e, parent, api["lo"], api["hi"], api["start_ns"], api["end_ns"])
    a_cut = api["end_ns"].astype(np.int64)
    has = a_parent >= 0
    a_cut[has] = np.maximum(api["start_ns"][has], np.minimum(a_cut[has], cut[a_parent[has]]))
    windows = _windows(con, scope)
    blocks = list(zip(threads["rank"].tolist(), threads["lo"].tolist(), threads["hi"].tolist(), strict=True))
    span: dict[int, list[int]] = {}  # rank -> [first start, last end] of its host ranges
    for r, lo, hi in blocks:  # each thread's ranges start in order
        _widen(span, r, int(s[lo]), int(e[lo:hi].max()))
    for r in np.unique(api["rank"]).tolist():
        mine = api["rank"] == r
        _widen(span, r, int(api["start_ns"][mine].min()), int(api["end_ns"][mine].max()))

    def cpu_rank(lo, hi):
        for r, b_lo, b_hi in blocks:
            a, b = max(lo, b_lo), min(hi, b_hi)
            if a < b:
                yield r, slice(a, b)

    total, cut, counted = _clip(windows, cpu_rank, s, e, cut)  # e and cut now hold times
    del s, e
    a_rank = np.asarray(api["rank"], np.int64)

    def api_rank(lo, hi):
        part = a_rank[lo:hi]
        for r in np.unique(part):
            yield int(r), lo + np.flatnonzero(part == r)

    a_start = api["start_ns"].astype(np.int64)
    a_total, a_cut, a_counted = _clip(windows, api_rank, a_start, api["end_ns"].astype(np.int64), a_cut)
    children = np.zeros(n, np.int64)
    for lo in range(0, n, CHUNK):
        p, c = parent[lo : lo + CHUNK], cut[lo : lo + CHUNK]
        np.add.at(children, p[p >= 0], c[p >= 0])
    np.add.at(children, a_parent[has], a_cut[has])
    cut -= children  # self = cut time less the children's
    del children
    scan = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, bool))
    for lo in range(0, n, CHUNK):  # back to scan order, for POSITIONAL JOIN
        at = inv[lo : lo + CHUNK]
        for out, by_position in zip(scan, (total, cut, counted), strict=True):
            out[lo : lo + CHUNK] = by_position[at]
    del total, cut, counted
    return HostRanges(
        windows,
        {"cpu_ops": scan, "api_calls": (a_total, a_cut, a_counted)},
        inv,
        parent,
        a_parent,
        [tuple(row[:3]) for row in thread_rows],
        thread * (len(KINDS) + 1) + kind,
        {r: hi - lo for r, (lo, hi) in span.items()},
    )


def _widen(span: dict, key, lo: int, hi: int) -> None:
    """Widen ``span[key]`` ([lo, hi]) to hold lo..hi."""
    have = span.setdefault(key, [lo, hi])
    have[0], have[1] = min(have[0], lo), max(have[1], hi)


# by thread and kind as one integer (``HostRanges.key``), then name: grouping by the VARCHAR
# kind beside the name took twice as long
_OPS_SQL = """
SELECT x.key, name, count(*) AS count, sum(total_ns) AS total_ns, sum(self_ns) AS self_ns
FROM cpu_ops POSITIONAL JOIN _host_cpu_ops x WHERE counted GROUP BY x.key, name
"""
_API_OPS_SQL = """
SELECT rank, pid, tid, kind, name, count(*) AS count, sum(total_ns) AS total_ns, sum(self_ns) AS self_ns
FROM api_calls POSITIONAL JOIN _host_api_calls x WHERE counted GROUP BY ALL
"""
# Each kernel with the launching API call inside the window: the call's process and
# correlation id, when it started and, not before that, when the kernel started (a kernel
# recorded as starting earlier is a clock artifact).
_LAUNCHED_SQL = """
SELECT k.rank, a.pid, k.device, a.correlation, a.start_ns AS launch_ns, greatest(k.start_ns, a.start_ns) AS start_ns
FROM (SELECT a.rank, a.pid, a.correlation, a.start_ns FROM api_calls a POSITIONAL JOIN _host_api_calls x
      WHERE x.counted AND a.correlation IS NOT NULL) a
JOIN kernels k ON k.rank = a.rank AND k.pid = a.pid AND k.correlation = a.correlation
"""


def _top(rows: list[dict], top: int, keys: tuple[str, ...], **fixed) -> list[dict]:
    """The first ``top`` rows, then one ``other`` row summing ``keys`` over the rest (with
    the ``fixed`` fields)."""
    out = rows[:top]
    rest = rows[top:]
    if rest:
        out.append({"name": "other", **fixed, **{k: sum(r[k] for r in rest) for k in keys}})
    return out


def _groups(*keys: np.ndarray):
    """(the distinct key tuples, their rows' indices) of rows grouped by ``keys``, in key order."""
    order = np.lexsort(keys[::-1])
    if not len(order):
        return
    sorted_keys = [k[order] for k in keys]
    change = np.ones(len(order), bool)
    change[1:] = np.any([k[1:] != k[:-1] for k in sorted_keys], axis=0)
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], len(order))
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        yield tuple(int(k[a]) for k in sorted_keys), order[a:b]


def _distinct_per(rank: np.ndarray, pid: np.ndarray, value: np.ndarray) -> dict[tuple, int]:
    """(rank, pid) -> the number of distinct ``value``s among its rows."""
    order = np.lexsort((value, pid, rank))
    r, p, v = rank[order], pid[order], value[order]
    new = np.ones(len(order), bool)
    new[1:] = (r[1:] != r[:-1]) | (p[1:] != p[:-1]) | (v[1:] != v[:-1])
    return dict(Counter(zip(r[new].tolist(), p[new].tolist(), strict=True)))


def launch_queue(launch_ns: np.ndarray, start_ns: np.ndarray) -> dict:
    """The launch queue of one device: +1 when a kernel's launch starts, -1 when the kernel
    starts; at one instant the starts first.

    Args: int64 [k], each kernel's launch and start (ns, start >= launch).
    Returns: ``launches``, ``start_ns``, ``end_ns`` (first launch, last kernel start), ``max``,
        ``mean`` (time-weighted over that span) and ``timeline``: ``QUEUE_POINTS`` or fewer
        [time_ns, length] points, the span in equal intervals, each at its largest length.
    """
    t = np.concatenate((launch_ns, start_ns))
    d = np.concatenate((np.ones(len(launch_ns), np.int64), -np.ones(len(start_ns), np.int64)))
    order = np.lexsort((d, t))
    t, length = t[order], np.cumsum(d[order])
    t0, t1 = int(t[0]), int(t[-1])
    span = t1 - t0
    area = int((length[:-1] * np.diff(t)).sum())
    points = max(1, min(QUEUE_POINTS, span))
    bucket = np.minimum((t - t0) * points // max(span, 1), points - 1)
    highest = np.zeros(points, np.int64)
    np.maximum.at(highest, bucket, length)
    last = np.full(points, -1, np.int64)
    last[bucket] = length  # the last event of each interval (events are in time order)
    timeline, carried = [], 0
    for b in range(points):  # an interval without events carries the length before it
        timeline.append([t0 + b * max(span, 1) // points, max(int(highest[b]), carried)])
        carried = int(last[b]) if last[b] >= 0 else carried
    return {
        "launches": len(launch_ns),
        "start_ns": t0,
        "end_ns": t1,
        "max": int(length.max()),
        "mean": area / span if span else float(length.max()),
        "timeline": timeline,
    }


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
    with memory_limit(con, NEST_MEMORY_LIMIT):  # DuckDB's buffers shrunk beside the arrays, as ingest's nesting
        return _host(con, ranges or host_ranges(con, scope), top)


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
        launched = con.execute(_LAUNCHED_SQL).fetchnumpy()
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
    else:
        window_ns = {r: int((we - ws).sum()) for r, (ws, we, _) in windows.items()}
    calls: dict[tuple, list[dict]] = {}
    for r, p, _, kind, name, n, total, _ in ops:
        if kind in ("runtime", "driver"):
            calls.setdefault((r, p), []).append({"name": name, "count": int(n), "total_ns": int(total)})
    cols = {k: np.asarray(v, np.int64) for k, v in launched.items()}
    launches = _distinct_per(cols["rank"], cols["pid"], cols["correlation"])
    launch = []
    for (r, p), rows in sorted(calls.items(), key=lambda kv: (kv[0][0], kv[0][1] if kv[0][1] is not None else -1)):
        rows.sort(key=lambda c: (-c["total_ns"], c["name"]))
        w = int(window_ns.get(r) or 0)
        api_ns, n_launches = sum(c["total_ns"] for c in rows), launches.get((r, p), 0)
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
        for (r, d), rows in _groups(cols["rank"], cols["device"])
    ]
    return {
        "window": "trace" if windows is None else "steps",
        "threads": thread_rows,
        "python_frames": _top(frame_rows, top, ("count", "total_ns", "self_ns")),
        "launch": launch,
        "launch_queue": queue,
    }


# Kernels per launching API call (its process and correlation id), by scan position
_KERNELS_PER_CALL_SQL = """
SELECT a.i, count(*), sum(k.dur_ns)
FROM (SELECT row_number() OVER () - 1 AS i, rank, pid, correlation FROM api_calls) a
JOIN kernels k ON k.rank = a.rank AND k.pid = a.pid AND k.correlation = a.correlation
GROUP BY a.i
"""
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
    with memory_limit(con, NEST_MEMORY_LIMIT):
        return _op_totals(con, scope or Scope())


def _op_totals(con, scope: Scope) -> list[dict]:
    ranges = host_ranges(con, scope)
    total, self_ns, counted = ranges.tables["cpu_ops"]
    inv, parent, a_parent = ranges.position, ranges.cpu_parent, ranges.api_parent
    n = len(parent)
    kind = np.empty(n, np.int8)  # by position
    kind[inv] = ranges.key % (len(KINDS) + 1)
    launched = con.execute(_KERNELS_PER_CALL_SQL).fetchnumpy()
    calls = np.asarray(launched["i"], np.int64)
    n_kernels = np.asarray(launched["count_star()"], np.float64)
    k_ns = np.asarray(launched["sum(k.dur_ns)"], np.float64)
    kernels = np.zeros(n)
    kernel_ns = np.zeros(n)
    for code in (KINDS.index("op"), KINDS.index("python")):
        at = a_parent[calls].copy()
        live = np.flatnonzero(at >= 0)
        live = live[kind[at[live]] != code]
        while len(live):  # up to the innermost enclosing range of this kind
            at[live] = parent[at[live]]
            live = live[at[live] >= 0]
            live = live[kind[at[live]] != code]
        ok = at >= 0
        kernels += np.bincount(at[ok], weights=n_kernels[ok], minlength=n)
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
