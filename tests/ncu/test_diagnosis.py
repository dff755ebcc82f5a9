"""Diagnosis wording on a hand-built kernel shaped like the study's FA2 kernel on an H200
(255 registers, 128 threads, 1.97 active / 0.66 eligible warps per scheduler, 15.7%
issue-slot utilization). Synthetic until the H200 captures are committed as fixtures;
the real-fixture verdicts are asserted in test_cli.py."""

from __future__ import annotations

from wanscope.ncu.diagnosis import diagnose
from wanscope.ncu.model import KernelProfile, Metric


def kernel(**overrides) -> KernelProfile:
    values = {
        "gpu__time_duration.sum": ("ns", 18_400_000.0),
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", 45.0),
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": ("%", 30.0),
        "launch__registers_per_thread": ("register/thread", 255.0),
        "launch__block_size": ("", 128.0),
        "launch__grid_size": ("", 3072.0),
        "launch__sm_count": ("SM", 132.0),
        "launch__shared_mem_config_size": ("byte", 233472.0),
        "launch__shared_mem_per_block_static": ("byte/block", 0.0),
        "launch__shared_mem_per_block_dynamic": ("byte/block", 65536.0),
        "launch__waves_per_multiprocessor": ("", 3072 / (132 * 2)),
        "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", 12.3),
        "sm__maximum_warps_per_active_cycle_pct": ("%", 12.5),
        "smsp__warps_active.avg.per_cycle_active": ("warp", 1.97),
        "smsp__warps_eligible.avg.per_cycle_active": ("warp", 0.66),
        "smsp__issue_active.avg.per_cycle_active": ("", 0.157),
        "smsp__issue_active.avg.pct_of_peak_sustained_active": ("%", 15.7),
        "smsp__issue_inst0.avg.pct_of_peak_sustained_active": ("%", 84.3),
    }
    values.update(overrides)
    metrics = [Metric(None, None, name, unit, value) for name, (unit, value) in values.items()]
    return KernelProfile(
        id=0,
        name="void pytorch_flash::flash_fwd_kernel<...>",
        block=(128, 1, 1),
        grid=(256, 12, 1),
        cc="9.0",
        metrics=metrics,
    )


def test_fa2_shape_reads_latency_bound_with_the_arithmetic():
    d = diagnose(kernel())
    assert d.verdict == "latency-bound"
    e = d.explanation
    assert "both under the 60% below which Nsight Compute's SpeedOfLight rule reads latency issues" in e
    assert (
        "255 registers per thread are allocated as 256 (32 x 255 = 8,160 registers round up to 8,192 per warp, in units of 256)"
        in e
    )
    assert "a scheduler partition holds 16,384, so 2 warps fit per scheduler and 8 per SM" in e
    assert "2 blocks x 4 warps = 8 of 64 warps: 12.50% theoretical occupancy (limited by registers)" in e
    assert "Nsight Compute measured 1.97 active and 0.66 eligible warps per scheduler" in e
    assert "issued an instruction in 15.70% of cycles (one every 6.4 cycles)" in e
    assert e.endswith("Latency-starved: too few eligible warps to hide each warp's stalls.")
    # fewer registers: 168 -> 3 warps per partition, 12 per SM, 3 blocks: 18.75%; below
    # that the 66,560-byte blocks (64 KiB + the driver's 1 KiB) cap at 3 per 228 KiB SM
    assert d.what_if[0] == {"if_registers_per_thread": 168, "if_block_size": 128, "occupancy_pct": 18.75}
    assert [r["if_registers_per_thread"] for r in d.what_if[1:]] == [255] * 4
    assert {"if_registers_per_thread": 255, "if_block_size": 64, "occupancy_pct": 9.375} in d.what_if
    assert "shared memory (66,560 bytes per block with the driver's 1,024) allows 3 in the 233,472-byte carveout" in e
    assert d.facts["block_limits_source"] == "calculator"
    assert d.facts["block_limit_registers"] == 2.0


def test_thresholds_name_the_bound():
    assert (
        diagnose(kernel(**{"sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", 85.0)})).verdict == "compute-bound"
    )
    mem = diagnose(kernel(**{"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": ("%", 60.0)}))
    assert mem.verdict == "memory-bound"
    assert "memory is the busier unit" in mem.explanation


def test_tail_effect_rule():
    """1.5 waves: the partial wave may take 1 / (1 + 1) = 50% >= 20% of the runtime, and
    achieved 6% < 0.8 x 12.5% theoretical: LaunchStats' tail effect."""
    d = diagnose(
        kernel(
            **{
                "launch__waves_per_multiprocessor": ("", 1.5),
                "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", 6.0),
            }
        )
    )
    assert d.verdict == "launch/tail-bound"
    assert "the last, partial wave may take up to 50% of the runtime" in d.explanation


def test_failed_kernel_not_diagnosed():
    d = diagnose(kernel(**{"gpu__time_duration.sum": ("ns", float("nan"))}))
    assert (d.verdict, d.facts, d.what_if) == ("profiling failed", {}, [])
