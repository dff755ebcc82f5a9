"""What one ``wanscope profile`` run does: its options, their defaults, and their checks.

Every default of the profile command lives here; sizes, steps and sampling values come from the
preset (``wan/config.py``). With CUDA the default is the 1.3B model at 832x480x81 in bf16;
without it, the ``tiny`` preset in fp32 on the CPU, so ``wanscope profile`` with no argument
runs anywhere. No torch import: the caller says whether CUDA is there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from wanscope.errors import UsageError
from wanscope.wan.cli import fast_mode, parse_size
from wanscope.wan.config import ATTENTION_CHOICES, dit_tokens, get_preset, resolve_cfg

CUDA_PRESET = "wan2.1-t2v-1.3b"
CPU_PRESET = "tiny"
WARMUP_STEPS = 1
PROFILE_STEPS = 3
OUT_DIR = Path("wanscope-profile")
# Text is padded to the DiT's text length, so the prompt changes no shape and no timing.
PROMPT = "A red fox trots through fresh snow in a pine forest at dawn, soft golden light"
KERNELS = ("torch", "triton")


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
        kernels: ``torch`` (reference ops) or ``triton`` (the fused kernels of ``wanscope.kernels``).
        fast: the fast mode's config as ``FastConfig.spec()`` text (``wan/precision.py``), or None
            for the exact mode.
        legacy_step_lookup: the sampler finds its step index with a device ``.item()``.
        device: ``cuda`` or ``cpu``; dtype: ``bf16`` (CUDA) or ``fp32`` (CPU).
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
    kernels: str = "torch"
    cfg_auto: bool = False
    fast: str | None = None

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
        return args


def resolve(
    cuda: bool,
    preset: str | None = None,
    checkpoint: Path | None = None,
    random_weights: bool = False,
    size: str | None = None,
    frames: int | None = None,
    steps: int | None = None,
    warmup: int = WARMUP_STEPS,
    profile_steps: int = PROFILE_STEPS,
    compile: bool = False,
    attention: str = "auto",
    cfg: str | None = None,
    legacy_step_lookup: bool = False,
    kernels: str | None = None,
    parallel: str | None = None,
    mode: str = "exact",
    fast: str | None = None,
) -> ProfileOptions:
    """Fill in the defaults and check the options against each other.

    Args:
        cuda: whether a CUDA device is available (picks the default preset, device, dtype).
        cfg: ``auto`` (the preset's default) resolves by the DiT's token count.
        parallel: the ``--parallel`` mode; under CFG parallel ``auto`` is ``sequential``.
        kernels: None is ``torch``, or ``triton`` in the fast mode (which runs the fused kernels).
        mode: ``exact`` or ``fast``; fast: the fast mode's spec over its defaults
            (``wan.cli.fast_mode``: parsed here, which imports torch).
        Others: as the command-line options; None takes the preset's value.

    Raises:
        UsageError: both --checkpoint and --random-weights, a bad size, negative or too many
            steps (warm-up + profiled steps beyond the schedule), an unknown name, a bad fast-mode
            spec, or the fast mode where it cannot run (``wan.cli.fast_mode``).
    """
    if checkpoint is not None and random_weights:
        raise UsageError("give --checkpoint DIR or --random-weights, not both")
    preset = preset or (CUDA_PRESET if cuda else CPU_PRESET)
    config = get_preset(preset)
    sampling = config.sampling
    height, width = parse_size(size) if size else (sampling.height, sampling.width)
    steps = sampling.steps if steps is None else steps
    if steps < 1:
        raise UsageError(f"--steps must be >= 1, got {steps}")
    if warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {warmup}")
    if profile_steps < 1:
        raise UsageError(f"--profile-steps must be >= 1, got {profile_steps}")
    if warmup + profile_steps > steps:
        raise UsageError(
            f"--warmup {warmup} + --profile-steps {profile_steps} exceed the {steps}-step schedule; "
            f"raise --steps or lower them"
        )
    if attention not in ATTENTION_CHOICES:
        raise UsageError(f"unknown attention backend {attention!r}; known: {', '.join(ATTENTION_CHOICES)}")
    if mode not in ("exact", "fast"):
        raise UsageError(f"unknown mode {mode!r}; known: exact, fast")
    fast_cfg = fast_mode(mode, fast, kernels, parallel)
    fast = None if fast_cfg is None else fast_cfg.spec()
    kernels = kernels or ("torch" if fast_cfg is None else "triton")
    if kernels not in KERNELS:
        raise UsageError(f"unknown kernels {kernels!r}; known: {', '.join(KERNELS)}")
    frames = sampling.frames if frames is None else frames
    cfg = cfg or sampling.cfg
    cfg_parallel = parallel is not None and parallel != "ulysses"
    return ProfileOptions(
        preset=preset,
        checkpoint=checkpoint,
        height=height,
        width=width,
        frames=frames,
        steps=steps,
        warmup=warmup,
        profile_steps=profile_steps,
        compile=compile,
        attention=attention,
        cfg=resolve_cfg(cfg, dit_tokens(config, height, width, frames), cfg_parallel),
        legacy_step_lookup=legacy_step_lookup,
        device="cuda" if cuda else "cpu",
        dtype="bf16" if cuda else "fp32",
        kernels=kernels,
        cfg_auto=cfg == "auto",
        fast=fast,
    )
