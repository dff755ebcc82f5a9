"""The datasheet table of GPU peaks (``analysis/gpu_peaks.csv``), its matching by recorded
device names, and measured values overriding it."""

from __future__ import annotations

import re

import pytest

from wanscope.analysis import peaks
from wanscope.analysis.peaks import device_peaks, lookup

# Device names as CUDA reports them (torch.cuda.get_device_name, Kineto's deviceProperties,
# Nsight Systems' TARGET_INFO_GPU) -> the table's row
NAMES = {
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA A100-SXM4-40GB": "A100 40GB SXM",
    "NVIDIA A100-SXM4-80GB": "A100 80GB SXM",
    "NVIDIA A100-PCIE-40GB": "A100 40GB PCIe",
    "NVIDIA A100 80GB PCIe": "A100 80GB PCIe",
    "NVIDIA L4": "L4",
    "NVIDIA L40S": "L40S",
    "NVIDIA A10": "A10",
    "NVIDIA GeForce RTX 4090": "GeForce RTX 4090",
    "NVIDIA GeForce RTX 3090": "GeForce RTX 3090",
    # other parts that only look alike: no row
    "NVIDIA GH200 480GB": None,
    "NVIDIA L40": None,
    "NVIDIA A10G": None,
    "NVIDIA GeForce RTX 3090 Ti": None,
    "NVIDIA GeForce RTX 4090 D": None,
    "Tesla T4": None,
}


@pytest.mark.parametrize("name", NAMES)
def test_device_names_match_their_row(name):
    row = lookup(name)
    assert (row.gpu if row else None) == NAMES[name]


def test_every_row_has_its_source_and_consistent_peaks():
    rows = peaks.table()
    assert {r.gpu for r in rows} >= {v for v in NAMES.values() if v}
    for r in rows:
        assert re.search(r"https://|whitepaper", r.source), r.gpu
        assert r.bandwidth_gbps > 0
        t = r.tflops
        assert {"bf16", "fp16", "tf32", "fp32", "int8"} <= set(t), r.gpu
        assert t["bf16"] == t["fp16"] >= t["tf32"] >= t["fp32"] / 1.01 > 0, r.gpu  # dense tensor >= CUDA cores
        assert t["int8"] >= t["bf16"], r.gpu
        assert t.get("fp8", t["bf16"]) >= t["bf16"], r.gpu
    h200 = lookup("NVIDIA H200")
    assert h200.tflops["bf16"] == 989.5 and h200.tflops["fp32"] == 67 and h200.bandwidth_gbps == 4800
    assert "fp8" not in lookup("NVIDIA A100-SXM4-80GB").tflops  # no FP8 before Ada


def test_measured_values_override_the_table():
    p = device_peaks("NVIDIA H200", None, peak_tflops=800, peak_bandwidth_gbps=4100)
    assert p.matched == "H200 SXM"
    assert p.tflops["bf16"] == p.tflops["fp16"] == 800.0
    assert p.tflops["fp8"] == 1979  # other precisions keep the datasheet's
    assert p.bandwidth_gbps == 4100.0
    assert p.sources["bf16"] == p.sources["bandwidth"] == "measured" and p.sources["fp32"] == "datasheet"
    d = p.as_dict()
    assert d["bf16_tflops"] == 800.0 and d["int8_tops"] == 1979 and d["citation"].startswith("NVIDIA H200")


def test_a_gpu_outside_the_table():
    p = device_peaks("Tesla T4", trace_bandwidth_gbps=320.064)
    assert p.matched is None and p.tflops == {} and p.bandwidth_gbps == 320.064
    assert p.sources == {"bandwidth": "trace"}
    p = device_peaks("Tesla T4", 320.064, peak_tflops=65, peak_fp32_tflops=8.1, peak_bandwidth_gbps=300)
    assert p.tflops == {"bf16": 65.0, "fp16": 65.0, "fp32": 8.1} and p.bandwidth_gbps == 300.0
    assert device_peaks(None).as_dict()["bandwidth_gbps"] is None
