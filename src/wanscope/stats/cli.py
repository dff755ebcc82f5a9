"""``wanscope stats``: NVIDIA's ``nsys stats`` reports and ``nsys analyze`` rules."""

from __future__ import annotations

import click

from wanscope.clitools import format_option, write_rows
from wanscope.errors import UsageError
from wanscope.stats.gpu_gaps import DEFAULT_GAP_MS
from wanscope.stats.gpu_time_util import DEFAULT_CHUNKS, DEFAULT_ROWS, DEFAULT_THRESHOLD_PCT
from wanscope.stats.registry import REPORTS, run_report

STATS_HELP = """Print one of NVIDIA's Nsight Systems summaries, computed by wanscope with
NVIDIA's definitions, columns and rounding (the same values `nsys stats` / `nsys analyze`
print for the export).

TRACE: Nsight Systems .sqlite exports (Kineto traces work for the GPU reports too),
a directory of rank files, or a database kept with `analyze --db`.

Reports: cuda_gpu_kern_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum, cuda_api_sum,
nvtx_sum; rules gpu_gaps (--gap-ms, --rows) and gpu_time_util (--threshold, --chunks,
--rows); and gpu_time_split (kernel vs memory-operation time, ours). Times in ns, sizes
in MB (10^6 bytes). docs/nsys.md says where these differ from `analyze`."""

# Which options each rule takes, as keyword arguments of its function.
RULE_OPTIONS = {"gpu_gaps": ("gap_ms", "rows"), "gpu_time_util": ("threshold", "chunks", "rows")}


@click.command(help=STATS_HELP)
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("--report", "report_name", required=True, type=click.Choice(list(REPORTS)), help="Which report.")
@format_option("table", "csv", "json")
@click.option(
    "--gap-ms",
    default=DEFAULT_GAP_MS,
    show_default=True,
    type=click.IntRange(0),
    help="gpu_gaps: report idle gaps longer than this (ms).",
)
@click.option(
    "--threshold",
    default=DEFAULT_THRESHOLD_PCT,
    show_default=True,
    type=click.IntRange(0),
    help="gpu_time_util: report chunks below this GPU in-use percentage.",
)
@click.option(
    "--chunks",
    default=DEFAULT_CHUNKS,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="gpu_time_util: equal-duration chunks per process and device.",
)
@click.option(
    "--rows",
    default=DEFAULT_ROWS,
    show_default=True,
    type=click.IntRange(0),
    help="gpu_gaps, gpu_time_util: at most this many rows (0: all).",
)
@click.pass_context
def stats(ctx, traces, report_name, fmt, gap_ms, threshold, chunks, rows):
    given = {"gap_ms": gap_ms, "threshold": threshold, "chunks": chunks, "rows": rows}
    accepted = RULE_OPTIONS.get(report_name, ())
    for name in given:
        if name not in accepted and ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            raise UsageError(
                f"--{name.replace('_', '-')} applies to {' and '.join(n for n, o in RULE_OPTIONS.items() if name in o)}, not {report_name}"
            )
    from wanscope.trace import open_traces

    con = open_traces(traces)
    report = run_report(con, report_name, **{name: given[name] for name in accepted})
    if not report.rows and report.empty_message:
        click.echo(f"wanscope: {report_name}: {report.empty_message}", err=True)
    write_rows(report.columns, report.rows, fmt)
