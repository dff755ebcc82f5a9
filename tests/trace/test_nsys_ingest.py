"""Nsight Systems ingest: the canonical tables hold what the exports hold."""

from __future__ import annotations

import csv
import json
import sqlite3

import duckdb
import pytest
from shared_fixtures import shared_fixture

from wanscope.trace import load, nsys, open_traces

GOLDEN = "nsys/expected_nsys2023.4.4"
ALL = [
    "fuser_64ee035dc_report1_h200_test_matmul",
    "mordred_ad27a34_report1_2021",
    "nsightful_power_iteration__baseline",
    "nsysai_h100_2gpu_1s_wan21_t2v",
    "nsysai_mfu_2gpu_before",
]


def ingest(fixture: str, source_id: int = 0, con=None) -> duckdb.DuckDBPyConnection:
    con = con or duckdb.connect()
    if con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'kernels'").fetchall()[0][0] == 0:
        con.execute(load.schema_sql())
    nsys.ingest(con, shared_fixture(f"nsys/{fixture}.sqlite"), source_id)
    return con


def one(con, sql, params=None):
    return con.execute(sql, params or []).fetchall()[0]


@pytest.mark.parametrize("fixture", [f for f in ALL if not f.startswith("nsysai_h100")])
def test_kernel_count_and_time_equal_nsys_kern_sum(fixture):
    rows = list(csv.DictReader(open(shared_fixture(f"{GOLDEN}/{fixture}/cuda_gpu_kern_sum.csv"))))
    want = (sum(int(r["Instances"]) for r in rows), sum(int(r["Total Time (ns)"]) for r in rows))
    assert one(ingest(fixture), "SELECT count(*), sum(dur_ns) FROM kernels") == want


def test_kernel_totals_without_golden_output_match_plain_sql():
    # nsys 2023.4.4 left no output for this export (schema 3.25.0): compare with the raw table.
    path = shared_fixture("nsys/nsysai_h100_2gpu_1s_wan21_t2v.sqlite")
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    want = raw.execute('SELECT count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    assert want == (3442, 44829522)
    assert one(ingest("nsysai_h100_2gpu_1s_wan21_t2v"), "SELECT count(*), sum(dur_ns) FROM kernels") == want


def test_two_processes_get_ranks_by_pid_and_launches_join_per_process():
    con = ingest("nsysai_mfu_2gpu_before")
    assert json.loads(one(con, "SELECT value FROM meta WHERE key = 'ranks'")[0]) == {"144": 0, "145": 1}
    assert con.execute("SELECT rank, pid, device, count(*) FROM kernels GROUP BY ALL ORDER BY 1").fetchall() == [
        (0, 144, 0, 1993),
        (1, 145, 1, 2017),
    ]
    assert one(con, "SELECT rank FROM sources") == (0,)
    # Correlation ids collide across the two processes: joining on them alone doubles launches.
    per_corr = one(con, "SELECT count(*) FROM kernels k JOIN api_calls a ON a.correlation = k.correlation")[0]
    per_process = con.execute(
        """SELECT count(*), count(DISTINCT (k.rank, k.correlation)) FROM kernels k
           JOIN api_calls a ON a.rank = k.rank AND a.pid = k.pid AND a.correlation = k.correlation"""
    ).fetchall()[0]
    assert per_corr == 4280
    assert per_process == (3986, 3986)  # one launch per kernel; 24 launched before the 300 ms window


def test_second_file_continues_the_ranks():
    con = ingest("nsysai_mfu_2gpu_before")
    ingest("fuser_64ee035dc_report1_h200_test_matmul", source_id=1, con=con)
    assert con.execute("SELECT source_id, rank FROM sources ORDER BY 1").fetchall() == [(0, 0), (1, 2)]
    assert one(con, "SELECT DISTINCT rank FROM kernels WHERE pid = 30156") == (2,)


def test_kernel_launch_geometry_and_shared_memory():
    con = ingest("fuser_64ee035dc_report1_h200_test_matmul")
    # nsys cuda_gpu_trace: GrdX..Z 8,16,1; BlkX..Z 128,3,1; Reg/Trd 156; DymSMem 0.115 MB, StcSMem 0.
    row = one(
        con,
        "SELECT grid, block, registers_per_thread, shared_mem_bytes, stream, correlation FROM kernels WHERE correlation = 247",
    )
    assert row[:3] == ([8, 16, 1], [128, 3, 1], 156)
    assert round(row[3] / 1e6, 3) == 0.115
    assert row[4:] == (7, 247)


def test_api_names_strip_only_long_version_suffixes():
    con = ingest("fuser_64ee035dc_report1_h200_test_matmul")
    names = dict(con.execute("SELECT DISTINCT raw_name, name FROM api_calls").fetchall())
    assert names["cudaLaunchKernel_v7000"] == "cudaLaunchKernel"
    assert names["cudaGetDeviceProperties_v2_v12000"] == "cudaGetDeviceProperties_v2"
    assert names["cuGetProcAddress_v2"] == "cuGetProcAddress_v2"
    kinds = dict(con.execute("SELECT DISTINCT name, kind FROM api_calls").fetchall())
    assert (kinds["cudaLaunchKernel"], kinds["cuLaunchKernelEx"]) == ("runtime", "driver")
    assert nsys.api_name("cudaStreamIsCapturing_v10000") == "cudaStreamIsCapturing"


def test_memops_syncs_devices_and_overhead():
    con = ingest("fuser_64ee035dc_report1_h200_test_matmul")
    assert con.execute("SELECT kind, copy_kind, bytes, name, dur_ns FROM memops ORDER BY kind").fetchall() == [
        ("memcpy", "DtoH", 1, "[CUDA memcpy Device-to-Host]", 1632),
        ("memset", None, 4, "[CUDA memset]", 1088),
    ]
    assert con.execute("SELECT kind, stream, pid FROM cuda_syncs").fetchall() == [("stream", 7, 30156)]
    assert con.execute("SELECT * FROM devices").fetchall() == [
        (0, 0, "NVIDIA H200", "9.0", 132, 150137864192, None, 4916.736)
    ]
    assert one(con, "SELECT count(*) FROM profiler_overhead") == (24,)
    assert con.execute("SELECT pid, device, context FROM gpu_contexts").fetchall() == [(30156, 0, 1)]


def test_2021_export_without_metadata_or_enums():
    con = ingest("mordred_ad27a34_report1_2021")
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert meta["export_meta_table"] == "none"
    assert meta["memcpy_kind_labels"].startswith("documented CUPTI enum")
    assert con.execute("SELECT kind, copy_kind, count(*) FROM memops GROUP BY ALL ORDER BY ALL").fetchall() == [
        ("memcpy", "DtoH", 24),
        ("memcpy", "HtoD", 164),
        ("memset", None, 16),
    ]
    # Kinds from the waiting call: this export's syncType says 1 for cudaDeviceSynchronize.
    assert con.execute("SELECT kind, count(*) FROM cuda_syncs GROUP BY ALL ORDER BY ALL").fetchall() == [
        ("context", 12),
        ("event", 6),
    ]


def test_nvtx_ranges_with_domains():
    con = ingest("nsightful_power_iteration__baseline")
    assert one(con, "SELECT count(*), count(DISTINCT id) FROM cpu_ops WHERE kind = 'nvtx'") == (786, 786)
    assert con.execute(
        "SELECT domain, style, count(*) FROM nvtx_ranges GROUP BY ALL ORDER BY ALL NULLS FIRST"
    ).fetchall() == [(None, "PushPop", 221), ("CCCL", "PushPop", 565)]
    # The domain-creation marker (eventType 75, negative start) is not a range.
    assert one(con, "SELECT min(start_ns) FROM cpu_ops")[0] > 0


def test_open_traces_links_and_analyzes_an_export():
    con = open_traces([shared_fixture("nsys/nsysai_mfu_2gpu_before.sqlite")])
    assert one(con, "SELECT count(*), count(parent_id) > 0, max(depth) > 0 FROM cpu_ops") == (19118, True, True)
    assert one(con, "SELECT count(*), sum(dur_ns) FROM kernels") == (4010, 535200650)


def test_demangled_or_short_kernel_names():
    con = duckdb.connect()
    con.execute(load.schema_sql())
    nsys.ingest(con, shared_fixture("nsys/fuser_64ee035dc_report1_h200_test_matmul.sqlite"), 0, kernel_names="short")
    names = {r[0] for r in con.execute("SELECT name FROM kernels").fetchall()}
    assert "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT" in names
    assert not any("(" in n for n in names)
