"""Kernel launches per process and the launch queue per device, from the kernels whose
launching API call lies inside the window (``host_ranges``).

The launch queue of a device: kernels launched (their API call started) but not yet started
on the GPU, over time, as Holistic Trace Analysis's queue length counts a stream's outstanding
operations.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

QUEUE_POINTS = 200

# Each kernel whose launching API call lies inside the window (``_host_api_calls``: the call's
# ``counted`` and its scan position ``call``; of calls sharing a correlation id, as a driver
# call inside a runtime call does, the first): the call's process and correlation id, when it
# started and, not before that, when the kernel started (a kernel recorded as starting earlier
# is a clock artifact), and the kernel's duration.
LAUNCHED_SQL = """
SELECT k.rank, a.pid, k.device, a.correlation, a.call, a.start_ns AS launch_ns,
       greatest(k.start_ns, a.start_ns) AS start_ns, k.dur_ns
FROM (SELECT a.rank, a.pid, a.correlation, min(a.start_ns) AS start_ns, arg_min(x.call, a.start_ns) AS call
      FROM api_calls a POSITIONAL JOIN _host_api_calls x
      WHERE x.counted AND a.correlation IS NOT NULL GROUP BY a.rank, a.pid, a.correlation) a
JOIN kernels k ON k.rank = a.rank AND k.pid = a.pid AND k.correlation = a.correlation
"""


def groups(*keys: np.ndarray):
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


def distinct_per(rank: np.ndarray, pid: np.ndarray, value: np.ndarray) -> dict[tuple, int]:
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
    area = float((length[:-1] * np.diff(t).astype(np.float64)).sum())  # no int64 overflow on long spans
    points = max(1, min(QUEUE_POINTS, span))
    bucket = np.minimum(((t - t0) / max(span, 1) * points).astype(np.int64), points - 1)
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
