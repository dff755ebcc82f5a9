"""The result of a stats report, and the error for inputs that hold none of its data."""

from __future__ import annotations

from dataclasses import dataclass

from wanscope.errors import WanscopeError


class NoDataError(WanscopeError):
    """The inputs hold none of the records a report summarizes (e.g. "no GPU activity
    captured"): said in one line instead of printing an empty or 0% result."""


@dataclass(frozen=True)
class Report:
    """Rows with NVIDIA's column names.

    Attributes:
        name: report name, e.g. ``cuda_gpu_kern_sum``.
        columns: column headers as ``nsys stats --format csv`` writes them.
        rows: one tuple per row; times in ns (int, or float rounded to 0.1 ns for
            averages), percentages rounded to 0.1, sizes in MB (10^6 bytes).
        empty_message: what an empty result means (rules only), else None.
    """

    name: str
    columns: list[str]
    rows: list[tuple]
    empty_message: str | None = None


def limit_sql(rows: int) -> str:
    """``LIMIT rows`` for the rules' ``--rows`` (0: no limit). A count beyond 64 bits means
    every row, as any count above the number of rows does; DuckDB rejects it as a LIMIT."""
    return f"LIMIT {min(int(rows), 2**63 - 1)}" if rows > 0 else ""
