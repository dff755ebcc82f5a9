"""CLI commands over ingested traces: ``analyze``, ``query``, ``schema``."""

from __future__ import annotations

import re

import click
import duckdb

from wanscope.clitools import TABLE_ROW_LIMIT, dumps_json, format_option, top_option, write_batches, write_rows
from wanscope.errors import UsageError

ANALYZE_HELP = """Analyze GPU traces: utilization, time by category, top kernels, idle gaps
with the CPU call stack behind the largest, host-device syncs and per-step times, per
(rank, device); host time and self time by op per thread, the Python frames with most self
time, launch overhead and the launch queue; peak memory from PyTorch's memory events;
rooflines of the ops with recorded shapes (FLOPs and bytes against the GPU's datasheet peaks,
or measured ones given below), furthest below their roof first.

TRACE: Kineto .json/.json.gz files, Nsight Systems .sqlite exports, a directory of rank
files, or a database kept with --db. With no TRACE, the H200 Wan2.1 trace embedded in
the package is analyzed.

All times are integer nanoseconds. JSON fields are documented in docs/json.md
("analyze JSON")."""


def _open(traces, db):
    from wanscope.trace import open_traces

    return open_traces(traces, db=db)


@click.command(help=ANALYZE_HELP)
@click.argument("traces", nargs=-1, type=click.Path())
@format_option("table", "json")
@top_option("Kernels listed per device before the 'other' row; also the largest gaps and roofline rows listed.")
@click.option("--step-range", metavar="A:B", help="Only steps A <= step < B (either end may be omitted).")
@click.option(
    "--min-gap-ns",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Ignore idle gaps shorter than this (ns).",
)
@click.option(
    "--peak-tflops",
    type=click.FloatRange(0, min_open=True),
    help="Measured dense BF16/FP16 tensor-core peak (TFLOP/s) for the rooflines, in place of the datasheet's.",
)
@click.option(
    "--peak-fp32-tflops",
    type=click.FloatRange(0, min_open=True),
    help="Measured FP32 (CUDA-core) peak (TFLOP/s): the roof of elementwise ops, norms and FP32 matmuls.",
)
@click.option(
    "--peak-bandwidth-gbps",
    type=click.FloatRange(0, min_open=True),
    help="Measured DRAM bandwidth (GB/s) for the rooflines, in place of the datasheet's.",
)
@click.option("--db", type=click.Path(dir_okay=False), help="Keep the ingested database in this file.")
def analyze(traces, fmt, top, step_range, min_gap_ns, peak_tflops, peak_fp32_tflops, peak_bandwidth_gbps, db):
    from wanscope.analysis.scope import Scope, parse_step_range
    from wanscope.analysis.summary import analyze as run

    used = None
    if not traces:
        from wanscope.data import default_trace

        traces = (str(default_trace()),)
        used = f"{traces[0]} (embedded default: Wan2.1 1.3B DiT forward on an H200, diffusers, random weights)"
    scope = Scope(parse_step_range(step_range))
    con = _open(traces, db)
    result = run(
        con,
        top=top,
        scope=scope,
        min_gap_ns=min_gap_ns,
        peak_tflops=peak_tflops,
        peak_fp32_tflops=peak_fp32_tflops,
        peak_bandwidth_gbps=peak_bandwidth_gbps,
    )
    if fmt == "json":
        click.echo(dumps_json(result))
    else:
        from wanscope.report.text import render_analysis

        render_analysis(result, used=used)


# The SQL of `query` sees the trace's tables and nothing else: no files (COPY ... TO,
# read_csv('/etc/passwd'), ATTACH, EXPORT), no network or extensions (INSTALL, LOAD),
# and no setting can be changed back (lock_configuration). Set after ingest, which reads
# the trace itself; spilling to DuckDB's own temporary directory still works.
SANDBOX_SQL = (
    "SET enable_external_access = false",
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    "SET lock_configuration = true",
)
FETCH_ROWS = 10_000


@click.command()
@click.argument("trace", type=click.Path())
@click.argument("sql")
@format_option("table", "csv", "json")
def query(trace, sql, fmt):
    """Run SQL on the canonical tables of TRACE and the SQL macros the analyses build
    on, such as gpu_activity() and busy_islands() (see `wanscope schema`).

    TRACE is a trace file, a directory of rank files or a database kept with --db.
    The SQL sees those tables and macros only: no files, network, extensions or
    settings. Several statements run in order; the last one's rows are printed. JSON
    output is a list of row objects."""
    con = _open([trace], None)
    for statement in SANDBOX_SQL:
        con.execute(statement)
    try:
        cur = con.execute(sql)
        if cur is None:
            raise UsageError("the SQL holds no statement")
        columns = [d[0] for d in cur.description] if cur.description else []
        first = cur.fetchmany(TABLE_ROW_LIMIT + 1 if fmt == "table" else FETCH_ROWS) if columns else []
    except duckdb.Error as e:
        raise UsageError(f"SQL error: {str(e).splitlines()[0]}") from None
    if fmt == "table" and len(first) > TABLE_ROW_LIMIT:
        raise UsageError(
            f"the result has more than {TABLE_ROW_LIMIT:,} rows, too many for a table; "
            "use --format csv or --format json"
        )

    def batches():  # the table's first batch holds every row; CSV and JSON stream
        yield first
        while columns and fmt != "table":
            try:
                rows = cur.fetchmany(FETCH_ROWS)
            except duckdb.Error as e:
                raise UsageError(f"SQL error: {str(e).splitlines()[0]}") from None
            if not rows:
                return
            yield rows

    write_batches(columns, batches(), fmt)


def schema_rows() -> list[tuple[str, str, str, str, str]]:
    """(table, column, type, unit, description) for every column of ``schema.sql``, then for
    every output column of the table macros of ``analysis/stdlib.sql`` (``table`` is the call,
    e.g. ``busy_islands(step_from, step_to)``)."""
    from wanscope.analysis.stdlib import macro_rows
    from wanscope.trace.load import schema_sql

    rows, table = [], None
    for line in schema_sql().splitlines():
        m = re.match(r"CREATE TABLE (\w+)", line)
        if m:
            table = m.group(1)
            continue
        m = re.match(r"\s+(\w+) ([A-Z\[\]0-9]+),?\s+-- ([^:]+): (.*)", line)
        if m and table:
            rows.append((table, m.group(1), m.group(2), m.group(3).strip(), m.group(4).strip()))
    return rows + macro_rows()


@click.command()
@format_option("table", "csv", "json")
def schema(fmt):
    """Print every table and column of the canonical trace schema with its unit, then the
    columns of the SQL macros the analyses build on (gpu_activity(), busy_islands(), ...)."""
    write_rows(["table", "column", "type", "unit", "description"], schema_rows(), fmt)
