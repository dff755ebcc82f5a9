"""Options and output helpers shared by every CLI command (kept out of cli.py so command
modules can import them without importing each other)."""

from __future__ import annotations

import csv
import io
import sys

import click
import orjson


def format_option(*choices: str, default: str = "table"):
    """The ``--format`` option every analysis command takes."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=default,
        show_default=True,
        help="Output format.",
    )


def dumps_json(obj) -> str:
    """JSON text for an analysis result (numpy-free, non-str keys allowed)."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def write_rows(columns: list[str], rows: list[tuple], fmt: str) -> None:
    """Print rows as a rich table, CSV, or a JSON list of row objects."""
    if fmt == "json":
        click.echo(dumps_json([dict(zip(columns, r)) for r in rows]))
    elif fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        sys.stdout.write(buf.getvalue())
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*columns, show_lines=False)
        for r in rows:
            table.add_row(*("" if v is None else str(v) for v in r))
        Console().print(table)
