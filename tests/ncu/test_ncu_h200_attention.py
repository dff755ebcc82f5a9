"""Our own H200 captures (tests/data/ncu, captured 2026-11-30 with
`wanscope ncu-run --kernel flash_fwd|fort_native_sdpa --launch-skip 1 --launch-count 1 --
python benchmarks/ncu_attention_capture.py --backend flash|cudnn`, ncu 2025.3.1,
--clock-control none): Wan2.1-1.3B self-attention at 480x832x81, [1, 12, 32760, 128] bf16."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "ncu"


def ncu_json(name):
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", "ncu", str(DATA / name), "--format", "json"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    (kernel,) = json.loads(r.stdout)["kernels"]
    return kernel


@pytest.mark.parametrize("page", ["details", "raw"])
def test_fa2_is_latency_bound_with_the_register_arithmetic(page):
    k = ncu_json(f"h200_fa2_attn_480p.{page}.csv")
    assert k["name"].startswith("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4")
    assert (k["registers_per_thread"], k["block_size"], k["grid_size"]) == (255, 128, 3072)
    assert k["theoretical_occupancy_pct"] == 12.5
    assert k["warps_active_per_scheduler"] == pytest.approx(1.97, abs=0.005)
    assert k["warps_eligible_per_scheduler"] == pytest.approx(0.66, abs=0.005)
    assert k["verdict"] == "latency-bound"
    text = k["explanation"]
    for phrase in (
        "255 registers per thread are allocated as 256",
        "8,192 per warp",
        "a scheduler partition holds 16,384, so 2 warps fit per scheduler",
        "12.50% theoretical occupancy",
        "Latency-starved",
    ):
        assert phrase in text


@pytest.mark.parametrize("page", ["details", "raw"])
def test_cudnn_attention_is_compute_bound(page):
    k = ncu_json(f"h200_cudnn_attn_480p.{page}.csv")
    assert k["name"].startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16")
    assert (k["registers_per_thread"], k["block_size"], k["grid_size"]) == (168, 384, 132)
    assert k["theoretical_occupancy_pct"] == 18.75
    assert k["warps_eligible_per_scheduler"] == pytest.approx(0.66, abs=0.005)
    assert k["verdict"] == "compute-bound"
    assert "3 warps fit per scheduler" in k["explanation"]
