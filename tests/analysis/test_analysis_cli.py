"""The analysis commands end to end: analyze (default trace, JSON, --db), query, schema,
a reader closing the pipe, and that the analysis side never imports torch."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_context import run_main as run_cli
from shared_fixtures import HANG_S, REPO, shared_fixture

H200 = "kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz"
EMBEDDED = REPO / "src" / "wanscope" / "data" / "h200_diffusers_wan21_1p3b_eager_forward.json.gz"


def test_analyze_default_names_the_embedded_trace():
    r = run_cli("analyze")
    assert r.returncode == 0, r.stderr
    assert "h200_diffusers_wan21_1p3b_eager_forward.json.gz" in r.stdout
    assert "embedded default" in r.stdout
    assert "99.25%" in r.stdout


def test_analyze_json_layout():
    r = run_cli("analyze", "--format", "json", "--top", "3")
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 4
    (d,) = doc["devices"]
    assert set(d) >= {
        "rank",
        "device",
        "window_ns",
        "busy_ns",
        "utilization_pct",
        "kernel_count",
        "kernel_time_ns",
        "top_kernels",
        "categories",
        "gaps",
    }
    assert [k["name"] for k in d["top_kernels"]][-1] == "other" and len(d["top_kernels"]) == 4
    assert set(d["top_kernels"][0]) == {"name", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "pct"}
    # integer ns like every time: 353,335,184 ns / 60 launches = 5,888,919.73 -> 5,888,920
    assert (d["top_kernels"][0]["total_ns"], d["top_kernels"][0]["mean_ns"]) == (353_335_184, 5_888_920)
    assert all(type(k["mean_ns"]) is int for k in d["top_kernels"])
    assert set(d["gaps"]) == {"count", "total_ns", "histogram", "largest"}
    assert len(d["gaps"]["largest"]) == 3
    assert list(d["gaps"]["histogram"]) == ["<1us", "1-10us", "10-100us", "0.1-1ms", ">=1ms"]
    assert set(doc["syncs"][0]) == {"kind", "rank", "api", "op", "frame", "start_ns", "wait_ns", "gpu_idle_after_ns"}


def test_min_gap_filter():
    doc = json.loads(run_cli("analyze", "--format", "json", "--min-gap-ns", "100000").stdout)
    g = doc["devices"][0]["gaps"]
    assert g["count"] == 5 and g["largest"][0]["dur_ns"] == 205_663


def test_db_then_query_and_analyze_the_database(tmp_path):
    trace = shared_fixture(H200)
    db = tmp_path / "h200.duckdb"
    assert run_cli("analyze", trace, "--db", db, "--format", "json").returncode == 0
    assert db.exists() and not list(tmp_path.glob("*.tmp-*"))
    r = run_cli("query", db, "SELECT count(*) AS n, sum(dur_ns) AS t FROM kernels", "--format", "json")
    assert json.loads(r.stdout) == [{"n": 1896, "t": 606202235}]
    r = run_cli("query", trace, "SELECT count(*) FROM memops", "--format", "csv")
    assert r.stdout.splitlines() == ["count_star()", "301"]
    doc = json.loads(run_cli("analyze", db, "--format", "json").stdout)
    assert doc["devices"][0]["busy_ns"] == 606_512_150


def test_query_sql_error_is_one_line():
    r = run_cli("query", shared_fixture(H200), "SELECT nope FROM kernels")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "SQL error" in r.stderr


def test_schema_lists_every_table_with_units():
    rows = json.loads(run_cli("schema", "--format", "json").stdout)
    tables = {r["table"] for r in rows}
    assert {"kernels", "memops", "api_calls", "cpu_ops", "steps", "devices", "meta"} <= tables
    units = {(r["table"], r["column"]): r["unit"] for r in rows}
    assert units[("kernels", "start_ns")] == "ns" and units[("memops", "bytes")] == "bytes"


def test_analyze_never_imports_torch():
    code = (
        "import sys; from wanscope.cli import main; main(['analyze', '--format', 'json']); "
        "sys.stderr.write('TORCH_LOADED=%s' % ('torch' in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "TORCH_LOADED=False" in r.stderr


def test_a_profile_folder_analyzes_its_traces_and_passes_over_its_report(tmp_path):
    data = Path(__file__).resolve().parents[1] / "data"
    shutil.copy(data / "h200_wan21_1p3b_profile_step2.json.gz", tmp_path / "trace.json.gz")
    shutil.copy(data / "h200_wan21_1p3b_profile_report.json", tmp_path / "report.json")
    r = run_cli("analyze", tmp_path, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s["path"] for s in doc["sources"]] == [str(tmp_path / "trace.json.gz")]
    assert doc["devices"][0]["kernel_count"] == 4_048


def test_a_random_weights_trace_says_so_when_analyzed_again():
    trace = Path(__file__).resolve().parents[1] / "data" / "h200_wan21_1p3b_profile_step2.json.gz"
    doc = json.loads(run_cli("analyze", trace, "--format", "json").stdout)
    assert doc["notes"][0] == "RANDOM WEIGHTS (no checkpoint): timing/profiling run, not a real video"


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "--top", "300"],  # table (rich), 0.42 MB: a pipe holds 64 KB
        ["analyze", "--top", "300", "--format", "json"],  # 0.55 MB
        ["query", "-", "SELECT * FROM cpu_ops", "--format", "csv"],
        ["query", "-", "SELECT * FROM cpu_ops", "--format", "json"],
        ["query", "-", "SELECT * FROM cpu_ops LIMIT 1000"],  # 0.24 MB
    ],
)
def test_a_closed_pipe_ends_quietly_with_exit_0(args):
    """``wanscope ... | head -1``: the reader leaves after one line, output far larger than a
    pipe's buffer is still being written."""
    args = [str(EMBEDDED) if a == "-" else a for a in args]
    p = subprocess.Popen([sys.executable, "-m", "wanscope", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=HANG_S) == 0, err.decode()
    assert first and err == b""


def test_a_broken_pipe_that_is_not_stdout_is_not_hidden():
    code = (
        "import click\nfrom wanscope import cli\n@click.command()\ndef boom():\n    raise BrokenPipeError\n"
        "cli.COMMANDS['boom'] = '__main__:boom'\ncli.main(['boom'])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 1 and "BrokenPipeError" in r.stderr


def test_every_option_of_the_trace_commands_has_help():
    import click

    from wanscope.cli import cli

    ctx = click.Context(cli)
    missing = [
        (name, p.opts[0])
        for name in ("analyze", "query", "schema", "report", "diff", "stats")
        for p in cli.get_command(ctx, name).params
        if isinstance(p, click.Option) and not p.hidden and not p.help
    ]
    assert missing == []
    r = run_cli("report", "--help")
    assert "Kernels listed per device before the 'other' row" in " ".join(r.stdout.split())


def test_the_readme_shows_how_to_find_the_embedded_trace():
    code = "from wanscope.data import default_trace; print(default_trace())"
    assert f'`.venv/bin/python -c "{code}"`' in (REPO / "README.md").read_text()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    path = Path(r.stdout.strip())
    assert path.name == "h200_diffusers_wan21_1p3b_eager_forward.json.gz" and path.is_file()
    assert f"trace: {path} (embedded default" in run_cli("analyze").stdout.splitlines()[0]
