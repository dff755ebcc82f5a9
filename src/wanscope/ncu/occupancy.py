"""Theoretical occupancy from first principles, as Nsight Compute computes it.

An SM runs as many blocks of a kernel at once as the tightest of four limits allows:

1. **Warps**: ``floor(max warps per SM / warps per block)``, warps per block being
   ``ceil(threads / 32)``.
2. **Blocks**: a fixed number of resident blocks per SM.
3. **Registers**: registers are allocated per warp in units of 256 (32 x 255 = 8,160
   rounds up to 8,192), and each of the SM's 4 scheduler partitions holds a quarter of the
   65,536-register file (16,384), so a partition keeps ``floor(16,384 / per-warp
   allocation)`` warps and the SM four times that; the block limit is that warp count
   divided by warps per block, rounded down.
4. **Shared memory**: each block takes its static plus dynamic shared memory, rounded up
   to the allocation unit, plus the shared memory the driver reserves per block (1 KiB
   from compute capability 8.0 on; ncu reports it as "Driver Shared Memory Per Block");
   the blocks that fit in the carveout the driver chose (ncu's "Shared Memory
   Configuration Size") are the limit. A block using none is not limited.

Occupancy is resident warps over the SM's maximum warps. All inputs are in base units:
registers per thread, threads per block, bytes.

Sources for the per-architecture constants (``ARCHS``): the CUDA C++ Programming Guide,
"Compute Capabilities", table "Technical Specifications per Compute Capability" (max
resident blocks and warps per SM, 64K 32-bit registers per SM, 255 registers per thread,
shared memory per SM and per block with opt-in) and section "Shared Memory" per
architecture (the carveouts: 0, 8, 16, 32, 64, 100, 132, 164, 196, 228 KB up to the
SM's capacity; 1 KB reserved by the system per block on 8.x and 9.0); the CUDA occupancy
calculator as shipped in the toolkit, ``cuda_occupancy.h`` (register allocation unit 256
per warp, 4 sub-partitions per SM, shared-memory allocation unit 256 bytes on 7.x and
128 bytes on 8.x/9.x, max blocks per SM 16 on 7.5 and 8.6, 32 on 8.0). Nsight Compute's
Occupancy section documents the same four "Block Limit" rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

WARP_SIZE = 32
KIB = 1024


@dataclass(frozen=True)
class Arch:
    """Occupancy-relevant limits of one compute capability (see the module docstring)."""

    cc: str
    max_warps_per_sm: int
    max_blocks_per_sm: int
    shared_mem_per_sm_bytes: int
    shared_mem_per_block_optin_bytes: int
    shared_mem_alloc_unit_bytes: int
    reserved_shared_mem_per_block_bytes: int
    registers_per_sm: int = 65536
    register_alloc_unit: int = 256
    scheduler_partitions: int = 4
    max_registers_per_thread: int = 255
    max_threads_per_block: int = 1024
    shared_mem_per_block_default_bytes: int = 48 * KIB

    @property
    def registers_per_partition(self) -> int:
        """Registers in one scheduler partition's slice of the register file."""
        return self.registers_per_sm // self.scheduler_partitions

    @property
    def max_warps_per_scheduler(self) -> int:
        return self.max_warps_per_sm // self.scheduler_partitions


ARCHS = {
    # Turing: 32 warps and 16 blocks per SM, 64 KB shared memory (carveout 32 or 64 KB)
    "7.5": Arch("7.5", 32, 16, 64 * KIB, 64 * KIB, 256, 0),
    # A100: 64 warps, 32 blocks, 164 KB per SM, 163 KB per block opt-in
    "8.0": Arch("8.0", 64, 32, 164 * KIB, 163 * KIB, 128, KIB),
    # GA10x (A10G, RTX 30x0): 48 warps, 16 blocks, 100 KB per SM, 99 KB opt-in
    "8.6": Arch("8.6", 48, 16, 100 * KIB, 99 * KIB, 128, KIB),
    # Ada (L4, L40, RTX 40x0): 48 warps, 24 blocks, 100 KB per SM, 99 KB opt-in
    "8.9": Arch("8.9", 48, 24, 100 * KIB, 99 * KIB, 128, KIB),
    # Hopper (H100, H200, H800): 64 warps, 32 blocks, 228 KB per SM, 227 KB opt-in
    "9.0": Arch("9.0", 64, 32, 228 * KIB, 227 * KIB, 128, KIB),
}


def arch(cc: str) -> Arch:
    """The ``Arch`` for a compute capability such as ``"9.0"``; KeyError if unknown."""
    return ARCHS[cc]


@dataclass(frozen=True)
class Launch:
    """One kernel launch as the occupancy calculation sees it (base units).

    ``shared_mem_config_bytes`` is the carveout the driver chose for this launch (ncu:
    "Shared Memory Configuration Size", ``launch__shared_mem_config_size``); static and
    dynamic are the kernel's own shared memory per block.
    """

    registers_per_thread: int
    block_size: int
    shared_mem_config_bytes: int
    static_shared_mem_bytes: int = 0
    dynamic_shared_mem_bytes: int = 0


@dataclass(frozen=True)
class Occupancy:
    """The result. Block limits are in blocks per SM, ``active_warps_per_sm`` in warps."""

    warps_per_block: int
    registers_per_warp: int
    warps_per_scheduler_by_registers: int | None
    shared_mem_per_block_bytes: int
    block_limit_registers: int
    block_limit_shared_mem: int
    block_limit_warps: int
    block_limit_blocks: int
    active_blocks_per_sm: int
    active_warps_per_sm: int
    max_warps_per_sm: int

    @property
    def occupancy_pct(self) -> float:
        """Theoretical occupancy: resident warps over the SM's maximum, in percent."""
        return 100.0 * self.active_warps_per_sm / self.max_warps_per_sm

    @property
    def limiters(self) -> list[str]:
        """The limits that bind (several when tied): ``registers``, ``shared memory``,
        ``warps``, ``blocks``."""
        limits = {
            "registers": self.block_limit_registers,
            "shared memory": self.block_limit_shared_mem,
            "warps": self.block_limit_warps,
            "blocks": self.block_limit_blocks,
        }
        low = min(limits.values())
        return [name for name, v in limits.items() if v == low]

    @property
    def limiter(self) -> str:
        """The first binding limit (see ``limiters``)."""
        return self.limiters[0]


def registers_per_warp(a: Arch, registers_per_thread: int) -> int:
    """Registers one warp is allocated: 32 x registers per thread, rounded up to the
    allocation unit (256)."""
    return math.ceil(registers_per_thread * WARP_SIZE / a.register_alloc_unit) * a.register_alloc_unit


def block_limit_registers(a: Arch, registers_per_thread: int, warps_per_block: int) -> tuple[int, int | None]:
    """(blocks per SM allowed by the register file, warps per scheduler partition).

    With no registers the file sets no limit (the block limit becomes the SM's block
    limit and the warps per partition are None).
    """
    if registers_per_thread <= 0:
        return a.max_blocks_per_sm, None
    per_warp = registers_per_warp(a, registers_per_thread)
    if per_warp * warps_per_block > a.registers_per_sm:
        return 0, a.registers_per_partition // per_warp
    per_partition = a.registers_per_partition // per_warp
    return (per_partition * a.scheduler_partitions) // warps_per_block, per_partition


def shared_mem_per_block(a: Arch, static_bytes: int, dynamic_bytes: int) -> int:
    """Shared memory one block occupies: its own, rounded up to the allocation unit, plus
    the driver's reservation."""
    own = static_bytes + dynamic_bytes
    unit = a.shared_mem_alloc_unit_bytes
    return math.ceil(own / unit) * unit + a.reserved_shared_mem_per_block_bytes


def occupancy(a: Arch, launch: Launch) -> Occupancy:
    """Block limits and theoretical occupancy of ``launch`` on an SM of ``a``.

    Reproduces ncu's Occupancy section (``launch__occupancy_limit_*``,
    ``sm__maximum_warps_per_active_cycle_pct``) for every kernel of the test fixtures' ncu reports
    (``tests/ncu``).
    """
    warps_per_block = math.ceil(launch.block_size / WARP_SIZE)
    if warps_per_block <= 0:
        raise ValueError(f"block size must be positive, got {launch.block_size}")
    lim_warps = a.max_warps_per_sm // warps_per_block
    lim_regs, per_partition = block_limit_registers(a, launch.registers_per_thread, warps_per_block)
    smem = shared_mem_per_block(a, launch.static_shared_mem_bytes, launch.dynamic_shared_mem_bytes)
    lim_smem = a.max_blocks_per_sm if smem == 0 else launch.shared_mem_config_bytes // smem
    blocks = min(lim_warps, lim_regs, lim_smem, a.max_blocks_per_sm)
    return Occupancy(
        warps_per_block=warps_per_block,
        registers_per_warp=registers_per_warp(a, launch.registers_per_thread),
        warps_per_scheduler_by_registers=per_partition,
        shared_mem_per_block_bytes=smem,
        block_limit_registers=lim_regs,
        block_limit_shared_mem=lim_smem,
        block_limit_warps=lim_warps,
        block_limit_blocks=a.max_blocks_per_sm,
        active_blocks_per_sm=blocks,
        active_warps_per_sm=blocks * warps_per_block,
        max_warps_per_sm=a.max_warps_per_sm,
    )


# The x axes of ncu's three occupancy curves (the instanced metrics in a .ncu-rep).
REGISTER_COUNTS = range(0, 257)
BLOCK_SIZES = (1, *range(16, 1025, 16))


def shared_mem_curve_limit_bytes(a: Arch, launch: Launch) -> int:
    """The largest shared memory per block ncu's shared-memory curve still plots as
    launchable: the opt-in maximum or the default 48 KB.

    The deciding input, the kernel's ``cudaFuncAttributeMaxDynamicSharedMemorySize``, is
    not in the report. Inferred from the 20 kernels of the test fixtures' ncu reports: kernels with
    static shared memory or more than 48 KB dynamic get the opt-in maximum, the others
    48 KB. Treat the curve's far end as approximate for other kernels.
    """
    if launch.static_shared_mem_bytes > 0 or launch.dynamic_shared_mem_bytes > a.shared_mem_per_block_default_bytes:
        return a.shared_mem_per_block_optin_bytes
    return a.shared_mem_per_block_default_bytes


def curve_registers(a: Arch, launch: Launch) -> list[tuple[int, int]]:
    """Warps per SM at each register count 0..256 (ncu's
    ``launch__occupancy_per_register_count``), all else as launched."""
    return [(r, occupancy(a, replace(launch, registers_per_thread=r)).active_warps_per_sm) for r in REGISTER_COUNTS]


def curve_block_size(a: Arch, launch: Launch) -> list[tuple[int, int]]:
    """Warps per SM at block sizes 1, 16, 32, ..., 1024 threads (ncu's
    ``launch__occupancy_per_block_size``), registers and shared memory per block as
    launched."""
    return [(b, occupancy(a, replace(launch, block_size=b)).active_warps_per_sm) for b in BLOCK_SIZES]


def curve_shared_mem(a: Arch, launch: Launch) -> list[tuple[int, int]]:
    """Warps per SM at shared memory per block 0, 512, ... bytes (ncu's
    ``launch__occupancy_per_shared_mem_size``).

    ncu's curve differs from the launch's own limit in two ways, both measured on the
    fixtures: a point counts the block's bytes without the driver's reservation against
    the launch's carveout, and a block too big for that carveout still gets one block
    per SM (the driver would choose a larger carveout) up to ``shared_mem_curve_limit_bytes``;
    past it, zero.
    """
    limit = shared_mem_curve_limit_bytes(a, launch)
    no_smem = replace(launch, static_shared_mem_bytes=0, dynamic_shared_mem_bytes=0)
    base = occupancy(a, no_smem)
    other_limit = min(base.block_limit_warps, base.block_limit_registers, a.max_blocks_per_sm)
    points = []
    for s in range(0, a.shared_mem_per_block_optin_bytes + 512 + 1, 512):
        if s > limit:
            blocks = 0
        elif s == 0:
            blocks = other_limit
        else:
            blocks = min(other_limit, max(1, launch.shared_mem_config_bytes // s))
        points.append((s, blocks * base.warps_per_block))
    return points
