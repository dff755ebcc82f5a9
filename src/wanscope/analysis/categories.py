"""Kernel categories by name: the rule table ``categories.csv`` shipped with the package.

Rules are tried in order and the first match wins (case-insensitive regular-expression
search); a kernel no rule matches is ``other``. Memory operations are categories of their
own: ``memcpy_<kind>`` (``memcpy_HtoD``, ``memcpy_DtoH``, ...) and ``memset``. The order
and the reasons are in docs/design.md, "Categories".
"""

from __future__ import annotations

import csv
import re
from functools import lru_cache
from importlib import resources

OTHER = "other"


@lru_cache(maxsize=1)
def rules() -> tuple[tuple[str, str], ...]:
    """(category, regex) pairs in priority order."""
    text = resources.files("wanscope.analysis").joinpath("categories.csv").read_text()
    return tuple((r["category"], r["pattern"]) for r in csv.DictReader(text.splitlines()))


def categorize(name: str) -> str:
    """The category of one kernel name (the same rules as :func:`sql_case`)."""
    for category, pattern in rules():
        if re.search(pattern, name, re.IGNORECASE):
            return category
    return OTHER


def sql_case(column: str = "name") -> str:
    """A SQL CASE expression that maps ``column`` to its category inside DuckDB."""
    arms = " ".join(
        f"WHEN regexp_matches({column}, '{pattern.replace(chr(39), chr(39) * 2)}', 'i') THEN '{category}'"
        for category, pattern in rules()
    )
    return f"(CASE {arms} ELSE '{OTHER}' END)"
