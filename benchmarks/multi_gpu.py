"""Multi-GPU denoising steps: one GPU vs ``--parallel cfg`` vs ``--parallel ulysses`` (issue 10),
and diffusers' own context parallelism (``ContextParallelConfig(ulysses_degree=2)``), all in one
run.

Default: Wan2.1 1.3B at 832x480x81 (latents [1, 16, 21, 60, 104], L = 32,760 tokens), random
weights, bf16, sdpa attention, 512 text tokens (random text states: the text encoder is not
part of a step). A step is what one iteration of the denoising loop costs: both CFG branches
(two DiT forwards, cond and uncond) plus, for ours, the UniPC update. Cases, each in its own
process group started with ``python -m torch.distributed.run``:

- ``ours_1gpu``: ``wanscope.wan.pipeline.denoise`` on one GPU (the baseline);
- ``ours_cfg_2gpu``: the same on 2 GPUs, one CFG branch per GPU, one all-gather per step;
- ``ours_ulysses_Ngpu``: N GPUs, 1/N of the tokens per GPU, all-to-alls around attention, for
  each head grouping of ``--head-groups`` in the same process group (``g=1``: the all-to-alls
  not overlapped; ``g=3``: 3 head groups pipelined with attention; ``g=1+4+1``: explicit group
  sizes; ``parallel/ulysses.py``), over the transport its suffix names (``@nccl``,
  ``@copy-engine``: ``parallel/exchange.py``; none: ``plan.ulysses_transport``'s default, copy
  engines on one host's GPUs), NCCL's on the high-priority stream ``setup_from_env`` gives the
  Ulysses group, and those of ``--normal-priority`` again on a normal-priority one;
- ``ours_cfg+ulysses_Ngpu`` (N >= 4): 2 CFG branches x Ulysses over N/2;
- ``diffusers_1gpu``: diffusers' ``WanTransformer3DModel``, two forwards per step;
- ``diffusers_ulysses_Ngpu``: the same with ``enable_parallelism(ContextParallelConfig(ulysses_degree=N))``.

``--gpus 1,2`` (default) plans the 2-GPU cases; ``--gpus 1,2,4,8`` the scaling runs of issue 11
(Ulysses only where the 12 heads divide: not over 8; ``plan_cases``). ``--only`` picks cases.

Each case (each Ulysses variant) runs ``--warmup`` steps, then ``--steps`` steps, each timed on
rank 0 with CUDA events recorded between steps (the loop never waits on the host, so events
time the GPU's steps); the median is reported with min and max, and the peak memory of rank 0.
Our parallel cases' final latents are compared with ``ours_1gpu`` (relative L2 error; CFG
parallel should be exactly equal, Ulysses differs by bf16 rounding order and not at all
between head groupings). Then every Ulysses variant runs one more step under torch.profiler
on every rank: per rank, the step's communication kernel time and how much of it no compute
kernel overlapped (``exposed``: |comm u compute| - |compute| over the step's kernels, the
definition of ``wanscope analyze``'s ranks section), for the all-to-alls (``SendRecv``/
``AllToAll`` kernels) and all communication. A case that fails is recorded with its error
(last line) and the run goes on. NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1
are set for every case: NVLink multicast stays off on the shared machines these runs use, where a
program using it can take the host's GPUs out of service.

Prints a table (speedup and scaling efficiency over the same implementation on one GPU, ours
against diffusers on as many GPUs, the goals of issues 10 and 11), writes the JSON (one row per
case in ``cases``, the date and the commit) to ``--out``: a folder gets
``multi_gpu-YYYY-MM-DD[-LABEL].json`` (``--label``), a name ending in .json is the file itself.
Ends with one line of JSON.
``--smoke`` runs the same code on the tiny preset on the CPU (gloo); diffusers' context
parallelism needs an accelerator and is recorded as failed there.

On 2x H200 (device tool, kind nvidia-h200-x2, Python 3.12, torch 2.11; the diffusers wheel
carried in ``.whl/``; wanscope from ``src/`` without an install; about 4 minutes)::

    export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/diffusers-*.whl
    export PYTHONPATH=/tmp/site:$PWD/src
    timeout 560 python3 benchmarks/multi_gpu.py --out "$OUT"

On 4 or 8 GPUs (kinds nvidia-h200-x4/-x8, when lent): ``--gpus 1,2,4`` or ``--gpus 1,2,4,8``
(split with ``--only`` if the cases do not fit in one 10-minute call).

CPU smoke test (about two minutes on 2 cores)::

    python benchmarks/multi_gpu.py --smoke --out /tmp/multi_gpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))  # run from a plain checkout: no install of wanscope needed

GIB = 2**30
STEP_RANGE = "wanscope/bench/profiled_step"  # the profiled step's host range (profile_step)
# per-step speedup over one GPU that issues 10 (2 GPUs) and 11 (4 and 8 GPUs) ask of ours
GOALS = {2: 1.9, 4: 3.4, 8: 6.0}


def plan_cases(gpu_counts: list[int], num_heads: int) -> dict[str, tuple[int, str, str | None]]:
    """name -> (processes, implementation, --parallel mode) for each GPU count: on 1 GPU ours and
    diffusers; on 2, CFG parallel; on N, Ulysses over N where the heads divide N, CFG x Ulysses
    (2 x N/2) from 4 GPUs where they divide N/2, and diffusers' Ulysses over N where they divide N."""
    cases: dict[str, tuple[int, str, str | None]] = {}
    for n in gpu_counts:
        if n == 1:
            cases["ours_1gpu"] = (1, "ours", None)
            cases["diffusers_1gpu"] = (1, "diffusers", None)
            continue
        if n == 2:
            cases["ours_cfg_2gpu"] = (2, "ours", "cfg")
        if num_heads % n == 0:
            cases[f"ours_ulysses_{n}gpu"] = (n, "ours", "ulysses")
        if n >= 4 and n % 2 == 0 and num_heads % (n // 2) == 0:
            cases[f"ours_cfg+ulysses_{n}gpu"] = (n, "ours", "cfg+ulysses")
        if num_heads % n == 0:
            cases[f"diffusers_ulysses_{n}gpu"] = (n, "diffusers", "ulysses")
    return cases


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="wan2.1-t2v-1.3b")
    p.add_argument("--size", default="832x480", help="WIDTHxHEIGHT")
    p.add_argument("--frames", type=int, default=81)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (cuDNN plans, allocator, NCCL setup)")
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--kernels", choices=["torch", "triton"], default="torch", help="our DiT's block kernels")
    p.add_argument("--gpus", default="1,2", help="comma-separated GPU counts (see plan_cases)")
    p.add_argument("--only", help="comma-separated subset of the planned case names")
    p.add_argument(
        "--head-groups",
        default="1@nccl,2@nccl,1@copy-engine,2@copy-engine,3@copy-engine,6@copy-engine",
        help="Ulysses head groupings to time, comma-separated: a count (3) or sizes (1+4+1), "
        "'@copy-engine' or '@nccl' after one picks its transport (parallel/exchange.py; "
        "default plan.ulysses_transport's); those that do not fit a case's heads per rank "
        "are skipped",
    )
    p.add_argument(
        "--normal-priority",
        default="2@nccl",
        help="of those, the ones to time again with the all-to-alls on a normal-priority stream ('' for none)",
    )
    p.add_argument("--no-profile", action="store_true", help="skip the profiled step of each Ulysses variant")
    p.add_argument("--case-timeout", type=int, default=300, help="seconds per case")
    p.add_argument("--smoke", action="store_true", help="tiny preset at 64x48x5 on the CPU (gloo)")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder for multi_gpu-YYYY-MM-DD[-LABEL].json, or the JSON file to write (a name ending in .json)",
    )
    p.add_argument("--label", default=None, help="what the run is, for the file name in a folder --out")
    p.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case as a torchrun worker
    p.add_argument("--impl", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)  # internal: where the worker writes
    args = p.parse_args(argv)
    if args.smoke:
        args.preset, args.size, args.frames = "tiny", "64x48", 5
    return args


# ---------------------------------------------------------------- worker side (one rank)


class _Clock:
    """Step ends: CUDA events on a GPU (recording one is no host sync), host time on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self):
        import torch

        if self.cuda:
            self.marks.append(torch.cuda.Event(enable_timing=True))
            self.marks[-1].record()
        else:
            self.marks.append(time.perf_counter())

    def step_ms(self) -> list[float]:
        """Milliseconds between consecutive marks (on a GPU, after waiting for the last)."""
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [1000 * (b - a) for a, b in zip(self.marks, self.marks[1:])]


def _inputs(cfg, height, width, frames, device, dtype):
    """Seeded text states (cond, uncond [1, Lc, text_dim]) and noise [1, C, F, H, W], equal on
    every rank."""
    import torch

    from wanscope.wan.pipeline import initial_noise, latent_shape

    g = torch.Generator().manual_seed(0)
    cond = torch.randn(1, cfg.dit.text_len, cfg.dit.text_dim, generator=g).to(device, dtype)
    uncond = torch.randn(1, cfg.dit.text_len, cfg.dit.text_dim, generator=g).to(device, dtype)
    return cond, uncond, initial_noise(latent_shape(cfg, height, width, frames), 0, device)


def _peak(device) -> int | None:
    import torch

    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def ulysses_variants(args, heads_per_rank: int) -> list[tuple[str, str, bool]]:
    """(label, head groups as given, high priority) of each Ulysses variant to time: every grouping of
    ``--head-groups`` that fits ``heads_per_rank`` on the high-priority stream, then those of
    ``--normal-priority`` on a normal one; a grouping that gives the same group sizes as an
    earlier one (a count above ``heads_per_rank``) is not run twice."""
    from wanscope.errors import UsageError
    from wanscope.parallel.plan import head_group_sizes, parse_head_groups

    out, seen = [], set()
    for option, high_priority in ((args.head_groups, True), (args.normal_priority, False)):
        for spec in (t.strip() for t in option.split(",") if t.strip()):
            groups, _, transport = spec.partition("@")
            try:
                key = (tuple(head_group_sizes(heads_per_rank, parse_head_groups(groups))), high_priority, transport)
            except UsageError:
                continue
            if key not in seen:
                seen.add(key)
                out.append((f"g={spec}" + ("" if high_priority else " normal-priority"), spec, high_priority))
    return out


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total, end = total + stop - start, stop
        elif stop > end:
            total, end = total + stop - end, stop
    return total


def exposed_communication(trace: Path) -> dict:
    """Communication in one profiled step, from the kernels of a Kineto trace (times in ms).

    The step is the kernels that start after the host entered the ``STEP_RANGE`` range (all of
    them in a trace without it): not the barrier before it, whose NCCL kernel spins while the
    other rank is still starting its profiler. ``*_ms``: summed kernel time;
    ``exposed_*_ms``: time in which those kernels ran and no compute kernel did
    (|X u compute| - |compute|, compute = every non-NCCL kernel; memory operations are
    neither, as in ``wanscope.analysis.ranks``); for the all-to-alls (NCCL's
    ``SendRecv``/``AllToAll`` kernels) and for all NCCL kernels. An NCCL kernel that waits for
    a late peer counts as exposed for the time it waits. The copy-engine transport's barriers
    (symmetric memory's ``barrier_kernel``) count as communication, its copies (``gpu_memcpy``
    events) as ``copy_engine_ms`` and ``exposed_copy_engine_ms``. ``{"kernels": 0}`` without
    GPU kernels.
    """
    events = json.loads(trace.read_text())["traceEvents"]
    starts = [float(e["ts"]) for e in events if e.get("ph") == "X" and e.get("name") == STEP_RANGE]
    since_ns = round(min(starts) * 1000) if starts else None
    kernels = [
        (round(float(e["ts"]) * 1000), round(float(e["dur"]) * 1000), e["name"].lower())
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "kernel"
    ]
    kernels = [k for k in kernels if since_ns is None or k[0] >= since_ns]
    if not kernels:
        return {"kernels": 0}
    copies = [
        (round(float(e["ts"]) * 1000), round(float(e["dur"]) * 1000))
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy"
    ]
    copies = [(s, s + d) for s, d in copies if since_ns is None or s >= since_ns]
    span = [(s, s + d) for s, d, _ in kernels]
    is_comm = ["nccl" in n or "barrier_kernel" in n for _, _, n in kernels]
    compute = [iv for iv, c in zip(span, is_comm) if not c]
    comm = [iv for iv, c in zip(span, is_comm) if c]
    a2a = [iv for iv, (_, _, n) in zip(span, kernels) if "nccl" in n and ("sendrecv" in n or "alltoall" in n)]
    busy = _union_ns(compute)

    def ms(ns):
        return round(ns / 1e6, 3)

    return {
        "kernels": len(kernels),
        "step_gpu_ms": ms(max(e for _, e in span) - min(s for s, _ in span)),
        "all_to_all_count": len(a2a),
        "all_to_all_ms": ms(sum(e - s for s, e in a2a)),
        "exposed_all_to_all_ms": ms(_union_ns(a2a + compute) - busy),
        "communication_ms": ms(sum(e - s for s, e in comm)),
        "copy_engine_ms": ms(sum(e - s for s, e in copies)),
        "exposed_copy_engine_ms": ms(_union_ns(copies + compute) - busy),
        "exposed_communication_ms": ms(_union_ns(comm + compute) - busy),
    }


def run_ours(args, mode, height, width) -> dict:
    import torch
    import torch.distributed as dist

    from wanscope.parallel import setup_from_env, shard_dit
    from wanscope.parallel.group import with_ulysses_priority
    from wanscope.parallel.plan import parse_head_groups
    from wanscope.wan.config import get_preset
    from wanscope.wan.pipeline import Components, denoise
    from wanscope.wan.sampler import FlowSampler, flow_schedule

    cfg = get_preset(args.preset)
    device_type = "cpu" if args.smoke else "cuda"
    dtype = torch.float32 if args.smoke else torch.bfloat16
    ctx = setup_from_env(mode, device_type, num_heads=cfg.dit.num_heads) if mode else None
    device = ctx.device if ctx else torch.device(device_type)
    rank = ctx.rank if ctx else 0
    with ctx or contextlib.nullcontext():
        # seeded: equal weights on every rank
        dit = Components(config=cfg, device=device, dtype=dtype, kernels=args.kernels).dit()
        cond, uncond, noise = _inputs(cfg, height, width, args.frames, device, dtype)
        total = args.warmup + args.steps
        # the real 50-step schedule (longer in a smoke run with more steps than the tiny preset's 4)
        schedule = flow_schedule(max(cfg.sampling.steps, total), cfg.sampling.shift)
        variants = [(None, None, True)]
        if ctx and ctx.ulysses_degree > 1:
            variants = ulysses_variants(args, cfg.dit.num_heads // ctx.ulysses_degree)
        contexts = {True: ctx}
        rows = []
        for label, groups, high_priority in variants:
            if high_priority not in contexts:
                contexts[high_priority] = with_ulysses_priority(ctx, high_priority)
            vctx = contexts[high_priority]
            if groups is not None:
                sizes, _, transport = groups.partition("@")
                # replaces the previous variant's hooks
                shard_dit(vctx, dit, parse_head_groups(sizes), transport or None)
            clock = _Clock(device)
            clock.mark()
            latents = denoise(
                dit,
                noise,
                cond,
                uncond,
                FlowSampler(schedule),
                cfg.sampling.guidance,
                stop=total,
                on_step=lambda i, _x, mark=clock.mark: mark(),
                parallel=vctx,
            )
            row = {
                "variant": label,
                "head_groups": groups,
                "comm_priority": None if groups is None else ("high" if high_priority else "normal"),
                "step_ms": clock.step_ms()[args.warmup :],
                "peak_memory_bytes": _peak(device),
            }
            name = "latents.pt" if label is None else f"latents-{label.replace(' ', '-')}.pt"
            if rank == 0:
                torch.save(latents.cpu(), args.work / name)
                row["latents"] = name
            if groups is not None and not args.no_profile:
                row["profile"] = profile_step(args, dit, noise, cond, uncond, schedule, cfg, vctx, label)
            rows.append(row)
        if ctx:
            dist.barrier()
        return {"rank": rank, "rows": rows}


def profile_step(args, dit, noise, cond, uncond, schedule, cfg, ctx, label) -> list[dict]:
    """One step under torch.profiler on every rank; every rank's ``exposed_communication`` of
    it, in rank order."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from wanscope.wan.pipeline import denoise
    from wanscope.wan.sampler import FlowSampler

    cuda = ctx.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        # Meet inside the profiler: its first start (CUPTI setup) takes each rank a different
        # time, and a barrier before it left the other rank ~0.6 s behind in the first profiled
        # variant (g=1 on 2x H200: rank 0's all-to-all kernels 603 ms, 594 ms "exposed", of
        # waiting). exposed_communication counts from STEP_RANGE on, after this barrier.
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        with record_function(STEP_RANGE):
            denoise(dit, noise, cond, uncond, FlowSampler(schedule), cfg.sampling.guidance, stop=1, parallel=ctx)
        if cuda:
            torch.cuda.synchronize()
    trace = args.work / f"trace-{label.replace(' ', '-')}-rank{ctx.rank}.json"
    prof.export_chrome_trace(str(trace))
    mine = {"rank": ctx.rank, **exposed_communication(trace)}
    trace.unlink()
    everyone: list = [None] * ctx.world_size
    dist.all_gather_object(everyone, mine)
    return everyone


def run_diffusers(args, mode, height, width) -> dict:
    import torch
    import torch.distributed as dist
    from diffusers import WanTransformer3DModel

    from wanscope.wan.config import get_preset

    cfg = get_preset(args.preset)
    d = cfg.dit
    if args.smoke:
        device, dtype = torch.device("cpu"), torch.float32
    else:
        device, dtype = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))), torch.bfloat16
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    with torch.device(device):
        model = WanTransformer3DModel(
            patch_size=d.patch_size,
            num_attention_heads=d.num_heads,
            attention_head_dim=d.head_dim,
            in_channels=d.in_channels,
            out_channels=d.out_channels,
            text_dim=d.text_dim,
            freq_dim=d.freq_dim,
            ffn_dim=d.ffn_dim,
            num_layers=d.num_layers,
            cross_attn_norm=d.cross_attn_norm,
            qk_norm="rms_norm_across_heads",
            eps=d.eps,
        )
    model = model.to(dtype).eval().requires_grad_(False)
    rank = 0
    if mode == "ulysses":
        from diffusers import ContextParallelConfig

        dist.init_process_group("gloo" if args.smoke else "nccl", device_id=None if args.smoke else device)
        rank = dist.get_rank()
        model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=dist.get_world_size()))
    cond, uncond, latents = _inputs(cfg, height, width, args.frames, device, dtype)
    latents = latents.to(dtype)
    t = torch.tensor([999.0], device=device)
    clock = _Clock(device)
    try:
        with torch.no_grad():
            clock.mark()
            for _ in range(args.warmup + args.steps):
                for context in (cond, uncond):
                    model(hidden_states=latents, timestep=t, encoder_hidden_states=context, return_dict=False)
                clock.mark()
        return {
            "rank": rank,
            "rows": [
                {
                    "variant": None,
                    "head_groups": None,
                    "comm_priority": None,
                    "step_ms": clock.step_ms()[args.warmup :],
                    "peak_memory_bytes": _peak(device),
                }
            ],
        }
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def worker(args) -> None:
    """One rank of one case; rank 0 writes ``result.json`` into ``--work``."""
    width, height = (int(v) for v in args.size.lower().split("x"))
    result = (run_ours if args.impl == "ours" else run_diffusers)(args, args.mode or None, height, width)
    if result["rank"] == 0:
        (args.work / "result.json").write_text(json.dumps(result))


# ---------------------------------------------------------------- driver side


def run_case(args, name: str, procs: int, impl: str, mode: str | None, work: Path) -> list[dict]:
    """The rows of one case (one per Ulysses variant, else one), or one row with its error."""
    work.mkdir(parents=True, exist_ok=True)
    passthrough = [
        "--preset",
        args.preset,
        "--size",
        args.size,
        "--frames",
        str(args.frames),
        "--warmup",
        str(args.warmup),
        "--steps",
        str(args.steps),
        "--kernels",
        args.kernels,
        "--head-groups",
        args.head_groups,
        "--normal-priority",
        args.normal_priority,
        *(["--no-profile"] if args.no_profile else []),
        "--out",
        str(args.out),
        "--case",
        name,
        "--impl",
        impl,
        "--mode",
        mode or "",
        "--work",
        str(work),
    ] + (["--smoke"] if args.smoke else [])
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(procs),
        __file__,
        *passthrough,
    ]
    row = {"case": name, "implementation": impl, "parallel": mode, "gpus": procs}
    try:
        r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=args.case_timeout)
    except subprocess.TimeoutExpired:
        return [{**row, "error": f"timed out after {args.case_timeout} s"}]
    if r.returncode != 0 or not (work / "result.json").exists():
        # the worker's exception ("ValueError: ...", "[rank0]: ValueError: ..."), else the last line
        lines = [ln for ln in r.stderr.splitlines() if re.match(r"(\[rank\d+\]: )?\w+(Error|Exception)\b", ln)]
        lines = lines or [ln for ln in r.stderr.splitlines() if ln.strip()] or [f"exit code {r.returncode}"]
        return [{**row, "error": lines[-1][:500]}]
    res = json.loads((work / "result.json").read_text())
    rows = []
    for sub in res["rows"]:
        ms = sub["step_ms"]
        rows.append(
            {
                **row,
                "case": name if sub["variant"] is None else f"{name} {sub['variant']}",
                "head_groups": sub["head_groups"],
                "comm_priority": sub["comm_priority"],
                "step_ms_median": round(statistics.median(ms), 3),
                "step_ms_min": round(min(ms), 3),
                "step_ms_max": round(max(ms), 3),
                "step_ms": [round(v, 3) for v in ms],
                "peak_memory_gib": None
                if sub["peak_memory_bytes"] is None
                else round(sub["peak_memory_bytes"] / GIB, 3),
                "latents": None if sub.get("latents") is None else str(work / sub["latents"]),
                **({"profile": sub["profile"]} if "profile" in sub else {}),
            }
        )
    return rows


def rel_l2(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def main(args) -> dict:
    import torch

    from wanscope.wan.config import get_preset

    cases = plan_cases([int(n) for n in args.gpus.split(",")], get_preset(args.preset).dit.num_heads)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in cases]
        if unknown:
            raise SystemExit(f"unknown case(s) {unknown}; planned: {', '.join(cases)}")
        cases = {n: cases[n] for n in names}
    work = Path(tempfile.mkdtemp(prefix="wanscope-multi-gpu-"))
    rows = []
    for name, (procs, impl, mode) in cases.items():
        for row in run_case(args, name, procs, impl, mode, work / name):
            rows.append(row)
            print(
                f"{row['case']}: " + (row.get("error") or f"{row['step_ms_median']} ms/step"),
                file=sys.stderr,
                flush=True,
            )
    by = {r["case"]: r for r in rows}
    base = by.get("ours_1gpu", {}).get("latents")
    for row in rows:
        one = by.get(f"{row['implementation']}_1gpu", {})
        if row["gpus"] > 1 and "step_ms_median" in row and "step_ms_median" in one:
            row["speedup_vs_1gpu"] = round(one["step_ms_median"] / row["step_ms_median"], 3)
            row["efficiency_pct"] = round(100 * row["speedup_vs_1gpu"] / row["gpus"], 1)
        theirs = by.get(f"diffusers_ulysses_{row['gpus']}gpu", {})
        if row["implementation"] == "ours" and "step_ms_median" in row and "step_ms_median" in theirs:
            row["speedup_vs_diffusers_ulysses"] = round(theirs["step_ms_median"] / row["step_ms_median"], 3)
    for row in rows:  # after every comparison: the paths point into the run's temporary folder
        mine = row.pop("latents", None)
        if row["implementation"] == "ours" and row["parallel"] and base and mine:
            row["rel_l2_vs_ours_1gpu"] = rel_l2(torch.load(mine), torch.load(base))
    result = {
        "benchmark": "multi_gpu",
        "date": datetime.date.today().isoformat(),
        "preset": args.preset,
        "size": args.size,
        "frames": args.frames,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "kernels": args.kernels,
        "smoke": args.smoke,
        "head_groups": args.head_groups,
        "normal_priority": args.normal_priority,
        "torch": torch.__version__,
        "cuda_devices": torch.cuda.device_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "env": {k: os.environ[k] for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")},
        "goals": {f"{n}gpu": g for n, g in GOALS.items()},
        "cases": rows,
    }
    try:
        import diffusers

        result["diffusers"] = diffusers.__version__
    except ImportError:
        result["diffusers"] = None
    from _common import git_commit, write_result

    if args.out.suffix == ".json":
        result["commit"] = git_commit()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2))
        tmp.replace(args.out)
    else:
        write_result(args.out, "multi_gpu", result, args.label)
    print_table(result)
    print(json.dumps(result))
    return result


def print_table(result: dict) -> None:
    print(
        f"\n{result['preset']} {result['size']}x{result['frames']}, {result['timed_steps']} timed steps after "
        f"{result['warmup_steps']} warm-up; {result['gpu'] or 'CPU'}, torch {result['torch']}, "
        f"diffusers {result['diffusers']}"
    )
    width = max([26] + [len(r["case"]) for r in result["cases"]])
    header = (
        f"{'case':<{width}} {'GPUs':>4} {'median ms/step':>15} {'min':>9} {'max':>9} {'speedup':>8} "
        f"{'eff. %':>7} {'vs diffusers':>12} {'peak GiB':>9} {'rel L2 vs 1 GPU':>16} "
        f"{'a2a ms/step':>12} {'exposed':>8}"
    )
    print(header)
    print("-" * len(header))

    def cell(row, key, fmt):
        return "-" if row.get(key) is None else format(row[key], fmt)

    def worst(row, key):  # the profiled step's figure of the rank where it is largest
        values = [p.get(key) for p in row.get("profile") or [] if p.get(key) is not None]
        return "-" if not values else f"{max(values):.2f}"

    for r in result["cases"]:
        if "error" in r:
            print(f"{r['case']:<{width}} {r['gpus']:>4} failed: {r['error']}")
            continue
        print(
            f"{r['case']:<{width}} {r['gpus']:>4} {r['step_ms_median']:>15,.1f} {r['step_ms_min']:>9,.1f} "
            f"{r['step_ms_max']:>9,.1f} {cell(r, 'speedup_vs_1gpu', '.3f'):>8} {cell(r, 'efficiency_pct', '.1f'):>7} "
            f"{cell(r, 'speedup_vs_diffusers_ulysses', '.3f'):>12} {cell(r, 'peak_memory_gib', '.2f'):>9} "
            f"{cell(r, 'rel_l2_vs_ours_1gpu', '.2e'):>16} {worst(r, 'all_to_all_ms'):>12} "
            f"{worst(r, 'exposed_all_to_all_ms'):>8}"
        )
    print(
        "a2a ms/step, exposed: the all-to-all kernels' time in one profiled step, and the part of it no compute "
        "kernel overlapped (the larger of the ranks)"
    )
    for r in result["cases"]:
        goal = GOALS.get(r["gpus"])
        if r["implementation"] == "ours" and goal and r.get("speedup_vs_1gpu") is not None:
            verdict = "met" if r["speedup_vs_1gpu"] >= goal else "NOT met"
            print(f"goal {r['case']}: >= {goal}x over one GPU: {r['speedup_vs_1gpu']:.3f}x, {verdict}")


if __name__ == "__main__":
    _args = parse_args()
    if _args.case:
        worker(_args)
    else:
        main(_args)
