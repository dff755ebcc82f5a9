"""``wanscope profile --nsys``: the same profile re-executed under Nsight Systems.

The child is ``python -m wanscope profile`` with the same options, its window switched to
``cudaProfilerStart``/``cudaProfilerStop`` (no torch.profiler in that process: CUPTI takes one
subscriber per process), under

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --capture-range=cudaProfilerApi
                 --capture-range-end=stop --export sqlite

(without ``-s none --cpuctxsw=none`` a small script wrote a 2 GB ``.qdstrm``: docs/design.md,
"Capturing"). The engine's step, CFG and block ranges are NVTX ranges too, so the
export has the same steps. nsys writes under a temporary name in the output folder; the files
are renamed to ``trace.nsys-rep`` and ``trace.sqlite`` once both exist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from wanscope.errors import WanscopeError
from wanscope.nsight import find_on_path_or_install

NSYS_FLAGS = (
    "-t",
    "cuda,nvtx,osrt",
    "-s",
    "none",
    "--cpuctxsw=none",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=stop",
    "--export",
    "sqlite",
    "--force-overwrite",
    "true",
)
# where NVIDIA installs nsys when it is not on PATH; the last one is the nsys that ships
# inside Nsight Compute (the H200 image has only that one)
NSYS_GLOBS = (
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)
HOW_TO_GET = (
    "nsys (Nsight Systems) not found: install it from https://developer.nvidia.com/nsight-systems "
    "(or apt-get install nsight-systems-cli from NVIDIA's CUDA repository), then put it on PATH "
    "or set NSYS=/path/to/nsys"
)
PARTIAL = ".nsys-capture"


class NsysError(WanscopeError):
    """nsys is missing or wrote no export (one line, exit 2)."""


def find_nsys() -> str:
    """The nsys executable: ``$NSYS``, then PATH, then NVIDIA's install folders.

    Raises:
        NsysError: none found (the message says how to get it).
    """
    explicit = os.environ.get("NSYS")
    if explicit:
        found = shutil.which(explicit)
        if not found:
            raise NsysError(f"NSYS={explicit}: not an executable")
        return found
    found = find_on_path_or_install("nsys", NSYS_GLOBS)
    if not found:
        raise NsysError(HOW_TO_GET)
    return found


def nsys_command(nsys: str, stem: Path, child: list[str]) -> list[str]:
    """The nsys call that profiles ``child`` into ``stem``.nsys-rep and ``stem``.sqlite."""
    return [nsys, "profile", *NSYS_FLAGS, "-o", str(stem), *child]


def capture(nsys: str, out_dir: Path, child: list[str], env: dict[str, str] | None = None) -> tuple[Path, Path]:
    """Run ``child`` under nsys (in ``env``, default ours); returns (``trace.nsys-rep``,
    ``trace.sqlite``) in ``out_dir``.

    The child's output (its progress bar) goes straight to this terminal. Partial files of a
    failed or interrupted capture are removed.

    Raises:
        NsysError: nsys failed or wrote no SQLite export.
    """
    stem = out_dir / PARTIAL
    partial = [Path(f"{stem}{ext}") for ext in (".nsys-rep", ".sqlite", ".qdstrm")]
    try:
        try:
            status = subprocess.run(nsys_command(nsys, stem, child), env=env).returncode
        except OSError as e:
            raise NsysError(f"cannot run {nsys}: {e.strerror or e}") from None
        rep, sqlite = partial[0], partial[1]
        if status != 0:
            raise NsysError(f"nsys exited with status {status}: see its messages above")
        missing = [p.name for p in (rep, sqlite) if not p.exists()]
        if missing:
            raise NsysError(
                f"nsys wrote no {' and no '.join(missing)} in {out_dir}: see its messages above "
                f"(its importer needs libdw.so.1, Debian package libdw1, on LD_LIBRARY_PATH)"
            )
        final = (out_dir / "trace.nsys-rep", out_dir / "trace.sqlite")
        os.replace(rep, final[0])
        os.replace(sqlite, final[1])
        return final
    finally:
        for p in partial:
            p.unlink(missing_ok=True)
