"""Malformed inputs: one line naming the file and exit code 2, or an explicit "no data"
line; never a traceback and never a 0% result."""

from __future__ import annotations

import shutil
import sqlite3

import duckdb
import pytest
from cli_context import run_main as run_cli
from shared_fixtures import shared_fixture

from wanscope.errors import InputError
from wanscope.stats import run_report
from wanscope.stats.report import NoDataError
from wanscope.trace import load, nsys

FIXTURE = "nsys/nsightful_power_iteration__baseline.sqlite"


def assert_one_line_error(result, *words):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wanscope: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for w in words:
        assert w in lines[0]


def test_truncated_export(tmp_path):
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(shared_fixture(FIXTURE).read_bytes()[:200_000])
    assert_one_line_error(run_cli("stats", cut, "--report", "cuda_gpu_kern_sum"), str(cut))


def test_database_from_another_tool(tmp_path):
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    assert_one_line_error(
        run_cli("stats", other, "--report", "gpu_time_util"), str(other), "not an Nsight Systems export"
    )


def test_not_a_database(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    assert_one_line_error(run_cli("stats", junk, "--report", "cuda_api_sum"), str(junk))


def test_ingest_raises_input_error(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    con = duckdb.connect()
    con.execute(load.schema_sql())
    with pytest.raises(InputError):
        nsys.ingest(con, junk, 0)


@pytest.fixture
def no_gpu_export(tmp_path):
    """The power-iteration export with its kernel and memcpy tables dropped (NVTX and API calls left)."""
    path = tmp_path / "no_gpu.sqlite"
    shutil.copy(shared_fixture(FIXTURE), path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY")
    con.commit()
    con.close()
    return path


def test_export_without_gpu_tables_says_so(no_gpu_export):
    con = duckdb.connect()
    con.execute(load.schema_sql())
    nsys.ingest(con, no_gpu_export, 0)
    assert dict(con.execute("SELECT key, value FROM meta").fetchall())["gpu_activity"].startswith("none")
    assert con.execute("SELECT count(*) FROM api_calls").fetchall() == [(7417,)]
    for name in ("gpu_time_util", "gpu_gaps", "gpu_time_split"):
        with pytest.raises(NoDataError, match="no GPU activity captured"):
            run_report(con, name)
    with pytest.raises(NoDataError, match="no CUDA kernels"):
        run_report(con, "cuda_gpu_kern_sum")
    assert len(run_report(con, "cuda_api_sum").rows) == 9


def test_cli_without_gpu_tables(no_gpu_export):
    assert_one_line_error(run_cli("stats", no_gpu_export, "--report", "gpu_time_util"), "no GPU activity captured")


def test_rule_option_on_a_summary_report():
    result = run_cli("stats", shared_fixture(FIXTURE), "--report", "nvtx_sum", "--chunks", "10")
    assert_one_line_error(result, "--chunks applies to gpu_time_util")


def test_chunks_out_of_range():
    result = run_cli("stats", shared_fixture(FIXTURE), "--report", "gpu_time_util", "--chunks", "1001")
    assert result.returncode == 2 and "Traceback" not in result.stderr
