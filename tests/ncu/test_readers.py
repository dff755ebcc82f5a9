"""Readers: parsed values equal the file's, in base units, for every ncu layout we ship."""

from __future__ import annotations

import csv
import math

import pytest
from ncu_fixtures import DERIVED, FIXTURES, REPS, fixture, needs_ncu_report

from wanscope.errors import InputError
from wanscope.ncu.model import label_table
from wanscope.ncu.readers import read_csv, read_report
from wanscope.ncu.units import base_unit, parse_value

NSIGHTFUL = FIXTURES / "nsightful_copy_blocked.details.csv"
CUTLASS_DETAILS = DERIVED / "cutlass_panjd123_0667dc2e_report_a100.details.ncu2024.1.1.csv"
CUTLASS_NAMES = DERIVED / "cutlass_panjd123_0667dc2e_report_a100.details.base_names.ncu2024.1.1.csv"
CUTLASS_RAW = DERIVED / "cutlass_panjd123_0667dc2e_report_a100.raw.base.ncu2024.1.1.csv"
ESMM_OLD = DERIVED / "esmm_049ec61_profile_a10g.details.ncu2022.3.0.csv"
ESMM_OLD_RAW = DERIVED / "esmm_049ec61_profile_a10g.raw.ncu2022.3.0.csv"
SGLANG_DETAILS = DERIVED / "sglang_16ab0c94_profile_h800.details.ncu2024.1.1.csv"
SGLANG_NAMES = DERIVED / "sglang_16ab0c94_profile_h800.details.base_names.ncu2024.1.1.csv"


@pytest.mark.parametrize(
    "unit, factor, base",
    [
        ("usecond", 1000, "ns"),
        ("msecond", 1_000_000, "ns"),
        ("nsecond", 1, "ns"),
        ("Kbyte", 1000, "byte"),
        ("Kbyte/block", 1000, "byte/block"),
        ("Gbyte/second", 1e9, "byte/s"),
        ("byte/s", 1, "byte/s"),
        ("cycle/nsecond", 1e9, "hz"),
        ("cycle/second", 1, "hz"),
        ("hz", 1, "hz"),
        ("inst/cycle", 1, "inst/cycle"),
        ("register/thread", 1, "register/thread"),
        ("%", 1, "%"),
    ],
)
def test_base_unit(unit, factor, base):
    f, b = base_unit(unit)
    assert (float(f), b) == (factor, base)


def test_parse_value_specials():
    assert parse_value("4,963,609,951.19", "hz") == (4963609951.19, "hz")
    assert parse_value("11.17", "usecond") == (11170.0, "ns")
    assert parse_value("n/a", "") == (None, "")
    assert math.isnan(parse_value("nan", "%")[0])
    assert parse_value("inf", "%")[0] == math.inf
    assert parse_value("CachePreferNone", "") == ("CachePreferNone", "")


def test_details_recent_ncu_base_units():
    """nsightful (T4, recent ncu): base units hz/ns/byte/s with thousands separators."""
    (k,) = read_report(fixture(NSIGHTFUL)).kernels
    assert (k.id, k.block, k.grid, k.cc) == (0, (256, 1, 1), (1024, 1, 1), "7.5")
    assert k.name.startswith("copy_blocked[v1,")
    assert k.value("gpu__time_duration.sum") == 21058944.0
    assert k.metric("gpu__time_duration.sum").unit == "ns"
    assert k.value("dram__cycles_elapsed.avg.per_second") == 4963609951.19
    assert k.value("dram__bytes.sum.per_second") == 196456177859.63
    assert k.metric("dram__bytes.sum.per_second").unit == "byte/s"
    assert k.value("launch__registers_per_thread") == 32.0
    assert k.value("launch__grid_size") == 1024.0
    assert k.value("launch__func_cache_config") == "CachePreferNone"
    assert len(k.rules) == 11
    hpu = next(r for r in k.rules if r.rule == "HighPipeUtilization")
    assert (hpu.section, hpu.type, hpu.speedup_type, hpu.speedup_pct) == (
        "ComputeWorkloadAnalysis",
        "OPT",
        "local",
        98.86,
    )


def test_details_autoscaled_units_and_nvtx_columns():
    """ncu 2024.1.1 default export: usecond, Kbyte, cycle/nsecond, Gbyte/second; two NVTX
    columns between Host Name and Kernel Name."""
    r = read_report(fixture(CUTLASS_DETAILS))
    assert r.source == "details-csv"
    assert [k.id for k in r.kernels] == [0, 1, 2]
    k = r.kernels[0]
    assert k.name.startswith("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<")
    assert (k.block, k.grid, k.cc) == ((128, 1, 1), (24, 4, 1), "8.0")
    assert k.value("gpu__time_duration.sum") == 11170.0  # "11.17 usecond"
    assert k.value("launch__shared_mem_config_size") == 102400.0  # "102.40 Kbyte"
    assert k.value("launch__shared_mem_per_block_driver") == 1020.0  # "1.02 Kbyte/block": the digits ncu printed
    assert k.value("dram__cycles_elapsed.avg.per_second") == 1.51e9  # "1.51 cycle/nsecond"
    assert k.value("dram__bytes.sum.per_second") == 120.49e9  # "120.49 Gbyte/second"
    assert k.value("launch__waves_per_multiprocessor") == 0.44
    sol = [x for x in k.rules if x.rule == "SOLBottleneck"]
    assert "only 0.4 full waves" in sol[0].description


def test_details_base_names_exact():
    """--print-units base --print-metric-name name: exact integers where the default export rounds."""
    k = read_report(fixture(CUTLASS_NAMES)).kernels[0]
    m = k.metric("gpu__time_duration.sum")
    assert (m.section, m.label, m.unit, m.value) == ("GPU Speed Of Light Throughput", "Duration", "ns", 11168.0)
    assert k.value("launch__shared_mem_per_block_driver") == 1024.0
    assert k.value("launch__shared_mem_per_block_dynamic") == 43008.0
    assert k.value("dram__bytes.sum.per_second") == pytest.approx(120.49e9, rel=5e-4)


def test_details_old_layout_kernel_time_column():
    """ncu 2022.3: a Kernel Time column, no Block/Grid/Device/CC columns, --metrics all."""
    r = read_report(fixture(ESMM_OLD))
    assert len(r.kernels) == 12
    k = r.kernels[0]
    assert k.name == "basic(int, int, int, const float *, const float *, float *)"
    assert (k.block, k.grid, k.cc) == (None, None, None)
    m = k.metric("sm__inst_executed_pipe_cbu_pred_off_all.avg")
    assert (m.section, m.unit, m.value) == ("Command line profiler metrics", "inst", 396.68)
    assert r.kernels[11].name == "ampere_sgemm_128x64_nn"


def test_raw_csv_units_row():
    r = read_report(fixture(CUTLASS_RAW))
    assert r.source == "raw-csv"
    k = r.kernels[2]
    assert k.value("launch__registers_per_thread") == 254.0
    assert k.value("gpu__time_duration.sum") == 25984.0
    assert k.value("launch__shared_mem_per_block_dynamic") == 92672.0
    assert (k.block, k.grid, k.cc, k.device) == ((128, 1, 1), (96, 1, 1), "8.0", "NVIDIA A100 80GB PCIe")


def test_raw_csv_old_ncu_autoscaled():
    """ncu 2022.3 raw page: units such as msecond and Kbyte on row 2; block and grid from
    the launch__*_dim_* metrics."""
    r = read_report(fixture(ESMM_OLD_RAW))
    k = r.kernels[0]
    assert k.value("gpu__time_duration.sum") == 10776992.0  # "10.776992 msecond"
    assert k.value("launch__shared_mem_config_size") == 8192.0  # "8.192000 Kbyte"
    assert (k.block, k.grid, k.cc) == ((32, 32, 1), (32, 32, 1), "8.6")
    assert r.kernels[2].value("launch__shared_mem_per_block_static") == 8192.0


def test_failed_kernel_na_nan_and_multiline_rules():
    """sglang kernel 4 (flash_fwd_kernel): replay failed, values nan / n/a, block (0,0,0);
    its ERR rule descriptions span several lines inside one quoted field."""
    for path in (SGLANG_DETAILS, SGLANG_NAMES):
        r = read_report(fixture(path))
        assert [k.profiling_failed for k in r.kernels] == [False, False, False, False, True]
        k = r.kernels[4]
        assert k.name.startswith("void flash_fwd_kernel<Flash_fwd_kernel_traits<")
        assert (k.block, k.grid) == (None, None)
        assert k.value("launch__block_size") is None
        assert math.isnan(k.metric("gpu__time_duration.sum").value)
        assert any("\n" in x.description and x.type == "ERR" for x in k.rules)
    inf = read_report(SGLANG_NAMES).kernels[0].metric("lts__average_gcomp_input_sector_success_rate.pct")
    assert inf.value == math.inf


def test_ncu_rep_values_and_curves():
    needs_ncu_report()
    r = read_report(fixture(REPS["sglang"]))
    assert r.source == "ncu-rep"
    assert len(r.kernels) == 5
    k = r.kernels[0]
    assert (k.block, k.grid, k.cc, k.device) == ((256, 1, 1), (1056, 1, 1), "9.0", "NVIDIA H800")
    assert k.value("gpu__time_duration.sum") == 16448.0
    assert k.metric("gpu__time_duration.sum").label == "Duration"
    assert k.value("dram__bytes.sum.per_second") == pytest.approx(513618677.04, abs=0.01)
    assert k.value("launch__waves_per_multiprocessor") == pytest.approx(4 / 3)
    assert [len(k.curves[c]) for c in sorted(k.curves)] == [65, 257, 456]
    assert [k.profiling_failed for k in r.kernels] == [False, False, False, False, True]
    assert r.kernels[4].curves == {}


def test_prof_lines_mixed_into_the_stream(tmp_path):
    """Real ncu on stdout: ==PROF==/==WARNING== lines before the header and between rows."""
    lines = fixture(NSIGHTFUL).read_text().splitlines(keepends=True)
    noisy = (
        [
            "==PROF== Connected to process 6153 (/usr/bin/python3.11)\n",
            "==WARNING== Found outstanding GPU clock reset\n",
        ]
        + lines[:5]
        + ['==PROF== Profiling "copy_blocked" - 0: 0%....50%....100% - 38 passes\n']
        + lines[5:]
        + ["==PROF== Disconnected from process 6153\n"]
    )
    p = tmp_path / "stdout.csv"
    p.write_text("".join(noisy))
    clean, dirty = read_report(NSIGHTFUL), read_report(p)
    assert list(dirty.rows()) == list(clean.rows())
    assert len(list(dirty.rows())) == 72


def test_label_table_matches_fixture_pairs():
    """Every label -> name pair that ncu 2024.1.1 printed both ways is in metric_labels.csv."""
    table = label_table()
    checked = 0
    for stem in ("sglang_16ab0c94_profile_h800", "cutlass_panjd123_0667dc2e_report_a100"):
        labels = list(csv.reader(fixture(DERIVED / f"{stem}.details.ncu2024.1.1.csv").open(newline="")))
        names = list(csv.reader((DERIVED / f"{stem}.details.base_names.ncu2024.1.1.csv").open(newline="")))
        h = labels[0]
        s, m = h.index("Section Name"), h.index("Metric Name")
        for a, b in zip(labels[1:], names[1:]):
            if a[m]:
                assert table[(a[s], a[m])][0] == b[m]
                checked += 1
    assert checked == 222 + 320


@pytest.mark.parametrize(
    "content, problem",
    [
        ('"ID";"Kernel Name";"Metric Name"\n"0";"k";"x"\n', "separated by semicolons"),
        ("Time (%),Total Time (ns),Instances,Avg (ns),Name\n1.0,2,3,4,k\n", "not an Nsight Compute CSV"),
        ("", "empty"),
    ],
)
def test_not_ncu_csv(tmp_path, content, problem):
    p = tmp_path / "x.csv"
    p.write_text(content)
    with pytest.raises(InputError, match=problem):
        read_csv(p)
