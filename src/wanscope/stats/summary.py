"""The statistics block that NVIDIA's summary reports share.

Per group: total, count, mean, median (the mean of the two middle values for an even
count), min, max and the sample standard deviation (n - 1 in the denominator; 0 for a
single value), and each group's share of the summed totals. Mean, median and standard
deviation are rounded to one decimal and the share to one decimal of a percent, as
``nsys stats`` rounds them (NVIDIA Nsight Systems User Guide, "Report Scripts").
"""

from __future__ import annotations

import duckdb


def summarize(con: duckdb.DuckDBPyConnection, values_sql: str, keys: list[str], order_by: str) -> list[tuple]:
    """Summary rows of ``values_sql``, a query with columns ``keys`` and ``value``.

    Args:
        values_sql: SQL returning one row per record: the grouping ``keys`` and ``value``.
        keys: grouping columns, returned last in each row, in this order.
        order_by: ORDER BY clause over ``total``, ``n`` and the keys.

    Returns:
        Tuples ``(share_pct, total, count, mean, median, min, max, stddev, *keys)``.
    """
    key_list = ", ".join(keys)
    return con.execute(
        f"""
        WITH per_group AS (
            SELECT {key_list}, sum(value) AS total, count(*) AS n, avg(value) AS mean,
                   median(value) AS med, min(value) AS lo, max(value) AS hi,
                   coalesce(stddev_samp(value), 0) AS sd
            FROM ({values_sql}) GROUP BY ALL
        )
        SELECT round(total * 100.0 / sum(total) OVER (), 1), total, n, round(mean, 1), round(med, 1), lo, hi,
               round(sd, 1), {key_list}
        FROM per_group
        ORDER BY {order_by}
        """
    ).fetchall()
