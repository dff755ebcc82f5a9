"""Running ``wanscope`` commands in the test's own process: a command's arguments parsed as the
``wanscope`` group parses them, and whole commands through the entry point."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess

import click


def parse_profile(args: list[str]) -> click.Context:
    """``wanscope profile ARGS`` parsed under the group's context (a command parsed alone caches
    a help option without the group's ``-h``, which the docs/cli.md test would then miss)."""
    from wanscope.cli import cli

    root = click.Context(cli, info_name="wanscope", **cli.context_settings)
    return cli.get_command(root, "profile").make_context("profile", args, parent=root)


def run_main(*args, cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """``wanscope ARGS`` through the entry point in this process, in ``cwd``: the same exit code,
    standard output and standard error as ``python -m wanscope ARGS``, without a process whose
    start (torch's and transformers' imports) costs more than most commands. For commands that
    end before they load a model (the refusals) or run on small inputs; a test of a hang, a
    memory bound or a signal still needs its own process."""
    from wanscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return subprocess.CompletedProcess(["wanscope", *map(str, args)], code, out.getvalue(), err.getvalue())


def sigint_default() -> None:
    """``preexec_fn`` for a child that a test interrupts: SIGINT back to its default, which a
    runner started with ``nohup`` (or anything else that ignores it) would otherwise pass down,
    so that the child's Python installs its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
