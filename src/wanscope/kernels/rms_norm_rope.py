"""q/k RMSNorm across all heads + 3-D rotary embedding, one pass, written head-split.

Per token row (position ``p`` in the sequence), over its ``C = N*D`` features, fp32::

    r   = rsqrt(mean_C(x^2) + eps)
    u   = x * r * w                                    # RMSNorm with weight w [C]
    (o[2j], o[2j+1]) = (u[2j] c - u[2j+1] s, u[2j] s + u[2j+1] c),   c, s = cos/sin[p, j mod D/2]

RoPE is optional (cross-attention normalizes q and k without it). The input may be a column
slice of a wider row (the q or k third of a fused QKV projection, row stride ``3C``): reading it
in place saves the copy that ``contiguous()`` would make. The output is a new contiguous
[B, L, C] tensor returned as [B, L, N, D]; SDPA takes its [B, N, L, D] transpose as a view, and
cuDNN then writes its output in the same token-major layout (PyTorch allocates it matching q's
strides), so the output projection reads it without a copy.

Sources: official Wan2.1 ``wan/modules/model.py`` (``WanRMSNorm`` over ``dim``, ``rope_apply``
on consecutive pairs as complex numbers); RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467);
RoPE (Su et al. 2021, arXiv:2104.09864).

Bytes per call at the 1.3B/480p shape (L*C = 32,760 x 1,536, bf16 in and out): read 101 MB,
write 101 MB, plus the cos/sin tables (2 x 32,760 x 64 fp32 = 17 MB, shared by the heads). The
torch path (fp32 upcast, norm, rounding, upcast, rotate via unflatten/stack, rounding) moves
about 1.9 GB for one of q or k.

Custom op: ``wanscope::rms_norm_rope``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from wanscope.kernels._dispatch import define_op, use_triton

# Features (padded rows x next_power_of_2(C)) one program covers: several short rows share a
# program, so the weight row and the reduction's setup are spread over more bytes.
ELEMENTS_PER_PROGRAM = 4096


@triton.jit
def _rms_norm_rope_kernel(
    x_ptr,
    w_ptr,
    cos_ptr,
    sin_ptr,
    out_ptr,
    n_rows,
    L,
    C,
    stride_row,
    eps,
    HALF_D: tl.constexpr,
    ROPE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # each row read and written contiguously (vector loads and stores); the feature pairs are
    # split and rejoined in registers: two stride-2 accesses moved half the bytes per instruction
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # token rows in [0, B*L)
    feat = tl.arange(0, BLOCK_C)
    row_ok = row < n_rows
    mask = row_ok[:, None] & (feat < C)[None, :]
    x = tl.load(x_ptr + row[:, None] * stride_row + feat[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / C + eps)  # [ROWS]
    u = x * rstd[:, None] * tl.load(w_ptr + feat, mask=feat < C, other=0.0).to(tl.float32)[None, :]
    if ROPE:
        u0, u1 = tl.split(tl.reshape(u, [ROWS, BLOCK_C // 2, 2]))  # features 2j, 2j+1: [ROWS, BLOCK_C/2]
        pair = tl.arange(0, BLOCK_C // 2)
        table = (row % L)[:, None] * HALF_D + (pair % HALF_D)[None, :]
        table_mask = row_ok[:, None] & (pair < C // 2)[None, :]
        c = tl.load(cos_ptr + table, mask=table_mask, other=0.0)
        s = tl.load(sin_ptr + table, mask=table_mask, other=0.0)
        u = tl.reshape(tl.join(u0 * c - u1 * s, u0 * s + u1 * c), [ROWS, BLOCK_C])
    tl.store(out_ptr + row[:, None] * C + feat[None, :], u.to(out_ptr.dtype.element_ty), mask=mask)


def _launch(x, weight, cos, sin, num_heads, eps):
    if x.ndim != 3 or x.stride(2) != 1 or x.stride(0) != x.shape[1] * x.stride(1):
        raise ValueError(
            f"x must be [B, L, C] with unit feature stride and rows evenly spaced, "
            f"got {tuple(x.shape)} strides {x.stride()}"
        )
    b, l, c = x.shape
    if c % num_heads or (c // num_heads) % 2:
        raise ValueError(f"C={c} must split into {num_heads} heads of even size")
    if weight.shape != (c,):
        raise ValueError(f"weight must be [{c}], got {tuple(weight.shape)}")
    half_d = c // num_heads // 2
    if cos is not None:
        for t, name in ((cos, "cos"), (sin, "sin")):
            if t.numel() != l * half_d or not t.is_contiguous() or t.dtype != torch.float32:
                raise ValueError(
                    f"{name} must be a contiguous fp32 [L, 1, D/2] = [{l}, 1, {half_d}], got {tuple(t.shape)} {t.dtype}"
                )
    out = torch.empty((b, l, c), dtype=x.dtype, device=x.device)
    if out.numel():
        block_c = triton.next_power_of_2(c)
        rows = max(1, ELEMENTS_PER_PROGRAM // block_c)  # 2 at C = 1536
        _rms_norm_rope_kernel[(triton.cdiv(b * l, rows),)](
            x,
            weight,
            cos if cos is not None else weight,
            sin if sin is not None else weight,
            out,
            b * l,
            l,
            c,
            x.stride(1),
            eps,
            HALF_D=half_d,
            ROPE=cos is not None,
            ROWS=rows,
            BLOCK_C=block_c,
            # 32 features a thread (four 16-byte loads in bf16): the fastest at [1, 32760, 1536] on an
            # H200, against 8 warps and the stride-2 kernel before (benchmarks/RESULTS.md, "2026-11-30:
            # DiT forward with a vectorized rms_norm_rope and a split attention tail", its A/B)
            num_warps=min(8, max(1, rows * block_c // 1024)),
        )
    return out


def reference(x, weight, cos, sin, num_heads, eps):
    """The same formula in torch ops, fp32, one rounding at the end: [B, L, C] in x's dtype."""
    u = F.rms_norm(x.float(), x.shape[-1:], weight.float(), eps).unflatten(-1, (num_heads, -1, 2))
    if cos is not None:
        c, s = cos.view(x.shape[1], 1, -1), sin.view(x.shape[1], 1, -1)  # [L, 1, D/2]
        u0, u1 = u[..., 0], u[..., 1]
        u = torch.stack([u0 * c - u1 * s, u0 * s + u1 * c], dim=-1)
    return u.flatten(2).to(x.dtype)


def _rms_norm_rope_op(
    x: torch.Tensor,
    weight: torch.Tensor,
    cos: torch.Tensor | None,
    sin: torch.Tensor | None,
    num_heads: int,
    eps: float,
) -> torch.Tensor:
    if use_triton(x):
        return _launch(x, weight, cos, sin, num_heads, eps)
    return reference(x, weight, cos, sin, num_heads, eps)


def _rms_norm_rope_op_fake(x, weight, cos, sin, num_heads, eps):
    return x.new_empty(x.shape)


define_op("rms_norm_rope", _rms_norm_rope_op, _rms_norm_rope_op_fake)


def rms_norm_rope(
    x: torch.Tensor,
    weight: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor] | None,
    num_heads: int,
    eps: float,
) -> torch.Tensor:
    """RMSNorm over all ``C = N*D`` features of a token, then RoPE per head; see the module docstring.

    Args:
        x: [B, L, C], unit feature stride; rows may be spaced wider than C (a column slice).
        weight: [C] RMSNorm weight (fp32 in our models).
        rope: (cos, sin), each [L, 1, D/2] fp32 contiguous (``dit.rope_tables``), or None.
        num_heads: N.

    Returns:
        [B, L, N, D] contiguous, dtype of ``x``.

    Raises:
        ValueError: shapes or strides outside the above (on the Triton path).
    """
    cos, sin = rope if rope is not None else (None, None)
    out = torch.ops.wanscope.rms_norm_rope(x, weight, cos, sin, num_heads, eps)
    return out.unflatten(-1, (num_heads, -1))  # [B, L, N, D]
