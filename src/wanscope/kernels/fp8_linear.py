"""FP8 (e4m3) linear layer: per-token scaled activations x per-output-channel scaled weights.

For ``x`` [M, K] (tokens x features) and a weight ``W`` [N, K] quantized once::

    s_w[n] = max_k |W[n, k]| / 448            W8 = round_e4m3(W / s_w[:, None])
    s_x[m] = max_k |x[m, k]| / 448            x8 = round_e4m3(x / s_x[:, None])     (per call)
    y[m, n] = s_x[m] s_w[n] sum_k x8[m, k] W8[n, k] + b[n]                            (fp32 accumulation)

448 is the largest finite e4m3 value (OCP FP8 formats, Micikevicius et al., arXiv:2209.05433).
Per-token and per-channel (rather than per-tensor) scales keep one outlier token or channel from
flushing the others' small values to zero; DeepSeek-V3's 1x128 blocks would matter for trained
outlier channels, which random weights do not have. On CUDA the product runs in
``torch._scaled_mm`` (rowwise scales, bf16 out, bias fused); on the CPU it is emulated in fp32
from the same quantized values (the same math up to the FP8 tensor cores' reduced-precision
accumulation and the output rounding; ``tests/kernels/test_fast_fp8_linear.py`` bounds both).

The activation quantization is one Triton kernel (``wanscope::quantize_fp8_rows``): one program
per row holds the row in registers, reduces its absolute maximum, then writes e4m3 and the
scale. With ``gelu=True`` it first applies tanh-GELU, so the FFN's up-projection output is read
once by the quantizer of the down-projection instead of by a separate GELU pass (fusing the GELU
saves 2 x 587 MB per block at 1.3B/480p). Bytes per call for [M, K] bf16: read 2MK, write
MK + 4M.

Error (per element, round to nearest even): e4m3 has 3 mantissa bits, so the relative rounding
error of a normal value is at most 2^-4 = 6.25% (RMS about 1.8% for values uniform in a binade);
values below 2^-6 * s are subnormal (absolute step 2^-9 * s). A K-term dot product of
independently rounded operands has an RMS relative error of about 2.5-3% of the output's RMS
(bf16: 0.2%). Tests bound each quantized element by half an e4m3 ulp of its value and the
layer's output against a float64 product.

Custom op: ``wanscope::quantize_fp8_rows`` (``FP8Linear`` below wraps it with ``_scaled_mm``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

from wanscope.kernels._dispatch import define_op, use_triton

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn value
# the scale of an all-zero row; any positive value works (its quantized values are 0)
_MIN_AMAX = 1e-12
# the widest row the one-pass kernel takes: 2 x 16384 elements, 64 fp32 per thread at 16 warps
# (Wan2.1 14B's widest, its FFN hidden 13824, is 8192 + 8192)
MAX_ROW = 32768


@triton.jit
def _gelu_tanh(x):
    # 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3); with t = e^(-2|u|)
    # (never overflows) that is x / (1 + t) for u >= 0 and x t / (1 + t) below. Forming
    # 1 + tanh(u) instead cancels for u < 0 (relative error up to 1.7e-3 for x in [-4, -2],
    # all bits lost below; torch's CPU GELU does the same, 8e-4): enough to move e4m3 codes past
    # their half-ulp bound (H200, 2026-11-30). This form stays within 5e-6 (exp's argument
    # rounding). t >= e^-80 keeps x t a normal fp32 (Triton's interpreter converts fp32 subnormals
    # to e4m3 wrongly); where that changes the value, it quantizes to 0 either way
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = tl.exp(tl.maximum(-2.0 * tl.abs(u), -80.0))
    return tl.where(u >= 0, x, x * t) / (1.0 + t)


@triton.jit
def _load_row_part(src, K, start, BLOCK: tl.constexpr, GELU: tl.constexpr):
    cols = start + tl.arange(0, BLOCK)
    x = tl.load(src + cols, mask=cols < K, other=0.0).to(tl.float32)
    if GELU:
        x = _gelu_tanh(x)
    return x, cols


@triton.jit
def _store_row_part(q_row, x, cols, inv, K):
    y = tl.clamp(x * inv, -448.0, 448.0)
    tl.store(q_row + cols, y.to(q_row.dtype.element_ty), mask=cols < K)


@triton.jit
def _quantize_fp8_rows_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    K,
    stride_row,
    min_amax,
    GELU: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    # one row, held in registers as two power-of-2 parts (K = 8960: 8192 + 1024, 3% padding), so
    # it is read from memory and activated once: reduce, then scale and store
    row = tl.program_id(0).to(tl.int64)
    src = x_ptr + row * stride_row
    xa, cols_a = _load_row_part(src, K, 0, BLOCK_A, GELU)
    amax = tl.max(tl.abs(xa), axis=0)
    if BLOCK_B > 0:
        xb, cols_b = _load_row_part(src, K, BLOCK_A, BLOCK_B, GELU)
        amax = tl.maximum(amax, tl.max(tl.abs(xb), axis=0))
    # IEEE divisions (Triton's ``/`` on fp32 is div.full.f32, within 2 ulp), once per row: the
    # scale and its reciprocal are then the torch reference's bit for bit, and so are the codes
    scale = tl.math.div_rn(tl.maximum(amax, min_amax), 448.0)
    inv = tl.math.div_rn(1.0, scale)
    q_row = q_ptr + row * K
    _store_row_part(q_row, xa, cols_a, inv, K)
    if BLOCK_B > 0:
        _store_row_part(q_row, xb, cols_b, inv, K)
    tl.store(scale_ptr + row, scale)


def _row_parts(k: int) -> tuple[int, int]:
    """Split a row of ``k`` >= 1 elements into two power-of-2 register blocks (a, b), b <= a (0
    when k is a power of 2): a the largest power of 2 <= k, b the smallest one >= the rest."""
    a = 1 << (k.bit_length() - 1)
    return a, (triton.next_power_of_2(k - a) if k > a else 0)


def _launch(x: torch.Tensor, gelu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # warps: a 1024-wide first part per warp, the fastest in the H200 sweep at both of the 1.3B
    # DiT's widths, K = 1536 and K = 8960 with GELU (benchmarks/RESULTS.md, "2026-11-30: fast mode,
    # new defaults, one-pass quantizer, INT8 on three warpgroups", change 2, 3f6bb5f)
    m, k = x.shape
    if k > MAX_ROW:
        raise ValueError(
            f"quantize_fp8_rows: rows of {k} elements, at most {MAX_ROW} on the Triton path "
            "(each row is held in registers)"
        )
    q = torch.empty((m, k), dtype=FP8, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m:
        block_a, block_b = _row_parts(k)
        _quantize_fp8_rows_kernel[(m,)](
            x,
            q,
            scale,
            k,
            x.stride(0),
            _MIN_AMAX,
            GELU=gelu,
            BLOCK_A=block_a,
            BLOCK_B=block_b,
            num_warps=min(16, max(1, block_a // 1024)),
        )
    return q, scale


def reference(x: torch.Tensor, gelu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The same formula in torch ops (fp32): (e4m3 [M, K], scale [M, 1] fp32)."""
    xf = x.float()
    if gelu:
        xf = F.gelu(xf, approximate="tanh")
    scale = xf.abs().amax(dim=1, keepdim=True).clamp_min(_MIN_AMAX) / FP8_MAX
    return (xf * (1.0 / scale)).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale  # as the kernel: times 1/scale


def _quantize_op(x: torch.Tensor, gelu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(x):
        return _launch(x, gelu)
    return reference(x, gelu)


def _quantize_op_fake(x, gelu):
    return x.new_empty(x.shape, dtype=FP8), x.new_empty((x.shape[0], 1), dtype=torch.float32)


define_op("quantize_fp8_rows", _quantize_op, _quantize_op_fake)


def quantize_fp8_rows(x: torch.Tensor, gelu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row e4m3 quantization of ``x`` (optionally of ``gelu_tanh(x)``).

    Args:
        x: [M, K] float (bf16/fp16/fp32), unit column stride.
        gelu: quantize ``gelu_tanh(x)`` instead of ``x``.

    Returns:
        (q, scale): q [M, K] ``float8_e4m3fn`` contiguous, scale [M, 1] fp32 with
        ``x ~= q * scale``.

    Raises:
        ValueError: ``x`` not 2-D or without unit column stride; on the Triton path (CUDA, or the
            interpreter), K > ``MAX_ROW``.
    """
    if x.ndim != 2 or x.stride(1) != 1:
        raise ValueError(f"x must be [M, K] with unit column stride, got {tuple(x.shape)} strides {x.stride()}")
    return torch.ops.wanscope.quantize_fp8_rows(x, gelu)


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel e4m3 quantization of a [N, K] weight, once at setup (torch ops).

    Returns:
        (q [N, K] e4m3, scale [N] fp32).
    """
    q, scale = reference(weight.detach(), gelu=False)
    return q, scale.view(-1)


class FP8Linear(nn.Module):
    """A linear layer run in FP8: see the module docstring for the formula and its error.

    Buffers: ``weight_fp8`` [N, K] e4m3, ``weight_scale`` [1, N] fp32, ``bias`` [N] in the output
    dtype (or None). 1 byte per weight, half of bf16.

    Args:
        weight: [N, K] (quantized here, not kept); its dtype is the output dtype.
        bias: [N] or None.
        gelu_input: quantize ``gelu_tanh(x)`` (the FFN down-projection after an un-activated up).
        fast_accum: ``_scaled_mm``'s fast accumulation (Hopper FP8 tensor cores add products at
            reduced precision; faster, less accurate for large K). Ignored on the CPU.
    """

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, gelu_input: bool = False, fast_accum: bool = False
    ):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.gelu_input, self.fast_accum = gelu_input, fast_accum
        q, scale = quantize_weight(weight)
        self.register_buffer("weight_fp8", q)
        self.register_buffer("weight_scale", scale.view(1, -1))
        self.out_dtype = weight.dtype
        self.register_buffer("bias", None if bias is None else bias.detach().to(self.out_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., K] -> [..., N] in the dtype of the original weight."""
        x2 = x.reshape(-1, x.shape[-1])  # [M, K]
        q, scale = quantize_fp8_rows(x2, self.gelu_input)
        if x.is_cuda:
            out = torch._scaled_mm(
                q,
                self.weight_fp8.t(),
                scale_a=scale,
                scale_b=self.weight_scale,
                bias=self.bias,
                out_dtype=self.out_dtype,
                use_fast_accum=self.fast_accum,
            )
        else:
            w = self.weight_fp8.float() * self.weight_scale.t()  # [N, K]
            out = (
                torch.addmm(self.bias.float(), q.float() * scale, w.t())
                if self.bias is not None
                else (q.float() * scale) @ w.t()
            )
            out = out.to(self.out_dtype)
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, e4m3, "
            f"gelu_input={self.gelu_input}, fast_accum={self.fast_accum}"
        )
