"""Post-ingest linking shared by every source format.

After all files are ingested, ``finish`` computes what depends on the whole database:
the nesting of host ranges (``cpu_ops.id``, ``parent_id``, ``depth``), the host process
of GPU work whose source records only the correlation id (Kineto), the ``steps``, and the
kernels' ``name_norm``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import duckdb

from wanscope.trace.names import fill_name_norm

# numpy's OpenBLAS starts threads that busy-wait; nothing here calls BLAS, and on a 2-core
# machine they took a share of analyze's CPU that perf could see. Effective only if numpy is not
# loaded yet.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np


def nest(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray, tie: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nesting of host ranges by containment on each thread.

    Args:
        thread: int32 [n], the range's thread as an index (ranges of one thread share it);
        start, end: int64 [n], ns;
        tie: int64 [n] or None: orders ranges with the same thread, start and end (the
            smaller one encloses the other); None: their order in the inputs.

    Returns:
        (id, parent, depth), aligned with the inputs: ``id`` int64, the position in the
        order (thread, start, end descending, tie); ``parent`` int64, the id of the
        innermost enclosing range on the same thread, -1 at the top; ``depth`` int32, the
        number of its ancestors (parent, parent's parent, ...), 0 at the top.

    A range encloses another when it starts no later and ends no earlier (a zero-length range
    at another's end lies inside it; a range starting at another's end does not); the
    innermost enclosing range is the one that started last, as torch.profiler's own event tree
    (``key_averages``) picks it. Ranges need not nest: a ``record_function`` range opens inside
    the Python call that enters it and outlives it; then the range's parent is what encloses
    both, and the calls inside it are its children. In the order above the parent is the
    previous range on the thread that ends no earlier (``previous_enclosing``). Vectorized:
    a sort and pointer jumping, no per-range Python. Unlike torch.profiler's tree, a
    zero-length range at another's end lies inside it (torch starts a new sibling there).
    """
    n = len(start)
    order = np.lexsort((-end, start, thread) if tie is None else (tie, -end, start, thread))
    del tie
    th, e = thread[order], end[order]
    del thread, start, end  # the caller hands its arrays over: memory stays ~6 arrays of n
    first = np.ones(n, bool)
    first[1:] = th[1:] != th[:-1]
    del th
    cand = previous_enclosing(e, first)
    del e, first
    depth = _depths(cand)
    ids = np.empty(n, np.int64)
    ids[order] = np.arange(n)
    parent = np.empty(n, np.int64)
    parent[order] = cand
    out_depth = np.empty(n, np.int32)
    out_depth[order] = depth
    return ids, parent, out_depth


def previous_enclosing(e: np.ndarray, first: np.ndarray) -> np.ndarray:
    """For ranges sorted by (thread, start, end descending, tie): the position of each one's
    innermost enclosing range, its previous greater-or-equal end on its thread, -1 for none.

    Pointer jumping: each range's candidate starts at the range before it and jumps to that
    candidate's own candidate while the candidate ends earlier (everything between them ends
    earlier still): vectorized rounds, as many as the deepest climb from a range's previous
    range up to its parent.

    Args: ``e`` int64 [n] ends; ``first`` bool [n], True at each thread's first range.
    Returns: int32 [n].
    """
    cand = np.arange(-1, len(e) - 1, dtype=np.int32)
    cand[first] = -1
    jump_back(cand, e, e)
    return cand


def jump_back(cand: np.ndarray, e: np.ndarray, need: np.ndarray, parent: np.ndarray | None = None) -> None:
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


def _depths(parent: np.ndarray) -> np.ndarray:
    """The number of ancestors of each node of a forest given by ``parent`` (-1 at a root), int32
    [n]: level by level from the roots, each level's children gathered from the nodes grouped by
    parent (one stable sort), so each node is visited in one level only."""
    n = len(parent)
    depth = np.zeros(n, np.int32)
    by_parent = np.argsort(parent, kind="stable").astype(np.int32)
    roots = int(np.count_nonzero(parent < 0))  # sorted first: -1 is the smallest
    count = np.bincount(parent[parent >= 0], minlength=n).astype(np.int32)  # children per node
    first = np.cumsum(count, dtype=np.int32) - count + roots  # where a node's children start in by_parent
    level, d = by_parent[:roots], 0
    while len(level):
        depth[level] = d
        k = count[level]
        total = int(k.sum())
        if not total:
            break
        # the children of every node of the level: each node's run in by_parent, concatenated
        offset = np.repeat(first[level] - (np.cumsum(k) - k), k)
        level, d = by_parent[offset + np.arange(total)], d + 1
    return depth


_NEST_INPUT_SQL = """
CREATE OR REPLACE TEMP TABLE _threads AS
SELECT rank, pid, tid, (row_number() OVER (ORDER BY rank, pid, tid))::INTEGER AS thread
FROM (SELECT DISTINCT rank, pid, tid FROM cpu_ops)
"""
# Ranges with the same start and end on one thread nest in a fixed order, whatever order
# the rows were stored in (parallel parsing does not keep the file's): by External id, which
# the profiler numbers in the order ops start (so the enclosing op first), ranges without
# one (Python frames) before those with one, then by a hash of kind and name.
_NEST_PIECE_SQL = """
SELECT t.thread, c.start_ns, c.end_ns,
       CASE WHEN c.external_id >= 0 THEN c.external_id
            ELSE (hash(c.kind, c.name) >> 2)::BIGINT - 4611686018427387904 END AS tie
FROM cpu_ops c JOIN _threads t
  ON c.rank = t.rank AND c.pid IS NOT DISTINCT FROM t.pid AND c.tid IS NOT DISTINCT FROM t.tid
WHERE c.rowid >= ? AND c.rowid < ?
ORDER BY c.rowid
"""
# cpu_ops is rewritten once with its nesting columns (cheaper in time and memory than an
# UPDATE of every row). The pieces above are read in rowid order, the order in which the
# table is scanned, so the nesting lines up with the rows by position (no join on rowid:
# half the time of the rewrite, and no rowid array).
_NEST_WRITE_SQL = """
ALTER TABLE cpu_ops RENAME TO _cpu_unnested;
CREATE TABLE cpu_ops AS
SELECT n.id, nullif(n.parent, -1) AS parent_id, n.depth,
       c.* EXCLUDE (id, parent_id, depth)
FROM _cpu_unnested c POSITIONAL JOIN _nesting n;
DROP TABLE _cpu_unnested;
DROP TABLE _threads;
"""
_PIECE_ROWS = 1 << 18  # rows fetched per query: bounds the result DuckDB holds beside numpy's copy


def _nest_cpu_ops(con: duckdb.DuckDBPyConnection) -> None:
    """Set cpu_ops' id, parent_id and depth (``nest``); threads ordered by (rank, pid, tid)."""
    rows = con.execute("SELECT count(*), max(rowid) + 1 FROM cpu_ops").fetchall()[0]
    if not rows[0]:
        return
    n, limit = rows[0], rows[1]
    con.execute(_NEST_INPUT_SQL)
    cols = {
        "thread": np.empty(n, np.int32),
        "start_ns": np.empty(n, np.int64),
        "end_ns": np.empty(n, np.int64),
        "tie": np.empty(n, np.int64),
    }
    filled = 0
    for lo in range(0, limit, _PIECE_ROWS):
        piece = con.execute(_NEST_PIECE_SQL, [lo, lo + _PIECE_ROWS]).fetchnumpy()
        k = len(piece["thread"])
        for name, out in cols.items():
            out[filled : filled + k] = piece[name]
        filled += k
    # Popped into the call: nest holds the only references and frees them as it goes.
    ids, parent, depth = nest(cols.pop("thread"), cols.pop("start_ns"), cols.pop("end_ns"), cols.pop("tie"))
    con.register("_nesting", {"id": ids, "parent": parent, "depth": depth})
    try:
        con.execute(_NEST_WRITE_SQL)
    finally:
        con.unregister("_nesting")


_LINK_PID_SQL = """
CREATE OR REPLACE TEMP TABLE _launch AS
SELECT rank, correlation, min(pid) AS pid FROM api_calls WHERE correlation IS NOT NULL GROUP BY ALL;
UPDATE kernels SET pid = l.pid FROM _launch l
 WHERE kernels.pid IS NULL AND kernels.rank = l.rank AND kernels.correlation = l.correlation;
UPDATE memops SET pid = l.pid FROM _launch l
 WHERE memops.pid IS NULL AND memops.rank = l.rank AND memops.correlation = l.correlation;
UPDATE cuda_syncs SET pid = l.pid FROM _launch l
 WHERE cuda_syncs.pid IS NULL AND cuda_syncs.rank = l.rank AND cuda_syncs.correlation = l.correlation;
DROP TABLE _launch;
"""

# Our own step ranges win over the profiler's; never both (docs/design.md, "Step").
_STEPS_SQL = """
INSERT INTO steps
WITH ours AS (
  SELECT rank, try_cast(regexp_extract(name, '^wanscope/step#(\\d+)$', 1) AS INTEGER) AS step, name, pid, tid, start_ns, end_ns
  FROM cpu_ops WHERE name LIKE 'wanscope/step#%'
), prof AS (
  SELECT rank, try_cast(regexp_extract(name, '^ProfilerStep#(\\d+)$', 1) AS INTEGER) AS step, name, pid, tid, start_ns, end_ns
  FROM cpu_ops WHERE name LIKE 'ProfilerStep#%' AND kind <> 'python'
)
SELECT * FROM ours WHERE step IS NOT NULL
UNION ALL
SELECT * FROM prof WHERE step IS NOT NULL AND rank NOT IN (SELECT rank FROM ours WHERE step IS NOT NULL)
ORDER BY rank, start_ns;
"""


@contextmanager
def memory_limit(con: duckdb.DuckDBPyConnection, limit: str):
    """DuckDB's memory limit set to ``limit`` inside the block (its buffers shrink, spilling, to
    make room for numpy arrays of every row), the previous one restored after."""
    before = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    con.execute(f"SET memory_limit = '{limit}'")
    try:
        yield
    finally:
        con.execute(f"SET memory_limit = '{before}'")


def finish(con: duckdb.DuckDBPyConnection, nest_memory_limit: str) -> None:
    """Compute nesting, launch links and steps once every source is in ``con``, then compress
    what they rewrote (a checkpoint).

    ``nest_memory_limit``: DuckDB's memory limit while the nesting's numpy arrays are alive,
    restored after (``memory_limit``)."""
    with memory_limit(con, nest_memory_limit):
        _nest_cpu_ops(con)
    con.execute(_LINK_PID_SQL)
    con.execute(_STEPS_SQL)
    fill_name_norm(con)
    # The rewritten cpu_ops and the updated kernels stay uncompressed until a checkpoint, and
    # spill under DuckDB's limit; the host analyses then read cpu_ops back several times.
    # Compressing them once costs less than those reads (benchmarks/RESULTS.md, "2026-12-04:
    # analyze against issue 23's parent, narrow staging and compressed cpu_ops").
    con.execute("CHECKPOINT")


# meta key of a source: how many of its GPU records overlap the next one's start on their stream.
PARTIAL_OVERLAPS_KEY = "wanscope_partial_overlaps"
# GPU records of one stream in order, each with the next one's times (kernels and memory
# operations together: one stream runs one record at a time, whatever its kind).
_NEXT_ON_STREAM_SQL = """
  SELECT t, rid, start_ns, end_ns,
         lead(start_ns) OVER w AS next_start, lead(end_ns) OVER w AS next_end
  FROM (SELECT 'k' AS t, rowid AS rid, rank, device, stream, start_ns, end_ns FROM kernels WHERE rank IN ({ranks})
        UNION ALL
        SELECT 'm', rowid, rank, device, stream, start_ns, end_ns FROM memops WHERE rank IN ({ranks}))
  WINDOW w AS (PARTITION BY rank, device, stream ORDER BY start_ns, end_ns, t, rid)
"""
# A record that begins before the next one on its stream and ends after that one ends.
OVERRUN = "next_start > start_ns AND end_ns > next_end"
# One that begins before the next one and ends inside it (programmatic dependent launch
# lets a kernel start before the previous one ends); equal times are neither.
PARTIAL_OVERLAP = "next_start > start_ns AND end_ns > next_start AND end_ns < next_end"


def clip_overruns(con: duckdb.DuckDBPyConnection, ranks: list[int]) -> tuple[int, int]:
    """Clip each GPU record of ``ranks`` that extends past the end of the next record on its
    stream (rank, device, stream) to that record's start (``end_ns``, ``dur_ns``): a stream
    runs its work in order, so such a duration is impossible (a known CUPTI timestamp
    artifact). Records that only overlap the next one's start (``PARTIAL_OVERLAP``) and
    records with equal times are left as they are.

    Returns:
        (records clipped, records that overlap the next one's start).
    """
    if not ranks:
        return 0, 0
    sql = _NEXT_ON_STREAM_SQL.format(ranks=", ".join(str(int(r)) for r in ranks))
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _clip AS
            SELECT t, rid, next_start, {OVERRUN} AS overrun FROM ({sql}) WHERE {OVERRUN} OR {PARTIAL_OVERLAP}"""
    )
    try:
        clipped, partial = con.execute(
            "SELECT count(*) FILTER (overrun), count(*) FILTER (NOT overrun) FROM _clip"
        ).fetchall()[0]
        if clipped:
            for table, t in (("kernels", "k"), ("memops", "m")):
                con.execute(f"""
                    UPDATE {table} SET end_ns = c.next_start, dur_ns = c.next_start - {table}.start_ns
                    FROM _clip c WHERE c.overrun AND c.t = '{t}' AND {table}.rowid = c.rid""")
    finally:
        con.execute("DROP TABLE IF EXISTS _clip")
    return clipped, partial
