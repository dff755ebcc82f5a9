"""`wanscope stats` against NVIDIA's own output (nsys 2023.4.4, fixtures/nsys/expected_nsys2023.4.4):
counts exactly, times exactly in ns (averages, medians and deviations as printed, to 0.1 ns),
sizes as printed (MB to 3 decimals), percentages to 0.1."""

from __future__ import annotations

import csv
import sqlite3

import duckdb
import pytest
from shared_fixtures import shared_fixture

from wanscope.stats import run_report
from wanscope.trace import load, nsys

EXPECTED = "nsys/expected_nsys2023.4.4"
FIXTURES = [
    "fuser_64ee035dc_report1_h200_test_matmul",
    "mordred_ad27a34_report1_2021",
    "nsightful_power_iteration__baseline",
    "nsysai_mfu_2gpu_before",
]
# golden file -> (report, options); gpu_gaps was run with gap=1 (ms).
REPORT_FILES = {
    "cuda_gpu_kern_sum": ("cuda_gpu_kern_sum", {}),
    "cuda_gpu_mem_time_sum": ("cuda_gpu_mem_time_sum", {}),
    "cuda_gpu_mem_size_sum": ("cuda_gpu_mem_size_sum", {}),
    "cuda_api_sum": ("cuda_api_sum", {}),
    "nvtx_sum": ("nvtx_sum", {}),
    "gpu_gaps_gap=1": ("gpu_gaps", {"gap_ms": 1}),
    "gpu_time_util": ("gpu_time_util", {}),
}
# Golden files left empty because nsys skipped the report (see stats_stdout.txt / analyze_stdout.txt).
SKIPPED_BY_NSYS = {
    ("mordred_ad27a34_report1_2021", "cuda_gpu_mem_time_sum"),  # no ENUM_CUDA_MEMCPY_OPER
    ("mordred_ad27a34_report1_2021", "cuda_gpu_mem_size_sum"),
    ("mordred_ad27a34_report1_2021", "nvtx_sum"),  # no NVTX data
    ("nsightful_power_iteration__baseline", "gpu_time_util"),  # no row below the threshold
}
CASES = [(f, g) for f in FIXTURES for g in REPORT_FILES if (f, g) not in SKIPPED_BY_NSYS]

_dbs: dict[str, duckdb.DuckDBPyConnection] = {}


def ingested(fixture: str) -> duckdb.DuckDBPyConnection:
    if fixture not in _dbs:
        con = duckdb.connect()
        con.execute(load.schema_sql())
        nsys.ingest(con, shared_fixture(f"nsys/{fixture}.sqlite"), 0)
        _dbs[fixture] = con
    return _dbs[fixture]


def equal(column: str, expected: str, got) -> bool:
    if "%" in column:
        return abs(float(expected) - got) <= 0.1 + 1e-9
    if isinstance(got, str) or got is None:
        return expected == ("" if got is None else got)
    return float(expected) == float(got)


@pytest.mark.parametrize("fixture,golden", CASES)
def test_report_equals_nsys(fixture, golden):
    rows = list(csv.reader(open(shared_fixture(f"{EXPECTED}/{fixture}/{golden}.csv"), newline="")))
    assert rows, "golden file is empty: NVIDIA skipped this report"
    name, options = REPORT_FILES[golden]
    report = run_report(ingested(fixture), name, **options)
    assert report.columns == rows[0]
    assert len(report.rows) == len(rows) - 1
    for i, (want, got) in enumerate(zip(rows[1:], report.rows)):
        bad = [(c, w, g) for c, w, g in zip(rows[0], want, got) if not equal(c, w, g)]
        assert not bad, f"row {i}: (column, nsys, ours) {bad}"


def test_gpu_time_util_power_iteration_has_no_low_chunk():
    # nsys wrote no row for it (empty CSV, no "PROCESSED"): no chunk below 50% in use.
    report = run_report(ingested("nsightful_power_iteration__baseline"), "gpu_time_util")
    assert report.rows == []
    assert "below 50%" in report.empty_message


def test_memory_reports_for_2021_export_from_documented_enums():
    """nsys skips these for want of ENUM_CUDA_MEMCPY_OPER; ours label CUPTI's documented
    copyKind values. Checked against plain SQL on the export."""
    path = shared_fixture("nsys/mordred_ad27a34_report1_2021.sqlite")
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    want = {
        {1: "[CUDA memcpy Host-to-Device]", 2: "[CUDA memcpy Device-to-Host]", 8: "[CUDA memcpy Device-to-Device]"}[
            kind
        ]: (n, total, size)
        for kind, n, total, size in raw.execute(
            'SELECT copyKind, count(*), sum("end" - start), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1'
        )
    }
    want["[CUDA memset]"] = raw.execute(
        'SELECT count(*), sum("end" - start), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMSET'
    ).fetchone()
    con = ingested("mordred_ad27a34_report1_2021")
    by_time = {r[8]: (r[2], r[1]) for r in run_report(con, "cuda_gpu_mem_time_sum").rows}
    by_size = {r[7]: (r[1], r[0]) for r in run_report(con, "cuda_gpu_mem_size_sum").rows}
    assert by_time == {op: (n, total) for op, (n, total, _) in want.items()}
    assert by_size == {op: (n, round(size / 1e6, 3)) for op, (n, _, size) in want.items()}
    assert by_time["[CUDA memcpy Host-to-Device]"] == (164, 100951169)
