"""The SQL definitions the analyses build on, as DuckDB macros (package data ``stdlib.sql``;
docs/sql.md lists them with their parameters and columns).

``create_macros(con)`` creates them on a connection as TEMP macros: they live in the
connection's temporary catalog, never in the database, so a read-only database (``--db``) and
one written by another version of wanscope get the macros of the running version, and they are
visible whichever catalog the connection uses. A cursor (``con.cursor()``) is a connection of
its own and needs them created again.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from wanscope.analysis.categories import sql_case


@lru_cache(maxsize=1)
def stdlib_sql() -> str:
    """The macros' DDL, comments included (package data ``analysis/stdlib.sql``)."""
    return resources.files("wanscope.analysis").joinpath("stdlib.sql").read_text()


@lru_cache(maxsize=1)
def _create_sql() -> str:
    # kernel_category first: DuckDB checks a macro's body, the functions it calls included,
    # when the macro is created. Created after the canonical tables, for the same reason.
    return f"CREATE OR REPLACE TEMP MACRO kernel_category(name) AS {sql_case('name')};\n{stdlib_sql()}"


def create_macros(con) -> None:
    """Create (or replace) every macro of ``stdlib.sql``, and ``kernel_category``, on ``con``,
    a connection whose current catalog holds the canonical tables."""
    con.execute(_create_sql())


def macro_rows() -> list[tuple[str, str, str, str, str]]:
    """(macro, column, type, unit, description) for every output column of the table macros of
    ``stdlib.sql``; ``macro`` is the call with its parameters' names, e.g.
    ``busy_islands(step_from, step_to)``."""
    rows, macro, section = [], None, None
    for line in stdlib_sql().splitlines():
        if m := re.match(r"-- (\w+\([\w, ]*\))$", line):
            macro, section = m.group(1), None
        elif m := re.match(r"-- (Parameters|Columns):$", line):
            section = m.group(1)
        elif line.startswith("CREATE "):
            macro = section = None
        elif section == "Columns" and (m := re.match(r"--\s+(\w+) ([A-Z\[\]0-9]+)\s+([^:\s]+): (.*)", line)):
            rows.append((macro, m.group(1), m.group(2), m.group(3), m.group(4).strip()))
    return rows
