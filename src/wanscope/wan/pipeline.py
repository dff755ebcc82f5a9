"""Text-to-video pipeline: encode prompts -> sync-free denoising loop -> VAE decode.

Stages run one after another and each model is loaded just before its stage and released after
it, so the text encoder, the DiT and the VAE never hold device memory together (the official
code offloads the same way). The denoising loop reads nothing back from the device: every
schedule value is a host float or a device tensor built before the loop, and the step index
comes from the loop. Each step, CFG branch and DiT block part is a named range (``ranges.py``).

With a ``ParallelContext`` (``wanscope.parallel``, under torchrun) rank 0 encodes the prompts and
broadcasts them, every rank runs the loop on its share (a CFG branch, a token shard or both) and
ends with the same latents, and rank 0 alone decodes the video.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from wanscope.errors import InputError, UsageError
from wanscope.parallel.cfg import cfg_velocity
from wanscope.parallel.group import ParallelContext
from wanscope.parallel.plan import check_cfg_parallel
from wanscope.parallel.text import broadcast_text_states
from wanscope.parallel.ulysses import shard_dit
from wanscope.wan import ranges
from wanscope.wan.attention import AttentionBackend
from wanscope.wan.config import CFG_MODES, WanConfig, dit_tokens, resolve_cfg
from wanscope.wan.dit import WanDiT, resolve_kernels
from wanscope.wan.memory_plan import MemoryPlan
from wanscope.wan.precision import FastConfig, apply_fast_mode
from wanscope.wan.sampler import SOLVERS, FlowSampler, flow_schedule
from wanscope.wan.streaming import stream_blocks
from wanscope.wan.timing import StageTimes, StepTimes
from wanscope.wan.warm_start import hash_triton

# per-step hook: (step index, latents after the step) -> None
StepCallback = Callable[[int, torch.Tensor], None]
# the --dtype names of generate, compare-modes and profile
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


# A bound on the schedule's length, far past any sampler's use (the official default is 50):
# larger counts only overflow the schedule's integer timesteps.
MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class Request:
    """One generation. Sizes are explicit height/width (the CLI takes WIDTHxHEIGHT).

    ``cfg`` is one of ``config.CFG_MODES``; ``auto`` becomes the mode that runs in
    ``with_cfg_resolved``.
    """

    prompt: str
    negative_prompt: str
    height: int
    width: int
    frames: int
    steps: int
    guidance: float
    shift: float
    seed: int
    solver: str = "unipc"
    cfg: str = "auto"
    legacy_step_lookup: bool = False

    def validate(self, vae_stride: tuple[int, int, int], patch: tuple[int, int, int]) -> None:
        """Raises UsageError naming the first bad field."""
        if not self.prompt.strip():
            raise UsageError("the prompt is empty")
        sf, sh, sw = vae_stride
        mult_h, mult_w = sh * patch[1], sw * patch[2]
        if self.height <= 0 or self.width <= 0 or self.height % mult_h or self.width % mult_w:
            raise UsageError(
                f"size {self.width}x{self.height}: width must be a positive multiple of {mult_w} and height of {mult_h}"
            )
        if self.frames < 1 or (self.frames - 1) % sf:
            raise UsageError(f"frames must be {sf}k+1 (1, 5, ..., 81), got {self.frames}")
        if self.steps < 1:
            raise UsageError(f"steps must be >= 1, got {self.steps}")
        if not math.isfinite(self.guidance) or self.guidance < 0:
            raise UsageError(f"guidance must be a finite number >= 0, got {self.guidance}")
        if not math.isfinite(self.shift) or self.shift <= 0:
            raise UsageError(f"shift must be a finite number > 0, got {self.shift}")
        if self.steps > MAX_STEPS:
            raise UsageError(f"steps must be <= {MAX_STEPS:,}, got {self.steps}")
        if not -(2**63) <= self.seed < 2**64:  # what torch's generators take
            raise UsageError(f"seed must fit in 64 bits, got {self.seed}")
        for name in ("prompt", "negative_prompt"):
            try:
                getattr(self, name).encode("utf-8")
            except UnicodeEncodeError:  # bytes of another encoding on the command line
                raise UsageError(f"the {name.replace('_', ' ')} is not UTF-8 text") from None
        if self.solver not in SOLVERS:
            raise UsageError(f"unknown solver {self.solver!r}; known: {', '.join(SOLVERS)}")
        if self.cfg not in CFG_MODES:
            raise UsageError(f"unknown cfg mode {self.cfg!r}; known: {', '.join(CFG_MODES)}")

    def with_cfg_resolved(self, config: WanConfig, cfg_parallel: bool = False) -> Request:
        """This request with ``cfg`` the mode that runs (``config.resolve_cfg`` on the DiT's
        token count for this size; ``cfg_parallel``: the branches run on two ranks)."""
        tokens = dit_tokens(config, self.height, self.width, self.frames)
        return replace(self, cfg=resolve_cfg(self.cfg, tokens, cfg_parallel))


@dataclass
class Components:
    """Loaders of the three models (each called once, just before its stage).

    ``checkpoint`` is None for random weights, in which case every output says so. ``kernels``:
    the DiT's ops, ``auto`` (fused Triton kernels on CUDA, see ``dit.resolve_kernels``), ``torch``
    or ``triton``. ``fast``: the fast mode's config (``precision.FastConfig``, applied to the DiT
    once it is loaded: it runs the fused kernels whatever ``kernels`` says), or None for the
    exact mode. ``plan``: where each stage's model lives (``memory_plan.MemoryPlan``; None: every
    model resident on ``device``). A streamed model is loaded into host memory and its blocks
    run through ``streaming.BlockStream``; its random weights are drawn on the CPU, so they
    differ from a resident model's.
    """

    config: WanConfig
    device: torch.device
    dtype: torch.dtype
    checkpoint: Path | None = None
    attention_backend: AttentionBackend = AttentionBackend.AUTO
    kernels: str = "auto"
    dit_overrides: dict = field(default_factory=dict)
    fast: FastConfig | None = None
    plan: MemoryPlan | None = None

    def _streamed(self, stage: str) -> bool:
        return self.plan is not None and getattr(self.plan, stage) == "streamed"

    @property
    def random_weights(self) -> bool:
        return self.checkpoint is None

    @property
    def text_width(self) -> int:
        """The text states' last dim: the checkpoint's encoder's (its folder's config.json), else
        the preset's; every rank knows it without loading the encoder."""
        if self.random_weights:
            return self.config.text_encoder.dim
        from wanscope.wan.text_encoder import encoder_config

        return encoder_config(self._layout().text_encoder, self.config.text_encoder).dim

    def text_encoder(self):
        from wanscope.wan.text_encoder import ByteTokenizer, CheckpointTokenizer, TextEncoder, load_umt5

        te_cfg, text_len = self.config.text_encoder, self.config.dit.text_len
        streamed = self._streamed("text_encoder")
        where = "cpu" if streamed else self.device
        if self.random_weights:
            torch.manual_seed(0)
            model, tokenizer = load_umt5(None, te_cfg, self.dtype, where), ByteTokenizer()
        else:
            layout = self._layout()
            tokenizer = CheckpointTokenizer(layout.tokenizer)  # its errors before the model's load
            model = load_umt5(layout.text_encoder, te_cfg, self.dtype, where)
            if tokenizer.vocab_size > model.cfg.vocab_size:
                raise InputError(
                    layout.tokenizer,
                    f"the tokenizer has {tokenizer.vocab_size} tokens, the text encoder's embedding {model.cfg.vocab_size}",
                )
        if streamed:  # read once, straight from the loaded (memory-mapped) tensors
            model.block_stream = stream_blocks(
                model, model.encoder.block, self.device, pin=False, on_host=(model.shared,)
            )
        return TextEncoder(model, tokenizer, text_len)

    def dit(self) -> WanDiT:
        from wanscope.wan.weights import load_dit

        streamed = self._streamed("dit")
        where = "cpu" if streamed else self.device
        if self.random_weights:
            torch.manual_seed(0)
            cfg = self.config.dit
            if self.dit_overrides:
                cfg = replace(cfg, **self.dit_overrides)
            model = WanDiT.random(cfg, self.dtype, where).eval().requires_grad_(False)
        else:
            model = load_dit(self._layout().dit, self.dtype, where, **self.dit_overrides)
        model.attention_backend = self.attention_backend
        model.kernels = resolve_kernels(self.kernels, self.device, model.cfg.qk_norm)
        if self.fast is not None:
            apply_fast_mode(model, self.fast, quantize_on=self.device if streamed else None)
        if streamed:  # run every step: packed into pinned host memory once
            model.block_stream = stream_blocks(model, model.blocks, self.device, pin=True)
        return model

    @property
    def vae_dtype(self) -> torch.dtype:
        """fp32, as the official Wan2_1_VAE; bf16 in the fast mode with a bf16 DiT on CUDA (its
        decode's PSNR against fp32 and its speed: benchmarks/vae_decode.py)."""
        fast = self.fast is not None and self.device.type == "cuda" and self.dtype == torch.bfloat16
        return torch.bfloat16 if fast else torch.float32

    def vae(self):
        """The VAE in ``vae_dtype``; on CUDA with its convolutions channels-last (``vae.channels_last``)."""
        from wanscope.wan.vae import channels_last, load_vae

        if self.random_weights:
            torch.manual_seed(0)
            vae = load_vae(None, self.config.vae, self.vae_dtype, self.device)
        else:
            vae = load_vae(self._layout().vae, self.config.vae, self.vae_dtype, self.device)
        return channels_last(vae) if self.device.type == "cuda" else vae

    def _layout(self):
        from wanscope.wan.weights import detect_layout

        return detect_layout(self.checkpoint)


def release() -> None:
    """Free what the caller dropped: collect garbage and return cached device memory."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def latent_shape(config: WanConfig, height: int, width: int, frames: int) -> tuple[int, int, int, int, int]:
    """[1, z_dim, (frames-1)/4 + 1, height/8, width/8] (official ``text2video.py`` target_shape)."""
    sf, sh, sw = config.vae.stride
    return (1, config.vae.z_dim, (frames - 1) // sf + 1, height // sh, width // sw)


def initial_noise(shape, seed: int, device: torch.device) -> torch.Tensor:
    """Standard normal fp32 noise from a generator on ``device`` seeded with ``seed``."""
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=g, device=device, dtype=torch.float32)


@torch.no_grad()
def denoise(
    dit: WanDiT,
    latents: torch.Tensor,
    cond: torch.Tensor,
    uncond: torch.Tensor,
    sampler: FlowSampler,
    guidance: float,
    cfg: str = "sequential",
    start: int = 0,
    stop: int | None = None,
    on_step: StepCallback | None = None,
    parallel: ParallelContext | None = None,
) -> torch.Tensor:
    """Run steps ``start..stop-1`` of ``sampler``'s schedule with classifier-free guidance.

    ``velocity = uncond + guidance * (cond - uncond)``; with ``guidance <= 1`` only the cond
    branch runs. ``cfg``: ``batched`` runs cond and uncond as one B=2 forward, ``sequential``
    as two (``auto`` is the caller's to resolve: ``Request.with_cfg_resolved``).

    Args:
        latents: [1, C, F, H, W] fp32 at sigma[start] (equal on every rank under ``parallel``).
        cond, uncond: [1, text_len, text_dim] text states.
        on_step: called after each step (outside the step's range) with (index, latents).
        parallel: with a CFG degree of 2, this rank runs one branch (``parallel/cfg.py``);
            Ulysses needs nothing here (``shard_dit`` made the DiT sharded).

    Returns:
        Latents at sigma[stop], fp32, equal on every rank.

    Raises:
        UsageError: ``cfg`` neither ``sequential`` nor ``batched``; CFG parallel with
            guidance <= 1 or ``cfg="batched"``.
        ParallelError: a collective failed.
    """
    if cfg not in ("sequential", "batched"):
        raise UsageError(f"denoise runs cfg 'sequential' or 'batched', got {cfg!r}")
    cfg_parallel = parallel is not None and parallel.cfg_degree > 1
    if cfg_parallel:
        check_cfg_parallel(guidance, cfg)
    schedule = sampler.schedule
    stop = schedule.steps if stop is None else stop
    timesteps = sampler.device_timesteps(latents.device)  # each step takes a view of it
    use_cfg = guidance > 1.0
    if use_cfg and cfg == "batched":
        context_pair = torch.cat([cond, uncond])
    with ranges.named_range(ranges.DENOISE):
        for i in range(start, stop):
            with ranges.named_range(ranges.STEP.format(i)):
                t = timesteps[i : i + 1]  # [1], a view: no sync
                if not use_cfg:
                    with ranges.named_range(ranges.CFG_COND):
                        velocity = dit(latents, t, cond)
                elif cfg_parallel:
                    velocity = cfg_velocity(parallel, dit, latents, t, cond, uncond, guidance)
                elif cfg == "batched":
                    with ranges.named_range(ranges.CFG_BATCHED):
                        v_cond, v_uncond = dit(latents.expand(2, -1, -1, -1, -1), t.expand(2), context_pair).chunk(2)
                    velocity = v_uncond + guidance * (v_cond - v_uncond)
                else:
                    with ranges.named_range(ranges.CFG_COND):
                        v_cond = dit(latents, t, cond)
                    with ranges.named_range(ranges.CFG_UNCOND):
                        v_uncond = dit(latents, t, uncond)
                    velocity = v_uncond + guidance * (v_cond - v_uncond)
                latents = sampler.step(i, latents, velocity, t)
            if on_step is not None:
                on_step(i, latents)
    return latents


@dataclass
class Result:
    """A generated video: [F, H, W, 3] uint8 frames on the CPU (None on ranks other than 0),
    the final latents [1, C, F', H', W'] fp32 on the CPU, per-stage peak memory (PyTorch's
    allocated and the caching allocator's reserved, bytes, None without CUDA), the DiT's ops
    that ran (``wan.dit.Kernels`` value), the wall time of each stage (``stage_s``:
    ``text_encoder_load``, ``text_encoding``, ``dit_load``, ``denoising``, ``vae_load``,
    ``vae_decode`` with the frames' conversion, in s; a rank other than 0 has no VAE stages) and of each denoising step (``step_s``, s; ``timing.StepTimes``)."""

    frames: torch.Tensor | None
    latents: torch.Tensor
    peak_memory_bytes: dict[str, int | None]
    peak_reserved_bytes: dict[str, int | None]
    kernels: str
    stage_s: dict[str, float] = field(default_factory=dict)
    step_s: list[float] = field(default_factory=list)


def _peak(device: torch.device) -> tuple[int | None, int | None]:
    """(allocated, reserved) at their peaks since the last call, bytes; Nones off CUDA."""
    if device.type != "cuda":
        return None, None
    peak = torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
    torch.cuda.reset_peak_memory_stats(device)
    return peak


def encode_prompts(
    parts: Components, req: Request, parallel: ParallelContext | None = None, encoder=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The text states of the prompt and, with guidance > 1, of the negative prompt.

    The encoder is loaded, run and released, unless one is given (``encoder``: a
    ``TextEncoder`` kept loaded across several requests); under ``parallel`` only rank 0
    encodes and broadcasts the states (``parallel/text.py``).

    Returns:
        cond, uncond: [1, text_len, text_dim] in ``parts.dtype`` on ``parts.device`` (the same
        tensor twice without guidance).

    Raises:
        ParallelError: the broadcast failed.
    """
    prompts = [req.prompt, req.negative_prompt] if req.guidance > 1.0 else [req.prompt]
    states = None
    if encoder is not None:
        states = encoder.encode(prompts)
    elif parallel is None or parallel.is_main:
        encoder = parts.text_encoder()
        states = encoder.encode(prompts)
        del encoder
        release()
    if parallel is not None:
        shape = (len(prompts), parts.config.dit.text_len, parts.text_width)
        states = broadcast_text_states(parallel, states, shape, parts.dtype)
    return states[:1], states[1:] if len(prompts) == 2 else states[:1]


def generate(
    parts: Components, req: Request, on_step: StepCallback | None = None, parallel: ParallelContext | None = None
) -> Result:
    """Prompt to video frames: each stage loads its model, runs, and releases it.

    Under ``parallel`` every rank must be called with the same request (checked first); rank 0
    alone decodes the video, the other ranks return without frames.

    Raises:
        UsageError: bad request values (see ``Request.validate``), or a parallel mode that
            cannot run this request (CFG parallel without guidance, heads that do not split,
            Ulysses with the fast mode).
        InputError: an unusable checkpoint.
        ParallelError: ranks started differently, or a collective failed.
    """
    config = parts.config
    req.validate(config.vae.stride, config.dit.patch_size)
    device = parts.device
    if parallel is not None:
        if parallel.cfg_degree > 1:
            check_cfg_parallel(req.guidance, req.cfg)
        if parts.fast is not None and parallel.ulysses_degree > 1:
            raise UsageError("the fast mode does not run under Ulysses sequence parallelism yet; use --parallel cfg")
        parallel.agree(**asdict(req), preset=config.name, dtype=str(parts.dtype), checkpoint=str(parts.checkpoint))
    peaks, reserved = {}, {}
    _peak(device)
    stage = StageTimes(device)
    steps = StepTimes(device)

    def step_done(i: int, latents: torch.Tensor) -> None:
        steps.mark()
        if on_step is not None:
            on_step(i, latents)

    encoder = None
    if parallel is None or parallel.is_main:
        with stage("text_encoder_load"):
            encoder = parts.text_encoder()
    if device.type == "cuda":  # beside the GPU-bound text encoding and the DiT's copies
        hash_triton()
    with stage("text_encoding"):
        cond, uncond = encode_prompts(parts, req, parallel, encoder=encoder)
    del encoder
    release()
    peaks["text_encoding"], reserved["text_encoding"] = _peak(device)

    with stage("dit_load"):
        dit = parts.dit()
    kernels = dit.kernels.value
    if parallel is not None:
        shard_dit(parallel, dit)
    with stage("denoising"):
        steps.start()
        latents = sample(dit, req, cond, uncond, config, device, step_done, parallel)
    del dit, cond, uncond
    release()
    peaks["denoising"], reserved["denoising"] = _peak(device)
    done = {
        "peak_memory_bytes": peaks,
        "peak_reserved_bytes": reserved,
        "kernels": kernels,
        "stage_s": stage.s,
        "step_s": steps.seconds(),
    }
    if parallel is not None and not parallel.is_main:
        return Result(frames=None, latents=latents.cpu(), **done)

    from wanscope.wan.vae import decode

    with stage("vae_load"):
        vae = parts.vae()
    with stage("vae_decode"):
        video = decode(vae, latents, config.vae, parts.plan)  # [1, 3, F, H, W] in [-1, 1]
        frames = to_frames(video)
    del vae, video
    release()
    peaks["vae_decode"], reserved["vae_decode"] = _peak(device)
    return Result(frames=frames, latents=latents.cpu(), **done)


def sample(
    dit: WanDiT,
    req: Request,
    cond: torch.Tensor,
    uncond: torch.Tensor,
    config: WanConfig,
    device: torch.device,
    on_step: StepCallback | None = None,
    parallel: ParallelContext | None = None,
) -> torch.Tensor:
    """The request's denoising run on a loaded DiT: its seeded noise through its whole schedule,
    with ``req.cfg`` resolved here when it is ``auto`` (``Request.with_cfg_resolved``).

    Args:
        cond, uncond: [1, text_len, text_dim] text states (cast to the DiT's dtype here).
        device: where the noise is drawn (the DiT's device; its generator is seeded there).

    Returns:
        Final latents [1, C, F', H', W'] fp32 on ``device``.
    """
    req = req.with_cfg_resolved(config, cfg_parallel=parallel is not None and parallel.cfg_degree > 1)
    sampler = FlowSampler(flow_schedule(req.steps, req.shift), req.solver, req.legacy_step_lookup)
    noise = initial_noise(latent_shape(config, req.height, req.width, req.frames), req.seed, device)
    return denoise(
        dit,
        noise,
        cond.to(dit.dtype),
        uncond.to(dit.dtype),
        sampler,
        req.guidance,
        req.cfg,
        on_step=on_step,
        parallel=parallel,
    )


def to_frames(video: torch.Tensor) -> torch.Tensor:
    """The VAE's [1, 3, F, H, W] in [-1, 1] -> frames [F, H, W, 3] uint8 on the CPU."""
    values = video[0].permute(1, 2, 3, 0) + 1  # the one full-size temporary, then in place
    return values.mul_(127.5).round_().clamp_(0, 255).to(torch.uint8).cpu()
