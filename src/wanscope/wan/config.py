"""Wan2.1 text-to-video configuration: frozen dataclasses and named presets.

Every default of the engine lives here; the CLI reads its defaults from these objects.
Sources: the official ``wan/configs/shared_config.py`` and ``wan_t2v_*.py`` (Wan-Video/Wan2.1),
and the ``config.json`` files of the published checkpoints (official and diffusers layouts).
No torch import: the analysis side may read presets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from wanscope.errors import UsageError

# The official T2V default negative prompt (wan/configs/shared_config.py, sample_neg_prompt).
OFFICIAL_NEGATIVE_PROMPT = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，"
    "低质量，JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，"
    "毁容的，形态畸形的肢体，手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走"
)

# Classifier-free guidance runs cond and uncond as two B=1 DiT forwards (sequential) or one B=2
# forward (batched); auto picks by the DiT's sequence length L (resolve_cfg).
CFG_MODES = ("auto", "sequential", "batched")
# The --attention choices of generate, profile and compare-modes: wan/attention.py's backends
# less ``triton`` (a benchmark contender), here where no torch is imported.
ATTENTION_CHOICES = ("auto", "sdpa", "cudnn", "flash", "efficient", "math", "hopper")
# auto: batched up to this many tokens, sequential above. One CFG step of our exact path on an
# H200: batched is faster at L = 2,340 (416x240x21) and no faster at L = 32,760 (832x480x81),
# where it takes more peak memory (benchmarks/RESULTS.md, "2026-11-30: DiT forward, all
# contenders in one run, and CFG batching"). Nothing between the two sizes is measured: 8,192 is
# a round number near their geometric mean (8,755), not a measured crossover.
CFG_BATCHED_MAX_TOKENS = 8192
# --kernels of generate and profile: the DiT ops (``wan.dit.Kernels``) and auto (``wan.dit.resolve_kernels``)
KERNEL_CHOICES = ("auto", "torch", "triton")


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_positive_int(name: str, value) -> None:
    """Raises UsageError unless ``value`` is a positive integer (a checkpoint's config.json may hold anything)."""
    if not is_int(value) or value <= 0:
        raise UsageError(f"{name} {value!r}: expected a positive integer")


def check_positive_number(name: str, value) -> None:
    """Raises UsageError unless ``value`` is a positive finite int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{name} {value!r}: expected a positive finite number")


@dataclass(frozen=True)
class DiTConfig:
    """The diffusion transformer (``WanModel`` in the official code).

    ``qk_norm`` is RMSNorm over all heads together (``dim`` features), ``cross_attn_norm`` an
    affine LayerNorm before cross-attention; RoPE splits the head dim into frame/height/width
    parts of ``head_dim - 4*(head_dim//6)``, ``2*(head_dim//6)``, ``2*(head_dim//6)`` real
    features (official ``model.py``).
    """

    dim: int = 1536
    num_layers: int = 30
    num_heads: int = 12
    ffn_dim: int = 8960
    freq_dim: int = 256
    text_len: int = 512
    text_dim: int = 4096
    patch_size: tuple[int, int, int] = (1, 2, 2)
    in_channels: int = 16
    out_channels: int = 16
    eps: float = 1e-6
    qk_norm: bool = True
    cross_attn_norm: bool = True
    rope_theta: float = 10000.0
    rope_max_len: int = 1024
    # Residual stream in fp32 (official WanModel under autocast) or in the model dtype
    # (diffusers). Irrelevant in fp32; benchmarks/dit_forward.py measures both in bf16.
    fp32_residual: bool = True

    def __post_init__(self):
        ints = ("dim", "num_layers", "num_heads", "ffn_dim", "freq_dim", "text_len", "text_dim", "in_channels")
        for name in (*ints, "out_channels", "rope_max_len"):
            check_positive_int(name, getattr(self, name))
        patch = self.patch_size
        if not (isinstance(patch, tuple) and len(patch) == 3 and all(is_int(n) and n > 0 for n in patch)):
            raise UsageError(f"patch_size {patch!r}: expected three positive integers")
        for name in ("eps", "rope_theta"):
            check_positive_number(name, getattr(self, name))
        if self.dim % self.num_heads or (self.dim // self.num_heads) % 2:
            raise UsageError(f"dim {self.dim} must split into {self.num_heads} heads of even size")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def rope_split(self) -> tuple[int, int, int]:
        """Real features of the head dim rotated by frame, height and width position."""
        hw = 2 * (self.head_dim // 6)
        return (self.head_dim - 2 * hw, hw, hw)


@dataclass(frozen=True)
class TextEncoderConfig:
    """The UMT5 encoder (official ``t5.py`` ``umt5_xxl``: 24 layers, 64 heads, gated-GELU FFN,
    one relative-position table per layer, 32 buckets, max distance 128)."""

    vocab_size: int = 256384
    dim: int = 4096
    ffn_dim: int = 10240
    num_heads: int = 64
    head_dim: int = 64
    num_layers: int = 24
    num_buckets: int = 32
    max_distance: int = 128
    eps: float = 1e-6

    def __post_init__(self):
        for name in (
            "vocab_size",
            "dim",
            "ffn_dim",
            "num_heads",
            "head_dim",
            "num_layers",
            "num_buckets",
            "max_distance",
        ):
            check_positive_int(name, getattr(self, name))
        # T5's buckets: half per direction, a quarter of them exact (umt5.position_buckets)
        if self.num_buckets < 4 or self.num_buckets % 2 or self.max_distance <= self.num_buckets // 4:
            raise UsageError(
                f"num_buckets {self.num_buckets} and max_distance {self.max_distance}: need an even "
                "num_buckets >= 4 and max_distance > num_buckets / 4"
            )
        check_positive_number("eps", self.eps)


@dataclass(frozen=True)
class VAEConfig:
    """The Wan2.1 causal 3-D VAE (official ``vae2_1.py``; diffusers ``AutoencoderKLWan``).

    One level per ``dim_mult`` entry (``base_dim * m`` channels); each level but the last halves
    the height and width, and those flagged in ``temporal_downsample`` (one flag per level but the
    last) also the frames. ``latents_mean``/``latents_std`` are the per-channel statistics the DiT
    latents are normalized with (official ``vae2_1.py`` ``WanVAE.mean``/``std``).
    """

    base_dim: int = 96
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    latents_mean: tuple[float, ...] = (
        -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
        0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
    )  # fmt: skip
    latents_std: tuple[float, ...] = (
        2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
        3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
    )  # fmt: skip

    def __post_init__(self):
        for name in ("base_dim", "z_dim", "num_res_blocks"):
            check_positive_int(name, getattr(self, name))
        mult, down = self.dim_mult, self.temporal_downsample
        if not (isinstance(mult, tuple) and mult and all(is_int(m) and m > 0 for m in mult)):
            raise UsageError(f"dim_mult {mult!r}: expected one or more positive integers")
        if not (isinstance(down, tuple) and len(down) == len(mult) - 1 and all(isinstance(d, bool) for d in down)):
            raise UsageError(
                f"temporal_downsample {down!r}: expected {len(mult) - 1} booleans (one per level but the last)"
            )
        for name in ("latents_mean", "latents_std"):
            values = getattr(self, name)
            if not (isinstance(values, tuple) and len(values) == self.z_dim):
                raise UsageError(f"{name}: expected {self.z_dim} values (z_dim)")
        for value in self.latents_std:
            check_positive_number("latents_std", value)

    @property
    def stride(self) -> tuple[int, int, int]:
        """Video frames, rows and columns per latent one (frames: after the first; (4, 8, 8) for Wan2.1)."""
        spatial = 2 ** (len(self.dim_mult) - 1)
        return (2 ** sum(self.temporal_downsample), spatial, spatial)


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling defaults of the official T2V code (``generate.py``/``text2video.py``, Wan2.1):
    50 UniPC steps, guidance 5.0, flow shift 5.0, 81 frames at 832x480, 16 fps."""

    steps: int = 50
    guidance: float = 5.0
    shift: float = 5.0
    frames: int = 81
    height: int = 480
    width: int = 832
    solver: str = "unipc"  # "unipc" | "euler"
    cfg: str = "auto"  # one of CFG_MODES
    seed: int = 0
    fps: int = 16
    negative_prompt: str = OFFICIAL_NEGATIVE_PROMPT
    num_train_timesteps: int = 1000


@dataclass(frozen=True)
class WanConfig:
    """One model: DiT, text encoder, VAE and sampling defaults."""

    name: str
    dit: DiTConfig = field(default_factory=DiTConfig)
    text_encoder: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    vae: VAEConfig = field(default_factory=VAEConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)


PRESETS: dict[str, WanConfig] = {
    "wan2.1-t2v-1.3b": WanConfig(name="wan2.1-t2v-1.3b"),
    "wan2.1-t2v-14b": WanConfig(
        name="wan2.1-t2v-14b",
        dit=DiTConfig(dim=5120, num_layers=40, num_heads=40, ffn_dim=13824),
    ),
    # For tests and CPU smoke runs: every code path of the real model at toy sizes.
    "tiny": WanConfig(
        name="tiny",
        dit=DiTConfig(dim=64, num_layers=2, num_heads=2, ffn_dim=128, freq_dim=32, text_len=16, text_dim=32),
        text_encoder=TextEncoderConfig(vocab_size=384, dim=32, ffn_dim=64, num_heads=4, head_dim=8, num_layers=2),
        vae=VAEConfig(base_dim=8),
        sampling=SamplingConfig(steps=4, frames=5, height=64, width=64),
    ),
}


def get_preset(name: str, **dit_overrides) -> WanConfig:
    """The preset ``name``, with optional ``DiTConfig`` field overrides.

    Raises:
        UsageError: unknown preset name (the message lists the known ones).
    """
    try:
        cfg = PRESETS[name]
    except KeyError:
        raise UsageError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None
    return replace(cfg, dit=replace(cfg.dit, **dit_overrides)) if dit_overrides else cfg


def dit_tokens(config: WanConfig, height: int, width: int, frames: int) -> int:
    """The DiT's sequence length L for a video of ``frames`` x ``height`` x ``width`` pixels:
    latent frames ``(frames - 1) / 4 + 1`` and rows and columns ``/ 8`` (the VAE's stride), in
    patches of 1x2x2 (832x480x81: 21 x 30 x 52 = 32,760)."""
    sf, sh, sw = config.vae.stride
    pf, ph, pw = config.dit.patch_size
    return ((frames - 1) // sf + 1) // pf * (height // sh // ph) * (width // sw // pw)


def resolve_cfg(mode: str, tokens: int, cfg_parallel: bool = False) -> str:
    """The CFG mode that runs, ``sequential`` or ``batched``.

    ``auto`` is ``batched`` at ``tokens`` <= ``CFG_BATCHED_MAX_TOKENS`` and ``sequential``
    above; under CFG parallel (each branch a B=1 forward on its own rank) it is ``sequential``.
    An explicit mode is returned as given (CFG parallel refuses ``batched``:
    ``parallel/plan.py`` ``check_cfg_parallel``).

    Raises:
        UsageError: unknown mode.
    """
    if mode not in CFG_MODES:
        raise UsageError(f"unknown cfg mode {mode!r}; known: {', '.join(CFG_MODES)}")
    if mode != "auto":
        return mode
    return "batched" if tokens <= CFG_BATCHED_MAX_TOKENS and not cfg_parallel else "sequential"
