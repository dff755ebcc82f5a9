"""The Wan2.1 diffusion transformer (DiT), our implementation.

Architecture and constants follow the official ``wan/modules/model.py`` (``WanModel``) and
the Wan2.1 report (arXiv:2503.20314): a 1x2x2 patch embedding, a sinusoidal time embedding
projected to six adaLN modulation vectors per block, self-attention with RMSNorm on q and k
(across heads) and 3-D RoPE, cross-attention to the text tokens, a tanh-GELU FFN, and an
output head with two-way modulation. Parameter names are the official checkpoint keys, so
the official layout loads without renaming (``weights.py`` maps the diffusers layout).

Numerics (the one place they are stated). The accuracy reference is the official WanModel
run entirely in fp32. In a low-precision ``dtype`` (bf16) the linear layers, convolution and
attention run in ``dtype``; these stay fp32 as in the reference (its ``autocast(float32)``
regions and ``.float()`` calls):

* the time embedding: sinusoid computed in fp64, its MLP and the 6-way projection in fp32;
* the modulation tables, shift/scale/gate arithmetic and LayerNorm/RMSNorm statistics;
* the RoPE tables (built in fp64, applied in fp32);
* the output head (norm, modulation and final linear: a dim x 64 matmul, negligible cost).

The residual stream is fp32 when ``DiTConfig.fp32_residual`` (official: block outputs are added
to an fp32 stream) and ``dtype`` otherwise (diffusers: each add is done in fp32 and rounded).
``benchmarks/dit_forward.py`` reports each choice's relative L2 error against the fp32 model.
"""

from __future__ import annotations

import math
from enum import Enum

import torch
import torch.nn.functional as F
from torch import nn

from wanscope.errors import UsageError
from wanscope.wan import ranges
from wanscope.wan.attention import (
    AttentionBackend,
    attention,
    parse_backend,
    resolve_backend,
)
from wanscope.wan.config import DiTConfig
from wanscope.wan.meta import materialize, meta_device


class Kernels(str, Enum):  # noqa: UP042 - str() and f-strings give the member name, as callers expect
    """How a block runs: ``torch`` ops (the reference path) or the fused Triton custom ops of
    ``wanscope.kernels`` (``wan/fused.py``; same math, one rounding per fused output)."""

    TORCH = "torch"
    TRITON = "triton"


def resolve_kernels(kernels: Kernels | str, device: torch.device | str, qk_norm: bool = True) -> Kernels:
    """``kernels`` as a ``Kernels``, with ``auto`` resolved: the fused Triton kernels on a CUDA
    device where Triton is installed and the model has q/k RMSNorm (the fused op always
    normalizes), the torch ops elsewhere. The fused path is the faster exact one, same error
    (benchmarks/RESULTS.md, "2026-11-30: DiT forward with fused Triton kernels vs torch.compile").

    Raises:
        UsageError: a name that is neither ``auto`` nor a ``Kernels`` value.
    """
    if kernels != "auto":
        try:
            return Kernels(kernels)
        except ValueError:
            raise UsageError(f"unknown kernels {kernels!r}; known: auto, torch, triton") from None
    import importlib.util

    cuda = torch.device(device).type == "cuda"
    fused = cuda and qk_norm and importlib.util.find_spec("triton") is not None
    return Kernels.TRITON if fused else Kernels.TORCH


# Parameters kept in fp32 whatever the model dtype (see the module docstring).
_FP32_PARTS = ("time_embedding.", "time_projection.", "modulation", "norm", "head.head.")


def keeps_fp32(name: str) -> bool:
    """Whether parameter ``name`` (official layout) stays fp32 in a low-precision model."""
    return any(part in name for part in _FP32_PARTS)


def sinusoidal_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Timestep embedding ``[cos(t w_i), sin(t w_i)]``, ``w_i = 10000^(-i/(dim/2))``.

    Source: official ``model.py`` ``sinusoidal_embedding_1d`` (computed in fp64 there too).

    Args:
        t: [B] timesteps in [0, 1000], any float or int dtype.
        dim: even embedding size.

    Returns:
        [B, dim] fp32.
    """
    half = dim // 2
    freqs = torch.pow(10000.0, -torch.arange(half, dtype=torch.float64, device=t.device) / half)
    angles = t.to(torch.float64)[:, None] * freqs  # [B, half]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=1).float()


def rope_tables(cfg: DiTConfig, grid: tuple[int, int, int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine and sine tables of the 3-D rotary embedding for a token grid.

    The head dim's pairs are split into frame, height and width groups (``cfg.rope_split``);
    a group of ``d`` real features at position ``p`` rotates pair ``j`` by
    ``p * theta^(-2j/d)`` (official ``model.py`` ``rope_params``/``rope_apply``).

    Args:
        grid: (F, H, W) in patches.

    Returns:
        cos, sin: each [L, 1, D/2] fp32, L = F*H*W, built in fp64.
    """
    angles = []
    for n, d in zip(grid, cfg.rope_split):
        inv = cfg.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
        angles.append(torch.arange(n, dtype=torch.float64, device=device)[:, None] * inv)  # [n, d/2]
    f, h, w = grid
    table = torch.cat(
        [
            angles[0][:, None, None, :].expand(f, h, w, -1),
            angles[1][None, :, None, :].expand(f, h, w, -1),
            angles[2][None, None, :, :].expand(f, h, w, -1),
        ],
        dim=-1,
    ).reshape(f * h * w, 1, -1)  # [L, 1, D/2]
    return torch.cos(table).float(), torch.sin(table).float()


def apply_rope_fp32(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate consecutive feature pairs ``(x[2j], x[2j+1])`` of every head, in fp32.

    Args:
        x: [B, L, N, D]; cos, sin: [L, 1, D/2] fp32.

    Returns:
        [B, L, N, D] fp32, for the caller to round into the tensor it wants (Ulysses rounds
        it straight into where its transport sends from: ``parallel/exchange.py``).
    """
    pairs = x.float().unflatten(-1, (-1, 2))  # [B, L, N, D/2, 2]
    x0, x1 = pairs[..., 0], pairs[..., 1]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)  # [B, L, N, D/2, 2]
    return out.flatten(-2)  # [B, L, N, D]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``apply_rope_fp32`` rounded to the dtype of ``x``: [B, L, N, D]."""
    return apply_rope_fp32(x, cos, sin).type_as(x)


def layer_norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """LayerNorm computed in fp32; returns fp32."""
    return F.layer_norm(x.float(), norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def modulate(x: torch.Tensor, norm: nn.LayerNorm, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """adaLN: ``LN(x) * (1 + scale) + shift`` in fp32. x: [B, L, dim]; shift, scale: [B, dim]."""
    return layer_norm(x, norm) * (1 + scale[:, None]) + shift[:, None]


class RMSNorm(nn.Module):
    """RMSNorm over the last dim, statistics and weight in fp32, output in the input dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), self.weight.shape, self.weight, self.eps).type_as(x)


class Attention(nn.Module):
    """Multi-head attention with RMSNorm on q and k across all heads (``dim`` features)."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.q = nn.Linear(cfg.dim, cfg.dim)
        self.k = nn.Linear(cfg.dim, cfg.dim)
        self.v = nn.Linear(cfg.dim, cfg.dim)
        self.o = nn.Linear(cfg.dim, cfg.dim)
        self.norm_q = RMSNorm(cfg.dim, cfg.eps) if cfg.qk_norm else nn.Identity()
        self.norm_k = RMSNorm(cfg.dim, cfg.eps) if cfg.qk_norm else nn.Identity()
        # The attention call: [B, L, N, D] q, k, v -> [B, L, N, D]. Ulysses sequence parallelism
        # (wanscope.parallel.ulysses) sets both on self-attention: ``sequence_parallel`` then runs
        # this module's projections straight into its all-to-all buffers (the torch-op path), and
        # ``attend`` is its all-to-all around the call for the fused path (wan/fused.py).
        self.attend = attention
        self.sequence_parallel = None

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        backend: AttentionBackend,
    ) -> torch.Tensor:
        """x: [B, L, dim]; context: [B, Lc, dim] (cross-attention) or None (self-attention);
        rope: (cos, sin) for self-attention. Returns [B, L, dim] in the dtype of ``x``."""
        if self.sequence_parallel is not None:  # set on self-attention only
            return self.sequence_parallel.self_attention(self, x, rope, backend)
        kv = x if context is None else context
        q = self.norm_q(self.q(x)).unflatten(-1, (self.num_heads, -1))  # [B, L, N, D]
        k = self.norm_k(self.k(kv)).unflatten(-1, (self.num_heads, -1))  # [B, Lk, N, D]
        v = self.v(kv).unflatten(-1, (self.num_heads, -1))  # [B, Lk, N, D]
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        return self.o(self.attend(q, k, v, backend).flatten(2))  # [B, L, dim]


class Block(nn.Module):
    """One DiT block: modulated self-attention, cross-attention, modulated FFN.

    ``norm3`` is the cross-attention norm and ``norm2`` the FFN norm, as in the official
    layout (diffusers swaps the two names).
    """

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim, cfg.eps, elementwise_affine=False)
        self.self_attn = Attention(cfg)
        self.norm3 = nn.LayerNorm(cfg.dim, cfg.eps, elementwise_affine=True) if cfg.cross_attn_norm else None
        self.cross_attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim, cfg.eps, elementwise_affine=False)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.dim, cfg.ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(cfg.ffn_dim, cfg.dim)
        )
        self.modulation = nn.Parameter(nn.init.normal_(torch.empty(1, 6, cfg.dim), std=cfg.dim**-0.5))
        # wan/fused.py's block_forward when WanDiT.kernels is "triton"
        self.fused_forward = None

    def forward(
        self,
        x: torch.Tensor,
        e: torch.Tensor,
        context: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        backend: AttentionBackend,
    ) -> torch.Tensor:
        """x: [B, L, dim] residual stream; e: [B, 6, dim] fp32 time projection;
        context: [B, Lc, dim]. Returns [B, L, dim] in the dtype of ``x``."""
        if self.fused_forward is not None:
            return self.fused_forward(self, x, e, context, rope, backend)
        dtype = context.dtype
        shift, scale, gate, c_shift, c_scale, c_gate = (self.modulation + e).unbind(1)  # [B, dim] fp32
        with ranges.named_range(ranges.SELF_ATTN):
            y = self.self_attn(modulate(x, self.norm1, shift, scale).to(dtype), None, rope, backend)
            x = (x.float() + y * gate[:, None]).type_as(x)
        with ranges.named_range(ranges.CROSS_ATTN):
            h = x.to(dtype) if self.norm3 is None else layer_norm(x, self.norm3).to(dtype)
            x = x + self.cross_attn(h, context, None, backend)
        with ranges.named_range(ranges.FFN):
            y = self.ffn(modulate(x, self.norm2, c_shift, c_scale).to(dtype))
            x = (x.float() + y * c_gate[:, None]).type_as(x)
        return x


class Head(nn.Module):
    """Output head: modulated LayerNorm then a linear to ``prod(patch) * out_channels``."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.dim, cfg.eps, elementwise_affine=False)
        self.head = nn.Linear(cfg.dim, math.prod(cfg.patch_size) * cfg.out_channels)
        self.modulation = nn.Parameter(nn.init.normal_(torch.empty(1, 2, cfg.dim), std=cfg.dim**-0.5))

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """x: [B, L, dim]; e: [B, dim] fp32 time embedding. Returns [B, L, prod(patch)*C] fp32."""
        shift, scale = (self.modulation + e[:, None]).unbind(1)  # [B, dim]
        return self.head(modulate(x, self.norm, shift, scale))


class WanDiT(nn.Module):
    """Wan2.1 DiT: ``forward(latents, timestep, context) -> velocity``.

    Same argument order and shapes as diffusers' ``WanTransformer3DModel``.

    Args:
        cfg: the architecture.
        attention_backend: attention kernel for every attention call (settable later). The
            default ``auto`` is resolved once per forward (``attention.resolve_backend``, on the
            latents' device, the model dtype and head dim): our Gluon kernel (``hopper``) on an
            sm_90 GPU where Triton's Gluon Hopper module imports, in bf16/fp16, else ``sdpa``.
        kernels: ``torch`` or ``triton`` (settable later; set it after loading and casting the
            weights: it fuses the q/k/v and cross k/v projection weights into one tensor each).
    """

    def __init__(
        self,
        cfg: DiTConfig,
        attention_backend: AttentionBackend | str = AttentionBackend.AUTO,
        kernels: Kernels | str = Kernels.TORCH,
    ):
        super().__init__()
        self.cfg = cfg
        self.attention_backend = attention_backend
        self.patch_embedding = nn.Conv3d(cfg.in_channels, cfg.dim, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.text_embedding = nn.Sequential(
            nn.Linear(cfg.text_dim, cfg.dim), nn.GELU(approximate="tanh"), nn.Linear(cfg.dim, cfg.dim)
        )
        self.time_embedding = nn.Sequential(nn.Linear(cfg.freq_dim, cfg.dim), nn.SiLU(), nn.Linear(cfg.dim, cfg.dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(cfg.dim, 6 * cfg.dim))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.head = Head(cfg)
        self._rope_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        # Ulysses sequence parallelism (wanscope.parallel.ulysses) sets this: the blocks then
        # run on this rank's tokens and the head's output is gathered from every rank.
        self.sequence_parallel = None
        # wan/streaming.py's BlockStream sets this: the blocks then run from host memory
        self.block_stream = None
        self.kernels = kernels

    @property
    def attention_backend(self) -> AttentionBackend:
        return self._attention_backend

    @attention_backend.setter
    def attention_backend(self, backend: AttentionBackend | str) -> None:
        """Set by name or enum; UsageError for an unknown name."""
        self._attention_backend = parse_backend(backend)

    @property
    def kernels(self) -> Kernels:
        return self._kernels

    @kernels.setter
    def kernels(self, kernels: Kernels | str) -> None:
        """Switch every block to ``kernels``; UsageError for an unknown name, or for ``triton``
        without q/k RMSNorm (the fused op always normalizes)."""
        try:
            self._kernels = Kernels(kernels)
        except ValueError:
            raise UsageError(f"unknown kernels {kernels!r}; known: torch, triton") from None
        fused_forward = None
        if self._kernels is Kernels.TRITON:
            if not self.cfg.qk_norm:
                raise UsageError("kernels='triton' needs qk_norm (the fused op normalizes q and k)")
            from wanscope.wan import fused  # imports triton: only when asked for

            fused_forward = fused.block_forward
            for block in self.blocks:
                fused.fuse_projections(block.self_attn, ("q", "k", "v"))
                fused.fuse_projections(block.cross_attn, ("k", "v"))
        for block in self.blocks:
            block.fused_forward = fused_forward

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype of the linear layers."""
        return self.patch_embedding.weight.dtype

    def set_dtype(self, dtype: torch.dtype) -> WanDiT:
        """Cast to ``dtype`` in place, keeping the fp32 parameters (``keeps_fp32``) in fp32."""
        for name, p in self.named_parameters():
            p.data = p.data.to(torch.float32 if keeps_fp32(name) else dtype)
        self.kernels = self.kernels  # re-fuse the projection weights in the new dtype
        return self

    def init_weights(self) -> WanDiT:
        """Random weights for timing and tests (seed with ``torch.manual_seed``), every parameter
        written in its own dtype and device (so a model built on the meta device and moved with
        ``meta.materialize`` gets values without an fp32 copy): Xavier-uniform linears with zero bias
        and N(0, 0.02) text and time embeddings (official ``init_weights``), except that the
        output head is Xavier too: the official zero head is a training choice that would make
        every random-weight output the same constant; norm weights 1 and biases 0; the
        modulation tables N(0, 1/dim), as the official model constructs them."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, (RMSNorm, nn.LayerNorm)) and m.weight is not None:
                nn.init.ones_(m.weight)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
            if isinstance(getattr(m, "modulation", None), nn.Parameter):
                nn.init.normal_(m.modulation, std=self.cfg.dim**-0.5)
        nn.init.xavier_uniform_(self.patch_embedding.weight.flatten(1))
        nn.init.zeros_(self.patch_embedding.bias)
        for seq in (self.text_embedding, self.time_embedding):
            for m in seq:
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=0.02)
        return self

    @classmethod
    def random(cls, cfg: DiTConfig, dtype: torch.dtype, device) -> WanDiT:
        """A random-weight model (``init_weights``) built on the meta device and initialized
        in ``dtype`` on ``device``: its peak memory is the model's size, as a checkpoint's
        load is, not that of an fp32 model cast afterwards."""
        with meta_device():
            model = cls(cfg)
        materialize(model.set_dtype(dtype), device)
        return model.init_weights()

    def rope(self, grid: tuple[int, int, int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE tables for ``grid`` (F, H, W in patches), built once per grid and device."""
        key = (*grid, device)
        if key not in self._rope_cache:
            self._rope_cache[key] = rope_tables(self.cfg, grid, device)
        return self._rope_cache[key]

    def forward(self, latents: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Predict the flow velocity.

        Args:
            latents: [B, C_in, F, H, W] (VAE latents; F, H, W divisible by the patch size).
            timestep: [B] in [0, num_train_timesteps] (= 1000 * sigma).
            context: [B, Lc, text_dim] text-encoder states, zero-padded to ``text_len`` as the
                text encoder returns them (both references pad; the DiT attends to all Lc).

        Returns:
            [B, C_out, F, H, W] fp32.

        Raises:
            ValueError: latents with the wrong rank or channels, or not divisible by the patch.
        """
        cfg = self.cfg
        if latents.ndim != 5 or latents.shape[1] != cfg.in_channels:
            raise ValueError(f"latents must be [B, {cfg.in_channels}, F, H, W], got {tuple(latents.shape)}")
        b, _, f, h, w = latents.shape
        pt, ph, pw = cfg.patch_size
        if f % pt or h % ph or w % pw:
            raise ValueError(f"latent F, H, W {(f, h, w)} not divisible by patch {cfg.patch_size}")
        grid = (f // pt, h // ph, w // pw)
        dtype = self.dtype

        x = self.patch_embedding(latents.to(dtype)).flatten(2).transpose(1, 2)  # [B, L, dim] view, dim-major
        e = self.time_embedding(sinusoidal_embedding(timestep, cfg.freq_dim))  # [B, dim] fp32
        e6 = self.time_projection(e).unflatten(1, (6, cfg.dim))  # [B, 6, dim] fp32
        ctx = self.text_embedding(context.to(dtype))  # [B, Lc, dim]
        rope = self.rope(grid, latents.device)
        if self.sequence_parallel is not None:
            x, rope = self.sequence_parallel.shard(x, rope)  # [B, L_r, dim] view, this rank's tokens
        # The residual stream: token-major, cast and copied from the view in one pass (only this
        # rank's tokens under Ulysses). .float() alone keeps a dim-major view dim-major (and
        # .to(memory_format=...) does not see a 3-D transpose): every block's LayerNorms would
        # transpose it back and every residual add read one operand across rows.
        residual = torch.float32 if cfg.fp32_residual else dtype
        x = torch.empty_like(x, dtype=residual, memory_format=torch.contiguous_format).copy_(x)

        # ``auto`` resolved once per forward, outside the blocks (which may be compiled)
        backend = resolve_backend(self.attention_backend, latents.device, dtype, cfg.head_dim)
        for block in self.blocks if self.block_stream is None else self.block_stream:
            x = block(x, e6, ctx, rope, backend)

        out = self.head(x, e)  # [B, L, pt*ph*pw*C] fp32 (L_r tokens under Ulysses)
        if self.sequence_parallel is not None:
            out = self.sequence_parallel.gather(out)  # [B, L, pt*ph*pw*C] from every rank
        out = out.view(b, *grid, pt, ph, pw, cfg.out_channels)  # [B, F, H, W, pt, ph, pw, C]
        out = out.permute(0, 7, 1, 4, 2, 5, 3, 6)  # [B, C, F, pt, H, ph, W, pw]
        return out.reshape(b, cfg.out_channels, f, h, w)  # [B, C, F, H, W]
