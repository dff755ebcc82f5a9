"""The DiT block on fused kernels (``WanDiT(kernels="triton")``): same math as ``dit.Block``.

Per block, for ``x`` the residual stream [B, L, C] and ``e`` the six modulation vectors::

    h = norm_modulate(x; shift, scale)                          # LN + adaLN, one pass
    qkv = h @ [Wq; Wk; Wv]^T                                    # one GEMM, [B, L, 3C]
    q, k = rms_norm_rope(qkv[q third]), rms_norm_rope(qkv[k third]);  v = qkv[v third] (a view)
    x, h = add_norm_modulate(x, o(attend(q, k, v)); gate, norm3 affine)
    x, h = add_norm_modulate(x, cross_attn(h, ctx); c_shift, c_scale)   # ctx K/V: one GEMM
    x = gated_add(x, W2 gelu_tanh(W1 h + b1) + b2; c_gate)       # GELU in the GEMM epilogue on CUDA

q, k and v reach SDPA as [B, N, L, D] transposed views of token-major storage; cuDNN writes
its output token-major too, so no layout copy happens around attention. The fused
projection weights are views of one concatenated tensor (``fuse_projections``), so the state
dict keeps the official keys. Numerics: ``wanscope.kernels`` (fp32 arithmetic, one rounding per
output); the FFN's GELU is the tanh approximation everywhere (cuBLASLt's GELU epilogue is the
tanh form; the CPU ``_addmm_activation`` would use erf, so the CPU runs linear + gelu).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from wanscope.kernels import gated_add, norm_modulate, rms_norm_rope
from wanscope.wan import ranges


def fuse_projections(attn: nn.Module, names: tuple[str, ...]) -> None:
    """Make the ``names`` Linear layers of ``attn`` views of one weight [sum(out), in] and one
    bias, stored as the non-persistent buffers ``fused_weight``/``fused_bias``.

    Call after the weights are loaded and cast: replacing a parameter's tensor later
    (``load_state_dict(assign=True)``, ``p.data = ...``) detaches it from the fused copy.
    """
    lins = [getattr(attn, n) for n in names]
    weight = torch.cat([lin.weight.detach() for lin in lins])
    bias = torch.cat([lin.bias.detach() for lin in lins])
    attn.register_buffer("fused_weight", weight, persistent=False)
    attn.register_buffer("fused_bias", bias, persistent=False)
    start = 0
    for lin in lins:
        stop = start + lin.out_features
        lin.weight = nn.Parameter(weight[start:stop], requires_grad=lin.weight.requires_grad)
        lin.bias = nn.Parameter(bias[start:stop], requires_grad=lin.bias.requires_grad)
        start = stop


def linear_gelu_tanh(x: torch.Tensor, lin: nn.Linear) -> torch.Tensor:
    """``gelu_tanh(x W^T + b)``: x [..., K] -> [..., M]. On CUDA one cuBLASLt GEMM with the
    GELU epilogue (``_addmm_activation``), saving the separate pass over the [L, ffn_dim] hidden
    (1.17 GB per block at 1.3B/480p in bf16)."""
    if not x.is_cuda:
        return F.gelu(lin(x), approximate="tanh")
    out = torch._addmm_activation(lin.bias, x.reshape(-1, x.shape[-1]), lin.weight.t(), use_gelu=True)
    return out.view(*x.shape[:-1], -1)


def self_attention(attn, h, rope, backend):
    """h: [B, L, C] model dtype; rope: (cos, sin) [L, 1, D/2]. Returns the o projection [B, L, C]."""
    c, n = h.shape[-1], attn.num_heads
    qkv = F.linear(h, attn.fused_weight, attn.fused_bias)  # [B, L, 3C]
    q = rms_norm_rope(qkv[..., :c], attn.norm_q.weight, rope, n, attn.norm_q.eps)  # [B, L, N, D]
    k = rms_norm_rope(qkv[..., c : 2 * c], attn.norm_k.weight, rope, n, attn.norm_k.eps)
    # A contiguous copy of v measured no faster in the whole forward (H200; benchmarks/RESULTS.md,
    # "2026-11-30: fast mode, first H200 run", its contiguous-v A/B), so cuDNN reads v as a strided
    # slice of the QKV output.
    v = qkv[..., 2 * c :].unflatten(-1, (n, -1))  # [B, L, N, D] view, rows 3C apart
    return attn.o(attn.attend(q, k, v, backend).flatten(2))  # [B, L, C]


def cross_attention(attn, h, ctx, backend):
    """h: [B, L, C]; ctx: [B, Lc, C] text states. Returns the o projection [B, L, C]."""
    c, n = h.shape[-1], attn.num_heads
    q = rms_norm_rope(attn.q(h), attn.norm_q.weight, None, n, attn.norm_q.eps)  # [B, L, N, D]
    kv = F.linear(ctx, attn.fused_weight, attn.fused_bias)  # [B, Lc, 2C]
    k = rms_norm_rope(kv[..., :c], attn.norm_k.weight, None, n, attn.norm_k.eps)  # [B, Lc, N, D]
    v = kv[..., c:].unflatten(-1, (n, -1))  # [B, Lc, N, D] view
    return attn.o(attn.attend(q, k, v, backend).flatten(2))


def add_norm3(block, x, y, gate, dtype):
    """The gated self-attention residual and the cross-attention input: x [B, L, C] residual
    stream, y [B, L, C] attention output, gate [B, C] fp32. Returns (x + gate * y, its ``norm3``
    LayerNorm in ``dtype``, or the plain cast where the block has no ``cross_attn_norm``)."""
    n3 = block.norm3
    if n3 is None:
        x = gated_add(x, y, gate)
        return x, x.to(dtype)
    return norm_modulate(x, residual=y, gate=gate, weight=n3.weight, bias=n3.bias, eps=n3.eps, out_dtype=dtype)


def block_forward(block, x, e, context, rope, backend):
    """``dit.Block.forward`` on fused kernels; same arguments and result."""
    dtype, eps = context.dtype, block.norm1.eps
    x = x.contiguous()  # the patch embedding's token-major view; a no-op from the 2nd block on
    shift, scale, gate, c_shift, c_scale, c_gate = (block.modulation + e).unbind(1)  # [B, C] fp32
    with ranges.named_range(ranges.SELF_ATTN):
        h = norm_modulate(x, shift=shift, scale=scale, eps=eps, out_dtype=dtype)
        y = self_attention(block.self_attn, h, rope, backend)
    with ranges.named_range(ranges.CROSS_ATTN):
        x, h = add_norm3(block, x, y, gate, dtype)
        y = cross_attention(block.cross_attn, h, context, backend)
    with ranges.named_range(ranges.FFN):
        x, h = norm_modulate(x, residual=y, shift=c_shift, scale=c_scale, eps=eps, out_dtype=dtype)
        up, down = block.ffn[0], block.ffn[2]
        x = gated_add(x, down(linear_gelu_tanh(h, up)), c_gate)
    return x
