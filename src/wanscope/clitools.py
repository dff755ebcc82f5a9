"""Options and output helpers shared by every CLI command (kept out of cli.py so command
modules can import them without importing each other)."""

from __future__ import annotations

import csv
import decimal
import io
import json
import math
import os
import sys

import click
import orjson

# Set by a command whose outputs are all written and closed when it returns (``skip_teardown``).
_TEARDOWN = {"skip": False}


def skip_teardown() -> None:
    """Ask for this process to end, once the command has returned without an error, without
    the interpreter's teardown: ``cli.main`` then flushes the standard streams, runs the
    ``atexit`` functions and calls ``os._exit(0)``, but only for the process's own command line
    (``cli.main()``; a call with ``argv``, as tests make, returns as usual) and not under a
    CUDA profiler's injection (``CUDA_INJECTION64_PATH``: Nsight Systems and Nsight Compute
    flush their data in CUDA's own teardown). Freeing every module, tensor and library of a
    process that imported torch one by one took about half a second after a ``generate``, on an
    H200 and on a CPU (``benchmarks/RESULTS.md``, "2026-12-06: time to video, the start-up and
    exit levers"), and changes nothing outside the process."""
    _TEARDOWN["skip"] = True


def take_skip_teardown() -> bool:
    """Whether a command called ``skip_teardown`` since the last call (the request is cleared)."""
    skip, _TEARDOWN["skip"] = _TEARDOWN["skip"], False
    return skip


def console(stderr: bool = False, **kwargs):
    """A rich Console. Where output is not a terminal (a pipe, a file, a test), rich would
    assume 80 columns and cut numbers and identifiers in tables; use $COLUMNS, else 200.
    A reader that closes the pipe (``| head``) ends the command as for plain output."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            # rich's own exits with code 1; the entry point ends quietly with 0 (cli.main)
            raise BrokenPipeError

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS") or 200)
    return PipeConsole(stderr=stderr, width=width, **kwargs)


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


def top_option(what: str):
    """The ``--top N`` option: rows listed (``what``) before the 'other' row."""
    return click.option("--top", default=10, show_default=True, type=click.IntRange(1), help=what)


def _json_default(value):
    """What orjson cannot write itself (DuckDB values in ``query``): DECIMAL as a number,
    anything else (BLOB, INTERVAL, BIT, ...) as its text, as the table and CSV show it."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    return str(value)


def _finite(obj):
    """``obj`` with NaN and infinities as None (what orjson writes), for the json module."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps_json(obj) -> str:
    """JSON text for an analysis result (numpy-free, non-str keys allowed)."""
    try:
        return orjson.dumps(obj, default=_json_default, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:  # an integer beyond 64 bits (HUGEINT): exact through json
        return json.dumps(_finite(obj), default=_json_default, indent=2, ensure_ascii=False)


# A terminal table is drawn whole; past this many rows ``query`` asks for csv or json.
TABLE_ROW_LIMIT = 100_000


def _unique(columns: list[str]) -> list[str]:
    """Column names made unique for JSON objects (the second ``a`` becomes ``a_1``, or the
    next free suffix): a duplicate key would silently drop a value."""
    taken, seen, out = set(columns), set(), []
    for c in columns:
        name = c
        if c in seen:
            k = 1
            while f"{c}_{k}" in taken:
                k += 1
            name = f"{c}_{k}"
            taken.add(name)
        seen.add(c)
        out.append(name)
    return out


def write_rows(columns: list[str], rows: list[tuple], fmt: str) -> None:
    """Print rows as a rich table, CSV, or a JSON list of row objects."""
    write_batches(columns, iter([rows]), fmt)


def write_batches(columns: list[str], batches, fmt: str) -> None:
    """``write_rows`` for rows arriving in batches (an iterator of lists): CSV and JSON
    are written batch by batch, so memory stays bounded whatever the row count; the
    table needs every row at once."""
    if fmt == "json":
        keys = _unique(columns)
        first = True
        for rows in batches:
            if not rows:
                continue
            # the batch as a list, without its brackets: "  {...},\n  {...}"
            text = dumps_json([dict(zip(keys, r)) for r in rows])
            sys.stdout.write(("[\n" if first else ",\n") + text[2:-2])
            first = False
        sys.stdout.write("[]\n" if first else "\n]\n")
    elif fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for rows in batches:
            w.writerows(rows)
            sys.stdout.write(buf.getvalue())
            buf.seek(0)
            buf.truncate()
    else:
        from rich.table import Column, Table

        # fold, never cut: query and schema output is read for exact values and names
        table = Table(*(Column(c, overflow="fold") for c in columns), show_lines=False)
        for rows in batches:
            for r in rows:
                table.add_row(*("" if v is None else str(v) for v in r))
        console().print(table)
