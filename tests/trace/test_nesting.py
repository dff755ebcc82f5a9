"""``link.nest`` against a direct reading of its definition: for every range, the ranges of its
thread before it in the order (thread, start, end descending, tie) that end no earlier enclose
it, the last of them is its parent, and its depth counts its ancestors; on random ranges with ties,
zero lengths, overlaps that do not nest, several threads and times near the int64 limit."""

from __future__ import annotations

import numpy as np
import pytest

from wanscope.trace.link import nest


def sweep(thread, start, end):
    """id, parent, depth by comparing every pair (pure Python)."""
    n = len(start)
    order = sorted(range(n), key=lambda i: (thread[i], start[i], -end[i], i))
    ids = {i: k for k, i in enumerate(order)}
    depth, parent = [0] * n, [-1] * n
    for k, i in enumerate(order):
        enclosing = [j for j in order[:k] if thread[j] == thread[i] and end[j] >= end[i]]
        parent[i] = ids[enclosing[-1]] if enclosing else -1
    for i in range(n):  # depth: the number of ancestors
        p, d = parent[i], 0
        while p >= 0:
            d, p = d + 1, parent[order[p]]
        depth[i] = d
    return [ids[i] for i in range(n)], parent, depth


def random_ranges(rng, n, threads, span, base=0):
    start = rng.integers(0, span, n) + base
    length = np.where(rng.random(n) < 0.2, 0, rng.integers(0, span // 4 + 1, n))
    end = start + length
    # nested families: some ranges copied inside others, some with equal starts or ends
    for i in rng.choice(n, n // 3, replace=False):
        j = rng.integers(0, n)
        start[i] = start[j] + rng.integers(0, max(1, end[j] - start[j]) + 1)
        end[i] = min(end[j], start[i] + rng.integers(0, span // 8 + 1)) if rng.random() < 0.7 else end[j]
        end[i] = max(end[i], start[i])
    return rng.integers(1, threads + 1, n).astype(np.int32), start.astype(np.int64), end.astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_matches_the_sweep(seed):
    rng = np.random.default_rng(seed)
    base = (1 << 62) if seed % 4 == 3 else 0  # times near the int64 limit
    span = [20, 1000, 10**9][seed % 3]
    thread, start, end = random_ranges(rng, 300, 1 + seed % 4, span, base)
    if seed % 4 == 3:
        start[0], end[0] = 1, 2  # times spread over ~2^62
    want = sweep(thread.tolist(), start.tolist(), end.tolist())
    ids, parent, depth = nest(thread.copy(), start.copy(), end.copy())
    assert ids.tolist() == want[0]
    assert parent.tolist() == want[1]
    assert depth.tolist() == want[2]


def test_siblings_children_and_zero_length():
    # 0: [0, 10); 1: [0, 10) inside 0; 2: [10, 20), a sibling of 0 (they touch);
    # 4: [12, 15) inside 2; 3: [12, 12), zero-length, starts with 4 but is shorter: inside 4
    thread = np.ones(5, np.int32)
    start = np.array([0, 0, 10, 12, 12], np.int64)
    end = np.array([10, 10, 20, 12, 15], np.int64)
    ids, parent, depth = nest(thread, start, end)
    assert depth.tolist() == [0, 1, 0, 2, 1]
    assert parent.tolist() == [-1, ids[0], -1, ids[4], ids[2]]


def test_tie_orders_ranges_with_the_same_times():
    # 0, 1: [0, 10) twice; 2, 3: [5, 5) twice, zero-length. The smaller tie encloses the other.
    thread = np.ones(4, np.int32)
    start = np.array([0, 0, 5, 5], np.int64)
    end = np.array([10, 10, 5, 5], np.int64)
    ids, parent, depth = nest(thread, start, end, np.array([7, 3, 2, 1], np.int64))
    assert ids.tolist() == [1, 0, 3, 2]
    assert depth.tolist() == [1, 0, 3, 2]
    assert parent.tolist() == [0, -1, 2, 1]


@pytest.mark.parametrize("seed", range(6))
def test_tie_makes_the_nesting_independent_of_row_order(seed):
    """Rows reach nest in whatever order DuckDB stored them (parallel parsing keeps no file
    order): with a tie key, every permutation nests each range the same way, the way the
    sweep does with the rows sorted by that key."""
    rng = np.random.default_rng(seed)
    thread, start, end = random_ranges(rng, 300, 1 + seed % 3, [3, 20, 1000][seed % 3])
    tie = rng.permutation(300).astype(np.int64)
    by_tie = np.argsort(tie)
    want = sweep(thread[by_tie].tolist(), start[by_tie].tolist(), end[by_tie].tolist())
    # the sweep's ids and parents are positions in one order; compare them per range
    want_id = np.empty(300, np.int64)
    want_id[by_tie] = want[0]
    want_depth = np.empty(300, np.int64)
    want_depth[by_tie] = want[2]
    want_parent = np.empty(300, np.int64)
    want_parent[by_tie] = want[1]
    for _ in range(3):
        p = rng.permutation(300)
        ids, parent, depth = nest(thread[p].copy(), start[p].copy(), end[p].copy(), tie[p].copy())
        assert ids.tolist() == want_id[p].tolist()
        assert parent.tolist() == want_parent[p].tolist()
        assert depth.tolist() == want_depth[p].tolist()
