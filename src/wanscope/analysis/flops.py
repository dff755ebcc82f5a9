"""FLOPs and bytes of one op call from the shapes torch.profiler recorded (``record_shapes=True``).

``count(name, dims, types, concrete)`` takes an op's name and its ``cpu_ops`` columns
``input_dims``, ``input_types`` and ``concrete_inputs`` (JSON text: one entry per argument of
the call, in the schema's order; ``[]`` dims for a non-tensor) and returns a ``Count``, or None
for an op it does not know or whose arguments it cannot read. Pure functions: no trace, no torch.

Conventions (docs/design.md, "Rooflines"):

- A FLOP is one arithmetic operation of the op's defining formula (PyTorch's documentation of
  the op); a multiply-add is two, a transcendental function (exp, erf, tanh, sin, ...) one.
  Terms computed once per row or channel (a row's mean, its 1/sqrt) are left out: they are
  O(rows), not O(elements).
- Bytes are the least DRAM traffic the op can have: each tensor input read once, each output
  written once, at its dtype's size. Copies an implementation makes (a ``contiguous()``, an
  upcast, re-reads from L2 misses) are not counted: they are part of what the roofline measures.
- Each count says on which peak its FLOPs run (``Count.flops``: (unit, FLOPs) pairs; a unit is a
  column of the peak table, ``peaks.UNITS``): matrix products on the tensor cores at their
  operands' precision (bf16, fp16, fp8, int8); FP32 matrix products of ``mm``/``bmm``/``linear``
  at the FP32 peak (PyTorch's default ``torch.backends.cuda.matmul.allow_tf32 = False``), FP32
  convolutions at the TF32 peak (PyTorch's default ``torch.backends.cudnn.allow_tf32 = True``);
  everything else (elementwise, norms, softmax, reductions) at the FP32 peak, since ATen computes
  reduced-precision elementwise math in fp32 (its "opmath" type).
- When ``input_types`` was not recorded, every tensor is taken to be ``default_dtype``
  (``Count.dtype`` is then None).
- torch.profiler records no string argument: ``gelu``'s ``approximate`` is taken as "none",
  our ``attention_flash``'s ``qk`` and ``pv`` as "exact"; a convolution whose ``padding`` is a
  string ("same", "valid") is not counted (the ``aten::convolution`` it calls is, with the
  padding as numbers).

Families and their formulas (shapes as recorded; ``numel`` is the product of a shape):

- gemm: ``mm`` [M, K] x [K, N] and ``bmm`` [B, M, K] x [B, K, N]: 2 B M N K; ``addmm`` and
  ``baddbmm`` add B M N for the added tensor (``beta``, ``alpha`` taken as 1); ``matmul`` with
  broadcast batch dims; ``linear`` x [..., K], w [N, K]: 2 M N K for M = numel(x) / K, plus M N
  with a bias; ``_scaled_mm`` (FP8) 2 M N K at the fp8 peak.
- conv: ``conv1d/2d/3d``, ``convolution``, ``_convolution``, ``cudnn_convolution``,
  ``conv_transpose1d/2d/3d``: 2 N numel(w) prod(out spatial) (w [C_out, C_in / groups, k...]:
  2 N C_out (C_in / groups) prod(k) prod(out)), out_i = floor((in_i + 2 p_i - d_i (k_i - 1) - 1)
  / s_i) + 1; transposed: 2 N numel(w) prod(in spatial); a bias adds N C_out prod(out);
  ``convolution_backward``: the forward's FLOPs for each of grad_input and grad_weight it computes.
- attention: 4 B N L L_kv D, the two matrix products Q K^T and P V (2 B N L L_kv D each, as
  FlashAttention counts, Dao et al. 2022, arXiv:2205.14135; the softmax is left out), halved where
  ``is_causal`` (or ``custom_mask_type`` > 0) is set, as FlashAttention's benchmarks do. ``aten::``
  ``scaled_dot_product_attention`` and its backends take [..., L, D] (batch and heads first:
  ``_scaled_dot_product_flash/efficient/cudnn_attention``, ``_cudnn_attention_forward``);
  ``_flash_attention_forward`` and ``_efficient_attention_forward`` take [B, L, N, D] (their
  variable-length form, with 3-d inputs, is not counted). Our ``wanscope::attention_hopper``,
  ``attention_int8`` and ``attention_flash`` take [B, L, N, D]; their INT8/FP8 modes run Q K^T or
  P V at the int8 or fp8 peak.
- elementwise (``ELEMENTWISE``): FLOPs per output element times the broadcast output's numel;
  the output's dtype is the tensor inputs' promoted one (bool for comparisons); a bias, addend
  or epilogue add of the other families counts at the FP32 peak; ``copy_`` and ``fill_`` 0 FLOPs.
- norm: ``layer_norm``/``native_layer_norm``, ``group_norm``/``native_group_norm``: 5 per
  element (mean: 1 add; centering: 1 sub; variance: 1 mul + 1 add; scaling by 1/std: 1 mul), plus
  1 for a weight and 1 for a bias; ``batch_norm``: 5 (training) or 2 (inference: centering and
  scaling with running statistics), plus the affine terms; ``rms_norm``/``_fused_rms_norm``: 3
  (square, add, scale), plus 1 for a weight. Our ``wanscope::rms_norm_rope`` adds RoPE's 3 per
  element (two products and a sum per rotated pair); ``norm_modulate``/``add_norm_modulate`` a
  layer norm, its affine terms, adaLN's 3 (``x (1 + scale) + shift``) and the residual's 1 (+1
  with a gate); ``gated_add`` 2 (``x + gate y``); ``quantize_fp8_rows`` 5 (abs, max, scale, clamp
  2), plus tanh-GELU's 9 with ``gelu``.
- softmax: ``softmax``/``_softmax``/``log_softmax``/``_log_softmax``: 5 per element (max,
  subtract, exp, sum, divide or subtract the log).
- reduction: ``sum``, ``mean``, ``amax``, ``amin``: 1 per input element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

# torch.profiler's "Input type" strings (c10's TypeMeta names) -> (our dtype name, bytes)
DTYPES: dict[str, tuple[str, int]] = {
    "c10::BFloat16": ("bf16", 2),
    "c10::Half": ("fp16", 2),
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "short int": ("int16", 2),
    "int": ("int32", 4),
    "long int": ("int64", 8),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}
SIZE = {name: size for name, size in DTYPES.values()}
# c10::ScalarType's numbering, as a dtype argument is recorded in "Concrete Inputs"
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "fp16", 6: "fp32", 7: "fp64"}
SCALAR_TYPES |= {11: "bool", 15: "bf16", 23: "fp8", 24: "fp8", 25: "fp8", 26: "fp8"}
FLOAT_RANK = {"bf16": 1, "fp16": 1, "fp32": 2, "fp64": 3}  # promotion among float dtypes
MATRIX_UNITS = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "fp8", "int8": "int8"}
DEFAULT_DTYPE = "bf16"

COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")  # their output is bool
# FLOPs per output element (module docstring: one per arithmetic operation of the formula in
# PyTorch's documentation of the op, a transcendental function one). In-place forms (name_) too.
ELEMENTWISE: dict[str, float] = {
    # binary arithmetic and comparisons: one operation
    **dict.fromkeys(("add", "sub", "rsub", "mul", "div", "maximum", "minimum", "pow", "remainder"), 1),
    **dict.fromkeys((*COMPARISONS, "where"), 1),
    # unary: one operation or one transcendental function
    **dict.fromkeys(("neg", "abs", "reciprocal", "relu", "exp", "exp2", "log", "log2", "sqrt", "rsqrt"), 1),
    **dict.fromkeys(("sin", "cos", "tanh", "erf", "sign", "floor", "ceil", "round"), 1),
    "clamp": 2,  # min and max
    "clamp_min": 1,
    "clamp_max": 1,
    "sigmoid": 4,  # 1 / (1 + exp(-x)): neg, exp, add, div
    "silu": 5,  # x * sigmoid(x)
    "gelu": 5,  # "none": x * 0.5 * (1 + erf(x / sqrt(2))): div, erf, add, 2 mul
    "addcmul": 3,  # self + value * t1 * t2
    "copy_": 0,
    "fill_": 0,
    "zero_": 0,
}
GELU_TANH = 9  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): x^3 2, *c 1, +x 1, *k 1, tanh 1, +1 1, *x 1, *0.5 1
# binary ops whose "alpha" (self + alpha * other) adds a multiply where it is not 1
ALPHA_INDEX = {"add": 2, "sub": 2, "rsub": 2}
LAYER_NORM = 5  # mean 1, centering 1, variance 2 (square, add), scaling by 1/std 1
RMS_NORM = 3  # square, add, scaling by 1/rms
BATCH_NORM_EVAL = 2  # (x - mean) * (1/std) with the running statistics
ROPE = 3  # per element of a rotated pair (a, b) -> (a c - b s, a s + b c): 2 products, 1 sum
ADALN = 3  # x * (1 + scale) + shift
SOFTMAX = 5  # max, subtract, exp, sum, divide (log_softmax: subtract the log)
QUANTIZE = 5  # abs, max, multiply by 1/scale, clamp (2)

# attention: name -> (layout, index of is_causal or custom_mask_type, index of a mask/bias)
ATTENTION = {
    "aten::scaled_dot_product_attention": ("BNLD", 5, 3),
    "aten::_scaled_dot_product_flash_attention": ("BNLD", 4, None),
    "aten::_scaled_dot_product_efficient_attention": ("BNLD", 6, 3),
    "aten::_scaled_dot_product_cudnn_attention": ("BNLD", 6, 3),
    "aten::_cudnn_attention_forward": ("BNLD", 10, 3),
    "aten::_flash_attention_forward": ("BLND", 8, None),
    "aten::_efficient_attention_forward": ("BLND", 9, 3),
    "wanscope::attention_hopper": ("BLND", None, None),
    "wanscope::attention_int8": ("BLND", None, None),
    "wanscope::attention_flash": ("BLND", None, None),
}
# convolution: name -> indices (input, weight, bias, stride, padding, dilation, transposed,
# output_padding, groups); a bool for transposed is fixed by the op, None: absent
CONVOLUTION = {
    **dict.fromkeys(("aten::conv1d", "aten::conv2d", "aten::conv3d"), (0, 1, 2, 3, 4, 5, False, None, 6)),
    "aten::convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "aten::_convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "aten::cudnn_convolution": (0, 1, None, 3, 2, 4, False, None, 5),
    **dict.fromkeys(
        ("aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"), (0, 1, 2, 3, 4, 7, True, 5, 6)
    ),
}
# norms: name -> (input, weight, bias, FLOPs per element before the affine terms)
NORMS = {
    "aten::layer_norm": (0, 2, 3, LAYER_NORM),
    "aten::native_layer_norm": (0, 2, 3, LAYER_NORM),
    "aten::group_norm": (0, 2, 3, LAYER_NORM),
    "aten::native_group_norm": (0, 1, 2, LAYER_NORM),
    "aten::rms_norm": (0, 2, None, RMS_NORM),
    "aten::_fused_rms_norm": (0, 2, None, RMS_NORM),
}
SOFTMAXES = {"aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax"}
REDUCTIONS = {"aten::sum", "aten::mean", "aten::amax", "aten::amin"}
GEMMS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear", "aten::_scaled_mm"}
GEMMS |= {"aten::_addmm_activation"}
CUSTOM = {
    "wanscope::rms_norm_rope",
    "wanscope::norm_modulate",
    "wanscope::add_norm_modulate",
    "wanscope::gated_add",
    "wanscope::quantize_fp8_rows",
}


def op_names() -> list[str]:
    """Every op name ``count`` can count (the ``aten::`` ones with their in-place forms)."""
    names = set(ATTENTION) | set(CONVOLUTION) | set(NORMS) | SOFTMAXES | REDUCTIONS | GEMMS | CUSTOM
    names |= {"aten::batch_norm", "aten::convolution_backward"}
    for op in ELEMENTWISE:
        names |= {f"aten::{op}", f"aten::{op.rstrip('_')}_"}
    return sorted(names)


@dataclass(frozen=True)
class Count:
    """What one call computes and moves.

    Attributes:
        family: gemm, conv, attention, elementwise, norm, softmax or reduction.
        flops: (unit, FLOPs) pairs, one per unit: the FLOPs that run at each peak (``peaks.UNITS``).
        bytes: least DRAM traffic, bytes (module docstring).
        dtype: the dtype of the call's first tensor input (bf16, fp32, ...), None where
            ``input_types`` was not recorded (the bytes then assume ``default_dtype``).
    """

    family: str
    flops: tuple[tuple[str, float], ...]
    bytes: float
    dtype: str | None

    @property
    def total_flops(self) -> float:
        return sum(f for _, f in self.flops)


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str  # our dtype name

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> int:
        return self.numel * SIZE.get(self.dtype, 0)


class Call:
    """One call's recorded arguments: ``tensor(i)`` the i-th as a Tensor (None: not a tensor, or
    absent), ``arg(i)`` its concrete value as text (None: absent or empty)."""

    def __init__(self, dims: list, types: list | None, concrete: list | None, default_dtype: str):
        self.dims, self.types, self.concrete = dims, types, concrete
        self.default = default_dtype

    def tensor(self, i: int | None) -> Tensor | None:
        if i is None or i >= len(self.dims):
            return None
        shape = self.dims[i]
        if not isinstance(shape, list) or any(not isinstance(d, int) or isinstance(d, bool) for d in shape):
            return None  # a tensor list, or something else
        if self.types is None:
            return Tensor(tuple(shape), self.default) if shape else None
        t = self.types[i] if i < len(self.types) else None
        if t not in DTYPES:
            return None  # Scalar, ScalarList, None ("") or an unknown dtype
        return Tensor(tuple(shape), DTYPES[t][0])

    def tensors(self) -> list[Tensor]:
        return [t for i in range(len(self.dims)) if (t := self.tensor(i)) is not None]

    def arg(self, i: int | None) -> str | None:
        if i is None or self.concrete is None or i >= len(self.concrete):
            return None
        v = self.concrete[i]
        return v.strip().strip("'\"") if isinstance(v, str) and v.strip() else None

    def ints(self, i: int | None, rank: int, default: int) -> list[int] | None:
        """A list argument such as '[1, 2, 2]' (a single value broadcast to ``rank``)."""
        text = self.arg(i)
        if text is None:
            return [default] * rank
        try:
            v = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        v = v if isinstance(v, list) else [v]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return None
        if len(v) == 1:
            v = v * rank
        return v if len(v) == rank else None

    def unrecorded(self, i: int | None) -> bool:
        """True where argument ``i`` was recorded without a value: None, or a string (torch.profiler
        records neither: its type is empty)."""
        return self.types is not None and i is not None and i < len(self.types) and self.types[i] == ""

    def flag(self, i: int | None) -> bool | None:
        text = self.arg(i)
        return None if text is None else text.lower() in ("true", "1")

    def recorded_dtype(self) -> str | None:
        first = next(iter(self.tensors()), None)
        return None if self.types is None or first is None else first.dtype


def count(
    name: str, dims: str | None, types: str | None, concrete: str | None, default_dtype: str = DEFAULT_DTYPE
) -> Count | None:
    """The FLOPs and bytes of one call of ``name`` from its recorded arguments (JSON text, as in
    ``cpu_ops``), or None for an op this module does not count or arguments it cannot read.

    Args:
        name: the op, e.g. ``aten::linear`` or ``wanscope::attention_hopper``.
        dims, types, concrete: ``cpu_ops.input_dims``, ``input_types``, ``concrete_inputs``.
        default_dtype: each tensor's dtype where ``types`` is None (a trace without "Input type").
    """
    if dims is None:
        return None
    try:
        d = orjson.loads(dims)
        t = orjson.loads(types) if types is not None else None
        c = orjson.loads(concrete) if concrete is not None else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(d, list) or (t is not None and not isinstance(t, list)):
        return None
    call = Call(d, t, c if isinstance(c, list) else None, default_dtype)
    try:
        return _count(name, call)
    except (ValueError, TypeError, ZeroDivisionError, IndexError):
        return None


def _count(name: str, call: Call) -> Count | None:
    if name in GEMMS:
        return gemm(name, call)
    if name in ATTENTION:
        return attention(name, call)
    if name in CONVOLUTION:
        return convolution(name, call)
    if name == "aten::convolution_backward":
        return convolution_backward(call)
    if name in NORMS or name == "aten::batch_norm":
        return norm(name, call)
    if name in SOFTMAXES:
        return softmax(name, call)
    if name in REDUCTIONS:
        return reduction(name, call)
    if name in CUSTOM:
        return custom(name, call)
    if name.startswith("aten::"):
        op = name[len("aten::") :]
        base = op if op in ELEMENTWISE else op.rstrip("_")
        if base in ELEMENTWISE or op in ELEMENTWISE:
            return elementwise(op if op in ELEMENTWISE else base, call)
    return None


def _result(family: str, flops: list[tuple[str, float]], nbytes: float, call: Call) -> Count:
    """A Count with the FLOPs of each unit summed (units in order of first appearance)."""
    by_unit: dict[str, float] = {}
    for u, f in flops:
        if f:
            by_unit[u] = by_unit.get(u, 0.0) + float(f)
    return Count(family, tuple(by_unit.items()), float(nbytes), call.recorded_dtype())


def _scalar_type(text: str | None) -> str | None:
    try:
        return None if text is None else SCALAR_TYPES.get(int(text))
    except ValueError:
        return None


def _matrix_unit(dtype: str) -> str:
    return MATRIX_UNITS.get(dtype, dtype)


def gemm(name: str, call: Call) -> Count | None:
    """mm, bmm, addmm, baddbmm, matmul, linear, _scaled_mm (module docstring)."""
    extra = None  # the added tensor of addmm / baddbmm
    out_dtype = None
    if name in ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation"):
        extra, a, b = call.tensor(0), call.tensor(1), call.tensor(2)
    elif name == "aten::linear":
        x, w, extra = call.tensor(0), call.tensor(1), call.tensor(2)
        if x is None or w is None or len(w.shape) != 2 or not x.shape or x.shape[-1] != w.shape[1]:
            return None
        a, b = Tensor((x.numel // x.shape[-1], x.shape[-1]), x.dtype), Tensor((w.shape[1], w.shape[0]), w.dtype)
        lead = x.shape[:-1]
    else:
        a, b = call.tensor(0), call.tensor(1)
    if name == "aten::_scaled_mm":
        out_dtype = _scalar_type(call.arg(6))
        extra = call.tensor(4)  # bias
    if a is None or b is None:
        return None
    batch, m, k, n = _matmul_dims(a.shape, b.shape)
    if k is None:
        return None
    out = Tensor((*batch, m, n) if name != "aten::linear" else (*lead, n), out_dtype or a.dtype)
    flops = 2 * math.prod(batch) * m * k * n
    nbytes = a.bytes + b.bytes + out.bytes
    add = 0
    if extra is not None:
        add = out.numel
        nbytes += extra.bytes
    if name == "aten::_scaled_mm":
        nbytes += sum(t.bytes for t in (call.tensor(2), call.tensor(3), call.tensor(5)) if t is not None)
    if name == "aten::_addmm_activation":  # the epilogue's GELU (tanh form) or ReLU
        add += out.numel * (GELU_TANH if call.flag(5) else ELEMENTWISE["relu"])
    return _result("gemm", [(_matrix_unit(a.dtype), flops), ("fp32", add)], nbytes, call)


def _matmul_dims(a: tuple, b: tuple) -> tuple[tuple, int, int | None, int]:
    """(batch dims, M, K, N) of a @ b with torch.matmul's rules (K None where they do not fit)."""
    if not a or not b:
        return (), 0, None, 0
    a2 = (1, a[0]) if len(a) == 1 else a
    b2 = (b[0], 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return (), 0, None, 0
    batch = _broadcast(a2[:-2], b2[:-2])
    if batch is None:
        return (), 0, None, 0
    m = 1 if len(a) == 1 else a2[-2]
    n = 1 if len(b) == 1 else b2[-1]
    return batch, m, a2[-1], n


def _broadcast(*shapes: tuple) -> tuple | None:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        sizes = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def attention(name: str, call: Call) -> Count | None:
    """Scaled dot-product attention (module docstring)."""
    layout, causal_at, mask_at = ATTENTION[name]
    q, k, v = call.tensor(0), call.tensor(1), call.tensor(2)
    if q is None or k is None or v is None or min(len(q.shape), len(k.shape), len(v.shape)) < 3:
        return None
    if layout == "BLND":
        if len(q.shape) != 4 or len(k.shape) != 4:
            return None  # the variable-length form: per-sequence lengths are not recorded
        heads, lq, lk, d, dv = q.shape[0] * q.shape[2], q.shape[1], k.shape[1], q.shape[3], v.shape[3]
        out = Tensor(q.shape[:3] + (dv,), q.dtype)
    else:
        heads, lq, lk, d, dv = math.prod(q.shape[:-2]), q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
        out = Tensor(q.shape[:-1] + (dv,), q.dtype)
    causal = False
    if causal_at is not None:
        text = call.arg(causal_at)
        causal = text is not None and (text.lower() == "true" or (text.isdigit() and int(text) > 0))
    half = 0.5 if causal else 1.0
    qk_unit = pv_unit = _matrix_unit(q.dtype)
    if name == "wanscope::attention_hopper" and call.flag(3):
        qk_unit = "int8"
    elif name == "wanscope::attention_int8":
        qk_unit = "int8"
        if call.flag(3) is not False:  # pv_fp8 defaults to True
            pv_unit = "fp8"
    elif name == "wanscope::attention_flash":
        modes = {"exact": qk_unit, "e4m3": "fp8", "int8": "int8"}
        qk_unit, pv_unit = modes.get(call.arg(3) or "exact"), modes.get(call.arg(4) or "exact")
        if qk_unit is None or pv_unit is None:
            return None
    mask = call.tensor(mask_at)
    nbytes = q.bytes + k.bytes + v.bytes + out.bytes + (mask.bytes if mask is not None else 0)
    flops = [(qk_unit, 2 * heads * lq * lk * d * half), (pv_unit, 2 * heads * lq * lk * dv * half)]
    return _result("attention", flops, nbytes, call)


def _conv_unit(dtype: str) -> str:
    return "tf32" if dtype == "fp32" else _matrix_unit(dtype)


def convolution(name: str, call: Call) -> Count | None:
    """Convolutions, transposed ones too (module docstring)."""
    i_in, i_w, i_b, i_s, i_p, i_d, transposed, i_op, i_g = CONVOLUTION[name]
    x, w, bias = call.tensor(i_in), call.tensor(i_w), call.tensor(i_b)
    if x is None or w is None or len(x.shape) != len(w.shape) or len(x.shape) < 3:
        return None
    if not isinstance(transposed, bool):
        transposed = bool(call.flag(transposed))
    rank = len(x.shape) - 2
    stride, dilation = call.ints(i_s, rank, 1), call.ints(i_d, rank, 1)
    groups = int(call.arg(i_g) or 1)
    if call.unrecorded(i_p):
        return None  # padding="same"/"valid", not recorded: the op inside (convolution) has it
    pad_text = call.arg(i_p)
    padding = None if pad_text in ("same", "valid") else call.ints(i_p, rank, 0)
    out_pad = call.ints(i_op, rank, 0) if i_op is not None else [0] * rank
    if stride is None or dilation is None or out_pad is None:
        return None
    kernel, spatial = w.shape[2:], x.shape[2:]
    if pad_text == "valid":
        padding = [0] * rank
    if transposed:
        if padding is None:
            return None
        out_sp = [
            (i - 1) * s - 2 * p + d * (k - 1) + o + 1
            for i, s, p, d, k, o in zip(spatial, stride, padding, dilation, kernel, out_pad, strict=True)
        ]
        c_out = w.shape[1] * groups
        flops = 2 * x.shape[0] * math.prod(spatial) * w.numel
    else:
        if pad_text == "same":
            out_sp = list(spatial)
        elif padding is None:
            return None
        else:
            out_sp = [
                (i + 2 * p - d * (k - 1) - 1) // s + 1
                for i, s, p, d, k in zip(spatial, stride, padding, dilation, kernel, strict=True)
            ]
        c_out = w.shape[0]
        flops = 2 * x.shape[0] * math.prod(out_sp) * w.numel
    if min(out_sp) <= 0:
        return None
    out = Tensor((x.shape[0], c_out, *out_sp), x.dtype)
    nbytes = x.bytes + w.bytes + out.bytes + (bias.bytes if bias is not None else 0)
    add = out.numel if bias is not None else 0
    return _result("conv", [(_conv_unit(x.dtype), flops), ("fp32", add)], nbytes, call)


def convolution_backward(call: Call) -> Count | None:
    """``aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)``: the forward's FLOPs for each
    of grad_input and grad_weight in ``output_mask``, N C_out prod(out) for grad_bias."""
    g, x, w = call.tensor(0), call.tensor(1), call.tensor(2)
    if g is None or x is None or w is None or len(g.shape) < 3:
        return None
    try:
        mask = orjson.loads((call.arg(10) or "[true, true, true]").lower())
    except orjson.JSONDecodeError:
        return None
    if not isinstance(mask, list) or len(mask) != 3:
        return None
    transposed = bool(call.flag(7))
    spatial = x.shape[2:] if transposed else g.shape[2:]  # the spatial extent the weight slides over
    forward = 2 * x.shape[0] * math.prod(spatial) * w.numel
    flops = forward * (bool(mask[0]) + bool(mask[1]))
    bias = g.numel if mask[2] else 0
    nbytes = g.bytes + x.bytes + w.bytes + (x.bytes if mask[0] else 0) + (w.bytes if mask[1] else 0)
    if mask[2]:
        nbytes += g.shape[1] * SIZE.get(g.dtype, 0)
    return _result("conv", [(_conv_unit(x.dtype), flops), ("fp32", bias)], nbytes, call)


def _promote(tensors: list[Tensor]) -> str:
    """The result dtype of an elementwise op over ``tensors`` (dimensioned ones first, as
    torch's type promotion; bf16 with fp16 gives fp32)."""
    dims = [t for t in tensors if t.shape] or tensors
    floats = {t.dtype for t in dims if t.dtype in FLOAT_RANK}
    if not floats:
        return dims[0].dtype
    top = max(FLOAT_RANK[f] for f in floats)
    best = {f for f in floats if FLOAT_RANK[f] == top}
    return best.pop() if len(best) == 1 else "fp32"


def elementwise(op: str, call: Call) -> Count | None:
    """An op of ``ELEMENTWISE`` (also its in-place form): FLOPs per element of the broadcast
    output; bytes: every tensor input, then the output (in place: the first input, written)."""
    tensors = call.tensors()
    if not tensors:
        return None
    in_place = op.endswith("_")
    base = op.rstrip("_") if op not in ELEMENTWISE else op
    per = ELEMENTWISE.get(op, ELEMENTWISE.get(base))
    if per is None:
        return None
    if base == "gelu" and (call.arg(1) or "none") == "tanh":
        per = GELU_TANH
    alpha_at = ALPHA_INDEX.get(base)
    if alpha_at is not None and call.arg(alpha_at) not in (None, "1", "1."):
        per += 1
    if in_place or op in ("copy_", "fill_", "zero_"):
        out = tensors[0] if call.tensor(0) is not None else None
        if out is None:
            return None
    else:
        shape = _broadcast(*(t.shape for t in tensors))
        if shape is None:
            return None
        out = Tensor(shape, "bool" if base in COMPARISONS else _promote(tensors))
    reads = tensors[1:] if op in ("copy_", "fill_", "zero_") else tensors
    nbytes = sum(t.bytes for t in reads) + out.bytes
    return _result("elementwise", [("fp32", per * out.numel)], nbytes, call)


def norm(name: str, call: Call) -> Count | None:
    """Layer, group, batch and RMS norms (module docstring)."""
    if name == "aten::batch_norm":
        i_x, i_w, i_b = 0, 1, 2
        per = LAYER_NORM if call.flag(5) else BATCH_NORM_EVAL
    else:
        i_x, i_w, i_b, per = NORMS[name]
    x, w, b = call.tensor(i_x), call.tensor(i_w), call.tensor(i_b)
    if x is None:
        return None
    per += (w is not None) + (b is not None)
    nbytes = 2 * x.bytes + sum(t.bytes for t in (w, b) if t is not None)
    if name == "aten::batch_norm":
        nbytes += sum(t.bytes for t in (call.tensor(3), call.tensor(4)) if t is not None)
    return _result("norm", [("fp32", per * x.numel)], nbytes, call)


def softmax(name: str, call: Call) -> Count | None:
    """softmax and log_softmax: 5 FLOPs per element; the output in the ``dtype`` argument's
    dtype (``_softmax``: fp32 with ``half_to_float``), else the input's."""
    x = call.tensor(0)
    if x is None:
        return None
    if name.startswith("aten::_"):
        out_dtype = "fp32" if call.flag(2) else x.dtype
    else:
        out_dtype = _scalar_type(call.arg(2)) or x.dtype
    return _result("softmax", [("fp32", SOFTMAX * x.numel)], x.bytes + Tensor(x.shape, out_dtype).bytes, call)


def reduction(name: str, call: Call) -> Count | None:
    """sum, mean, amax, amin: 1 FLOP per input element; the output over the ``dim`` argument
    (all dims where absent), kept dims or not."""
    x = call.tensor(0)
    if x is None:
        return None
    text = call.arg(1)
    try:
        dims = orjson.loads(text) if text else None
    except orjson.JSONDecodeError:
        dims = None
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = [dims]
    if isinstance(dims, list) and dims and all(isinstance(i, int) for i in dims) and x.shape:
        reduced = {i % len(x.shape) for i in dims}
        out_numel = math.prod(s for i, s in enumerate(x.shape) if i not in reduced)
    else:
        out_numel = 1
    out_dtype = _scalar_type(call.arg(3)) or x.dtype
    return _result("reduction", [("fp32", x.numel)], x.bytes + out_numel * SIZE.get(out_dtype, 0), call)


def custom(name: str, call: Call) -> Count | None:
    """Our engine's norm and quantization ops (``wanscope::``; module docstring)."""
    x = call.tensor(0)
    if x is None:
        return None
    tensors = call.tensors()
    if name == "wanscope::rms_norm_rope":  # (x, weight, cos, sin, num_heads, eps)
        per = RMS_NORM + (call.tensor(1) is not None) + (ROPE if call.tensor(2) is not None else 0)
        return _result("norm", [("fp32", per * x.numel)], sum(t.bytes for t in tensors) + x.bytes, call)
    if name == "wanscope::gated_add":  # (x, y, gate): x + gate * y
        return _result("elementwise", [("fp32", 2 * x.numel)], sum(t.bytes for t in tensors) + x.bytes, call)
    if name == "wanscope::quantize_fp8_rows":  # (x [M, K], gelu) -> (e4m3 [M, K], scale [M, 1] fp32)
        per = QUANTIZE + (GELU_TANH if call.flag(1) else 0)
        rows = x.numel // x.shape[-1]
        return _result("elementwise", [("fp32", per * x.numel)], x.bytes + x.numel + 4 * rows, call)
    # norm_modulate (x, weight, bias, shift, scale, eps, out_dtype);
    # add_norm_modulate (x, y, gate, weight, bias, shift, scale, eps, out_dtype) -> (x', h)
    add = name == "wanscope::add_norm_modulate"
    first = 3 if add else 1
    weight, bias, shift, scale = (call.tensor(first + i) for i in range(4))
    per = LAYER_NORM + (weight is not None) + (bias is not None) + (ADALN if scale is not None else 0)
    if shift is not None and scale is None:
        per += 1
    out = Tensor(x.shape, _scalar_type(call.arg(first + 5)) or DEFAULT_DTYPE)
    nbytes = sum(t.bytes for t in tensors) + out.bytes
    if add:
        per += 1 + (call.tensor(2) is not None)  # the residual add (and its gate)
        nbytes += x.bytes  # x' written in x's dtype
    return _result("norm", [("fp32", per * x.numel)], nbytes, call)
