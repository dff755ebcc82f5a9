"""Write ``report.json`` and ``report.html`` into a directory, atomically.

Each file is written under a temporary name in the same directory, then renamed, so an
interrupted run (Ctrl-C) never leaves a half-written report behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from wanscope.analysis.icicle import icicle_nodes
from wanscope.analysis.scope import Scope
from wanscope.analysis.timeline import timeline_segments
from wanscope.clitools import dumps_json
from wanscope.errors import InputError, check_output
from wanscope.report.figures import device_key
from wanscope.report.html import gap_windows, render_html


def write_atomic(path: Path, text: str, inputs=()) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    write_all({Path(path): text}, inputs)


def write_all(files: dict[Path, str], inputs=()) -> None:
    """Write every file under a temporary name in its directory, then rename them all:
    an interrupt leaves either the earlier files or the new ones, never a half-written
    file (and at most microseconds where one file is new and the other not).

    Raises:
        InputError: a target is an input, a directory or a special file (``os.replace``
            over /dev/null as root replaces the device), or cannot be written.
    """
    for path in files:
        check_output(path, inputs)
    umask = os.umask(0)
    os.umask(umask)
    temporary: dict[Path, str] = {}
    try:
        for path, text in files.items():
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            except OSError as e:
                raise InputError(path, f"cannot write: {e.strerror or e}") from None
            temporary[path] = tmp
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:
                raise InputError(path, f"cannot write: {e.strerror or e}") from None
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a report is an ordinary file
        for path, tmp in temporary.items():
            os.replace(tmp, path)
    except BaseException:
        for tmp in temporary.values():
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        raise


def make_dir(path: Path) -> list[Path]:
    """Create ``path`` and missing parents; returns the directories created, outermost first
    (for ``remove_dirs`` when what goes in them fails).

    Raises:
        InputError: it cannot be created (under a file, on a read-only or virtual file
            system, no permission).
    """
    missing = []
    p = path
    while not p.is_dir():
        if p.exists() or p.is_symlink():
            raise InputError(p, "exists and is not a directory")
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except OSError as e:
            remove_dirs(created)
            raise InputError(d, f"cannot create the directory: {e.strerror or e}") from None
        created.append(d)
    return created


def remove_dirs(created: list[Path]) -> None:
    """Remove directories ``make_dir`` created, innermost first, where they are empty."""
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:
            return


def prepare_out_dir(folder: Path, files=()) -> None:
    """``make_dir(folder)``, then refuse, before any work, a folder that cannot be written or
    where one of ``files`` (names in it) is a directory, device or FIFO; what was created for
    it is removed again then.

    Raises:
        InputError: naming the folder or file and the problem.
    """
    created = make_dir(folder)
    try:
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(folder, "the directory is not writable")
        for name in files:
            check_output(folder / name)
    except InputError:
        remove_dirs(created)
        raise


def write_report(
    con, result: dict, out_dir: Path, title: str, scope: Scope | None = None, inputs=()
) -> tuple[Path, Path]:
    """Render and write both files; returns their paths. The page is rendered before the
    directory is made: an interrupt or an error leaves no directory behind."""
    views = gap_windows(result)
    detail = [
        (d["rank"], d["device"], g["from_ns"], g["to_ns"]) for d in result["devices"] for g in views[device_key(d)]
    ]
    segments = timeline_segments(con, scope or Scope(), detail=detail)
    page = render_html(result, segments, icicle_nodes(con), title)
    json_path, html_path = out_dir / "report.json", out_dir / "report.html"
    for path in (json_path, html_path):
        check_output(path, inputs)
    created = make_dir(out_dir)
    try:
        write_all({json_path: dumps_json(result), html_path: page}, inputs)
    except BaseException:
        remove_dirs(created)
        raise
    return json_path, html_path
