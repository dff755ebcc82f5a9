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
from wanscope.report.html import render_html


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a report is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_report(con, result: dict, out_dir: Path, title: str, scope: Scope | None = None) -> tuple[Path, Path]:
    """Render and write both files; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    page = render_html(result, timeline_segments(con, scope or Scope()), icicle_nodes(con), title)
    json_path, html_path = out_dir / "report.json", out_dir / "report.html"
    write_atomic(json_path, dumps_json(result))
    write_atomic(html_path, page)
    return json_path, html_path
