"""What one ``wanscope profile`` run does: the engine's options (``wan/options.py``, as for
``generate``) and the profile's own: warm-up and profiled steps, regional compilation.

With CUDA the default is the 1.3B model at 832x480x81 in bf16; without it and without a
checkpoint, the ``tiny`` preset in fp32 on the CPU, so ``wanscope profile`` with no argument runs
anywhere. The caller says how many CUDA devices there are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from wanscope.errors import UsageError
from wanscope.wan.options import resolve_engine

WARMUP_STEPS = 1
PROFILE_STEPS = 3
OUT_DIR = Path("wanscope-profile")
# Text is padded to the DiT's text length, so the prompt changes no shape and no timing.
PROMPT = "A red fox trots through fresh snow in a pine forest at dawn, soft golden light"


@dataclass(frozen=True)
class ProfileOptions:
    """A resolved profile run (every default filled in).

    Attributes:
        preset: preset name (``wan/config.py``); a checkpoint's own config sets the DiT.
        checkpoint: Wan2.1 checkpoint folder, or None for random weights.
        height, width: video size in pixels; frames: 4k+1 video frames.
        steps: length of the sampling schedule (the real one: the profiled steps are steps of it).
        warmup: denoising steps run before the profiled ones (compilation, autotuning, caches).
        profile_steps: denoising steps profiled after the warm-up.
        compile: regional ``torch.compile`` of the repeated DiT block.
        attention: attention backend name (``wan/attention.py``).
        cfg: the CFG mode that runs: ``sequential`` (two forwards per step) or ``batched``
            (one B=2 forward).
        cfg_auto: ``cfg`` was chosen by ``--cfg auto`` (``wan/config.py`` ``resolve_cfg``).
        kernels: the DiT's ops that run: ``torch`` (reference ops) or ``triton`` (the fused kernels
            of ``wanscope.kernels``).
        fast: the fast mode's config as ``FastConfig.spec()`` text (``wan/precision.py``), or None
            for the exact mode.
        legacy_step_lookup: the sampler finds its step index with a device ``.item()``.
        device: ``cuda`` or ``cpu``; dtype: ``bf16`` (CUDA) or ``fp32`` (CPU).
        memory_budget: ``--memory-budget`` in GiB, or None (``wan/memory_plan.py`` ``plan_for``).
    """

    preset: str
    checkpoint: Path | None
    height: int
    width: int
    frames: int
    steps: int
    warmup: int
    profile_steps: int
    compile: bool
    attention: str
    cfg: str
    legacy_step_lookup: bool
    device: str
    dtype: str
    kernels: str
    cfg_auto: bool
    fast: str | None
    memory_budget: float | None = None

    @property
    def random_weights(self) -> bool:
        return self.checkpoint is None

    @property
    def profiled_steps(self) -> list[int]:
        """Indices (0-based, in the schedule) of the profiled steps."""
        return list(range(self.warmup, self.warmup + self.profile_steps))

    def with_steps(self, warmup: int, profile_steps: int) -> ProfileOptions:
        """The same run with another warm-up and profiled-step count."""
        return replace(self, warmup=warmup, profile_steps=profile_steps)

    def cli_args(self) -> list[str]:
        """``wanscope profile`` arguments that reproduce these options in a child process
        (the nsys and ncu captures re-run the profile under their tool)."""
        args = ["--preset", self.preset]
        args += ["--checkpoint", str(self.checkpoint)] if self.checkpoint else ["--random-weights"]
        args += [
            "--size",
            f"{self.width}x{self.height}",
            "--frames",
            str(self.frames),
            "--steps",
            str(self.steps),
            "--warmup",
            str(self.warmup),
            "--profile-steps",
            str(self.profile_steps),
            "--attention",
            self.attention,
            "--cfg",
            "auto" if self.cfg_auto else self.cfg,
            "--kernels",
            self.kernels,
        ]
        if self.compile:
            args.append("--compile")
        if self.legacy_step_lookup:
            args.append("--legacy-step-lookup")
        if self.fast is not None:
            args += ["--mode", "fast", "--fast", self.fast]
        if self.memory_budget is not None:
            args += ["--memory-budget", str(self.memory_budget)]
        return args


def resolve(
    cuda_devices: int,
    *,
    warmup: int = WARMUP_STEPS,
    profile_steps: int = PROFILE_STEPS,
    compile: bool = False,
    **engine,
) -> ProfileOptions:
    """Fill in the defaults and check the options against each other.

    Args:
        cuda_devices: CUDA devices on this machine (``torch.cuda.device_count()``; picks the
            default preset, device and dtype).
        warmup, profile_steps, compile: the profile's own options.
        engine: the engine's options (``wan/options.py`` ``resolve_engine``: preset, checkpoint,
            random_weights, size, frames, steps, cfg, attention, kernels, mode, fast,
            legacy_step_lookup, parallel); ``kernels`` ``auto`` resolves as the DiT does
            (``wan/dit.py`` ``resolve_kernels``), and the fast mode runs the fused kernels.

    Raises:
        UsageError: negative or too many steps (warm-up + profiled steps beyond the schedule), or
            an engine option ``resolve_engine`` refuses.
        InputError: an unusable checkpoint.
    """
    e = resolve_engine(cuda_devices=cuda_devices, prompt=PROMPT, **engine)
    req = e.request
    if warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {warmup}")
    if profile_steps < 1:
        raise UsageError(f"--profile-steps must be >= 1, got {profile_steps}")
    if warmup + profile_steps > req.steps:
        raise UsageError(
            f"--warmup {warmup} + --profile-steps {profile_steps} exceed the {req.steps}-step schedule; "
            f"raise --steps or lower them"
        )
    from wanscope.wan.dit import resolve_kernels

    kernels = "triton" if e.fast is not None else resolve_kernels(e.kernels, e.device, e.dit.qk_norm).value
    if e.memory_budget is not None:  # a budget that cannot hold the run fails here, before any child
        import torch

        from wanscope.wan.memory_plan import plan_for
        from wanscope.wan.pipeline import DTYPES, Components

        parts = Components(config=e.config, device=torch.device(e.device), dtype=DTYPES[e.dtype], fast=e.fast)
        plan_for(parts, req, e.dit, e.memory_budget)
    return ProfileOptions(
        preset=e.preset,
        checkpoint=e.checkpoint,
        height=req.height,
        width=req.width,
        frames=req.frames,
        steps=req.steps,
        warmup=warmup,
        profile_steps=profile_steps,
        compile=compile,
        attention=e.attention,
        cfg=req.cfg,
        legacy_step_lookup=req.legacy_step_lookup,
        device=e.device,
        dtype=e.dtype,
        kernels=kernels,
        cfg_auto=e.cfg_auto,
        fast=None if e.fast is None else e.fast.spec(),
        memory_budget=e.memory_budget,
    )
