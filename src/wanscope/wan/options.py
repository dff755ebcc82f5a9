"""The engine's options, resolved once for every command that runs the engine (``generate``,
``profile``, ``compare-modes``): parsing, defaults, and every check that can be made before a
model loads, so that a bad input costs no minutes. No click here: the commands' option
decorators are ``wan/cli_options.py``.

Names: ``config`` is a model's ``WanConfig`` (``wan/config.py``); ``cfg`` is the classifier-free
guidance mode (``CFG_MODES``), never the config.

Importing this module does not import torch; resolving does (the request, the attention and
fast-mode checks).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wanscope.errors import InputError, UsageError
from wanscope.parallel.plan import (
    DEFAULT_TIMEOUT_S,
    PARALLEL_MODES,
    check_cfg_parallel,
    check_heads,
    check_launcher,
    degrees,
)
from wanscope.wan.config import ATTENTION_CHOICES, KERNEL_CHOICES, DiTConfig, WanConfig, get_preset

if TYPE_CHECKING:  # both import torch
    from wanscope.wan.pipeline import Request
    from wanscope.wan.precision import FastConfig

RANDOM_NOTE = "RANDOM WEIGHTS (no checkpoint): timing/profiling run, not a real video"
CUDA_PRESET = "wan2.1-t2v-1.3b"
CPU_PRESET = "tiny"  # random 1.3B weights on a CPU would take minutes per step
MODES = ("exact", "fast")
DTYPE_CHOICES = ("bf16", "fp32")
MAX_SIDE = 16384  # libx264's largest frame width and height, in pixels
# The import names of the `engine` extra's packages (pyproject.toml) that the engine imports.
ENGINE_MODULES = ("torch", "safetensors", "transformers", "diffusers", "imageio", "PIL", "tqdm")


def require_engine(command: str) -> None:
    """Refuse an engine command where the engine's packages are not installed (the analysis-only
    install, ``pip install wanscope``), before anything imports them.

    Raises:
        UsageError: naming the missing modules and the extra to install.
    """
    missing = [name for name in ENGINE_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"wanscope {command} runs the Wan engine, which this install lacks ({', '.join(missing)} missing): "
            f"pip install 'wanscope[engine]'"
        )


def engine_allocator() -> None:
    """PyTorch's caching allocator with expandable segments for our engine's commands, unless
    ``PYTORCH_CUDA_ALLOC_CONF`` is set: a segment then grows in place instead of a new one being
    cut for each new size, so the memory reserved stays near the memory allocated (the VAE
    decode's many tensor sizes otherwise left gigabytes reserved and unused: benchmarks/RESULTS.md),
    which is what ``--memory-budget`` plans for. Call before CUDA's first allocation, when the
    allocator reads the setting (``docs.pytorch.org/docs/stable/notes/cuda.html``)."""
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")


def parse_size(text: str) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` (as the official CLI: ``832x480``) -> (height, width).

    Raises:
        UsageError: not two integers (ASCII digits) joined by ``x``, or a side over ``MAX_SIDE``.
    """
    m = re.fullmatch(r"\s*([0-9]{1,9})\s*[xX*]\s*([0-9]{1,9})\s*", text)
    if not m:
        raise UsageError(f"--size {text!r}: expected WIDTHxHEIGHT, e.g. 832x480")
    width, height = int(m.group(1)), int(m.group(2))
    if max(width, height) > MAX_SIDE:
        raise UsageError(f"--size {text!r}: at most {MAX_SIDE} pixels a side (the H.264 encoder's limit)")
    return height, width


def parse_device(name: str | None, cuda_devices: int) -> str:
    """``--device`` checked against this machine's ``cuda_devices`` (``torch.cuda.device_count()``):
    ``cpu``, ``cuda`` or ``cuda:N``; None is ``cuda`` where there is a CUDA device, else ``cpu``.

    Raises:
        UsageError: not a device name, a type other than cpu and cuda, or a CUDA device that is not here.
    """
    if name is None:
        return "cuda" if cuda_devices else "cpu"
    m = re.fullmatch(r"(cpu|cuda)(?::([0-9]{1,4}))?", name.strip())
    if not m:
        raise UsageError(f"--device {name!r}: expected cpu, cuda or cuda:N")
    if m.group(1) == "cuda" and not cuda_devices:
        raise UsageError(f"--device {name}: no CUDA device is available here")
    if m.group(2) is not None and m.group(1) == "cuda" and int(m.group(2)) >= cuda_devices:
        raise UsageError(f"--device {name}: there are {cuda_devices} CUDA devices")
    return name.strip()


def require_triton(what: str) -> None:
    """Refuse, before any model loads, a run whose fused kernels need Triton where it is not
    installed (the engine's CPU install has none; CUDA builds of torch bring it).

    Raises:
        UsageError: "``what`` the fused Triton kernels ...: pip install triton".
    """
    if importlib.util.find_spec("triton") is None:
        raise UsageError(f"{what} the fused Triton kernels (their torch references on a CPU): pip install triton")


def check_world_size(parallel: str | None, can_parallel: bool = True) -> None:
    """Refuse several processes (``torchrun``'s ``WORLD_SIZE``) without a ``--parallel`` mode
    (``can_parallel``: the command has one).

    Raises:
        UsageError: WORLD_SIZE > 1 and no mode.
    """
    text = os.environ.get("WORLD_SIZE", "1")
    if not text.isdigit():
        raise UsageError(f"WORLD_SIZE={text!r} in the environment: not a process count")
    if parallel is None and int(text) > 1:
        fix = f"give --parallel {'|'.join(PARALLEL_MODES)}" if can_parallel else "run it as one process"
        raise UsageError(f"launched as {os.environ['WORLD_SIZE']} processes without --parallel; {fix}")


def resolve_fast(
    mode: str, spec: str | None, kernels: str | None, parallel: str | None, fast_runs: str = "--mode fast runs"
) -> FastConfig | None:
    """The fast mode's ``FastConfig`` from ``--mode``/``--fast`` (None for ``--mode exact``).
    Imports torch (through ``wan/precision.py``) only for ``--mode fast``. ``fast_runs`` begins
    the no-Triton message (``require_triton``).

    Raises:
        UsageError: an unknown mode, ``--fast`` without ``--mode fast``, a bad spec, no Triton
            installed, ``--kernels torch`` (the fast mode runs the fused kernels), or a Ulysses
            ``--parallel`` mode (the fast blocks bypass its all-to-alls).
    """
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    if spec is not None and mode != "fast":
        raise UsageError("--fast SPEC configures the fast mode: add --mode fast")
    if mode != "fast":
        return None
    from wanscope.wan.precision import FastConfig

    fast = FastConfig.parse(spec or "")
    require_triton(fast_runs)
    if kernels == "torch":
        raise UsageError("--mode fast runs the fused Triton kernels; drop --kernels torch")
    if parallel in ("ulysses", "cfg+ulysses"):
        raise UsageError(f"--mode fast does not run under --parallel {parallel} (Ulysses) yet; use --parallel cfg")
    return fast


def dit_config(checkpoint: Path | None, config: WanConfig) -> DiTConfig:
    """The DiT that will run: the checkpoint's (its ``config.json`` or its weights' shapes) when
    there is one, else the preset's. The checkpoint's other parts are read as far as their
    headers tell (``wan/weights.py`` ``check_parts``).

    Raises:
        InputError: a checkpoint folder that is not a usable Wan2.1 checkpoint (``wan/weights.py``),
            whose VAE folder's config does not fit the preset (``vae.vae_config_from_json``), or
            whose text encoder's width is not the DiT's ``text_dim``.
    """
    if checkpoint is None:
        return config.dit
    from wanscope.wan.text_encoder import encoder_config
    from wanscope.wan.vae import vae_config_from_json
    from wanscope.wan.weights import check_dit, check_parts, detect_layout

    layout = detect_layout(checkpoint)
    check_parts(layout)
    if layout.vae.is_dir():
        vae_config_from_json(layout.vae / "config.json", config.vae)
    dit = check_dit(layout.dit)
    width = encoder_config(layout.text_encoder, config.text_encoder).dim
    if width != dit.text_dim:
        where = layout.text_encoder / "config.json" if layout.text_encoder.is_dir() else layout.text_encoder
        raise InputError(where, f"the text encoder's states are {width} wide, the DiT's text_dim is {dit.text_dim}")
    return dit


@dataclass(frozen=True)
class EngineOptions:
    """One resolved engine run, every default filled in and every pre-load check passed.

    Attributes:
        preset: preset name (``wan/config.py``): text encoder and VAE sizes and sampling defaults.
        checkpoint: Wan2.1 checkpoint folder (official or diffusers layout), or None for random weights.
        dit: the DiT that runs: the checkpoint's config when there is one, else the preset's.
        request: the generation (``wan/pipeline.py`` ``Request``), validated, ``cfg`` resolved to
            the mode that runs (``sequential`` or ``batched``).
        cfg_auto: ``request.cfg`` was chosen by ``--cfg auto`` (``wan/config.py`` ``resolve_cfg``).
        attention: the attention backend as asked (``wan/attention.py``; ``auto`` resolves per device).
        kernels: the DiT's ops as asked: ``auto``, ``torch`` or ``triton`` (``wan/dit.py`` ``resolve_kernels``).
        fast: the fast mode's ``FastConfig`` (``wan/precision.py``), or None for the exact mode.
        device: ``cpu``, ``cuda`` or ``cuda:N``; dtype: ``bf16`` or ``fp32``.
        parallel: the ``--parallel`` mode under torchrun, or None; dist_timeout: seconds any rank
            may wait for the others.
        memory_budget: ``--memory-budget`` in GiB, or None (``memory_plan.plan_for``: the
            device's free memory on CUDA, no budget on the CPU).
    """

    preset: str
    checkpoint: Path | None
    dit: DiTConfig
    request: Request
    cfg_auto: bool
    attention: str
    kernels: str
    fast: FastConfig | None
    device: str
    dtype: str
    parallel: str | None = None
    dist_timeout: float = DEFAULT_TIMEOUT_S
    memory_budget: float | None = None

    @property
    def random_weights(self) -> bool:
        return self.checkpoint is None

    @property
    def config(self) -> WanConfig:
        return get_preset(self.preset)

    @property
    def mode(self) -> str:
        return "exact" if self.fast is None else "fast"


def build_request(
    config: WanConfig,
    prompt: str,
    *,
    negative_prompt: str | None = None,
    size: str | None = None,
    frames: int | None = None,
    steps: int | None = None,
    guidance: float | None = None,
    shift: float | None = None,
    seed: int | None = None,
    solver: str | None = None,
    cfg: str | None = None,
    legacy_step_lookup: bool = False,
) -> Request:
    """A validated ``Request`` (``cfg`` as asked, ``auto`` unresolved); None takes the preset's
    sampling default.

    Raises:
        UsageError: a bad size or a bad request value (``Request.validate``).
    """
    from wanscope.wan.pipeline import Request

    s = config.sampling
    height, width = parse_size(size) if size is not None else (s.height, s.width)
    req = Request(
        prompt=prompt,
        negative_prompt=s.negative_prompt if negative_prompt is None else negative_prompt,
        height=height,
        width=width,
        frames=s.frames if frames is None else frames,
        steps=s.steps if steps is None else steps,
        guidance=s.guidance if guidance is None else guidance,
        shift=s.shift if shift is None else shift,
        seed=s.seed if seed is None else seed,
        solver=solver or s.solver,
        cfg=cfg or s.cfg,
        legacy_step_lookup=legacy_step_lookup,
    )
    req.validate(config.vae.stride, config.dit.patch_size)
    return req


def resolve_engine(
    *,
    cuda_devices: int,
    prompt: str,
    checkpoint: Path | None = None,
    random_weights: bool = False,
    weights_required: bool = False,
    compare_modes: bool = False,
    preset: str | None = None,
    attention: str = "auto",
    kernels: str = "auto",
    mode: str = "exact",
    fast: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    parallel: str | None = None,
    dist_timeout: float = DEFAULT_TIMEOUT_S,
    memory_budget: float | None = None,
    **sampling,
) -> EngineOptions:
    """Parse, fill in the defaults and check the engine's options against each other and this
    machine, before any model loads.

    Defaults: the ``tiny`` preset for random weights on a CPU, else the 1.3B model; the device
    ``cuda`` where ``cuda_devices`` > 0, else ``cpu``; bf16 on CUDA, fp32 on the CPU; sampling
    values from the preset.

    Args:
        cuda_devices: CUDA devices on this machine (``torch.cuda.device_count()``).
        weights_required: the command needs ``--checkpoint`` or ``--random-weights`` (``generate``);
            otherwise no checkpoint means random weights.
        compare_modes: for ``compare-modes``, which runs both modes and has no ``--parallel``
            (its messages say so).
        fast: the fast mode's spec over its defaults (``FastConfig.parse``), with ``mode="fast"``.
        sampling: ``build_request``'s keywords (negative_prompt, size, frames, steps, guidance,
            shift, seed, solver, cfg, legacy_step_lookup); None takes the preset's value.
        Others: as the command-line options.

    Raises:
        UsageError: both or (with ``weights_required``) neither of checkpoint and random weights,
            a bad size, device or request value, an unknown name, a bad fast-mode spec or the fast
            mode where it cannot run, several processes without ``--parallel``, a world size the
            parallel mode cannot use or a Ulysses degree that does not divide the DiT's heads, CFG
            parallel without two branches, or an attention backend that cannot run here (``check_backend``).
        InputError: an unusable checkpoint.
    """
    if checkpoint is not None and random_weights:
        raise UsageError("give --checkpoint DIR or --random-weights, not both")
    if not math.isfinite(dist_timeout):
        raise UsageError(f"--dist-timeout must be a finite number of seconds, got {dist_timeout}")
    if weights_required and checkpoint is None and not random_weights:
        raise UsageError("give --checkpoint DIR or --random-weights")
    if memory_budget is not None:
        if not (math.isfinite(memory_budget) and memory_budget > 0):
            raise UsageError(f"--memory-budget must be a positive number of GiB, got {memory_budget}")
        if parallel is not None:
            raise UsageError("--memory-budget does not run under --parallel yet")
    for name, value, known in (
        ("attention backend", attention, ATTENTION_CHOICES),
        ("kernels", kernels, KERNEL_CHOICES),
    ):
        if value not in known:
            raise UsageError(f"unknown {name} {value!r}; known: {', '.join(known)}")
    fast_config = resolve_fast(mode, fast, kernels, parallel, "both modes run" if compare_modes else "--mode fast runs")
    check_world_size(parallel, can_parallel=not compare_modes)
    device = parse_device(device, cuda_devices)
    cuda = device.startswith("cuda")
    preset = preset or (CPU_PRESET if checkpoint is None and not cuda else CUDA_PRESET)
    config = get_preset(preset)
    if dtype is not None and dtype not in DTYPE_CHOICES:
        raise UsageError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_CHOICES)}")
    dtype = dtype or ("bf16" if cuda else "fp32")
    req = build_request(config, prompt, **sampling)
    cfg_parallel = parallel is not None and parallel != "ulysses"
    cfg_auto = req.cfg == "auto"
    req = req.with_cfg_resolved(config, cfg_parallel)
    dit = dit_config(checkpoint, config)  # a bad checkpoint fails before any model runs
    if dit is not config.dit:
        _check_against_preset(dit, config, checkpoint)
        req.validate(config.vae.stride, dit.patch_size)
    if fast_config is not None:
        fast_config.check_blocks(dit.num_layers)
    if cfg_parallel:
        check_cfg_parallel(req.guidance, req.cfg)
    if parallel is not None:  # before any rank waits for another, or any output folder is made
        check_launcher(parallel)
        cfg_degree, ulysses_degree = degrees(parallel, int(os.environ["WORLD_SIZE"]))
        check_heads(dit.num_heads, ulysses_degree, cfg_degree)
    import torch

    from wanscope.wan.attention import check_backend, parse_backend
    from wanscope.wan.pipeline import DTYPES

    check_backend(parse_backend(attention), torch.device(device), DTYPES[dtype], dit.head_dim)
    return EngineOptions(
        preset=preset,
        checkpoint=checkpoint,
        dit=dit,
        request=req,
        cfg_auto=cfg_auto,
        attention=attention,
        kernels=kernels,
        fast=fast_config,
        device=device,
        dtype=dtype,
        parallel=parallel,
        dist_timeout=dist_timeout,
        memory_budget=memory_budget,
    )


def _check_against_preset(dit: DiTConfig, config: WanConfig, checkpoint: Path) -> None:
    """The checkpoint's DiT must fit the preset's VAE (latent channels) and text encoder (width).

    Raises:
        InputError: naming the checkpoint, the mismatch and the preset.
    """
    from wanscope.errors import InputError

    latent = config.vae.z_dim
    if (dit.in_channels, dit.out_channels) != (latent, latent):
        raise InputError(
            checkpoint,
            f"its DiT takes {dit.in_channels} latent channels in and {dit.out_channels} out; "
            f"the {config.name} preset's VAE has {latent}",
        )
    if dit.text_dim != config.text_encoder.dim:
        raise InputError(
            checkpoint,
            f"its DiT takes text states of {dit.text_dim} features; the {config.name} preset's text "
            f"encoder gives {config.text_encoder.dim} (pick the --preset of its size)",
        )
