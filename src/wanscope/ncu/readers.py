"""Read Nsight Compute output into ``NcuReport``: details CSV, raw CSV, or a .ncu-rep.

Layouts handled (all seen in the test fixtures' ncu reports, ``tests/ncu``):

- ``--csv --page details``: one row per metric and one per rule result. Since 2023 the
  columns are ID, Process ID, Process Name, Host Name, [NVTX columns with ``--nvtx``],
  Kernel Name, Context, Stream, Block Size, Grid Size, Device, CC, Section Name, Metric
  Name, Metric Unit, Metric Value, then Rule Name, Rule Type, Rule Description, Estimated
  Speedup Type, Estimated Speedup; metric rows stop after Metric Value (16 fields against
  20 in the header, counting the trailing comma). ncu 2022.3 has a ``Kernel Time`` column and no Block/Grid/Device/CC.
  ``Metric Name`` holds the label ("Duration") or, with ``--print-metric-name name``, the
  base name (``gpu__time_duration.sum``).
- ``--csv --page raw``: one row per kernel, one column per metric, units on row 2.
- ``.ncu-rep``: through NVIDIA's ``ncu_report`` module (PyPI package ``ncu-report``);
  exact values, and the occupancy curves as instanced metrics.

``==PROF==``/``==WARNING==``/``==ERROR==`` lines that ncu mixes into the same stream (before
the header, or anywhere outside a quoted field) are not CSV: they are kept, as they are, in
``NcuReport.warnings``. Malformed input raises ``InputError`` with one line saying what is
wrong.
"""

from __future__ import annotations

import csv
import io
import math
import re
import stat
from pathlib import Path

from wanscope.errors import InputError, file_kind
from wanscope.ncu.model import CURVE_METRICS, KernelProfile, Metric, NcuReport, RuleResult, labels_for, name_for
from wanscope.ncu.units import base_unit, parse_value

NCU_REP_MAGIC = b"NVR\x00"
_METRIC_NAME = re.compile(r"[a-z][a-z0-9_]*__[A-Za-z0-9_.]+")
_TRIPLE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_TOOL_LINE = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==")
# identity columns of both CSV pages; anything else that is not a metric name is NVTX
_IDENTITY = {
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Kernel Time",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
}
_DETAILS_REQUIRED = ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value")


def read_report(path: str | Path) -> NcuReport:
    """Read any Nsight Compute output wanscope knows, choosing the reader by content.

    Raises:
        InputError: the file is missing, unreadable, or not one of the layouts above.
    """
    p = Path(path)
    try:
        mode = p.stat().st_mode
        if not stat.S_ISREG(mode):  # a FIFO would block, /dev/zero never end
            raise InputError(path, f"is {file_kind(mode)}, not a regular file")
        with p.open("rb") as f:
            head = f.read(4)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    if head == NCU_REP_MAGIC:
        return read_ncu_rep(p)
    return read_csv(p)


def read_csv(path: str | Path) -> NcuReport:
    """Read an ncu ``--csv`` export, details page or raw page (told apart by the header)."""
    header, rows, tool_lines = _csv_rows(Path(path))
    report = _details(path, header, rows) if "Metric Name" in header else _raw(path, header, rows)
    report.warnings = tool_lines
    return report


def _strip_tool_lines(text: str) -> tuple[str, int, list[str]]:
    """The CSV text from its header on, without ncu's ``==PROF==``-style lines; the
    1-based line number where the header was found; and those lines (before the header
    and after it, outside quoted fields), in order, without their line ends."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
    if start is None:
        return "", 0, []
    tool = [ln.rstrip("\r\n") for ln in lines[:start] if ln.startswith(_TOOL_LINE)]
    kept, in_quotes = [], False
    for ln in lines[start:]:
        if not in_quotes and ln.startswith(_TOOL_LINE):
            tool.append(ln.rstrip("\r\n"))
            continue
        kept.append(ln)
        if ln.count('"') % 2:
            in_quotes = not in_quotes
    return "".join(kept), start + 1, tool


def _not_ncu_reason(text: str) -> str:
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith(_TOOL_LINE)), "")
    for delim, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "'|'")):
        if first.replace('"', "").startswith(f"ID{delim}"):
            return f"fields are separated by {name}; ncu --csv writes commas"
    if not first:
        return "empty: no Nsight Compute CSV header"
    return f'not an Nsight Compute CSV: expected a header starting with "ID", found {first[:60]!r}'


def _csv_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]], list[str]]:
    try:
        text = path.read_bytes().decode("utf-8-sig")  # a BOM where Excel saved it
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(path, "not text (neither CSV nor a .ncu-rep)") from None
    body, header_line, tool_lines = _strip_tool_lines(text)
    if not body:
        raise InputError(path, _not_ncu_reason(text))
    if not body.endswith("\n"):
        raise InputError(path, "ends in the middle of a row (truncated?)")
    reader = csv.reader(io.StringIO(body), strict=True)
    try:
        header = next(reader)
        rows = []
        for fields in reader:
            rows.append((header_line + reader.line_num - 1, fields))
    except csv.Error as e:
        raise InputError(path, f"malformed CSV near line {header_line + reader.line_num - 1}: {e}") from None
    missing = [c for c in ("ID", "Kernel Name") if c not in header]
    if missing:
        raise InputError(path, f"not an Nsight Compute CSV: no {missing[0]!r} column")
    if not rows:
        raise InputError(path, "has a header but no rows")
    return header, rows, tool_lines


def _triple(text: str | None) -> tuple[int, int, int] | None:
    m = _TRIPLE.fullmatch(text.strip()) if text else None
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _kernel_from(fields: dict[str, str], kernel_id: int) -> KernelProfile:
    block, grid = _triple(fields.get("Block Size")), _triple(fields.get("Grid Size"))
    return KernelProfile(
        id=kernel_id,
        name=fields.get("Kernel Name", ""),
        block=None if block == (0, 0, 0) else block,
        grid=None if grid == (0, 0, 0) else grid,
        device=fields.get("Device") or None,
        cc=fields.get("CC") or None,
    )


def _kernel_id(path, line: int, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(path, f"line {line}: kernel ID {text[:20]!r} is not a number") from None


def _details(path, header: list[str], rows) -> NcuReport:
    missing = [c for c in _DETAILS_REQUIRED if c not in header]
    if missing:
        raise InputError(path, f"not an ncu details CSV: no {missing[0]!r} column")
    # metric rows end after Metric Value plus a trailing comma; rule rows fill the header
    n_metric = header.index("Metric Value") + 1
    allowed = {n_metric, n_metric + 1, len(header)}
    kernels: dict[int, KernelProfile] = {}
    for line, fields in rows:
        if len(fields) not in allowed:
            raise InputError(
                path, f"line {line} has {len(fields)} fields, expected {n_metric + 1} or {len(header)} (truncated?)"
            )
        row = dict(zip(header, fields))
        kid = _kernel_id(path, line, row["ID"])
        kernel = kernels.get(kid)
        if kernel is None:
            kernel = kernels[kid] = _kernel_from(row, kid)
        section = row["Section Name"] or None
        if row["Metric Name"]:
            shown = row["Metric Name"]
            value, unit = parse_value(row["Metric Value"], row["Metric Unit"])
            if _METRIC_NAME.fullmatch(shown):
                labels = labels_for(shown)
                label = next((lb for s, lb in labels if s == section), labels[0][1] if labels else None)
                kernel.metrics.append(Metric(section, label, shown, unit, value))
            else:
                kernel.metrics.append(Metric(section, shown, name_for(section, shown), unit, value))
        elif row.get("Rule Name"):
            speedup = row.get("Estimated Speedup") or ""
            sp, _ = parse_value(speedup)
            kernel.rules.append(
                RuleResult(
                    section=section or "",
                    rule=row["Rule Name"],
                    type=row.get("Rule Type", ""),
                    description=row.get("Rule Description", ""),
                    speedup_type=row.get("Estimated Speedup Type") or None,
                    speedup_pct=sp if isinstance(sp, float) else None,
                )
            )
    return NcuReport(str(path), "details-csv", [_complete(kernels[k]) for k in sorted(kernels)])


def _raw(path, header: list[str], rows) -> NcuReport:
    if len(rows) < 2:
        raise InputError(path, "raw CSV needs a units row and at least one kernel row")
    (_, units), kernel_rows = rows[0], rows[1:]
    if units[: header.index("ID") + 1] != [""] * (header.index("ID") + 1) or len(units) != len(header):
        raise InputError(path, "raw CSV: row 2 should hold the metric units")
    metric_cols = [i for i, h in enumerate(header) if h not in _IDENTITY and _METRIC_NAME.fullmatch(h)]
    if not metric_cols:
        raise InputError(path, "not an ncu CSV: no metric columns")
    kernels = []
    for line, fields in kernel_rows:
        if len(fields) != len(header):
            raise InputError(path, f"line {line} has {len(fields)} fields, expected {len(header)} (truncated?)")
        row = dict(zip(header, fields))
        kernel = _kernel_from(row, _kernel_id(path, line, row["ID"]))
        for i in metric_cols:
            value, unit = parse_value(fields[i], units[i])
            labels = labels_for(header[i])
            section, label = labels[0] if labels else (None, None)
            kernel.metrics.append(Metric(section, label, header[i], unit, value))
        kernels.append(_complete(kernel))
    return NcuReport(str(path), "raw-csv", kernels)


def read_ncu_rep(path: str | Path) -> NcuReport:
    """Read a ``.ncu-rep`` with NVIDIA's ``ncu_report`` module (``pip install ncu-report``).

    Every non-instanced metric becomes a ``Metric`` (label from the report, section from
    ``metric_labels.csv`` where known); the three occupancy curves (``CURVE_METRICS``)
    become ``KernelProfile.curves``: [(registers per thread | threads per block | shared
    memory bytes per block, warps per SM)].
    """
    try:
        import ncu_report
    except ImportError:
        raise InputError(path, "reading .ncu-rep needs NVIDIA's ncu-report package (pip install ncu-report)") from None
    with open(path, "rb") as f:
        if f.read(4) != NCU_REP_MAGIC:
            raise InputError(path, "not an Nsight Compute report (.ncu-rep magic missing)")
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as e:  # noqa: BLE001 - the SWIG layer raises plain exceptions
        raise InputError(path, f"ncu_report could not load it: {e}") from None
    kernels: list[KernelProfile] = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            kernels.append(_rep_kernel(rng.action_by_idx(a), len(kernels)))
    if not kernels:
        raise InputError(path, "holds no profiled kernels (truncated or not an ncu report?)")
    return NcuReport(str(path), "ncu-rep", kernels)


def _rep_value(m):
    if not m.has_value():
        return None
    v = m.value()
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    return v


def _rep_kernel(action, kernel_id: int) -> KernelProfile:
    kernel = KernelProfile(id=kernel_id, name=action.name(action.NameBase_DEMANGLED))
    for name in action.metric_names():
        m = action.metric_by_name(name)
        if m.num_instances() > 0:
            if name in CURVE_METRICS:
                ids = m.correlation_ids()
                kernel.curves[name] = [(int(ids.value(i)), float(m.value(i))) for i in range(m.num_instances())]
            continue
        value = _rep_value(m)
        factor, unit = base_unit(m.unit())
        if isinstance(value, float) and factor != 1:
            value = float(value * float(factor))
        labels = labels_for(name)
        section = labels[0][0] if labels else None
        kernel.metrics.append(Metric(section, m.label() or None, name, unit, value))
    _complete(kernel)
    return kernel


def _complete(kernel: KernelProfile) -> KernelProfile:
    """Fill block, grid, compute capability and device name from metrics where the
    source's own columns lack them (ncu 2022.3 CSVs, .ncu-rep)."""

    def whole(v):  # a count; a cell of inf or NaN is no count
        return int(v) if v is not None and math.isfinite(v) else None

    def dims(prefix):
        vals = [whole(kernel.number(f"{prefix}{a}")) for a in "xyz"]
        return tuple(vals) if all(v is not None for v in vals) else None

    if kernel.block is None:
        kernel.block = dims("launch__block_dim_")
    if kernel.grid is None:
        kernel.grid = dims("launch__grid_dim_")
    major = whole(kernel.number("device__attribute_compute_capability_major"))
    minor = whole(kernel.number("device__attribute_compute_capability_minor"))
    if kernel.cc is None and major is not None and minor is not None:
        kernel.cc = f"{major}.{minor}"
    display = kernel.value("device__attribute_display_name")
    if isinstance(display, str):
        kernel.device = display
    return kernel
