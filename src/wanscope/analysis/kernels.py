"""Top kernels and time by category per (rank, device).

A kernel's or category's ``pct`` is its share of summed kernel time in the window
(docs/design.md, "Shares"); memory operations are categories of their own with their own times
and no share of kernel time (``pct`` is None for them).
"""

from __future__ import annotations

from collections import defaultdict

from wanscope.analysis.scope import Scope


def top_kernels(con, scope: Scope, top: int) -> dict[tuple, list[dict]]:
    """(rank, device) -> the ``top`` kernel names by total time, then one ``other`` row
    holding the rest so that the rows' totals reconcile with the kernel time.

    Each row: ``name``, ``count``, ``total_ns``, ``mean_ns`` (rounded to the nearest ns),
    ``min_ns``, ``max_ns``, ``pct``.
    """
    sql = f"""
    WITH per_name AS (
      SELECT rank, device, name, count(*) AS n, sum(dur_ns) AS total, min(dur_ns) AS lo, max(dur_ns) AS hi
      FROM gpu_activity({scope.args}) WHERE kind = 'kernel' GROUP BY ALL),
    ranked AS (
      SELECT *, row_number() OVER (PARTITION BY rank, device ORDER BY total DESC, name) AS pos,
             sum(total) OVER (PARTITION BY rank, device) AS all_total
      FROM per_name)
    SELECT rank, device, pos, name, n, total, lo, hi, all_total FROM ranked ORDER BY rank, device, pos
    """
    out: dict[tuple, list[dict]] = defaultdict(list)
    rest: dict[tuple, list] = {}
    for rank, device, pos, name, n, total, lo, hi, all_total in con.execute(sql).fetchall():
        key = (rank, device)
        pct = round(100.0 * total / all_total, 4) if all_total else None
        if pos <= top:
            out[key].append(
                {
                    "name": name,
                    "count": n,
                    "total_ns": int(total),
                    "mean_ns": round(total / n),
                    "min_ns": int(lo),
                    "max_ns": int(hi),
                    "pct": pct,
                }
            )
        else:
            acc = rest.setdefault(key, [0, 0, None, None, all_total])
            acc[0] += n
            acc[1] += int(total)
            acc[2] = lo if acc[2] is None else min(acc[2], lo)
            acc[3] = hi if acc[3] is None else max(acc[3], hi)
    for key, (n, total, lo, hi, all_total) in rest.items():
        out[key].append(
            {
                "name": "other",
                "count": n,
                "total_ns": total,
                "mean_ns": round(total / n),
                "min_ns": int(lo),
                "max_ns": int(hi),
                "pct": round(100.0 * total / all_total, 4) if all_total else None,
            }
        )
    return out


def categories(con, scope: Scope) -> dict[tuple, list[dict]]:
    """(rank, device) -> rows ``category``, ``count``, ``total_ns``, ``pct`` (kernel
    categories first, by time; then memory-operation categories with ``pct`` None)."""
    sql = f"""
    SELECT rank, device, category, kind = 'kernel' AS is_kernel, count(*) AS n, sum(dur_ns) AS total,
           sum(sum(dur_ns) FILTER (kind = 'kernel')) OVER (PARTITION BY rank, device) AS kernel_total
    FROM gpu_activity({scope.args}) GROUP BY rank, device, category, kind = 'kernel'
    ORDER BY rank, device, is_kernel DESC, total DESC, category
    """
    out: dict[tuple, list[dict]] = defaultdict(list)
    for rank, device, category, is_kernel, n, total, kernel_total in con.execute(sql).fetchall():
        pct = round(100.0 * total / kernel_total, 4) if is_kernel and kernel_total else None
        out[(rank, device)].append({"category": category, "count": n, "total_ns": int(total), "pct": pct})
    return out
