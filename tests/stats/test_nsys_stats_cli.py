"""`wanscope stats` end to end: CSV as nsys writes it, JSON, options."""

from __future__ import annotations

import json

from cli_context import run_main as run_cli
from shared_fixtures import shared_fixture


def test_csv_matches_nsys_file_for_gaps():
    fixture = "nsysai_mfu_2gpu_before"
    result = run_cli(
        "stats", shared_fixture(f"nsys/{fixture}.sqlite"), "--report", "gpu_gaps", "--gap-ms", "1", "--format", "csv"
    )
    assert result.returncode == 0, result.stderr
    golden = shared_fixture(f"nsys/expected_nsys2023.4.4/{fixture}/gpu_gaps_gap=1.csv").read_text()
    assert result.stdout == golden.replace("\r\n", "\n")


def test_json_rows_and_default_gap():
    path = shared_fixture("nsys/mordred_ad27a34_report1_2021.sqlite")
    rows = json.loads(run_cli("stats", path, "--report", "gpu_gaps", "--format", "json").stdout)
    # NVIDIA's default 500 ms keeps the two longest of the 13 gaps over 1 ms.
    assert [(r["Duration (ns)"], r["Start (ns)"]) for r in rows] == [(4661617146, 1632085273), (1244871654, 257261539)]


def test_time_util_chunks_and_threshold():
    path = shared_fixture("nsys/nsysai_mfu_2gpu_before.sqlite")
    out = run_cli(
        "stats", path, "--report", "gpu_time_util", "--threshold", "101", "--chunks", "1", "--format", "csv"
    ).stdout
    # One chunk per process and device: its span, in use = summed operation time over it.
    assert out.splitlines()[1:] == [
        "1,89.5,298661551,60111513113,145,1,2",
        "2,91.3,299848812,60111541307,144,0,1",
    ]


def test_gpu_time_split():
    out = run_cli(
        "stats", shared_fixture("nsys/nsysai_mfu_2gpu_before.sqlite"), "--report", "gpu_time_split", "--format", "json"
    ).stdout
    assert json.loads(out) == [
        {"Category": "Kernels", "Time (%)": 98.9, "Total Time (ns)": 535200650, "Count": 4010},
        {"Category": "Memory operations", "Time (%)": 1.1, "Total Time (ns)": 5905495, "Count": 1289},
    ]
