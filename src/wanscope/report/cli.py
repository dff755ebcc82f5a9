"""``wanscope report``: the HTML/JSON report for any trace."""

from __future__ import annotations

from pathlib import Path

import click

from wanscope.clitools import top_option


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for report.json and report.html.",
)
@top_option("Kernels listed per device before the 'other' row; also the largest gaps listed.")
@click.option("--step-range", metavar="A:B", help="Only steps A <= step < B (either end may be omitted).")
def report(traces, out_dir, top, step_range):
    """Write report.json (the analyze JSON) and report.html (a self-contained page: per device
    the timeline with links to its largest gaps, categories, top kernels and the stacks behind
    the gaps; steps, host self time, launch queue, host-time icicle, memory, rooflines, syncs)
    for TRACES."""
    from wanscope.analysis.scope import Scope, parse_step_range
    from wanscope.analysis.summary import analyze
    from wanscope.report.text import render_analysis
    from wanscope.report.write import write_report
    from wanscope.trace import open_traces
    from wanscope.trace.load import expand

    scope = Scope(parse_step_range(step_range))
    con = open_traces(traces)
    result = analyze(con, top=top, scope=scope)
    title = "wanscope report: " + ", ".join(Path(t).name for t in traces)
    json_path, html_path = write_report(con, result, out_dir, title, scope, inputs=expand(traces))
    render_analysis(result)
    click.echo(f"wrote {json_path} and {html_path}")
