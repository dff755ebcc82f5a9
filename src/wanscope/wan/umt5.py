"""The UMT5 encoder of Wan2.1's text stage, our own module (no transformers import).

The architecture is T5's encoder as UMT5 changes it (Chung et al. 2023, "UniMax: Fairer and
more effective language sampling for large-scale multilingual pretraining", ICLR; the official
Wan ``t5.py`` ``T5Encoder`` with ``shared_pos=False``): a token embedding (no scaling), then per
layer a pre-norm self-attention with its own relative-position bias table and a pre-norm gated
tanh-GELU FFN, each added to the residual stream, then a final norm. The norms are T5's RMS
norms without a mean or a bias (statistics in fp32); the attention scores are not scaled by
``1/sqrt(head_dim)`` (T5 folds that into the initialization) and are softmaxed in fp32.

Parameter names are transformers' ``UMT5EncoderModel`` ones (``shared.weight``,
``encoder.block.N.layer.0.SelfAttention.q.weight``, ...), so a diffusers ``text_encoder/`` folder
loads as it is saved and the official names map onto them (``text_encoder.hf_key``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from wanscope.wan.config import TextEncoderConfig


class RMSNorm(nn.Module):
    """T5's layer norm: ``x / sqrt(mean(x^2) + eps) * weight``, the statistics in fp32, the result
    in the weight's dtype. [..., dim] -> [..., dim]."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps)).to(self.weight.dtype)


def position_buckets(length: int, num_buckets: int, max_distance: int, device) -> torch.Tensor:
    """T5's bidirectional relative-position buckets (Raffel et al. 2020, "Exploring the limits of
    transfer learning with a unified text-to-text transformer", JMLR 21, section 2.1): half the
    buckets per direction; distances below a quarter of ``num_buckets`` get one bucket each, the
    rest logarithmically spaced up to ``max_distance`` (farther ones share the last bucket).

    Returns:
        int64 [length, length]: the bucket of key position j relative to query position i.
    """
    pos = torch.arange(length, device=device)
    relative = pos[None, :] - pos[:, None]  # key - query
    half = num_buckets // 2
    bucket = (relative > 0).long() * half
    distance = relative.abs()
    exact = half // 2
    far = (
        exact
        + (torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (half - exact)).long()
    )
    bucket += torch.where(distance < exact, distance, far.clamp(max=half - 1))
    return bucket


class SelfAttention(nn.Module):
    """Multi-head self-attention with a learned relative-position bias per head.

    Args of ``forward``: x [B, L, dim]; mask_bias fp32 [B, 1, 1, L] additive (0, or fp32's
    minimum at padding keys); buckets int64 [L, L] (``position_buckets``). Returns [B, L, dim].
    The scores, bias and mask are added and softmaxed in fp32.
    """

    def __init__(self, cfg: TextEncoderConfig):
        super().__init__()
        inner = cfg.num_heads * cfg.head_dim
        self.num_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.q = nn.Linear(cfg.dim, inner, bias=False)
        self.k = nn.Linear(cfg.dim, inner, bias=False)
        self.v = nn.Linear(cfg.dim, inner, bias=False)
        self.o = nn.Linear(inner, cfg.dim, bias=False)
        self.relative_attention_bias = nn.Embedding(cfg.num_buckets, cfg.num_heads)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        b, length, _ = x.shape
        q, k, v = (
            proj(x).view(b, length, self.num_heads, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v)
        )
        scores = (q @ k.transpose(-1, -2)).float()  # [B, H, L, L], unscaled
        bias = self.relative_attention_bias(buckets).permute(2, 0, 1)[None]  # [1, H, L, L]
        # in fp32: the mask's minimum stays finite, so a row with every key masked is uniform
        weights = torch.softmax(scores + bias.float() + mask_bias, dim=-1).to(v.dtype)
        out = (weights @ v).transpose(1, 2).reshape(b, length, -1)
        return self.o(out)


class GatedFFN(nn.Module):
    """``wo(gelu_tanh(wi_0(x)) * wi_1(x))``: [B, L, dim] -> [B, L, dim]."""

    def __init__(self, cfg: TextEncoderConfig):
        super().__init__()
        self.wi_0 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.wi_1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.wo = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wo(F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x))


class _AttentionLayer(nn.Module):
    def __init__(self, cfg: TextEncoderConfig):
        super().__init__()
        self.layer_norm = RMSNorm(cfg.dim, cfg.eps)
        self.SelfAttention = SelfAttention(cfg)  # transformers' parameter names

    def forward(self, x, mask_bias, buckets):
        return x + self.SelfAttention(self.layer_norm(x), mask_bias, buckets)


class _FFNLayer(nn.Module):
    def __init__(self, cfg: TextEncoderConfig):
        super().__init__()
        self.layer_norm = RMSNorm(cfg.dim, cfg.eps)
        self.DenseReluDense = GatedFFN(cfg)  # transformers' parameter names

    def forward(self, x):
        return x + self.DenseReluDense(self.layer_norm(x))


class _Block(nn.Module):
    def __init__(self, cfg: TextEncoderConfig):
        super().__init__()
        self.layer = nn.ModuleList([_AttentionLayer(cfg), _FFNLayer(cfg)])

    def forward(self, x, mask_bias, buckets):
        return self.layer[1](self.layer[0](x, mask_bias, buckets))


class _Stack(nn.Module):
    def __init__(self, cfg: TextEncoderConfig):
        super().__init__()
        self.block = nn.ModuleList([_Block(cfg) for _ in range(cfg.num_layers)])
        self.final_layer_norm = RMSNorm(cfg.dim, cfg.eps)


class UMT5Encoder(nn.Module):
    """Token ids -> hidden states.

    ``forward(ids, mask)``: ids int64 [B, L], mask [B, L] (1 for tokens, 0 for padding, which no
    position attends to) -> [B, L, dim] in the parameters' dtype, the padding positions' states
    included (``TextEncoder`` zeroes them).
    """

    def __init__(self, cfg: TextEncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.shared = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.encoder = _Stack(cfg)
        # wan/streaming.py's BlockStream sets this: the blocks then run from host memory (and
        # the embedding may stay there: ids are looked up where it is)
        self.block_stream = None

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.shared(ids.to(self.shared.weight.device)).to(ids.device)
        buckets = position_buckets(ids.shape[1], self.cfg.num_buckets, self.cfg.max_distance, ids.device)
        mask_bias = (1 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for block in self.encoder.block if self.block_stream is None else self.block_stream:
            x = block(x, mask_bias, buckets)
        return self.encoder.final_layer_norm(x)

    @torch.no_grad()
    def init_weights(self) -> None:
        """Random values in place, the scheme transformers' ``UMT5PreTrainedModel._init_weights``
        uses (Mesh TensorFlow's, initializer factor 1): embedding N(0, 1); q N(0, (dim *
        head_dim)^-1/2), k and v N(0, dim^-1/2), o N(0, (heads * head_dim)^-1/2), the position
        tables N(0, dim^-1/2); wi_0 and wi_1 N(0, dim^-1/2), wo N(0, ffn_dim^-1/2); norms 1."""
        c = self.cfg
        self.shared.weight.normal_(0, 1)
        for block in self.encoder.block:
            att, ffn = block.layer[0].SelfAttention, block.layer[1].DenseReluDense
            att.q.weight.normal_(0, (c.dim * c.head_dim) ** -0.5)
            att.k.weight.normal_(0, c.dim**-0.5)
            att.v.weight.normal_(0, c.dim**-0.5)
            att.o.weight.normal_(0, (c.num_heads * c.head_dim) ** -0.5)
            att.relative_attention_bias.weight.normal_(0, c.dim**-0.5)
            ffn.wi_0.weight.normal_(0, c.dim**-0.5)
            ffn.wi_1.weight.normal_(0, c.dim**-0.5)
            ffn.wo.weight.normal_(0, c.ffn_dim**-0.5)
        for m in self.modules():
            if isinstance(m, RMSNorm):
                m.weight.fill_(1)
