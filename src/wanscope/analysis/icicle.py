"""Host time as an icicle (flame) graph: identical stacks merged across steps, small nodes pruned.

Each host range (``cpu_ops``) sits under its parent, the innermost range of its thread that
encloses it (``cpu_ops.parent_id``: containment, ``trace/link.py``); ranges with the same chain
of names from the thread's root merge into one node whose time is the sum of their durations.
Names that differ only in a trailing ``#N`` (torch.profiler's ``ProfilerStep#3``, our
``wanscope/step#3``) count as one name, so every step's ranges merge into one subtree instead of
one copy per step. Nodes under ``min_share`` of the total host time are pruned (their time stays
in the parent's total); the thread roots are always kept: one root per thread (rank, process,
thread id) that has ranges.
"""

from __future__ import annotations

import re

_NUMBERED = re.compile(r"#\d+$")
_MODULE = re.compile(r"^nn\.Module: (.+?)(?:_\d+)?$")


def icicle_nodes(con, min_share: float = 0.001) -> list[dict]:
    """Nodes ``id``, ``parent`` ("" at a thread root), ``label``, ``total_ns`` (inclusive),
    ``merged`` (how many differently numbered names the node merges: 1 but for step ranges),
    ``kind`` (``cpu_ops.kind``: op, python, annotation, nvtx; None at the roots) and ``module``
    (the class of the innermost ``nn.Module: Class_N`` range at or above it, None outside
    modules and at the roots)."""
    rows = con.execute("SELECT parent_id, name, rank, pid, tid, dur_ns, kind FROM cpu_ops ORDER BY id").fetchall()
    paths: dict[tuple, int] = {}
    labels: list[str] = []
    names: list[set[str]] = []
    parents: list[int] = []
    modules: list[str | None] = []
    kinds: list[str | None] = []
    totals: list[int] = []
    path_of: list[int] = []  # by cpu_ops.id (0, 1, ... in this order): its node; a parent comes first
    for parent_id, name, rank, pid, tid, dur, kind in rows:
        parent_path = path_of[parent_id] if parent_id is not None else None
        if parent_path is None:
            root_key = ("root", rank, pid, tid)
            parent_path = paths.get(root_key)
            if parent_path is None:
                parent_path = paths[root_key] = len(labels)
                labels.append(f"rank {rank} · pid {pid} · thread {tid}")
                names.append(set())
                parents.append(-1)
                modules.append(None)
                kinds.append(None)
                totals.append(0)
            totals[parent_path] += dur
        key = (parent_path, _NUMBERED.sub("#*", name))
        path = paths.get(key)
        if path is None:
            path = paths[key] = len(labels)
            labels.append(name)
            names.append(set())
            parents.append(parent_path)
            m = _MODULE.match(name)
            modules.append(m.group(1) if m else modules[parent_path])
            kinds.append(kind)
            totals.append(0)
        names[path].add(name)
        totals[path] += dur
        path_of.append(path)
    grand = sum(t for t, p in zip(totals, parents) if p == -1) or 1
    keep = [p == -1 or t >= min_share * grand for t, p in zip(totals, parents)]
    for i, p in enumerate(parents):  # a node is kept only if its parent is
        if p >= 0 and not keep[p]:
            keep[i] = False
    out = []
    for i in range(len(labels)):
        if not keep[i]:
            continue
        merged = max(len(names[i]), 1)
        label = labels[i] if merged == 1 else f"{_NUMBERED.sub('#*', labels[i])} ({merged} merged)"
        out.append(
            {
                "id": f"n{i}",
                "parent": "" if parents[i] < 0 else f"n{parents[i]}",
                "label": label,
                "total_ns": totals[i],
                "merged": merged,
                "kind": kinds[i],
                "module": modules[i],
            }
        )
    return out
