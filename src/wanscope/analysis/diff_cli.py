"""``wanscope diff``: compare two traces (eager vs compiled, before vs after a change)."""

from __future__ import annotations

import math
from pathlib import Path

import click

from wanscope.clitools import dumps_json, format_option, top_option
from wanscope.errors import UsageError

HTML_SUFFIXES = (".html", ".htm")

DIFF_HELP = """Compare two GPU traces: time (mean step GPU time when both have steps; mean
step CPU time when neither has GPU activity; else the window), busy time, utilization, kernel launches, time and share by category,
attention's share before and after, kernels that appeared, disappeared or changed most,
the aten ops and Python frames whose self time changed most (with the kernels each launched),
and the fused Triton kernels of a torch.compile run with the ops fused into each.

BASE and NEW: each a Kineto .json/.json.gz file, an Nsight Systems .sqlite export, a
directory of rank files or a database kept with `analyze --db` (mixed formats are fine).

All times are integer nanoseconds. JSON fields are documented in docs/json.md ("diff JSON").
With --fail-if-slower PCT the exit code is 1 when NEW's time is more than PCT percent
above BASE's, and 2 when the two times cannot be compared (say, one trace has GPU activity
and the other none)."""


@click.command(help=DIFF_HELP)
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@format_option("table", "json", "html")
@top_option("Kernels listed as appeared, disappeared and top changes.")
@click.option(
    "--fail-if-slower",
    "fail_pct",
    type=click.FloatRange(0),
    metavar="PCT",
    help="Exit with code 1 when NEW's time is more than PCT percent above BASE's (for CI); "
    "2 when the times cannot be compared.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File the HTML page is written to (required with --format html; "
    "an --out ending in .html implies --format html).",
)
def diff(base, new, fmt, top, fail_pct, out):
    from click.core import ParameterSource

    from wanscope.analysis.diff import BASES
    from wanscope.analysis.diff import diff as run
    from wanscope.trace import open_traces

    fmt_given = click.get_current_context().get_parameter_source("fmt") is not ParameterSource.DEFAULT
    if out is not None and not fmt_given and out.suffix.lower() in HTML_SUFFIXES:
        fmt = "html"
    if fmt == "html" and out is None:
        raise UsageError("--format html needs --out FILE")
    if fmt != "html" and out is not None:
        raise UsageError("--out is for --format html (implied when --out ends in .html and --format is not given)")
    if fail_pct is not None and math.isnan(fail_pct):  # FloatRange lets NaN through; it never fires
        raise UsageError("--fail-if-slower nan: expected a number of percent, e.g. 5")
    result = run(open_traces([base]), open_traces([new]), str(base), str(new), top=top)
    if fmt == "json":
        click.echo(dumps_json(result))
        for w in result["warnings"]:  # the table shows them; JSON readers may not look
            click.echo(f"wanscope: warning: {w}", err=True)
    else:
        from wanscope.report.diff_text import render_diff

        render_diff(result)
    if fmt == "html":
        from wanscope.report.diff_html import render_diff_html
        from wanscope.report.write import make_dir, remove_dirs, write_atomic
        from wanscope.trace.load import expand

        page = render_diff_html(result, f"wanscope diff: {Path(base).name} vs {Path(new).name}")
        created = make_dir(out.parent)
        try:
            write_atomic(out, page, inputs=expand([base, new]))
        except BaseException:
            remove_dirs(created)
            raise
        click.echo(f"wrote {out}")
    if fail_pct is not None:
        change = result["delta"]["time_change_pct"]
        if change is None:
            raise UsageError(f"--fail-if-slower: the times cannot be compared: {_incomparable(result)}")
        if change > fail_pct:
            click.echo(
                f"wanscope: NEW is {change:.2f}% slower than BASE ({BASES[result['time_basis']]}), "
                f"more than --fail-if-slower {fail_pct:g}%",
                err=True,
            )
            click.get_current_context().exit(1)


def _incomparable(result: dict) -> str:
    """Why the diff has no time change (``delta.time_change_pct`` None), one clause."""
    gpu = [side.upper() for side in ("base", "new") if result[side]["devices"]]
    if len(gpu) == 1:
        other = "NEW" if gpu[0] == "BASE" else "BASE"
        return f"{gpu[0]} has GPU activity and {other} none (a GPU time does not compare with a CPU one)"
    if not gpu:
        without = [side.upper() for side in ("base", "new") if not result[side]["cpu_steps"]]
        if len(without) == 2:
            return "neither trace has GPU activity or steps"
        return f"neither trace has GPU activity and {without[0]} has no steps whose CPU time could compare instead"
    return "BASE's time is 0"
