"""A command's arguments parsed as the ``wanscope`` group parses them."""

from __future__ import annotations

import click


def parse_profile(args: list[str]) -> click.Context:
    """``wanscope profile ARGS`` parsed under the group's context (a command parsed alone caches
    a help option without the group's ``-h``, which the docs/cli.md test would then miss)."""
    from wanscope.cli import cli

    root = click.Context(cli, info_name="wanscope", **cli.context_settings)
    return cli.get_command(root, "profile").make_context("profile", args, parent=root)
