"""The occupancy calculator reproduces ncu's block limits, theoretical occupancy and the
three occupancy curves stored in each .ncu-rep, at every point, for every fixture kernel."""

from __future__ import annotations

import pytest
from ncu_fixtures import DERIVED, FIXTURES, REPS, fixture, needs_ncu_report

from wanscope.ncu import occupancy as occ
from wanscope.ncu.readers import read_report

LIMITS = (
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "sm__maximum_warps_avg_per_active_cycle",
    "sm__maximum_warps_per_active_cycle_pct",
)
CURVES = {
    "launch__occupancy_per_register_count": occ.curve_registers,
    "launch__occupancy_per_block_size": occ.curve_block_size,
    "launch__occupancy_per_shared_mem_size": occ.curve_shared_mem,
}


def launch_of(k) -> occ.Launch:
    return occ.Launch(
        registers_per_thread=int(k.number("launch__registers_per_thread")),
        block_size=int(k.number("launch__block_size")),
        shared_mem_config_bytes=int(k.number("launch__shared_mem_config_size")),
        static_shared_mem_bytes=int(k.number("launch__shared_mem_per_block_static")),
        dynamic_shared_mem_bytes=int(k.number("launch__shared_mem_per_block_dynamic")),
    )


def ours(k) -> tuple:
    o = occ.occupancy(occ.arch(k.cc), launch_of(k))
    return (
        o.block_limit_registers,
        o.block_limit_shared_mem,
        o.block_limit_warps,
        o.block_limit_blocks,
        o.active_warps_per_sm,
        o.occupancy_pct,
    )


def rep_kernels():
    cases = []
    for key in REPS:
        n = {"sglang": 5, "cutlass": 3, "esmm": 12}[key]
        cases += [pytest.param(key, i, id=f"{key}-{i}") for i in range(n)]
    return cases


_cache: dict = {}


def rep(key):
    needs_ncu_report()
    if key not in _cache:
        _cache[key] = read_report(fixture(REPS[key]))
    return _cache[key]


@pytest.mark.parametrize("key, kid", rep_kernels())
def test_block_limits_and_theoretical_occupancy_match_ncu(key, kid):
    k = rep(key).kernels[kid]
    if k.profiling_failed:
        assert (key, kid) == ("sglang", 4)
        assert k.value("launch__occupancy_limit_registers") is None
        return
    assert ours(k) == pytest.approx(tuple(k.number(n) for n in LIMITS), abs=1e-9)


@pytest.mark.parametrize("key, kid", rep_kernels())
@pytest.mark.parametrize("curve", sorted(CURVES))
def test_occupancy_curves_match_ncu_at_every_point(key, kid, curve):
    k = rep(key).kernels[kid]
    if k.profiling_failed:
        assert curve not in k.curves
        return
    theirs = k.curves[curve]
    mine = CURVES[curve](occ.arch(k.cc), launch_of(k))
    assert [x for x, _ in mine] == [x for x, _ in theirs]
    assert [float(y) for _, y in mine] == [y for _, y in theirs]


@pytest.mark.parametrize(
    "path",
    [
        FIXTURES / "nsightful_copy_blocked.details.csv",
        DERIVED / "cutlass_panjd123_0667dc2e_report_a100.details.base_names.ncu2024.1.1.csv",
        DERIVED / "sglang_16ab0c94_profile_h800.raw.base.ncu2024.1.1.csv",
        DERIVED / "esmm_049ec61_profile_a10g.raw.base.ncu2024.1.1.csv",
    ],
)
def test_block_limits_match_ncu_from_csv(path):
    done = 0
    for k in read_report(fixture(path)).kernels:
        if k.profiling_failed:
            continue
        # the CSV prints percentages with two decimals (66.67 for 2/3)
        assert ours(k) == pytest.approx(tuple(k.number(n) for n in LIMITS), abs=0.005)
        done += 1
    assert done >= 1


def test_turing_copy_kernel_numbers():
    """T4 (sm_75): 32 registers x 256 threads; 8 warps per block; no driver reservation."""
    o = occ.occupancy(occ.arch("7.5"), occ.Launch(32, 256, 32768))
    assert (o.registers_per_warp, o.warps_per_scheduler_by_registers) == (1024, 16)
    assert (o.block_limit_registers, o.block_limit_warps, o.block_limit_shared_mem, o.block_limit_blocks) == (
        8,
        4,
        16,
        16,
    )
    assert (o.active_warps_per_sm, o.occupancy_pct, o.limiter) == (32, 100.0, "warps")


def test_fa2_on_hopper_arithmetic():
    """The study's FA2 kernel: 255 registers are allocated as 256 per thread, 8,192 per
    warp; a 16,384-register partition holds 2 warps, the SM 8; 128-thread blocks (4
    warps) -> 2 blocks, 8 of 64 warps = 12.5%."""
    o = occ.occupancy(occ.arch("9.0"), occ.Launch(255, 128, 233472, 0, 65536))
    assert o.registers_per_warp == 8192
    assert o.warps_per_scheduler_by_registers == 2
    assert (o.block_limit_registers, o.active_blocks_per_sm, o.active_warps_per_sm) == (2, 2, 8)
    assert o.occupancy_pct == 12.5
    assert o.limiter == "registers"
    assert o.shared_mem_per_block_bytes == 65536 + 1024


def test_arch_table():
    assert {cc: (a.max_warps_per_sm, a.max_blocks_per_sm) for cc, a in occ.ARCHS.items()} == {
        "7.5": (32, 16),
        "8.0": (64, 32),
        "8.6": (48, 16),
        "8.9": (48, 24),
        "9.0": (64, 32),
    }
    assert (
        occ.arch("9.0").shared_mem_per_block_optin_bytes == 232448
    )  # ncu: device__attribute_max_shared_memory_per_block_optin
    assert occ.arch("8.0").shared_mem_per_sm_bytes == 167936
    assert occ.arch("8.6").shared_mem_per_block_optin_bytes == 101376
