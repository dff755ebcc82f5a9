"""Per-kernel diagnosis: the numbers a performance engineer reads, a verdict, and the
occupancy arithmetic written out in words.

Verdicts and the thresholds behind them, all Nsight Compute's own rules (the Python rule
files shipped in its ``sections/`` folder):

- **compute-bound / memory-bound**: SM throughput (``sm__throughput...pct_of_peak_
  sustained_elapsed``) or memory throughput (``gpu__compute_memory_throughput...``) at or
  above 60% of peak; the higher one names the bound. SpeedOfLight's ``SOLBottleneck``
  rule: below 60% on both "typically indicate[s] latency issues"; 80% and above is near
  peak (its ``no_bound_threshold``).
- **launch/tail-bound**: too few blocks or waves. SOLBottleneck's "Small Grid" (both
  throughputs under 60% and fewer than 1 wave per SM), LaunchStats' "Small Grid" (fewer
  blocks than SMs) and "Tail Effect" (at least one full wave, a partial wave that may
  take ``1 / (full waves + 1) >= 20%`` of the runtime, and achieved occupancy under 80%
  of theoretical).
- **latency-bound**: both throughputs under 60% with enough blocks: warps stall and too
  few are eligible to hide it. SchedulerStats' ``IssueSlotUtilization`` rule flags issue
  rates below 0.6 instructions per cycle per scheduler; its message reports active and
  eligible warps per scheduler, as the explanation here does.
- **profiling failed**: ncu measured nothing (every value NaN or n/a); not diagnosed.
- **undetermined**: the report lacks the throughput metrics (e.g. captured with
  ``--metrics`` and no sections) and no launch rule applies.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from wanscope.ncu import occupancy as occ
from wanscope.ncu.model import KernelProfile, finite

LATENCY_BOUND_PCT = 60.0  # SpeedOfLight rule SOLBottleneck: latency_bound_threshold
NEAR_PEAK_PCT = 80.0  # SpeedOfLight rule SOLBottleneck: no_bound_threshold
WAVES_THRESHOLD = 1.0  # SpeedOfLight rule SOLBottleneck: waves_threshold
TAIL_EFFECT_MIN = 0.2  # LaunchStats rule LaunchConfiguration: potential_tail_effect >= 0.2
TAIL_ACHIEVED_FRACTION = 0.8  # LaunchStats rule: achieved_occ < theoretical_occ * 0.8
ISSUE_ACTIVE_TARGET = 0.6  # SchedulerStats rule IssueSlotUtilization: issueActiveTarget

VERDICTS = ("compute-bound", "memory-bound", "latency-bound", "launch/tail-bound", "profiling failed", "undetermined")

_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
_STALL_RULE = re.compile(r"spends ([\d,.]+) cycles being stalled (.+?)\.(?:\s|$)")
# metric names of the numbers every diagnosis reports (base units)
M = {
    "duration_ns": "gpu__time_duration.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "registers_per_thread": "launch__registers_per_thread",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "static_shared_mem_per_block_bytes": "launch__shared_mem_per_block_static",
    "dynamic_shared_mem_per_block_bytes": "launch__shared_mem_per_block_dynamic",
    "driver_shared_mem_per_block_bytes": "launch__shared_mem_per_block_driver",
    "shared_mem_config_bytes": "launch__shared_mem_config_size",
    "waves_per_sm": "launch__waves_per_multiprocessor",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "theoretical_warps_per_sm": "sm__maximum_warps_avg_per_active_cycle",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "achieved_warps_per_sm": "sm__warps_active.avg.per_cycle_active",
    "block_limit_registers": "launch__occupancy_limit_registers",
    "block_limit_shared_mem": "launch__occupancy_limit_shared_mem",
    "block_limit_warps": "launch__occupancy_limit_warps",
    "block_limit_blocks": "launch__occupancy_limit_blocks",
    "warps_active_per_scheduler": "smsp__warps_active.avg.per_cycle_active",
    "warps_eligible_per_scheduler": "smsp__warps_eligible.avg.per_cycle_active",
    "warps_issued_per_scheduler": "smsp__issue_active.avg.per_cycle_active",
    "issue_slot_utilization_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "no_eligible_pct": "smsp__issue_inst0.avg.pct_of_peak_sustained_active",
    "warp_cycles_per_issued_instruction": "smsp__average_warp_latency_per_inst_issued.ratio",
}


@dataclass
class Diagnosis:
    """One kernel's numbers (``facts``, base units, None when the report lacks them),
    verdict (one of ``VERDICTS``), explanation, and what-if occupancy rows."""

    kernel: KernelProfile
    verdict: str
    explanation: str
    facts: dict = field(default_factory=dict)
    what_if: list[dict] = field(default_factory=list)
    occupancy: occ.Occupancy | None = None

    def to_json(self) -> dict:
        k = self.kernel
        out = {"id": k.id, "name": k.name, "device": k.device, "cc": k.cc, "block": k.block, "grid": k.grid}
        out.update(self.facts)
        out.update(verdict=self.verdict, explanation=self.explanation, what_if=self.what_if)
        return out


def _facts(k: KernelProfile) -> dict:
    f = {key: k.number(name) for key, name in M.items()}
    for key in ("registers_per_thread", "block_size", "grid_size"):
        f[key] = _whole(f[key])
    if f["block_size"] is None and k.block:
        f["block_size"] = math.prod(k.block)
    if f["grid_size"] is None and k.grid:
        f["grid_size"] = math.prod(k.grid)
    f["sm_count"] = _whole(k.number("launch__sm_count") or k.number("device__attribute_multiprocessor_count"))
    static, dynamic = f["static_shared_mem_per_block_bytes"], f["dynamic_shared_mem_per_block_bytes"]
    f["shared_mem_per_block_bytes"] = None if static is None or dynamic is None else static + dynamic
    f["top_stalls"] = _top_stalls(k)
    loads = k.number("sass__inst_executed_local_loads")
    stores = k.number("sass__inst_executed_local_stores")
    f["local_memory_instructions"] = None if loads is None or stores is None else loads + stores
    return f


def _top_stalls(k: KernelProfile, n: int = 3) -> list[dict]:
    """The largest warp-stall reasons in cycles per issued instruction: from the
    ``smsp__average_warps_issue_stalled_*_per_issue_active.ratio`` metrics where present
    (raw page, .ncu-rep), else from the text of ncu's ``CPIStall`` rule rows."""
    found = []
    for m in k.metrics:
        hit = _STALL.fullmatch(m.name or "")
        if hit and finite(m.value) and hit[1] != "selected":
            found.append({"reason": hit[1], "cycles_per_issued_instruction": m.value})
    if not found:
        for r in k.rules:
            if r.rule == "CPIStall":
                hit = _STALL_RULE.search(r.description)
                if hit:
                    found.append({"reason": hit[2], "cycles_per_issued_instruction": float(hit[1].replace(",", ""))})
    found.sort(key=lambda s: -s["cycles_per_issued_instruction"])
    return found[:n]


def _whole(x: float | None) -> int | None:
    """A count from a report cell: None where the cell is not a finite number."""
    return int(x) if x is not None and math.isfinite(x) else None


# What a launch can be on any NVIDIA GPU (CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability"): outside these a report cell is garbage, and the
# occupancy arithmetic (which walks register counts down to 1) is not attempted.
_LAUNCH_LIMITS = {
    "registers_per_thread": (0, 255),
    "block_size": (1, 1024),
    "shared_mem_config_bytes": (0, 1 << 30),
    "static_shared_mem_per_block_bytes": (0, 1 << 30),
    "dynamic_shared_mem_per_block_bytes": (0, 1 << 30),
}


def _launch(f: dict) -> occ.Launch | None:
    for key, (low, high) in _LAUNCH_LIMITS.items():
        v = f[key]
        if v is None or not math.isfinite(v) or not low <= v <= high:
            return None
    return occ.Launch(
        registers_per_thread=f["registers_per_thread"],
        block_size=f["block_size"],
        shared_mem_config_bytes=int(f["shared_mem_config_bytes"]),
        static_shared_mem_bytes=int(f["static_shared_mem_per_block_bytes"]),
        dynamic_shared_mem_bytes=int(f["dynamic_shared_mem_per_block_bytes"]),
    )


def _n(x: float, digits: int = 2) -> str:
    """A number for prose: integers with thousands separators, others rounded."""
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


# The block limits of the table (``facts``) with the calculator's name for each.
_LIMITS = (
    ("block_limit_registers", "registers"),
    ("block_limit_shared_mem", "shared memory"),
    ("block_limit_warps", "warps"),
    ("block_limit_blocks", "blocks"),
)


def occupancy_arithmetic(a: occ.Arch, launch: occ.Launch, o: occ.Occupancy, reported: dict | None = None) -> str:
    """The occupancy calculation in words, e.g. for FA2 on an H200: "255 registers per
    thread are allocated as 256 (32 x 255 = 8,160 registers round up to 8,192 per warp,
    in units of 256); a scheduler partition holds 16,384, so 2 warps fit per scheduler
    and 8 per SM; ...".

    ``reported``: Nsight Compute's own block limits and theoretical occupancy (the keys of
    ``M``, None where the report lacks one). The sentence states the same numbers as the
    table, which shows ncu's where it has them: each limit is ncu's where reported, and
    where it differs from the calculator's the calculator's derivation gives way to ncu's
    number, with the calculator's beside it."""
    reported = reported or {}
    calc = {key: getattr(o, key) for key, _ in _LIMITS}
    final = {key: int(reported[key]) if reported.get(key) is not None else calc[key] for key in calc}

    def limit(key: str) -> str:
        if final[key] == calc[key]:
            return f"{final[key]}"
        return f"{final[key]} (Nsight Compute's limit; the calculator gives {calc[key]})"

    parts = []
    r = launch.registers_per_thread
    if r > 0 and final["block_limit_registers"] == calc["block_limit_registers"]:
        raw = 32 * r
        if raw == o.registers_per_warp:
            parts.append(f"{r} registers per thread: a warp takes 32 x {r} = {o.registers_per_warp:,} registers")
        else:
            parts.append(
                f"{r} registers per thread are allocated as {o.registers_per_warp // 32} "
                f"(32 x {r} = {raw:,} registers round up to {o.registers_per_warp:,} per warp, in units of {a.register_alloc_unit})"
            )
        per = o.warps_per_scheduler_by_registers
        parts.append(
            f"a scheduler partition holds {a.registers_per_partition:,}, so {per} warps fit per scheduler "
            f"and {per * a.scheduler_partitions} per SM"
        )
    regs = f"{r} registers per thread allow" if r > 0 and parts == [] else "registers allow"
    parts.append(
        f"a {launch.block_size}-thread block is {_count(o.warps_per_block, 'warp')}, so {regs} "
        f"{limit('block_limit_registers')} blocks per SM, the {a.max_warps_per_sm}-warp limit "
        f"{limit('block_limit_warps')}, the SM's block limit {limit('block_limit_blocks')}"
    )
    binding = min(final.values())
    if o.shared_mem_per_block_bytes or final["block_limit_shared_mem"] == binding:
        parts.append(
            f"shared memory ({o.shared_mem_per_block_bytes:,} bytes per block with the driver's "
            f"{a.reserved_shared_mem_per_block_bytes:,}) allows {limit('block_limit_shared_mem')} in the "
            f"{launch.shared_mem_config_bytes:,}-byte carveout"
        )
    warps = binding * o.warps_per_block
    pct = 100.0 * warps / a.max_warps_per_sm
    theirs = reported.get("theoretical_occupancy_pct")
    occupancy = (
        f"{_n(pct)}% theoretical occupancy"
        if theirs is None or abs(theirs - pct) < 0.005
        else f"Nsight Compute reports {_n(theirs)}% theoretical occupancy"
    )
    limiters = " and ".join(name for key, name in _LIMITS if final[key] == binding)
    parts.append(
        f"{_count(binding, 'block')} x {_count(o.warps_per_block, 'warp')} = {warps} of "
        f"{a.max_warps_per_sm} warps: {occupancy} (limited by {limiters})"
    )
    return "; ".join(parts)


def what_if(a: occ.Arch, launch: occ.Launch, o: occ.Occupancy, levels: int = 3) -> list[dict]:
    """Occupancy at fewer registers per thread (the largest register count reaching each
    of the next ``levels`` higher occupancies) and at other block sizes (64-1024 threads,
    registers and shared memory per block unchanged)."""
    rows = []
    seen = {o.active_warps_per_sm}
    for r in range(launch.registers_per_thread - 1, 0, -1):
        w = occ.occupancy(
            a,
            occ.Launch(
                r,
                launch.block_size,
                launch.shared_mem_config_bytes,
                launch.static_shared_mem_bytes,
                launch.dynamic_shared_mem_bytes,
            ),
        )
        if w.active_warps_per_sm > max(seen):
            seen.add(w.active_warps_per_sm)
            rows.append(
                {"if_registers_per_thread": r, "if_block_size": launch.block_size, "occupancy_pct": w.occupancy_pct}
            )
            if len(rows) == levels:
                break
    for b in (64, 128, 256, 512, 1024):
        if b != launch.block_size:
            w = occ.occupancy(
                a,
                occ.Launch(
                    launch.registers_per_thread,
                    b,
                    launch.shared_mem_config_bytes,
                    launch.static_shared_mem_bytes,
                    launch.dynamic_shared_mem_bytes,
                ),
            )
            rows.append(
                {
                    "if_registers_per_thread": launch.registers_per_thread,
                    "if_block_size": b,
                    "occupancy_pct": w.occupancy_pct,
                }
            )
    return rows


def _throughput_sentence(f: dict) -> str:
    return (
        f"Compute (SM) throughput is {_n(f['sm_throughput_pct'])}% and memory throughput "
        f"{_n(f['memory_throughput_pct'])}% of peak"
    )


def _scheduler_sentence(f: dict) -> str | None:
    act, eli = f["warps_active_per_scheduler"], f["warps_eligible_per_scheduler"]
    if act is None or eli is None:
        return None
    s = f"Nsight Compute measured {_n(act)} active and {_n(eli)} eligible warps per scheduler"
    issued, util = f["warps_issued_per_scheduler"], f["issue_slot_utilization_pct"]
    rate_pct = util if util else (100 * issued if issued else None)
    if rate_pct:
        s += f"; a scheduler issued an instruction in {_n(rate_pct)}% of cycles (one every {_n(100 / rate_pct, 1)} cycles)"
    if f["no_eligible_pct"] is not None:
        s += f", with no eligible warp in {_n(f['no_eligible_pct'])}% of cycles"
    if f["top_stalls"]:
        s += (
            "; top stalls: "
            + ", ".join(f"{st['reason']} {_n(st['cycles_per_issued_instruction'], 1)}" for st in f["top_stalls"])
            + " cycles per issued instruction"
        )
    return s


def _launch_problem(f: dict) -> str | None:
    """The launch rule that fires, in words, or None."""
    grid, sms, waves = f["grid_size"], f["sm_count"], f["waves_per_sm"]
    in_waves = f" ({_n(waves)} waves per SM)" if waves is not None else ""
    if grid is not None and sms and grid < sms:
        return (
            f"the grid has {grid:,} blocks for {sms} SMs{in_waves}, so some SMs get none "
            "(Nsight Compute LaunchStats rule: a grid smaller than the number of SMs)"
        )
    if waves is not None and waves < WAVES_THRESHOLD:
        grid_text = f"{grid:,} blocks fill" if grid is not None else "the grid fills"
        return (
            f"{grid_text} only {_n(waves)} waves of the {sms or '?'} SMs "
            f"(Nsight Compute SpeedOfLight rule: under {WAVES_THRESHOLD:g} wave the grid is too small)"
        )
    theo, ach = f["theoretical_occupancy_pct"], f["achieved_occupancy_pct"]
    if waves is not None and theo and ach is not None:
        whole = math.floor(waves)
        partial = waves - whole
        tail = 0.0 if partial == 0 else 1.0 / (whole + 1)
        if whole >= 1 and tail >= TAIL_EFFECT_MIN and ach < theo * TAIL_ACHIEVED_FRACTION:
            return (
                f"{_n(waves)} waves: the last, partial wave may take up to {_n(100 * tail, 1)}% of the runtime "
                f"and achieved occupancy {_n(ach)}% is under 80% of the theoretical {_n(theo)}% "
                "(Nsight Compute LaunchStats rule: tail effect)"
            )
    return None


def diagnose(k: KernelProfile) -> Diagnosis:
    """Diagnose one kernel; see the module docstring for the verdicts and thresholds."""
    if k.profiling_failed:
        return Diagnosis(
            k,
            "profiling failed",
            "ncu collected no values for this kernel (all NaN or n/a): the replay failed, nothing to diagnose.",
        )
    f = _facts(k)
    a = occ.ARCHS.get(k.cc or "")
    launch = _launch(f)
    o = occ.occupancy(a, launch) if a and launch else None
    rows = what_if(a, launch, o) if o else []
    arithmetic = occupancy_arithmetic(a, launch, o, f) if o else None

    sm, mem = f["sm_throughput_pct"], f["memory_throughput_pct"]
    sentences = []
    if sm is not None and mem is not None and max(sm, mem) >= LATENCY_BOUND_PCT:
        verdict = "compute-bound" if sm >= mem else "memory-bound"
        unit = "SM" if sm >= mem else "memory"
        level = (
            "near peak"
            if max(sm, mem) >= NEAR_PEAK_PCT
            else "the busier unit, at or above the 60% below which ncu reads latency issues"
        )
        sentences.append(f"{_throughput_sentence(f)}: {unit} is {level}")
    else:
        problem = _launch_problem(f)
        if problem:
            verdict = "launch/tail-bound"
            if sm is not None and mem is not None:
                sentences.append(f"{_throughput_sentence(f)}, both under {LATENCY_BOUND_PCT:g}%")
            sentences.append(f"too few blocks: {problem}")
        elif sm is not None and mem is not None:
            verdict = "latency-bound"
            sentences.append(
                f"{_throughput_sentence(f)}, both under the {LATENCY_BOUND_PCT:g}% below which Nsight Compute's "
                "SpeedOfLight rule reads latency issues, with enough blocks to fill the GPU"
            )
        else:
            verdict = "undetermined"
            sentences.append(
                "the report holds no SM or memory throughput (no SpeedOfLight section), and no launch rule applies"
            )
    if arithmetic:
        sentences.append(arithmetic)
    sched = _scheduler_sentence(f)
    if sched:
        sentences.append(sched)
    if verdict == "latency-bound":
        issued = f["warps_issued_per_scheduler"]
        starved = issued is not None and issued < ISSUE_ACTIVE_TARGET
        sentences.append(
            "latency-starved: too few eligible warps to hide each warp's stalls"
            if starved
            else "the schedulers still issue often; look at the stall reasons and memory access patterns"
        )
    if f["local_memory_instructions"]:
        sentences.append(f"{_n(f['local_memory_instructions'])} local-memory instructions: registers spill")
    f["block_limits_source"] = "ncu" if f["block_limit_registers"] is not None else ("calculator" if o else None)
    if o:
        for key, val in (
            ("block_limit_registers", o.block_limit_registers),
            ("block_limit_shared_mem", o.block_limit_shared_mem),
            ("block_limit_warps", o.block_limit_warps),
            ("block_limit_blocks", o.block_limit_blocks),
            ("theoretical_occupancy_pct", o.occupancy_pct),
        ):
            if f[key] is None:
                f[key] = float(val)
    explanation = ". ".join(s[0].upper() + s[1:] for s in sentences) + "."
    return Diagnosis(k, verdict, explanation, f, rows, o)
