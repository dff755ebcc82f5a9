"""Host time as an icicle (flame) graph: identical stacks merged, small nodes pruned.

Each host range (``cpu_ops``) sits under the innermost range of its thread that contains it;
ranges with the same chain of names from the thread's root merge into one node whose time is
the sum of their durations. Nodes under ``min_share`` of the total host time are pruned (their
time stays in the parent's total).

Host ranges do not always nest: with Python stacks recorded, a ``record_function`` range (a
step, a CFG branch) opens inside the Python call that enters it (``record_function.__enter__``)
and outlives it. ``cpu_ops.parent_id`` then names that call, which ended microseconds after the
range began, and everything inside the range would hang under it; so the tree is built here
from containment: the parent is the latest-starting range of the thread that is still open and
ends no earlier than the child.
"""

from __future__ import annotations


def icicle_nodes(con, min_share: float = 0.001) -> list[dict]:
    """Nodes ``id``, ``parent`` ("" at a thread root), ``label``, ``total_ns`` (inclusive)."""
    rows = con.execute(
        "SELECT name, rank, pid, tid, start_ns, end_ns, dur_ns FROM cpu_ops "
        "ORDER BY rank, pid, tid, start_ns, end_ns DESC, id"
    ).fetchall()
    paths: dict[tuple, int] = {}
    labels: list[str] = []
    parents: list[int] = []
    totals: list[int] = []
    thread = None
    open_ranges: list[tuple[int, int]] = []  # (end_ns, path) of this thread's ranges, by start
    for name, rank, pid, tid, start, end, dur in rows:
        if (rank, pid, tid) != thread:
            thread, open_ranges = (rank, pid, tid), []
        parent_path = None
        i = len(open_ranges) - 1
        while i >= 0:
            open_end, path = open_ranges[i]
            if open_end <= start:  # ended before this one started (touching ranges are siblings)
                del open_ranges[i]
            elif open_end >= end:
                parent_path = path
                break
            i -= 1  # overlaps this one's start but ends inside it: not a container
        if parent_path is None:
            root_key = ("root", rank, tid)
            parent_path = paths.get(root_key)
            if parent_path is None:
                parent_path = paths[root_key] = len(labels)
                labels.append(f"rank {rank} · thread {tid}")
                parents.append(-1)
                totals.append(0)
            totals[parent_path] += dur
        key = (parent_path, name)
        path = paths.get(key)
        if path is None:
            path = paths[key] = len(labels)
            labels.append(name)
            parents.append(parent_path)
            totals.append(0)
        totals[path] += dur
        open_ranges.append((end, path))
    grand = sum(t for t, p in zip(totals, parents) if p == -1) or 1
    keep = [t >= min_share * grand for t in totals]
    for i, p in enumerate(parents):  # a node is kept only if its parent is
        if p >= 0 and not keep[p]:
            keep[i] = False
    return [
        {"id": f"n{i}", "parent": "" if parents[i] < 0 else f"n{parents[i]}", "label": labels[i], "total_ns": totals[i]}
        for i in range(len(labels))
        if keep[i]
    ]
