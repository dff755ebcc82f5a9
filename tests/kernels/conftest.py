"""Run the Triton kernels on the CPU through Triton's interpreter when there is no GPU.

``triton.jit`` picks the interpreter when a kernel is defined, so the variable must be set
before triton is first imported: this conftest is loaded before the test modules
of this folder (and the wan/ tests, which come later, import the kernels lazily).
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
# before triton's first import: its own library functions (tl.sum, ...) are jitted then too
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
