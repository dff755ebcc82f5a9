"""Finding an Nsight tool (``nsys``, ``ncu``) that may not be on PATH."""

from __future__ import annotations

import glob
import shutil
from collections.abc import Iterable


def find_on_path_or_install(name: str, install_globs: Iterable[str]) -> str | None:
    """``name`` on PATH, else the last match (in sort order: the newest version folder) of the
    first of ``install_globs`` that matches anything; None when neither finds it."""
    found = shutil.which(name)
    if found:
        return found
    for pattern in install_globs:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None
