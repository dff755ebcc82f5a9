"""Every host range of a trace nested, cut to the window, with its self time: what the host
analyses (``analysis/host.py``) build on.

Definitions (docs/design.md, "Host time and self time"):

- Host ranges: ``cpu_ops`` (aten and other dispatcher ops, Python frames, ``record_function``
  and NVTX ranges), nested per thread by containment (``cpu_ops.parent_id``), and ``api_calls``
  (CUDA runtime and driver calls) as leaves under the innermost range that encloses them
  (``attach_leaves``).
- Window: the union of the steps' CPU ranges per rank (the selected steps with a step range)
  when the trace has steps, else the whole trace; a rank without steps in a trace with steps
  counts its whole time. A range counts with the part of it inside
  the window (``total_ns``), and at all if any of it is inside (a zero-length one: if it lies
  inside).
- Self time: the time in which the range is the innermost open on its thread (``cut_ends``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wanscope.analysis.scope import Scope

CHUNK = 1 << 18  # rows per step of the passes that would otherwise hold temporaries of every row


@dataclass
class Siblings:
    """The ranges grouped by parent (the top ranges of a thread: one group), each group in
    order: ``order`` int32 [n] positions, ``group`` int32 [n] each one's group key (the parent's
    position, or -1 - the thread's index at the top), sorted."""

    order: np.ndarray
    group: np.ndarray

    @classmethod
    def of(cls, parent: np.ndarray, first: np.ndarray) -> Siblings:
        group = parent.copy()
        top = np.flatnonzero(parent < 0)
        group[top] = -1 - np.cumsum(first, dtype=np.int32)[top]
        order = np.argsort(group, kind="stable").astype(np.int32)
        return cls(order, group[order])

    def first_of(self, keys: np.ndarray) -> np.ndarray:
        """The first range of each group in ``keys``, -1 for a group without ranges."""
        if not len(self.order):
            return np.full(len(keys), -1, np.int32)
        at = np.searchsorted(self.group, keys, "left")
        ok = (at < len(self.group)) & (self.group[np.minimum(at, len(self.group) - 1)] == keys)
        return np.where(ok, self.order[np.minimum(at, len(self.order) - 1)], -1)

    def next_of(self, rows: np.ndarray) -> np.ndarray:
        """The next range after each of ``rows`` in its group, -1 for the last."""
        if not len(self.order):
            return np.full(len(rows), -1, np.int32)
        where = np.empty(len(self.order), np.int32)
        where[self.order] = np.arange(len(self.order), dtype=np.int32)
        at = where[rows] + 1
        ok = at < len(self.order)
        at = np.minimum(at, len(self.order) - 1)
        ok &= self.group[at] == self.group[where[rows]]
        return np.where(ok, self.order[at], -1)

    def cut_down(self, cut: np.ndarray, s: np.ndarray, parent: np.ndarray, front: np.ndarray) -> None:
        """In place: the children of the ranges in ``front``, which were just cut, cut at their
        parent's cut end (never before their start), and so on down."""
        while len(front):
            lo = np.searchsorted(self.group, front, "left")
            hi = np.searchsorted(self.group, front, "right")
            kids = self.order[_ranges(lo, hi)]
            new = np.maximum(s[kids], np.minimum(cut[kids], cut[parent[kids]]))
            moved = new < cut[kids]
            kids = kids[moved]
            cut[kids] = new[moved]
            front = kids


def cut_ends(s: np.ndarray, e: np.ndarray, parent: np.ndarray, siblings: Siblings) -> np.ndarray:
    """The end of the time in which each host range is the innermost one open on its thread.

    The ranges come sorted as ingest numbers them (``cpu_ops.id``: thread, start, end
    descending), with their parents by containment (``cpu_ops.parent_id``, ``trace/link.py``).
    Where the next range under the same parent starts inside a range (a ``record_function``
    range that outlives the Python call that opened it, or the call that closes it), the later
    one is the innermost from there, as a sampling profiler would see it on top of the stack:
    the earlier one is cut at that start. Then each range is cut at its parent's cut end,
    never before its own start, walking down only from the ranges that were cut. Ranges cut so
    nest with disjoint siblings: self times computed from them are never negative and add up
    to the union of the outermost ranges.

    Args:
        s, e: int64 [n], start and end (ns) in that order.
        parent: int32 [n], the parent's position, -1 at the top.
        siblings: ``Siblings.of(parent, first)``.

    Returns:
        int64 [n], ns.
    """
    n = len(s)
    sib, grouped = siblings.order, siblings.group
    cut = e.copy()
    front = []
    for lo in range(0, max(n - 1, 0), CHUNK):
        a, b = sib[lo : lo + CHUNK], sib[lo + 1 : lo + 1 + CHUNK]
        same = grouped[lo : lo + len(b)] == grouped[lo + 1 : lo + 1 + len(b)]
        earlier, later = a[: len(b)][same], b[same]
        cut[earlier] = np.minimum(cut[earlier], np.maximum(s[later], s[earlier]))
        front.append(earlier[cut[earlier] < e[earlier]])
    siblings.cut_down(cut, s, parent, np.concatenate(front) if front else np.empty(0, np.int32))
    return cut


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
) -> tuple[np.ndarray, np.ndarray]:
    """Where each leaf range (an API call, which encloses nothing) sits among the ranges.

    Args:
        s, e, parent: the ranges in ingest's nesting order and their parents' positions.
        block_lo, block_hi: int64 [m], the positions [lo, hi) of each leaf's thread's ranges
            (-1 where its thread has none).
        leaf_start, leaf_end: int64 [m], ns.

    Returns:
        (parent, previous), int32 [m] positions: the range of the leaf's thread that encloses
        it and started last (-1 for none), and the child of that range (or top range of the
        thread) that started last at or before the leaf (-1 for none): its sibling before it.
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
    previous = np.full(m, -1, np.int32)
    live = np.flatnonzero(cand >= 0)
    live = live[e[cand[live]] < leaf_end[live]]
    while len(live):  # up from that range, each step one parent, to the first that encloses
        previous[live] = cand[live]
        cand[live] = parent[cand[live]]
        live = live[cand[live] >= 0]
        live = live[e[cand[live]] < leaf_end[live]]
    return cand, previous


def cut_leaves(
    s: np.ndarray,
    cut: np.ndarray,
    parent: np.ndarray,
    siblings: Siblings,
    leaf: dict[str, np.ndarray],
) -> np.ndarray:
    """Cut the leaves among their siblings as ``cut_ends`` cuts the ranges, in place over ``cut``
    where a leaf starts inside the sibling before it, and return the leaves' cut ends.

    A leaf that starts inside the range before it under the same parent cuts that range (and,
    down from it, its descendants) at its start; a leaf is cut at the start of the next sibling
    range and of the next leaf that it does not enclose; a leaf it encloses (a driver call
    inside a runtime call) nests in it; then each is cut at its parent's cut end.

    Args:
        s, cut, parent: the ranges' starts, cut ends and parents (positions), by position.
        siblings: the ranges' ``Siblings``.
        leaf: int arrays [m]: ``start_ns``, ``end_ns``, ``parent`` and ``previous``
            (``attach_leaves``), ``top`` (the group of a leaf without parent, as in ``Siblings``).

    Returns:
        int64 [m], ns; ``leaf["outer_leaf"]`` is set: the leaf each leaf nests in, -1 for none
        (its time counts as that leaf's child's, not its parent range's).
    """
    ls, le, lp, prev = leaf["start_ns"], leaf["end_ns"], leaf["parent"], leaf["previous"]
    key = np.where(lp >= 0, lp, leaf["top"])
    out = le.astype(np.int64)
    # the sibling range before: cut where the leaf starts inside it
    before = np.flatnonzero(prev >= 0)
    inside = before[cut[prev[before]] > ls[before]]
    if len(inside):
        rows = prev[inside]
        cut[rows] = np.maximum(s[rows], np.minimum(cut[rows], ls[inside]))
        siblings.cut_down(cut, s, parent, np.unique(rows))
    # the next sibling range: the one after the one before, or the group's first
    nxt = np.where(prev >= 0, siblings.next_of(np.maximum(prev, 0)), siblings.first_of(key))
    has = nxt >= 0
    out[has] = np.minimum(out[has], np.maximum(ls[has], s[nxt[has]]))
    # the next leaf of the same group: a driver call inside a runtime call nests in it (one
    # level); any other later leaf cuts the earlier one at its start
    order = np.lexsort((-le, ls, key))
    same = key[order][1:] == key[order][:-1]
    earlier, later = order[:-1][same], order[1:][same]
    inner = le[later] <= le[earlier]
    outer_leaf = np.full(len(ls), -1, np.int64)
    outer_leaf[later[inner]] = earlier[inner]
    earlier, later = earlier[~inner], later[~inner]
    out[earlier] = np.minimum(out[earlier], np.maximum(ls[earlier], ls[later]))
    has = lp >= 0
    out[has] = np.maximum(ls[has], np.minimum(out[has], cut[lp[has]]))
    nested = np.flatnonzero(outer_leaf >= 0)
    out[nested] = np.maximum(ls[nested], np.minimum(out[nested], out[outer_leaf[nested]]))
    leaf["outer_leaf"] = outer_leaf
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
            if w is None:  # a rank without steps: its whole time
                e[rows], cut[rows] = te - t, tc - t
                continue
            j = np.searchsorted(w[0], t, side="right") - 1
            inside = j >= 0
            j = np.maximum(j, 0)
            # starts inside an interval; at its end only a zero-length range (the next step's
            # range, starting where this one ends, is not in it)
            inside &= (t < w[1][j]) | ((te == t) & (t == w[1][j]))
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
        thread: int32 [cpu_ops rows], by position: the index of the range's thread in ``threads``.
        kind: int8 [cpu_ops rows], by position: the range's kind as its index in ``KINDS``
            (another kind: ``len(KINDS)``).
        span_ns: rank -> first start to last end of its host ranges (ns).
    """

    windows: dict | None
    tables: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    position: np.ndarray
    cpu_parent: np.ndarray
    api_parent: np.ndarray
    threads: list[tuple]
    thread: np.ndarray
    kind: np.ndarray
    span_ns: dict[int, int]

    def register(self, con) -> None:
        """Register ``_host_<table>`` (total_ns, self_ns, counted; cpu_ops also ``key``: thread
        index * (len(KINDS) + 1) + kind code, for grouping by thread and kind with one integer;
        api_calls also call, the scan position), to join positionally."""
        for table, (total, self_ns, counted) in self.tables.items():
            cols = {"total_ns": total, "self_ns": self_ns, "counted": counted}
            if table == "cpu_ops":
                key = self.thread * np.int32(len(KINDS) + 1)
                key += self.kind
                cols["key"] = key[self.position]  # in scan order
            else:
                cols["call"] = np.arange(len(total), dtype=np.int64)
            con.register(f"_host_{table}", cols)

    def unregister(self, con) -> None:
        for table in self.tables:
            con.unregister(f"_host_{table}")


KINDS = ("op", "python", "annotation", "nvtx")  # cpu_ops.kind as a code (its index; another kind: 4)
_KIND_CODE_SQL = (
    "CASE kind " + " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(KINDS)) + f" ELSE {len(KINDS)} END"
)
# rowid: where the row comes in a scan, which POSITIONAL JOIN follows (``_scan_positions``)
_PIECE_SQL = (
    f"SELECT rowid, id, coalesce(parent_id, -1) AS parent, start_ns, end_ns, ({_KIND_CODE_SQL})::TINYINT AS kind "
    "FROM cpu_ops WHERE rowid >= ? AND rowid < ?"
)
# Each thread's ranges are one block of ids whose first is a top range (nothing earlier on the
# thread encloses it): the blocks from the top ranges alone, each up to the next one's start.
_THREADS_SQL = """
SELECT rank, pid, tid, lo, coalesce(lead(lo) OVER (ORDER BY lo), $n) AS hi
FROM (SELECT rank, pid, tid, min(id) AS lo FROM cpu_ops WHERE parent_id IS NULL GROUP BY ALL)
"""
# each API call with its thread's block of ranges (-1 for none) and a number for its thread: the
# few distinct threads numbered and matched first, then joined to every call (numbering every
# call's thread with a window function sorted them all)
_API_SQL = """
WITH t AS (
  SELECT a.rank, a.pid, a.tid, coalesce(h.lo, -1) AS lo, coalesce(h.hi, -1) AS hi, row_number() OVER () AS thread
  FROM (SELECT DISTINCT rank, pid, tid FROM api_calls) a LEFT JOIN _host_threads h
    ON a.rank = h.rank AND a.pid IS NOT DISTINCT FROM h.pid AND a.tid IS NOT DISTINCT FROM h.tid
)
SELECT a.rowid, a.rank, a.start_ns, a.end_ns, t.lo, t.hi, t.thread
FROM api_calls a JOIN t
  ON a.rank = t.rank AND a.pid IS NOT DISTINCT FROM t.pid AND a.tid IS NOT DISTINCT FROM t.tid
"""


def scan_positions(con, table: str) -> tuple[int, np.ndarray | None]:
    """(rows, rowid -> the row's place in a scan of ``table``): None where the rowids are
    0..rows-1 (a table written in one go); else a lookup array (rows deleted at ingest, as a
    discarded fast pass deletes its rows, leave gaps)."""
    n, limit = con.execute(f"SELECT count(*), coalesce(max(rowid) + 1, 0) FROM {table}").fetchall()[0]
    if limit == n:
        return n, None
    rowids = np.sort(np.asarray(con.execute(f"SELECT rowid FROM {table}").fetchnumpy()["rowid"], np.int64))
    lookup = np.full(limit, -1, np.int64)
    lookup[rowids] = np.arange(n)
    return n, lookup


def host_ranges(con, scope: Scope, steps: bool = True) -> HostRanges:
    """Attach the API calls to the host ranges of ``con`` as leaves, cut every range at the
    time another becomes the innermost (``cut_ends``, ``cut_leaves``), clip them to the window
    and compute their self times. Works in ``cpu_ops.id`` order (ingest's nesting order: each
    thread's ranges in one block) with int32 positions and a few arrays of every row at a time;
    DuckDB's buffers are best shrunk meanwhile (``memory_limit``), as ``host`` does.
    ``steps`` False: the whole trace is the window, whatever steps it has."""
    n, cpu_lookup = scan_positions(con, "cpu_ops")
    limit = n if cpu_lookup is None else len(cpu_lookup)
    position = np.empty(n, np.int32)  # scan row -> position in the order
    kind = np.empty(n, np.int8)  # by position
    s, e = np.empty(n, np.int64), np.empty(n, np.int64)
    parent = np.empty(n, np.int32)  # by position: the parent's position (ids are positions)
    for lo in range(0, limit, CHUNK):  # in pieces: DuckDB holds one piece's result at a time
        piece = con.execute(_PIECE_SQL, [lo, lo + CHUNK]).fetchnumpy()
        at, rows = np.asarray(piece["id"], np.int64), np.asarray(piece["rowid"], np.int64)
        if cpu_lookup is not None:
            rows = cpu_lookup[rows]
        position[rows], kind[at] = at, piece["kind"]
        s[at], e[at], parent[at] = piece["start_ns"], piece["end_ns"], piece["parent"]
    con.execute(f"CREATE OR REPLACE TEMP TABLE _host_threads AS {_THREADS_SQL}", {"n": n})
    thread_rows = con.execute("SELECT * FROM _host_threads ORDER BY lo").fetchall()
    blocks = [(int(r[0]), int(r[3]), int(r[4])) for r in thread_rows]  # (rank, lo, hi) per thread
    first = np.zeros(n, bool)
    first[[lo for _, lo, _ in blocks]] = True
    thread = np.cumsum(first, dtype=np.int32) - 1  # by position: the thread's index
    siblings = Siblings.of(parent, first)
    del first
    cut = cut_ends(s, e, parent, siblings)
    try:
        fetched = con.execute(_API_SQL).fetchnumpy()
    finally:
        con.execute("DROP TABLE _host_threads")
    m, api_lookup = scan_positions(con, "api_calls")
    rows = np.asarray(fetched.pop("rowid"), np.int64)
    if api_lookup is not None:
        rows = api_lookup[rows]
    api = {}
    for k, v in fetched.items():  # in scan order, for POSITIONAL JOIN
        api[k] = np.empty(m, np.int64)
        api[k][rows] = v
    del fetched, rows
    a_parent, a_previous = attach_leaves(s, e, parent, api["lo"], api["hi"], api["start_ns"], api["end_ns"])
    # a leaf outside every range: the group of its thread's top ranges, or one of its own
    top = np.where(
        api["lo"] >= 0, -1 - np.searchsorted([lo for _, lo, _ in blocks], api["lo"]), -(1 << 40) - api["thread"]
    )
    leaves = {"start_ns": api["start_ns"], "end_ns": api["end_ns"], "parent": a_parent, "previous": a_previous}
    leaves["top"] = top
    a_cut = cut_leaves(s, cut, parent, siblings, leaves)
    outer_leaf = leaves["outer_leaf"]
    del siblings, a_previous, top, leaves
    windows = _windows(con, scope) if steps else None
    span: dict[int, list[int]] = {}  # rank -> [first start, last end] of its host ranges
    for r, lo, hi in blocks:  # each thread's ranges start in order
        _widen(span, r, int(s[lo]), int(e[lo:hi].max()))
    for r in _values(api["rank"]):
        mine = api["rank"] == r
        _widen(span, r, int(api["start_ns"][mine].min()), int(api["end_ns"][mine].max()))

    def cpu_rank(lo, hi):
        for r, b_lo, b_hi in blocks:
            a, b = max(lo, b_lo), min(hi, b_hi)
            if a < b:
                yield r, slice(a, b)

    total, cut, counted = _clip(windows, cpu_rank, s, e, cut)  # e and cut now hold times
    del s, e
    a_rank = api["rank"]

    def api_rank(lo, hi):
        part = a_rank[lo:hi]
        for r in _values(part):
            yield int(r), lo + np.flatnonzero(part == r)

    a_total, a_cut, a_counted = _clip(windows, api_rank, api["start_ns"], api["end_ns"], a_cut)
    del api
    children = np.zeros(n, np.int64)
    for lo in range(0, n, CHUNK):
        p, c = parent[lo : lo + CHUNK], cut[lo : lo + CHUNK]
        np.add.at(children, p[p >= 0], c[p >= 0])
    has = (a_parent >= 0) & (outer_leaf < 0)
    np.add.at(children, a_parent[has], a_cut[has])
    cut -= children  # self = cut time less the children's
    del children
    nested = np.flatnonzero(outer_leaf >= 0)
    a_self = a_cut.copy()
    np.subtract.at(a_self, outer_leaf[nested], a_cut[nested])
    scan = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, bool))
    for lo in range(0, n, CHUNK):  # back to scan order, for POSITIONAL JOIN
        at = position[lo : lo + CHUNK]
        for out, by_position in zip(scan, (total, cut, counted), strict=True):
            out[lo : lo + CHUNK] = by_position[at]
    del total, cut, counted
    return HostRanges(
        windows,
        {"cpu_ops": scan, "api_calls": (a_total, a_self, a_counted)},
        position,
        parent,
        a_parent,
        [tuple(row[:3]) for row in thread_rows],
        thread,
        kind,
        {r: hi - lo for r, (lo, hi) in span.items()},
    )


def _values(a: np.ndarray) -> list[int]:
    """The distinct values of ``a``, ascending: without a sort where all are one (a trace of one
    rank)."""
    if not len(a):
        return []
    lo, hi = int(a.min()), int(a.max())
    return [lo] if lo == hi else np.unique(a).tolist()


def _widen(span: dict, key, lo: int, hi: int) -> None:
    """Widen ``span[key]`` ([lo, hi]) to hold lo..hi."""
    have = span.setdefault(key, [lo, hi])
    have[0], have[1] = min(have[0], lo), max(have[1], hi)
