"""``wanscope ncu`` and ``wanscope ncu-run``: thin click commands over the ncu library."""

from __future__ import annotations

import re
from pathlib import Path

import click

from wanscope.clitools import console as make_console
from wanscope.clitools import dumps_json, format_option
from wanscope.errors import InputError, UsageError
from wanscope.ncu.compare import Comparison, compare_reports, select_kernels
from wanscope.ncu.diagnosis import Diagnosis, diagnose
from wanscope.ncu.readers import read_report
from wanscope.report.tables import DataTable

SCHEMA_VERSION = 1

# (facts key, label, format) for the per-kernel table
_TABLE = (
    ("duration_ns", "duration", lambda v: f"{v / 1e3:,.2f} us"),
    ("sm_throughput_pct", "SM throughput", lambda v: f"{v:.2f}% of peak"),
    ("memory_throughput_pct", "memory throughput", lambda v: f"{v:.2f}% of peak"),
    ("registers_per_thread", "registers per thread", str),
    ("block_size", "block size", lambda v: f"{v:,} threads"),
    ("grid_size", "grid size", lambda v: f"{v:,} blocks"),
    ("shared_mem_per_block_bytes", "shared memory per block", lambda v: f"{v:,.0f} bytes"),
    ("waves_per_sm", "waves per SM", lambda v: f"{v:.2f}"),
    ("theoretical_occupancy_pct", "theoretical occupancy", lambda v: f"{v:.2f}%"),
    ("achieved_occupancy_pct", "achieved occupancy", lambda v: f"{v:.2f}%"),
    ("block_limit_registers", "block limit: registers", lambda v: f"{v:.0f}"),
    ("block_limit_shared_mem", "block limit: shared memory", lambda v: f"{v:.0f}"),
    ("block_limit_warps", "block limit: warps", lambda v: f"{v:.0f}"),
    ("block_limit_blocks", "block limit: blocks per SM", lambda v: f"{v:.0f}"),
    ("warps_active_per_scheduler", "warps per scheduler: active", lambda v: f"{v:.2f}"),
    ("warps_eligible_per_scheduler", "warps per scheduler: eligible", lambda v: f"{v:.2f}"),
    ("warps_issued_per_scheduler", "warps per scheduler: issued", lambda v: f"{v:.2f}"),
    ("issue_slot_utilization_pct", "issue-slot utilization", lambda v: f"{v:.2f}%"),
    ("no_eligible_pct", "cycles with no eligible warp", lambda v: f"{v:.2f}%"),
    ("local_memory_instructions", "local-memory (spill) instructions", lambda v: f"{v:,.0f}"),
)


def short_name(name: str, width: int = 100) -> str:
    """A kernel name fit for a title: no ``void``, template and argument lists elided."""
    s = name.removeprefix("void ")
    cut = min((i for i in (s.find("<"), s.find("(")) if i > 0), default=-1)
    if cut > 0:
        s = s[:cut] + ("<...>" if s[cut] == "<" else "(...)")
    return s if len(s) <= width else s[: width - 3] + "..."


def _print_warning(line: str) -> None:
    """One of ncu's own warning lines, as ncu wrote it (rich markup escaped)."""
    from rich.markup import escape

    make_console().print(f"[yellow]{escape(line)}[/yellow]", soft_wrap=True)


def _render(d: Diagnosis) -> None:

    console = make_console()
    k = d.kernel
    console.print(
        f"[bold]kernel {k.id}[/bold] {short_name(k.name)}  ({k.device or 'device ?'}, sm_{(k.cc or '?').replace('.', '')})"
    )
    console.print(f"verdict: [bold]{d.verdict}[/bold]")
    if d.facts:
        table = DataTable("quantity", "value", show_header=False, box=None, pad_edge=False)
        for key, label, fmt in _TABLE:
            v = d.facts.get(key)
            if v is not None:
                table.add_row(label, fmt(v))
        for st in d.facts.get("top_stalls") or []:
            table.add_row(
                "stall: " + st["reason"], f"{st['cycles_per_issued_instruction']:.2f} cycles per issued instruction"
            )
        console.print(table)
    console.print(d.explanation, soft_wrap=False)
    if d.what_if:
        table = DataTable("if registers per thread", "if block size", "theoretical occupancy", title="what if")
        for row in d.what_if:
            table.add_row(
                str(row["if_registers_per_thread"]), str(row["if_block_size"]), f"{row['occupancy_pct']:.2f}%"
            )
        console.print(table)
    console.print()


def _render_comparison(c: Comparison, a_name: str, b_name: str) -> None:

    def cell(v):
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{int(v):,}" if v.is_integer() else f"{v:,.2f}"
        return str(v)

    console = make_console()
    console.print(f"A: kernel {c.a.kernel.id} {short_name(c.a.kernel.name)} ({a_name})")
    console.print(f"B: kernel {c.b.kernel.id} {short_name(c.b.kernel.name)} ({b_name})")
    table = DataTable("metric", "A", "B", "B / A")
    for label, va, vb, ratio in c.rows:
        table.add_row(label, cell(va), cell(vb), "" if ratio is None else f"{ratio:.2f}x")
    console.print(table)
    console.print(c.summary())


def diagnose_report(path: str, kernel_regex: str | None) -> tuple[list[Diagnosis], list[str]]:
    """Diagnoses of the kernels of one report, filtered by ``kernel_regex``, and the
    report's ncu warnings (``NcuReport.warnings``)."""
    report = read_report(path)
    return [diagnose(k) for k in select_kernels(report, kernel_regex)], report.warnings


def emit(diagnoses: list[Diagnosis], source: str, fmt: str, warnings: list[str] | None = None) -> None:
    warnings = warnings or []
    if fmt == "json":
        doc = {
            "schema_version": SCHEMA_VERSION,
            "source": source,
            "warnings": warnings,
            "kernels": [d.to_json() for d in diagnoses],
        }
        click.echo(dumps_json(doc))
    else:
        for line in warnings:
            _print_warning(line)
        for d in diagnoses:
            _render(d)


@click.command("ncu")
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--kernel", "kernel_regex", help="Only kernels whose name matches this regular expression.")
@click.option("--kernel-b", "kernel_regex_b", help="With two reports: the regex for B (default: --kernel).")
@format_option("table", "json")
def ncu(reports, kernel_regex, kernel_regex_b, fmt):
    """Diagnose the kernels of an Nsight Compute report (details or raw CSV, or .ncu-rep):
    throughput, occupancy with its arithmetic, scheduler statistics, and a verdict.

    With two reports A B, compare the longest matching kernel of each side by side
    (e.g. two attention backends); pass the same report twice with --kernel and
    --kernel-b to compare two kernels of one report.
    """
    for option, regex in (("--kernel", kernel_regex), ("--kernel-b", kernel_regex_b)):
        if regex is not None:  # checked here, where the option that holds it is known
            try:
                re.compile(regex)
            except re.error as e:
                raise UsageError(f"{option} {regex!r} is not a regular expression: {e}") from None
    if len(reports) > 2:
        raise UsageError(f"wanscope ncu takes one report, or two to compare; got {len(reports)}")
    if len(reports) == 1:
        diagnoses, warnings = diagnose_report(reports[0], kernel_regex)
        emit(diagnoses, reports[0], fmt, warnings)
        return
    a, b = reports
    ra, rb = read_report(a), read_report(b)
    comparison = compare_reports(ra, rb, kernel_regex, kernel_regex_b or kernel_regex)
    warnings = [f"{a}: {w}" for w in ra.warnings] + [f"{b}: {w}" for w in rb.warnings]
    if fmt == "json":
        doc = {"schema_version": SCHEMA_VERSION, "sources": [a, b], "warnings": warnings, **comparison.to_json()}
        click.echo(dumps_json(doc))
    else:
        for line in warnings:
            _print_warning(line)
        _render_comparison(comparison, a, b)


@click.command("ncu-run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--kernel", "kernel_regex", help="Profile only kernels whose name matches this regex (ncu --kernel-name regex:)."
)
@click.option(
    "--launch-skip", default=0, show_default=True, type=click.IntRange(min=0), help="Matching launches to skip first."
)
@click.option(
    "--launch-count", default=1, show_default=True, type=click.IntRange(min=1), help="Matching launches to profile."
)
@click.option(
    "--output",
    "-o",
    default="wanscope_ncu",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Report path stem: writes STEM.ncu-rep, STEM.details.csv, STEM.raw.csv.",
)
@click.option("--ncu", "ncu_path", help="The ncu executable (default: $NCU, PATH, /opt/nvidia/nsight-compute/*/ncu).")
@format_option("table", "json")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def ncu_run(kernel_regex, launch_skip, launch_count, output, ncu_path, fmt, command):
    """Run COMMAND under Nsight Compute (--clock-control none, the sections the diagnosis
    needs), write the .ncu-rep and its CSVs, then print the diagnosis.

    Example: wanscope ncu-run --kernel flash_fwd -- python bench.py
    """
    from wanscope.ncu.capture import capture

    if kernel_regex:
        try:
            re.compile(kernel_regex)
        except re.error as e:
            raise UsageError(f"--kernel {kernel_regex!r} is not a regular expression: {e}") from None
    files = capture(list(command), Path(output), kernel_regex, launch_skip, launch_count, ncu_path)
    click.echo(f"wrote {files.report}, {files.details_csv}, {files.raw_csv}", err=True)
    try:
        report = read_report(files.report)
    except InputError:  # ncu-report not installed: the raw page holds the same metrics
        report = read_report(files.raw_csv)
    emit([diagnose(k) for k in report.kernels], str(files.report), fmt, report.warnings)
