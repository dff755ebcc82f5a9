"""Where each stage's model lives so that a run fits a device-memory budget (``--memory-budget``).

The stages run one after another and each releases its model (``pipeline.py``), so a plan fits
when every stage's estimate fits on its own. For each stage the planner takes the fastest
placement that fits:

- text encoder: ``resident`` (the whole encoder on the device), else ``streamed`` (its blocks
  from host memory through two device slots, ``streaming.py``, read once from the memory-mapped
  checkpoint; the token embedding looked up on the host);
- DiT: ``resident``, else ``streamed`` (its blocks from pinned host memory, the next block's
  copy overlapping the current block's compute);
- VAE (``vae_decoder.VAEDecoder``): ``all_frames`` (the up path's frames of a latent frame
  together), else ``frame_by_frame`` (one video frame at a time), else ``tiled`` (frame by
  frame, one spatial tile at a time: ``TILES``, the most tiles last, each costing its halo's
  extra arithmetic).

A stage's estimate is the device bytes of its weights as placed plus an upper bound of its
activations (``_text_activations``, ``_dit_activations``, ``_vae_activations``: the largest
tensors each holds at once, from its architecture) plus ``MARGIN_BYTES`` for the allocator's
rounding and the libraries' workspaces; it must fit the budget less ``CONTEXT_BYTES``. The
engine's commands run PyTorch's allocator with expandable segments (``options.engine_allocator``),
so that what it reserves stays near what it allocates. ``benchmarks/memory.py`` measures the peaks against
the estimates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from wanscope.errors import UsageError
from wanscope.wan.config import WanConfig, dit_tokens, resolve_cfg
from wanscope.wan.meta import meta_device
from wanscope.wan.vae_decoder import VAEDecoder, tile_extent

GIB = 1 << 30
MARGIN_BYTES = 512 << 20  # caching-allocator rounding, cuBLAS/cuDNN workspaces
STAGES = ("text_encoder", "dit", "vae")
# the VAE's tile grids (rows, columns) the planner tries, fewest tiles first; the larger count
# goes along the longer side. More tiles gain little: each carries ``halo`` pixels around it.
TILES = ((1, 2), (2, 2), (2, 4))
# the VAE decode's working tensors, in frame planes of ``base_dim`` channels at full resolution
# (``_vae_activations``): counted from its operations and rounded up to what an H200 measured
# for every placement in fp32 and bf16 (``benchmarks/vae_decode.py --placements``; RESULTS.md);
# all frames together hold the 4 frames of a latent frame, but not 4 times every temporary
WORKING_PLANES = {"frame_by_frame": 16, "all_frames": 36}
# what the allocator reserves for the VAE's activations, per byte allocated: its tensors of many
# sizes leave free blocks between live ones, even with expandable segments (rounded up from an
# H200's frame-by-frame and all-frames decodes: benchmarks/RESULTS.md, 2026-12-03)
VAE_RESERVED_FACTOR = 1.25
# the CUDA context, the kernels' code and the libraries' memory outside PyTorch's allocator: a
# budget is the device memory the run may use in all (NVML's count), so the stages get it less this
CONTEXT_BYTES = 768 << 20


def _tensor_bytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


@dataclass(frozen=True)
class ModelSizes:
    """Device bytes of each model's parts, from the architecture (built on the meta device).

    ``text_blocks``/``dit_blocks``: every block together; ``*_block``: the largest one (a slot);
    ``text_embedding``: the token table; ``*_rest``: everything else; ``vae``: the decoder;
    ``vae_halo``: the latent pixels of context a tile of its up path needs (``Decoder3d.halo``)."""

    text_embedding: int
    text_blocks: int
    text_block: int
    text_rest: int
    dit_blocks: int
    dit_block: int
    dit_rest: int
    vae: int
    vae_halo: int

    @classmethod
    def of(cls, config: WanConfig, dtype: torch.dtype, fast, vae_dtype: torch.dtype) -> ModelSizes:
        """``fast``: a ``precision.FastConfig`` (its FP8 copies are added to each block) or None."""
        from wanscope.wan.dit import WanDiT
        from wanscope.wan.umt5 import UMT5Encoder

        with meta_device():
            te = UMT5Encoder(config.text_encoder).to(dtype)
            dit = WanDiT(config.dit).set_dtype(dtype)
            vae = VAEDecoder(config.vae).to(vae_dtype)
        te_blocks = [_tensor_bytes(b) for b in te.encoder.block]
        dit_blocks = [_tensor_bytes(b) + _fp8_bytes(b, fast) for b in dit.blocks]
        emb = _tensor_bytes(te.shared)
        return cls(
            text_embedding=emb,
            text_blocks=sum(te_blocks),
            text_block=max(te_blocks),
            text_rest=_tensor_bytes(te) - emb - sum(te_blocks),
            dit_blocks=sum(dit_blocks),
            dit_block=max(dit_blocks),
            dit_rest=_tensor_bytes(dit) - sum(_tensor_bytes(b) for b in dit.blocks),
            vae=_tensor_bytes(vae),
            vae_halo=vae.decoder.halo(),
        )


def _fp8_bytes(block, fast) -> int:
    """The fast mode's FP8 copies of one block's linears (``precision.FastBlock``): 1 byte per
    weight and an fp32 scale per output (their biases are the linears' own tensors)."""
    if fast is None:
        return 0
    sa, ca, ffn = block.self_attn, block.cross_attn, block.ffn
    shapes = {
        "qkv": (3 * sa.q.out_features, sa.q.in_features),
        "o": (sa.o.out_features, sa.o.in_features),
        "cross_q": (ca.q.out_features, ca.q.in_features),
        "cross_o": (ca.o.out_features, ca.o.in_features),
        "ffn_up": (ffn[0].out_features, ffn[0].in_features),
        "ffn_down": (ffn[2].out_features, ffn[2].in_features),
    }
    return sum(n * k + 4 * n for n, k in (shapes[name] for name in fast.linears))


def _text_activations(config: WanConfig, prompts: int, dtype: torch.dtype) -> int:
    """One UMT5 layer's largest live tensors for ``prompts`` x ``text_len`` tokens: the hidden
    states and their norm (4 of [B, L, dim]), the gated FFN's three [B, L, ffn_dim], and the
    attention scores with their softmax and position bias in fp32 (3 of [B, heads, L, L])."""
    te, n, size = config.text_encoder, prompts * config.dit.text_len, dtype.itemsize
    return n * (4 * te.dim + 3 * te.ffn_dim) * max(size, 4) + 3 * prompts * te.num_heads * config.dit.text_len**2 * 4


def _dit_activations(config: WanConfig, tokens: int, batch: int) -> int:
    """One DiT block's largest live tensors for ``batch`` x ``tokens``: the fp32 residual stream
    and its modulated norm, the fused q/k/v and the attention output (16 bytes per token and
    channel together), the FFN's hidden layer and its GELU (4 bytes per token and FFN channel);
    the RoPE tables and the text states are small beside them."""
    d = config.dit
    return batch * tokens * (16 * d.dim + 4 * d.ffn_dim)


def _vae_activations(
    config: WanConfig,
    height: int,
    width: int,
    frames: int,
    dtype: torch.dtype,
    per_frame: bool,
    tiles: tuple[int, int],
    halo: int,
) -> int:
    """An upper bound of the decode's live tensors (``vae_decoder.VAEDecoder``), the larger of
    two moments. While decoding: the video in ``dtype``, when tiled the middle block's output of
    every latent frame, and for one tile (its halo included: ``tile_extent``) the causal caches at each
    resolution (2 frames of the input of each of a level's ``2 (num_res_blocks + 1) + 1``
    convolutions with a temporal kernel, at the level's output width) and the working tensors:
    ``WORKING_PLANES`` frame planes of ``base_dim`` channels at full resolution (a convolution's
    input with its 2 cached frames, that padded, its output, the residual block's input, norm
    temporaries and skip, the upsampler's fp32 interpolation at twice the channels, cuDNN's
    workspace). After: 9 bytes per video value (the fp32 video, ``pipeline.to_frames``' fp32
    temporary and its uint8 frames)."""
    v = config.vae
    size = dtype.itemsize
    sf, sh, sw = v.stride
    h, w = height // sh, width // sw
    th, tw = tile_extent(h, tiles[0], halo), tile_extent(w, tiles[1], halo)
    latent_frames = (frames - 1) // sf + 1
    video = 3 * frames * height * width
    middle = 0 if tuple(tiles) == (1, 1) else v.base_dim * v.dim_mult[-1] * latent_frames * h * w * size
    levels = len(v.dim_mult)
    caches = 0
    for level in range(levels):  # the up blocks, from the latent resolution up
        channels = v.base_dim * v.dim_mult[levels - 1 - level]
        convs = 2 * (v.num_res_blocks + 1) + 1
        caches += convs * 2 * channels * (th << level) * (tw << level) * size
    planes = WORKING_PLANES["frame_by_frame" if per_frame else "all_frames"]
    working = planes * v.base_dim * th * sh * tw * sw * size
    return max(middle + video * size + caches + working, 9 * video)


def _vae_choices(config, height, width, frames, dtype, sizes: ModelSizes) -> dict[str, tuple]:
    """Each VAE placement, fastest first: its label (``vae_label``) -> (name, tiles, bytes)."""
    h, w = height // config.vae.stride[1], width // config.vae.stride[2]

    def need(per_frame: bool, tiles: tuple[int, int]) -> int:
        act = _vae_activations(config, height, width, frames, dtype, per_frame, tiles, sizes.vae_halo)
        return sizes.vae + int(act * VAE_RESERVED_FACTOR) + MARGIN_BYTES

    choices = [("all_frames", (1, 1)), ("frame_by_frame", (1, 1))]
    choices += [("tiled", t if w >= h else t[::-1]) for t in TILES]
    return {
        vae_label(name, tiles): (name, tiles, need(name != "all_frames", tiles))
        for name, tiles in choices
        if tiles[0] <= h and tiles[1] <= w
    }


def vae_label(name: str, tiles: tuple[int, int]) -> str:
    """A VAE placement as shown: its name, and its tiles when ``tiled`` (``tiled 1x2``)."""
    return f"{name} {tiles[0]}x{tiles[1]}" if name == "tiled" else name


@dataclass(frozen=True)
class MemoryPlan:
    """The placement of each stage and its estimate (bytes) under ``budget_bytes`` (None: no
    budget, everything resident); ``vae_tiles``: the VAE's (rows, columns) when it is ``tiled``."""

    budget_bytes: int | None
    text_encoder: str
    dit: str
    vae: str
    estimate_bytes: dict[str, int] = field(default_factory=dict)
    vae_tiles: tuple[int, int] = (1, 1)

    def placement(self, stage: str) -> str:
        """The stage's placement as shown: ``tiled 1x2`` for a tiled VAE."""
        return vae_label(self.vae, self.vae_tiles) if stage == "vae" else getattr(self, stage)

    def describe(self) -> str:
        """One line, e.g. ``memory plan (budget 8.00 GiB, each stage on its own): text encoder streamed (1.77 GiB), ...``."""
        budget = (
            "no budget"
            if self.budget_bytes is None
            else f"budget {self.budget_bytes / GIB:.2f} GiB, each stage on its own"
        )
        parts = [
            f"{name.replace('_', ' ')} {self.placement(name)} ({self.estimate_bytes[name] / GIB:.2f} GiB)"
            for name in STAGES
        ]
        return f"memory plan ({budget}): " + ", ".join(parts)

    def as_dict(self) -> dict:
        """For the sidecar and ``report.json``: ``budget_bytes``, each stage's placement,
        ``vae_tiles`` and ``estimate_bytes``."""
        return {
            "budget_bytes": self.budget_bytes,
            **{name: getattr(self, name) for name in STAGES},
            "vae_tiles": list(self.vae_tiles),
            "estimate_bytes": dict(self.estimate_bytes),
        }


def plan_memory(
    config: WanConfig,
    height: int,
    width: int,
    frames: int,
    cfg: str,
    guidance: float,
    dtype: torch.dtype,
    fast,
    vae_dtype: torch.dtype,
    budget_bytes: int | None,
) -> MemoryPlan:
    """The fastest placement of each stage that fits ``budget_bytes`` less ``CONTEXT_BYTES``
    (module docstring).

    Args:
        cfg: the request's CFG mode (``auto`` resolved here as the run resolves it).
        fast: the fast mode's ``FastConfig`` or None.
        budget_bytes: None: no budget (every stage resident).

    Raises:
        UsageError: a budget that even the streamed plan overshoots: the message names the
            smallest budget that works and the stage that needs it.
    """
    sizes = ModelSizes.of(config, dtype, fast, vae_dtype)
    prompts = 2 if guidance > 1.0 else 1
    tokens = dit_tokens(config, height, width, frames)
    batch = 2 if guidance > 1.0 and resolve_cfg(cfg, tokens) == "batched" else 1
    text_act = _text_activations(config, prompts, dtype) + MARGIN_BYTES
    dit_act = _dit_activations(config, tokens, batch) + MARGIN_BYTES
    vae = _vae_choices(config, height, width, frames, vae_dtype, sizes)
    options = {
        "text_encoder": {
            "resident": sizes.text_embedding + sizes.text_blocks + sizes.text_rest + text_act,
            "streamed": 2 * sizes.text_block + sizes.text_rest + text_act,
        },
        "dit": {
            "resident": sizes.dit_blocks + sizes.dit_rest + dit_act,
            "streamed": 2 * sizes.dit_block + sizes.dit_rest + dit_act,
        },
        "vae": {label: need for label, (_, _, need) in vae.items()},
    }
    usable = None if budget_bytes is None else budget_bytes - CONTEXT_BYTES
    chosen, estimate = {}, {}
    for stage, choices in options.items():
        fits = [(name, need) for name, need in choices.items() if usable is None or need <= usable]
        if not fits:
            smallest = max(min(c.values()) for c in options.values()) + CONTEXT_BYTES
            worst = max(options, key=lambda s: min(options[s].values()))
            raise UsageError(
                f"--memory-budget {budget_bytes / GIB:.2f} GiB cannot hold this run: the smallest budget that "
                f"works is {-(-smallest * 100 // GIB) / 100:.2f} GiB (the {worst.replace('_', ' ')} stage)"
            )
        chosen[stage], estimate[stage] = fits[0]
    vae_name, tiles, _ = vae[chosen["vae"]]
    return MemoryPlan(budget_bytes, chosen["text_encoder"], chosen["dit"], vae_name, estimate, tiles)


def plan_for(parts, req, dit, budget_gib: float | None, fast="auto") -> MemoryPlan | None:
    """The plan of a run of ``parts`` (``pipeline.Components``) for ``req`` (its ``cfg``
    resolved or ``auto``) with the DiT ``dit`` (a ``DiTConfig``: the checkpoint's): under
    ``budget_gib`` or, without one, the CUDA device's free memory now (plus ``CONTEXT_BYTES``:
    the context, which the query creates, is already out of it); None on the CPU without
    a budget (nothing to fit). ``fast``: the ``FastConfig`` to plan for (default: ``parts``';
    ``compare-modes`` plans for its fast mode, the larger).

    Raises:
        UsageError: as ``plan_memory``.
    """
    from dataclasses import replace

    if budget_gib is not None:
        budget = int(budget_gib * GIB)
    elif parts.device.type == "cuda":  # free memory, the context (made by the call) already out of it
        budget = torch.cuda.mem_get_info(parts.device)[0] + CONTEXT_BYTES
    else:
        return None
    return plan_memory(
        replace(parts.config, dit=dit),
        req.height,
        req.width,
        req.frames,
        req.cfg,
        req.guidance,
        parts.dtype,
        parts.fast if fast == "auto" else fast,
        parts.vae_dtype,
        budget,
    )
