"""Typed errors. The CLI turns each into one line on stderr and exit code 2."""

import os
import stat


class WanscopeError(Exception):
    """Base class: a problem the user can fix; printed as one line, exit code 2."""

    exit_code = 2


class InputError(WanscopeError):
    """A file given to wanscope cannot be used.

    Args:
        path: the file as the user named it.
        problem: what is wrong with it, one short clause.
    """

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class UsageError(WanscopeError):
    """Arguments that cannot work together or out of range."""


def check_output(path, inputs=()) -> None:
    """Refuse an output path whose replacement would destroy something: a device, a FIFO
    or a directory (``os.replace`` over ``/dev/null`` as root replaces the device itself),
    or one of the ``inputs`` (``--out`` or ``--db`` naming the trace just read).

    Raises:
        InputError: naming ``path`` and what it is.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(path, f"cannot write: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, "is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, f"is {file_kind(st.st_mode)}, not a regular file; not replacing it")
    for p in inputs:
        try:
            if os.path.samefile(path, p):
                raise InputError(path, "is one of the inputs; not replacing it")
        except OSError:
            continue


def file_kind(mode: int) -> str:
    """'a named pipe (FIFO)', 'a device', ... for an ``st_mode`` that is not a regular file."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a special file"
