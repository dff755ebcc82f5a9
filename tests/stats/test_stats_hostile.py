"""Hostile inputs to ``wanscope stats`` (and the Nsight Systems ingest every command
shares): SQLite stores whatever a writer gives it, so a damaged export can hold text,
reals, blobs or absurd integers where nsys writes integers. Records with unusable times are
counted under ``warnings``; values nsys never writes are one line naming the file; huge
option values work."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

import pytest
from hostile_cli import EMBEDDED, assert_one_line_error, run_cli
from shared_fixtures import shared_fixture

EXPORT = "nsys/nsightful_power_iteration__baseline.sqlite"


def mutated(tmp_path, *statements) -> str:
    path = tmp_path / "export.sqlite"
    shutil.copy(shared_fixture(EXPORT), path)
    os.chmod(path, 0o644)
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()
    return path


def analyze_json(path) -> dict:
    r = run_cli("analyze", path, "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def clean_warnings():
    return sum(analyze_json(shared_fixture(EXPORT))["warnings"].values())


@pytest.mark.parametrize(
    "table, where, report",
    [
        ("CUPTI_ACTIVITY_KIND_KERNEL", "rowid % 3 = 0", "cuda_gpu_kern_sum"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "rowid % 5 = 0", "cuda_api_sum"),
        ("NVTX_EVENTS", "rowid % 2 = 0", "nvtx_sum"),
    ],
)
@pytest.mark.parametrize(
    "values",
    [
        '"end" = 9223372036854775807, start = -9223372036854775807',  # end - start beyond 64 bits
        "start = 'abc'",
        "start = 1.5e300",
    ],
)
def test_records_with_unusable_times_are_counted(tmp_path, clean_warnings, table, where, report, values):
    bad = mutated(tmp_path, f"UPDATE {table} SET {values} WHERE {where}")
    assert sum(analyze_json(bad)["warnings"].values()) > clean_warnings
    r = run_cli("stats", bad, "--report", report, "--format", "csv")
    assert r.returncode == 0 and "Traceback" not in r.stderr, (report, r.stderr[-3000:])


def test_names_missing_from_string_ids(tmp_path):
    """Kernels whose name id is not in StringIds: counted and excluded, every command runs."""
    bad = mutated(
        tmp_path,
        "DELETE FROM StringIds WHERE id IN (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0)",
    )
    doc = analyze_json(bad)
    assert doc["warnings"].get("malformed_event", 0) > 0
    for args in (
        ["analyze", bad],
        ["report", bad, "--out", tmp_path / "r"],
        ["diff", bad, bad],
        ["stats", bad, "--report", "cuda_gpu_kern_sum"],
    ):
        r = run_cli(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])


@pytest.mark.parametrize(
    "statement, words",
    [
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1.5e300 WHERE rowid % 2 = 0", ["corrupt"]),
        ("UPDATE StringIds SET value = X'FFFE00'", ["corrupt"]),
        ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN demangledName", ["demangledName"]),
    ],
)
def test_values_nsys_never_writes(tmp_path, statement, words):
    bad = mutated(tmp_path, statement)
    for args in (["analyze", bad], ["stats", bad, "--report", "cuda_gpu_kern_sum"]):
        assert_one_line_error(run_cli(*args), bad, *words)


def test_corrupt_page_in_the_middle(tmp_path):
    data = bytearray(shared_fixture(EXPORT).read_bytes())
    mid = len(data) // 2
    data[mid : mid + 8192] = os.urandom(8192)
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(bytes(data))
    assert_one_line_error(run_cli("stats", bad, "--report", "cuda_gpu_kern_sum"), bad)


@pytest.mark.parametrize(
    "args",
    [
        ["--report", "gpu_gaps", "--gap-ms", "0", "--rows", "99999999999999999999999"],
        ["--report", "gpu_time_util", "--rows", "99999999999999999999999"],
        ["--report", "gpu_gaps", "--gap-ms", "99999999999999999999999"],
        ["--report", "gpu_time_util", "--threshold", "99999999999999999999999"],
    ],
)
def test_huge_option_values(args):
    # an export whose rules have rows to limit (DuckDB checks LIMIT only then)
    r = run_cli(
        "stats", shared_fixture("nsys/fuser_64ee035dc_report1_h200_test_matmul.sqlite"), *args, "--format", "csv"
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]


@pytest.mark.parametrize(
    "args, word",
    [
        (["--report", "bogus"], "--report"),
        (["--report", "gpu_time_util", "--chunks", "0"], "--chunks"),
        (["--report", "gpu_gaps", "--rows", "-1"], "--rows"),
        (["--report", "cuda_gpu_kern_sum", "--rows", "5"], "--rows"),
    ],
)
def test_bad_options(args, word):
    assert_one_line_error(run_cli("stats", EMBEDDED, *args), word)


def test_fifo(tmp_path):
    fifo = tmp_path / "export.sqlite"
    os.mkfifo(fifo)
    assert_one_line_error(run_cli("stats", fifo, "--report", "cuda_gpu_kern_sum"), fifo, "not a regular file")
