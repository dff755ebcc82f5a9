"""Call stacks collapsed to the program's own frames, for the report's gap table.

A stack behind an idle gap (``gaps.largest[].stack``, outermost first) holds Python frames
(``file(line): function``), ``nn.Module: Name_N`` entries, record_function and NVTX ranges,
built-in calls and ops. Collapsed, it keeps what the program's author wrote: frames outside
PyTorch and the Python standard library, the modules and the named ranges, and of the ops
only the innermost (the one that launched the work); the outer frames every listed stack
shares are left out, counted once.
"""

from __future__ import annotations

import re
import sys

_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): ")
_LIBRARY_PACKAGES = frozenset(sys.stdlib_module_names) | {"torch", "triton"}


def is_library_frame(entry: str) -> bool:
    """True for a Python frame of PyTorch, Triton or the standard library (``torch/nn/...``,
    ``<frozen runpy>``, ``contextlib.py``) and for a ``<built-in ...>`` call."""
    if entry.startswith("<built-in") or entry.startswith("<frozen"):
        return True
    m = _FRAME.match(entry)
    if m is None:
        return False
    top = m["file"].replace("\\", "/").lstrip("/").split("/", 1)[0]
    return top.removesuffix(".py") in _LIBRARY_PACKAGES


def _is_op(entry: str) -> bool:
    return "::" in entry and " " not in entry and _FRAME.match(entry) is None


def common_prefix(stacks: list[list[str]]) -> int:
    """How many outermost entries every stack in ``stacks`` shares (0 for fewer than two),
    leaving each stack at least its innermost entry."""
    if len(stacks) < 2:
        return 0
    n = min(len(s) for s in stacks) - 1
    for i in range(max(n, 0)):
        if any(s[i] != stacks[0][i] for s in stacks[1:]):
            return i
    return max(n, 0)


def collapse(stack: list[str], skip: int = 0) -> list[str]:
    """The entries of ``stack`` (outermost first) from ``skip`` on that are the program's own:
    not library frames (``is_library_frame``), not ops but the innermost entry. The program's
    entry, its outermost ``<module>`` frame, is kept even where its file shares a standard
    library module's name (a script ``profile.py`` is recorded as ``profile.py(3): <module>``)."""
    entry = next((i for i, e in enumerate(stack) if e.endswith("): <module>") and not e.startswith("<")), None)
    kept = []
    last = len(stack) - 1
    for i, e in enumerate(stack[skip:], skip):
        if i in (last, entry) or not (is_library_frame(e) or _is_op(e)):
            kept.append(e)
    return kept
