"""The ``wanscope`` command: a thin click group over the library.

Commands are imported only when invoked (click's lazy-group pattern), so the analysis
commands never import the engine's heavy dependencies (torch).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import select
import signal
import sys

import click

from wanscope.errors import WanscopeError

# command name -> "module:attribute" of a click.Command
COMMANDS = {
    "analyze": "wanscope.analysis.cli:analyze",
    "query": "wanscope.analysis.cli:query",
    "schema": "wanscope.analysis.cli:schema",
    "ncu": "wanscope.ncu.cli:ncu",
    "ncu-run": "wanscope.ncu.cli:ncu_run",
    "report": "wanscope.report.cli:report",
    "generate": "wanscope.wan.cli:generate",
    "compare-modes": "wanscope.wan.compare_cli:compare_modes",
    "profile": "wanscope.profile.cli:profile",
    "stats": "wanscope.stats.cli:stats",
    "diff": "wanscope.analysis.diff_cli:diff",
    "memory": "wanscope.memory.cli:memory",
}


class _Interrupted(Exception):
    """A Ctrl-C, SIGTERM or SIGHUP inside a command, carried past click (whose own handling of a
    KeyboardInterrupt prints a blank line before its Abort) to ``main``'s one line."""


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted from None
        except BrokenPipeError:
            if not _stdout_closed():
                raise  # another pipe broke (a child process's): an error to see
            # The reader closed the pipe (``wanscope analyze | head``): end quietly with 0, the
            # usual convention (click's own handling exits 1). Output still buffered would fail
            # again at interpreter exit, so stdout goes to /dev/null.
            _stdout_to_devnull()
            raise click.exceptions.Exit(0) from None


def _stdout_closed() -> bool:
    """Whether standard output's reader is gone (poll reports an error on a pipe's write end
    once no reader is left, a hang-up on a closed socket)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no descriptor to ask (a test's capture)
        return True


def _flush_stdout() -> Exception | None:
    """Flush standard output; where that fails (a full device, a reader gone), send it to
    /dev/null so that the interpreter's own flush at exit does not fail again, and return the
    error (None for a broken pipe: the reader's choice, not an error)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_to_devnull()
    except (OSError, ValueError) as e:  # ValueError: stdout closed
        _stdout_to_devnull()
        return e
    return None


def _write_failed(e: Exception):
    """Exit 1 after a write the system refused (a full disk, an I/O error), in one line."""
    where = getattr(e, "filename", None) or "writing the output"  # no name: standard output, as a rule
    problem = getattr(e, "strerror", None) or e
    click.echo(f"wanscope: error: {_one_line(f'{where}: {problem}')}", err=True)
    sys.exit(1)


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (a test's capture)
        pass
    finally:
        os.close(devnull)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wanscope")
def cli():
    """wanscope: run Wan2.1 text-to-video fast and find out where GPU time goes."""


def _one_line(text: str) -> str:
    """``text`` with control characters escaped (a newline or an escape sequence in a
    file name): an error stays one line and cannot drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


_TERMINATED: list[int] = []  # the SIGTERM or SIGHUP received, if any


def _terminate(signum, _frame):
    """SIGTERM or SIGHUP: a KeyboardInterrupt where Python next runs, so the cleanup of a Ctrl-C
    runs too (a ``--db`` file's temporary, chunk and spill files removed; half-written outputs
    deleted); ``_interrupted`` then names the signal."""
    _TERMINATED.append(signum)
    raise KeyboardInterrupt


def _lost_interrupt(unraisable, default=sys.unraisablehook) -> None:
    """``sys.unraisablehook``: a Ctrl-C (or ``_terminate``'s) raised inside a callback Python
    cannot raise from (importlib's module-lock weakref, a finalizer) would be printed as
    "Exception ignored" with a traceback and dropped; the signal is sent again instead, so it
    interrupts where Python next runs, as any other. Anything else goes to ``default``."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        signal.raise_signal(_TERMINATED[0] if _TERMINATED else signal.SIGINT)
        return
    default(unraisable)


def _interrupted(ctrl_c_line: str):
    """Exit after an interrupt: 128 + the signal for SIGTERM/SIGHUP, 130 for Ctrl-C."""
    if _TERMINATED:
        click.echo(f"wanscope: terminated ({signal.Signals(_TERMINATED[0]).name})", err=True)
        sys.exit(128 + _TERMINATED[0])
    click.echo(ctrl_c_line, err=True)
    sys.exit(130)


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # nothing more to save there
            stream.flush()


def _exit_without_teardown() -> None:
    """``clitools.skip_teardown``'s end: the ``atexit`` functions, then exit code 0."""
    _flush_streams()
    atexit._run_exitfuncs()  # CPython's own call at interpreter exit
    _flush_streams()
    os._exit(0)


def main(argv=None) -> None:
    """Entry point: typed errors become one line on stderr and exit code 2, no traceback.
    SIGTERM and SIGHUP end a run like Ctrl-C, with exit code 128 + the signal, except under
    torchrun, whose launcher owns them (it escalates to SIGKILL; ``parallel/watch.py`` ends
    ranks whose peers died)."""
    own_signals = argv is None and "TORCHELASTIC_RUN_ID" not in os.environ
    # A standard stream closed before the start (``>&-``): Python sets it to None; what would
    # go there is discarded, as the caller chose
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")
    finished = False
    if own_signals:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _terminate)
        sys.unraisablehook = _lost_interrupt
    try:
        # Outside standalone mode click returns ctx.exit()'s code instead of exiting.
        code = cli.main(args=argv, prog_name="wanscope", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
        finished = True
    except WanscopeError as e:
        click.echo(f"wanscope: error: {_one_line(str(e))}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        # One line like every other bad input (not click's usage block); help is a -h away.
        hint = f" (see '{e.ctx.command_path} -h')" if e.ctx is not None else ""
        message = _one_line(" ".join(e.format_message().split()))
        click.echo(f"wanscope: error: {message}{hint}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except _Interrupted:
        _interrupted("wanscope: interrupted")
    except click.exceptions.Abort:
        _interrupted("wanscope: aborted")
    except KeyboardInterrupt:
        _interrupted("wanscope: interrupted")
    except RuntimeError as e:
        if str(e) != "Query interrupted":
            raise
        # DuckDB's form of Ctrl-C during a query (a plain RuntimeError).
        _interrupted("wanscope: interrupted")
    except MemoryError:
        click.echo("wanscope: error: out of memory", err=True)
        sys.exit(2)
    except BrokenPipeError:  # outside a command (LazyGroup.invoke handles those)
        if not _stdout_closed():
            raise
        _stdout_to_devnull()
        sys.exit(0)
    except OSError as e:
        _flush_stdout()
        _write_failed(e)
    finally:
        skip = False
        if finished:  # the request is cleared for in-process callers too
            from wanscope.clitools import take_skip_teardown

            skip = take_skip_teardown()
        if argv is None:  # the process's own command line: its end is the process's end
            # The command is over, its outputs written or removed. A Ctrl-C from here on,
            # while the interpreter shuts down (atexit callbacks such as removing DuckDB's
            # spill folder, thread joins), only printed "Exception ignored in ..." and a
            # traceback after a finished run; so did a SIGTERM or SIGHUP through _terminate
            # (now they end the process at once, silently, as by default).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if own_signals:
                for signum in (signal.SIGTERM, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_DFL)
            error = _flush_stdout()  # output still buffered for a full stdout
            if error is not None:
                _write_failed(error)
            if skip and "CUDA_INJECTION64_PATH" not in os.environ:
                _exit_without_teardown()
