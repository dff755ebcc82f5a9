"""Run Nsight Compute on a command and keep what the diagnosis needs.

``ncu_command`` builds the ncu call: the sections the diagnosis reads (SpeedOfLight,
LaunchStats, Occupancy, SchedulerStats, WarpStateStats, ComputeWorkloadAnalysis,
MemoryWorkloadAnalysis, SourceCounters for the local-memory spill counts),
``--clock-control none`` so the kernel runs at the clocks it would see in production (ncu
otherwise locks base clocks), and ``-o`` for the .ncu-rep. ``export_csvs`` then writes
the details page and the raw page from the report, both in base units
(``--print-units base``) so no digits are lost to auto-scaling.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from wanscope.errors import WanscopeError
from wanscope.nsight import find_on_path_or_install

SECTIONS = (
    "SpeedOfLight",
    "LaunchStats",
    "Occupancy",
    "SchedulerStats",
    "WarpStateStats",
    "ComputeWorkloadAnalysis",
    "MemoryWorkloadAnalysis",
    "SourceCounters",
)
# where NVIDIA installs ncu when it is not on PATH
NCU_GLOBS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda-*/bin/ncu")
_NO_COUNTERS = ("ERR_NVGPUCTRPERM", "does not have permission to access NVIDIA GPU Performance Counters")


class CaptureError(WanscopeError):
    """ncu is missing, cannot read the counters, or profiled nothing (one line, exit 2)."""


@dataclass(frozen=True)
class Capture:
    """Files one capture wrote: the report and its two CSV exports."""

    report: Path
    details_csv: Path
    raw_csv: Path


def find_ncu(explicit: str | None = None) -> str:
    """The ncu executable: ``explicit``, then ``$NCU``, PATH, and NVIDIA's install folders.

    Raises:
        CaptureError: none found.
    """
    for candidate in (explicit, os.environ.get("NCU")):
        if candidate:
            if shutil.which(candidate):
                return shutil.which(candidate)
            raise CaptureError(f"ncu not found at {candidate}")
    found = find_on_path_or_install("ncu", NCU_GLOBS)
    if not found:
        raise CaptureError("ncu (Nsight Compute) not found: install it, put it on PATH, or pass --ncu PATH")
    return found


def ncu_command(
    ncu: str,
    command: list[str],
    output: Path,
    kernel_regex: str | None = None,
    launch_skip: int = 0,
    launch_count: int = 1,
    from_profiler_start: bool = False,
) -> list[str]:
    """The ncu argument list that profiles ``command`` into ``output`` (.ncu-rep added by ncu).

    ``from_profiler_start``: profile only after the program's ``cudaProfilerStart``
    (``--profile-from-start off``), and match ``kernel_regex`` against demangled names.
    """
    args = [ncu, "--clock-control", "none", "--target-processes", "all"]
    if from_profiler_start:
        args += ["--profile-from-start", "off", "--kernel-name-base", "demangled"]
    if kernel_regex:
        args += ["--kernel-name", f"regex:{kernel_regex}"]
    args += ["--launch-skip", str(launch_skip), "--launch-count", str(launch_count)]
    for s in SECTIONS:
        args += ["--section", s]
    args += ["--export", str(output), "--force-overwrite"]
    return args + list(command)


def run_ncu(args: list[str], log=None, env: dict[str, str] | None = None) -> str:
    """Run ncu, echoing its output to ``log`` (default: standard error); the output as text.

    Raises:
        CaptureError: no counter access, or ncu failed.
    """
    try:
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
        )
    except OSError as e:
        raise CaptureError(f"cannot run {args[0]}: {e.strerror or e}") from None
    log = log or sys.stderr
    lines = []
    for line in proc.stdout:
        lines.append(line)
        log.write(line)
    proc.wait()
    out = "".join(lines)
    if any(marker in out for marker in _NO_COUNTERS):
        raise CaptureError(
            "ncu has no access to the GPU performance counters (ERR_NVGPUCTRPERM): run as root or "
            "set NVreg_RestrictProfilingToAdminUsers=0"
        )
    if "No kernels were profiled" in out:
        raise CaptureError("ncu profiled no kernel: check --kernel and --launch-skip against the command's launches")
    if proc.returncode != 0:
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
        raise CaptureError(f"ncu exited with status {proc.returncode}: {last[:200]}")
    return out


def export_csvs(ncu: str, report: Path) -> Capture:
    """Write ``<stem>.details.csv`` and ``<stem>.raw.csv`` next to ``report``."""
    stem = report.with_suffix("")
    details, raw = Path(f"{stem}.details.csv"), Path(f"{stem}.raw.csv")
    for page, target in (("details", details), ("raw", raw)):
        args = [ncu, "--import", str(report), "--csv", "--page", page, "--print-units", "base"]
        with open(target, "w") as f:
            proc = subprocess.run(args, stdout=f, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise CaptureError(f"ncu --import {report} --page {page} failed: {proc.stderr.strip()[:200]}")
    return Capture(report, details, raw)


def capture(
    command: list[str],
    output: Path,
    kernel_regex: str | None = None,
    launch_skip: int = 0,
    launch_count: int = 1,
    ncu: str | None = None,
    log=None,
    from_profiler_start: bool = False,
    env: dict[str, str] | None = None,
) -> Capture:
    """Profile ``command`` with ncu (in ``env``, default ours) and export the CSVs; the files
    written. ``from_profiler_start``: see ``ncu_command``."""
    exe = find_ncu(ncu)
    output = Path(str(output).removesuffix(".ncu-rep"))
    output.parent.mkdir(parents=True, exist_ok=True)
    run_ncu(ncu_command(exe, command, output, kernel_regex, launch_skip, launch_count, from_profiler_start), log, env)
    report = Path(f"{output}.ncu-rep")
    if not report.exists():
        raise CaptureError(f"ncu wrote no report at {report}")
    return export_csvs(exe, report)
