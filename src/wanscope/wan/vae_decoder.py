"""The decoder of Wan2.1's causal 3-D VAE, our own module (no diffusers import).

The architecture is the official ``vae2_1.py`` ``WanVAE_`` decoder (its ``conv2`` and
``Decoder3d``; diffusers' ``AutoencoderKLWan`` ``post_quant_conv`` and ``decoder``). The latents
[B, z_dim, F, H, W] go through a 1x1x1 convolution, then latent frame by latent frame through: a
3x3x3 convolution to the widest level's channels; a middle block (residual block, single-head
self-attention over each frame's positions, residual block); one up block per level, widest
first, of ``num_res_blocks + 1`` residual blocks and, at each level but the last, an upsampler
(nearest-exact 2x in height and width, then a 3x3 convolution halving the channels); an RMS norm,
SiLU and a 3x3x3 convolution to RGB. A residual block is ``conv2(silu(norm2(conv1(silu(norm1(x))))))``
plus ``x`` (through a 1x1x1 convolution where the width changes).

Time is causal: every 3-D convolution with a temporal kernel of 3 sees the current frame and the
two before it, zeros before the video's first. Decoding runs one latent frame at a time, as both
published implementations do, each such convolution keeping the last two frames of its input so
far in a cache (``Cache``) for the next. The temporally upsampling levels (``temporal_downsample``
reversed) pass the first latent frame through as one frame; every later frame becomes two: a
(3, 1, 1) causal convolution doubles the channels, the halves are the two frames, and its history
starts at the second latent frame (the official code's ``"Rep"`` first-chunk mark). So F latent
frames decode to ``1 + 4 (F - 1)`` video frames at Wan2.1's two such levels.

The RMS norm is ``x / ||x||_2 * sqrt(C) * gamma`` over the channels (no mean, no epsilon but
``F.normalize``'s), its statistics in fp32 for a half-precision input; before a convolution
it runs with the SiLU after it and the frames the convolution keeps in one pass
(``kernels.causal_norm_silu``: fp32 arithmetic, one rounding). The upsampling's interpolation
runs in fp32 too. Parameter names are diffusers' (``post_quant_conv.weight``,
``decoder.up_blocks.N.resnets.M.conv1.weight``, ...), so a diffusers ``vae/`` folder loads as it
is saved and the official names map onto them (``vae.decoder_key``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from wanscope.wan.config import VAEConfig

# A decode's state: per causal convolution, the last frames of its input so far ([B, C, <=2, H, W]);
# per temporally upsampling ``Upsampler``, None once it has passed the first latent frame.
Cache = dict[nn.Module, "torch.Tensor | None"]


class CausalConv3d(nn.Conv3d):
    """A 3-D convolution zero-padded ``kernel - 1`` frames in front (none behind) and
    ``kernel // 2`` on each side in height and width, so its output has its input's size.

    ``forward(x, cache, norm)``: x [B, C_in, T, H, W] -> [B, C_out, T, H, W]. A temporal kernel
    above 1 needs ``cache``: the frames it holds for this convolution replace that many zeros in
    front, and the last frames of its input are left there for the next call. ``norm`` (an
    ``RMSNorm``): the convolution's input is ``silu(norm(x))``, made with the frames in front in
    one pass (``kernels.causal_norm_silu``; on CUDA a Triton kernel); the spatial zeros are the
    convolution's own padding. Only convolutions with a temporal kernel above 1 take a ``norm``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel: int | tuple[int, int, int]):
        super().__init__(in_channels, out_channels, kernel)

    def forward(self, x: torch.Tensor, cache: Cache | None = None, norm: RMSNorm | None = None) -> torch.Tensor:
        from wanscope.kernels.causal_norm_silu import causal_norm_silu

        kt, kh, kw = self.kernel_size
        if kt == 1:
            return super().forward(x)
        x = causal_norm_silu(x, cache.get(self), None if norm is None else norm.gamma, kt - 1)
        cache[self] = x[:, :, 1 - kt :].clone()
        return F.conv3d(x, self.weight, self.bias, padding=(0, kh // 2, kw // 2))


class RMSNorm(nn.Module):
    """``F.normalize(x, dim=1) * sqrt(dim) * gamma``: the L2 norm over the channels (dim 1), in fp32
    for a half-precision ``x``, the result in ``x``'s dtype. ``gamma`` is [dim, 1, 1, 1] for
    [B, C, T, H, W] inputs and [dim, 1, 1] for [N, C, H, W] ones (``frames=False``)."""

    def __init__(self, dim: int, frames: bool = True):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim, *(1,) * (3 if frames else 2)))
        self.scale = dim**0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = x.dtype in (torch.float16, torch.bfloat16)
        normalized = F.normalize(x.float() if low else x, dim=1).to(x.dtype)
        return normalized * self.scale * self.gamma


class ResidualBlock(nn.Module):
    """[B, in_dim, T, H, W] -> [B, out_dim, T, H, W]; ``cache`` as ``CausalConv3d``'s."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.norm1 = RMSNorm(in_dim)
        self.conv1 = CausalConv3d(in_dim, out_dim, 3)
        self.norm2 = RMSNorm(out_dim)
        self.conv2 = CausalConv3d(out_dim, out_dim, 3)
        self.conv_shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else None

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        skip = x if self.conv_shortcut is None else self.conv_shortcut(x)
        x = self.conv1(x, cache, self.norm1)
        return self.conv2(x, cache, self.norm2) + skip


class Attention(nn.Module):
    """Single-head self-attention among the H*W positions of each frame (scaled by
    ``1/sqrt(dim)``, SDPA's default), added to the input: [B, dim, T, H, W] -> the same."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = RMSNorm(dim, frames=False)
        self.to_qkv = nn.Conv2d(dim, 3 * dim, 1)
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        frames = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        qkv = self.to_qkv(self.norm(frames)).reshape(b * t, 1, 3 * c, h * w).permute(0, 1, 3, 2).contiguous()
        q, k, v = qkv.chunk(3, dim=-1)  # [B*T, 1, H*W, C] each
        out = F.scaled_dot_product_attention(q, k, v).squeeze(1).permute(0, 2, 1).reshape(b * t, c, h, w)
        return self.proj(out).view(b, t, c, h, w).permute(0, 2, 1, 3, 4) + x


class MidBlock(nn.Module):
    """Residual block, attention, residual block, at ``dim`` channels."""

    def __init__(self, dim: int):
        super().__init__()
        self.resnets = nn.ModuleList([ResidualBlock(dim, dim), ResidualBlock(dim, dim)])
        self.attentions = nn.ModuleList([Attention(dim)])

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        x = self.resnets[0](x, cache)
        return self.resnets[1](self.attentions[0](x), cache)


class Upsample2x(nn.Module):
    """Nearest-exact 2x in height and width, computed in fp32 (half-precision input in, its dtype
    out): [N, C, H, W] -> [N, C, 2H, 2W]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x.float(), scale_factor=2.0, mode="nearest-exact").to(x.dtype)


class Upsampler(nn.Module):
    """[B, dim, T, H, W] -> [B, dim/2, T', 2H, 2W]: with ``temporal``, T' = 2T except on the first
    call of a decode (T' = T = 1), else T' = T."""

    def __init__(self, dim: int, temporal: bool):
        super().__init__()
        self.resample = nn.Sequential(Upsample2x(), nn.Conv2d(dim, dim // 2, 3, padding=1))
        self.time_conv = CausalConv3d(dim, 2 * dim, (3, 1, 1)) if temporal else None

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        if self.time_conv is not None:
            if self in cache:  # every frame after the first becomes two: the two channel halves
                b, c, t, h, w = x.shape
                pairs = self.time_conv(x, cache).view(b, 2, c, t, h, w)
                x = pairs.permute(0, 2, 3, 1, 4, 5).reshape(b, c, 2 * t, h, w)
            else:  # the first latent frame stays one frame; the time conv's history starts after it
                cache[self] = None
        b, c, t, h, w = x.shape
        y = self.resample(x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w))
        return y.view(b, t, *y.shape[1:]).permute(0, 2, 1, 3, 4)


class UpBlock(nn.Module):
    """``num_res_blocks + 1`` residual blocks ``in_dim -> out_dim``, then an ``Upsampler`` of
    ``upsample`` ("2d", "3d": also in time, or None)."""

    def __init__(self, in_dim: int, out_dim: int, num_res_blocks: int, upsample: str | None):
        super().__init__()
        dims = [in_dim] + [out_dim] * (num_res_blocks + 1)
        self.resnets = nn.ModuleList([ResidualBlock(a, b) for a, b in zip(dims[:-1], dims[1:])])
        self.upsamplers = nn.ModuleList([Upsampler(out_dim, upsample == "3d")] if upsample else [])

    def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        for resnet in self.resnets:
            x = resnet(x, cache)
        for upsampler in self.upsamplers:
            x = upsampler(x, cache)
        return x


class Decoder3d(nn.Module):
    """The decoder's layers, run one latent frame at a time as ``up(middle(x, cache), cache)``:
    [B, z_dim, 1, H, W] -> video frames [B, 3, T', 8H, 8W] (Wan2.1's strides), the causal
    history in ``cache``."""

    def __init__(self, cfg: VAEConfig):
        super().__init__()
        widths = [cfg.base_dim * m for m in (cfg.dim_mult[-1], *cfg.dim_mult[::-1])]
        temporal = cfg.temporal_downsample[::-1]
        self.conv_in = CausalConv3d(cfg.z_dim, widths[0], 3)
        self.mid_block = MidBlock(widths[0])
        blocks = []
        for i, out_dim in enumerate(widths[1:]):
            in_dim = widths[i] if i == 0 else widths[i] // 2  # the upsampler before halved it
            upsample = None if i == len(cfg.dim_mult) - 1 else ("3d" if temporal[i] else "2d")
            blocks.append(UpBlock(in_dim, out_dim, cfg.num_res_blocks, upsample))
        self.up_blocks = nn.ModuleList(blocks)
        self.norm_out = RMSNorm(widths[-1])
        self.conv_out = CausalConv3d(widths[-1], 3, 3)

    def middle(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
        """One latent frame [B, z_dim, 1, H, W] through ``conv_in`` and the middle block:
        [B, widths[0], 1, H, W]. Its attention mixes every position of the frame, so this part
        runs on whole frames; everything after it is local in space (``halo``)."""
        return self.mid_block(self.conv_in(x, cache), cache)

    def up(self, x: torch.Tensor, cache: Cache, per_frame: bool = True, level: int = 0) -> torch.Tensor:
        """The middle block's output for one latent frame through up block ``level`` and
        everything after it: [B, widths[0], 1, h, w] -> [B, 3, T', 8*h, 8*w].

        ``per_frame``: after each up block, every frame it made goes on alone. The operations
        after it act per frame or through the causal caches, which carry the frames before, so
        this is the arithmetic of the frames all at once; the higher resolutions then hold one
        frame's working tensors, not four. Else the frames go on together (faster, more memory).
        """
        if level == len(self.up_blocks):
            return self.conv_out(x, cache, self.norm_out)
        x = self.up_blocks[level](x, cache)
        if not per_frame:
            return self.up(x, cache, per_frame, level + 1)
        return torch.cat([self.up(x[:, :, t : t + 1], cache, per_frame, level + 1) for t in range(x.shape[2])], dim=2)

    def halo(self) -> int:
        """Latent pixels of context a tile of the up path needs on each side for its inner part
        to come out as in the whole frame: the up path's receptive radius, each convolution of
        kernel k adding ``k // 2`` pixels at its resolution (1/2 latent pixel after one 2x
        upsampling, 1/4 after two, ...), rounded up. 13 for Wan2.1's VAE (12.25)."""
        reach, scale = 0.0, 1
        for block in self.up_blocks:
            for resnet in block.resnets:
                reach += (resnet.conv1.kernel_size[-1] // 2 + resnet.conv2.kernel_size[-1] // 2) / scale
            for upsampler in block.upsamplers:
                scale *= 2
                reach += (upsampler.resample[1].kernel_size[-1] // 2) / scale
        return math.ceil(reach + (self.conv_out.kernel_size[-1] // 2) / scale)


class VAEDecoder(nn.Module):
    """Un-normalized latents -> video.

    ``forward(z, per_frame=True, tiles=(1, 1))``: z [B, z_dim, F, H, W] in the parameters' dtype
    (the DiT's latents already multiplied by ``latents_std`` and shifted by ``latents_mean``:
    ``vae.decode``) -> [B, 3, 1 + 4 (F - 1), 8H, 8W] (Wan2.1's strides, ``cfg.stride``) in the
    parameters' dtype, not clamped, without gradients. Latent frame by latent frame, through
    ``Decoder3d.middle`` and then the up path (``Decoder3d.up``, ``per_frame`` as there) into
    the video. With ``tiles`` (rows, columns) other than (1, 1) the up path, whose working
    tensors and causal caches are most of the decode's memory, runs one spatial tile after
    another instead: every latent frame's middle-block output is kept first ([B, widths[0], F,
    H, W]), then each tile takes ``Decoder3d.halo`` latent pixels of its neighbours around it,
    cropped off after, all frames of a tile before the next, its caches freed after it. Every
    operation of the up path is local in space within that halo (convolutions zero-padded only
    at the frame's edges, nearest upsampling, per-position norms), so a tile's inner part is the
    whole frame's arithmetic: equal but for the rounding of convolutions whose algorithm depends
    on the input's size (tested in float64 on the CPU; the GPU's PSNR against the untiled
    decode: ``benchmarks/vae_decode.py``).

    Raises:
        ValueError: more tile rows or columns than latent pixels.
    """

    def __init__(self, cfg: VAEConfig):
        super().__init__()
        self.cfg = cfg
        self.post_quant_conv = CausalConv3d(cfg.z_dim, cfg.z_dim, 1)
        self.decoder = Decoder3d(cfg)

    @torch.no_grad()
    def forward(self, z: torch.Tensor, per_frame: bool = True, tiles: tuple[int, int] = (1, 1)) -> torch.Tensor:
        x = self.post_quant_conv(z)
        b, _, frames, h, w = x.shape
        sf, sh, sw = self.cfg.stride
        video = x.new_empty(b, 3, 1 + sf * (frames - 1), sh * h, sw * w)
        cache: Cache = {}
        if tuple(tiles) == (1, 1):  # each latent frame's middle-block output goes straight on
            middle = (self.decoder.middle(x[:, :, i : i + 1], cache) for i in range(frames))
            self._up_into(video, middle, cache, per_frame, (0, h, 0, w), (0, 0))
            return video
        kept = x.new_empty(b, self.decoder.conv_in.out_channels, frames, h, w)
        for i in range(frames):
            kept[:, :, i : i + 1] = self.decoder.middle(x[:, :, i : i + 1], cache)
        del x, cache
        halo = self.decoder.halo()
        for (r0, r1), (t0, t1) in _tiles(h, tiles[0], halo):
            for (c0, c1), (u0, u1) in _tiles(w, tiles[1], halo):
                middle = (kept[:, :, i : i + 1, t0:t1, u0:u1] for i in range(frames))
                self._up_into(video, middle, {}, per_frame, (r0 - t0, r1 - t0, c0 - u0, c1 - u0), (r0, c0))
        return video

    def _up_into(self, video, middle, cache: Cache, per_frame: bool, inner: tuple, at: tuple[int, int]) -> None:
        """The up path of each latent frame's middle-block output (``middle``, in order) into
        ``video``: of each output, the part ``inner`` (latent rows r0:r1 and columns c0:c1 of
        the region it covers), written at latent row and column ``at``."""
        _, sh, sw = self.cfg.stride
        r0, r1, c0, c1 = inner
        row, col = at
        start = 0
        for m in middle:
            out = self.decoder.up(m, cache, per_frame)
            part = out[..., sh * r0 : sh * r1, sw * c0 : sw * c1]
            video[
                :, :, start : start + out.shape[2], sh * row : sh * (row + r1 - r0), sw * col : sw * (col + c1 - c0)
            ] = part
            start += out.shape[2]

    @torch.no_grad()
    def init_weights(self) -> None:
        """Random values in place, PyTorch's default for convolutions (``nn.Conv3d``'s
        ``reset_parameters``: Kaiming-uniform with ``a = sqrt(5)``, which is U(-b, b) with
        ``b = 1 / sqrt(fan_in)``, the bias the same), RMS-norm gains 1. The values are drawn in
        fp32 one tensor at a time and rounded to the parameters' dtype, so a seed gives the
        same VAE in fp32 and bf16 (the exact and fast modes decode with one set of weights)."""

        def uniform_(p: torch.Tensor, bound: float) -> None:
            p.copy_(torch.empty(p.shape, dtype=torch.float32, device=p.device).uniform_(-bound, bound))

        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Conv3d)):
                bound = (m.weight[0].numel()) ** -0.5  # fan_in: input channels x kernel
                uniform_(m.weight, bound)
                uniform_(m.bias, bound)
            elif isinstance(m, RMSNorm):
                m.gamma.fill_(1)


def _spans(n: int, parts: int) -> list[tuple[int, int]]:
    """``n`` positions in ``parts`` near-equal consecutive [start, end) spans.

    Raises:
        ValueError: ``parts`` not in 1..n."""
    if not 1 <= parts <= n:
        raise ValueError(f"{parts} tiles across {n} latent pixels")
    edges = [n * k // parts for k in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _tiles(n: int, parts: int, halo: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """``n`` latent pixels cut into ``parts`` tiles: each tile's [start, end) and the same with
    ``halo`` pixels on each side, clipped to the frame.

    Raises:
        ValueError: ``parts`` not in 1..n."""
    return [((a, b), (max(a - halo, 0), min(b + halo, n))) for a, b in _spans(n, parts)]


def tile_extent(n: int, parts: int, halo: int) -> int:
    """The largest tile, its halo included, of ``n`` latent pixels cut into ``parts``
    (``VAEDecoder.forward``'s tiles): for the memory planner's estimate."""
    return max(hi - lo for _, (lo, hi) in _tiles(n, parts, halo))
