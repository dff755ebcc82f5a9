"""Terminal tables whose cells are data: names from a trace (kernel, op, frame, file names) are
shown as they are, never read as rich console markup (``[/]`` in a name would raise, ``[bold]``
would vanish), with control characters (escape sequences; newlines inside a name) shown as U+FFFD."""

from __future__ import annotations

import re

from rich.markup import escape
from rich.table import Table
from rich.text import Text

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def clean(name: str) -> str:
    """``name`` with its control characters (newlines too) shown as U+FFFD."""
    return _CONTROL.sub("\ufffd", name)


def short_name(name: str, width: int = 90) -> str:
    """A kernel or op name, ``clean``, cut to ``width`` characters (C++ template names run to
    thousands)."""
    name = clean(name).removeprefix("void ")
    return name if len(name) <= width else name[: width - 1] + "…"


def plain(value: str) -> Text:
    """``value`` as text without markup, its control characters but newlines (a cell of several
    lines) replaced."""
    return Text(_CONTROL_BUT_NEWLINE.sub("\ufffd", value))


def quoted(value: str) -> str:
    """``value`` for a console line that uses markup around it: markup escaped, control
    characters replaced."""
    return escape(_CONTROL.sub("\ufffd", value))


class DataTable(Table):
    """A ``rich.table.Table`` whose string cells are ``plain``."""

    def add_row(self, *renderables, **kwargs) -> None:
        super().add_row(*(plain(c) if isinstance(c, str) else c for c in renderables), **kwargs)
