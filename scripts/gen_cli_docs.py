"""Write ``docs/cli.md``: the ``--help`` of the ``wanscope`` group and of every command.

The help comes from click itself (each command's ``get_help``), rendered at a fixed width
(``WIDTH``, what click prints in a terminal of 80 columns or more), so the file does not
depend on ``$COLUMNS`` or on the terminal it is generated in. The commands are the group's
(``wanscope.cli.COMMANDS``), in the order ``wanscope --help`` lists them. Importing them
imports no torch (the engine's commands import it when they run), so this works in an
install without the ``engine`` extra too.

``tests/test_cli_docs.py`` regenerates the text in memory and fails when ``docs/cli.md``
differs from it.

Usage: .venv/bin/python scripts/gen_cli_docs.py [--check]
(``--check``: write nothing, exit 1 when docs/cli.md is out of date)
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

OUT = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
WIDTH = 78
COMMAND = "python scripts/gen_cli_docs.py"

HEADER = f"""# Command reference

Every command's `--help`, as wanscope prints it in a terminal of 80 columns. This file is
generated; do not edit it by hand. After changing a command's options or help text, run
`{COMMAND}` with the repository's virtual environment and commit the result:
`tests/test_cli_docs.py` fails while it is out of date. What the outputs mean:
[design.md](design.md) (definitions) and [json.md](json.md) (JSON layouts); each command in
detail: [analysis.md](analysis.md), [profile.md](profile.md), [engine.md](engine.md).
"""


def help_texts() -> dict[str, str]:
    """``wanscope`` and ``wanscope NAME`` for every command -> its ``--help`` text."""
    from wanscope.cli import cli

    root = click.Context(
        cli, info_name="wanscope", terminal_width=WIDTH, max_content_width=WIDTH, **cli.context_settings
    )
    texts = {"wanscope": cli.get_help(root)}
    for name in cli.list_commands(root):
        command = cli.get_command(root, name)
        # the parent context gives the usage line its "wanscope" and the help option its names (-h)
        ctx = click.Context(command, info_name=name, parent=root, **command.context_settings)
        texts[f"wanscope {name}"] = command.get_help(ctx)
    return texts


def anchor(title: str) -> str:
    """The anchor GitHub gives the heading ``## `title` ``."""
    return title.lower().replace(" ", "-")


def render(texts: dict[str, str]) -> str:
    """The whole of docs/cli.md for ``help_texts()``."""
    parts = [HEADER]
    parts.append("".join(f"- [`{title}`](#{anchor(title)})\n" for title in texts))
    for title, text in texts.items():
        parts.append(f"## `{title}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    text = render(help_texts())
    if argv == ["--check"]:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: scripts/gen_cli_docs.py [--check]", file=sys.stderr)
        return 2
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
