"""Host time as an icicle (flame) graph: identical stacks merged, small nodes pruned.

Each host range (``cpu_ops``) sits under its parent, the innermost range of its thread that
encloses it (``cpu_ops.parent_id``: containment, ``trace/link.py``); ranges with the same chain
of names from the thread's root merge into one node whose time is the sum of their durations.
Nodes under ``min_share`` of the total host time are pruned (their time stays in the parent's
total).
"""

from __future__ import annotations


def icicle_nodes(con, min_share: float = 0.001) -> list[dict]:
    """Nodes ``id``, ``parent`` ("" at a thread root), ``label``, ``total_ns`` (inclusive)."""
    rows = con.execute("SELECT parent_id, name, rank, tid, dur_ns FROM cpu_ops ORDER BY id").fetchall()
    paths: dict[tuple, int] = {}
    labels: list[str] = []
    parents: list[int] = []
    totals: list[int] = []
    path_of: list[int] = []  # by cpu_ops.id (0, 1, ... in this order): its node; a parent comes first
    for parent_id, name, rank, tid, dur in rows:
        parent_path = path_of[parent_id] if parent_id is not None else None
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
        path_of.append(path)
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
