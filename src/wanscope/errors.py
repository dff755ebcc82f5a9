"""Typed errors. The CLI turns each into one line on stderr and exit code 2."""


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
