"""FlashAttention-3-style attention forward for Hopper (sm_90), written in Triton's Gluon.

For one (batch, head), q [Lq, D], k and v [Lk, D], no mask, ``c = log2(e) / sqrt(D)``::

    s[i, j] = c (q[i] . k[j])                            # log2 units: exp2 below, scale folded in
    p[i, j] = 2^(s[i, j] - m_i);  l_i = sum_j p[i, j]    # m_i: a shift per row (below)
    o[i]    = (sum_j p[i, j] v[j]) / l_i                 # normalized once, at the end

The shift m_i only has to keep 2^(s - m_i) finite and its largest term far from underflow.
FlashAttention takes the running max over the K/V tiles seen so far (the online softmax, which
rescales o and l whenever it grows). This kernel fixes m_i before the loop where it can prove
that safe, from bf16 inputs with at least ``FIXED_MIN_KEYS`` keys (2048): a pre-pass takes
K = max_j |k_j| per (batch, head); by Cauchy-Schwarz every score of row i is at most
u_i = c |q_i| K, and block 0's row max s0_i is at most the row's max. Where u_i - s0_i <= 128
for all 64 rows of a warpgroup, m_i = max(s0_i, u_i - 64) lies within 64 of the row's max either
way: every p <= 2^64 (finite in fp32 and bf16) and the largest p >= 2^-64, so the terms that
underflow weigh less than 2^-62 of it. The loop then has no row max, no rescale of o, and its
row sums l come from the tensor cores (P times a ones tile, accumulated like P V, so l sums the
same bf16-rounded P that P V sums). Other warpgroups (the bound too loose, e.g. very peaked rows
of large q and k), fp16 (P would overflow fp16) and shorter key sequences take the online softmax.
A fixed shift in place of the running max is FlashDecoding++'s "unified max value" (Hong et al.
2023, arXiv:2311.01282), there taken from statistics with a recomputation where it fails; here it
is proven per warpgroup before the loop, so nothing is recomputed.

Which path runs depends on the data: for q, k ~ N(0, s^2) the bound exceeds block 0's max by
about 12.6 s^2 (log2 units) at D = 128, so the fixed shift runs up to s ~ 3.2 (random weights
give s ~ 1) and the online softmax above; trained weights (RMSNorm gains on q and k) are not
measured. The fixed path keeps o finite for |v| below ~2^49 at 32,760 keys (the online one up to
~2^113).


Inputs: q [B, Lq, N, D], k and v [B, Lk, N, D], one dtype, bf16 or fp16, on one CUDA device of
compute capability 9.0; D in {64, 128}; Lk >= 1. Token-major with each token's heads side by
side (unit last stride, ``stride(2) == D``) is read in place through TMA, whatever the row
stride (v may be the strided third of a fused [B, L, 3 N D] QKV output); other layouts are
copied contiguous first. Output: [B, Lq, N, D] contiguous, q's dtype. Scores, softmax and the
accumulator are fp32; P is rounded to the input dtype for P V (as cuDNN and FlashAttention do).

The algorithm is FlashAttention-3's (Shah et al. 2024, arXiv:2407.08608) without FP8: one CTA
covers 128 query rows of one (batch, head) (192 with INT8 ``Q K^T``, below) with warp-specialized
roles (``gl.warp_specialize``):

* a TMA loader warp (24 registers): the consumers' Q tiles once, then 128-token K and V tiles
  (64 with INT8) into a 3-deep (4) shared-memory ring; a K slot is refilled as soon as every
  consumer has its S from it, a V slot once every one has done its P V (mbarriers for ready and
  empty);
* two consumer warpgroups of 64 query rows each (``setmaxnreg`` 240; INT8: three at 160, where
  a third warpgroup hides more of the softmax's latency): S = Q K^T and O += P V by
  ``warpgroup_mma`` (Q, K, V in shared memory, P in registers as the A operand), with S_{j+1}
  issued before P_j V_j and waited for alone (FA3's intra-warpgroup overlap of softmax and
  GEMM). The last K/V block is peeled for its column mask (rows past Lk read the next batch's
  tokens or TMA's zero fill, and get p = 0).

Not in it: FA3's ping-pong scheduling of the two warpgroups (slower here, built from mbarriers:
benchmarks/RESULTS.md, "2026-11-30: attention, an FA3-style Gluon kernel"), FP8 (INT8 ``Q K^T`` is
an option, below), masks, backward. Work at [1, 32760, 12, 128]: 4 B N Lq Lk D = 6.6e12 FLOP;
HBM traffic q, k, v, o once (~400 MB; K/V re-reads hit L2) and k once more for the key norms.

Error bounds the GPU tests hold (relative L2 against float64 attention, q, k, v ~ N(0, 1)):
<= 1.25x PyTorch SDPA's at small shapes (<= 1.1x with peaked rows, q and k x 2.5), and at the
DiT's [1, 32760, 12, 128] bf16 <= min(1.05x cuDNN's, 2.5e-3). Speed and error on an H200:
benchmarks/RESULTS.md, "2026-11-30: Hopper attention with a fixed softmax shift".

INT8 Q K^T (``qk_int8=True``, the fast mode's, not exact; bf16 only): q and k are first quantized
by ``wanscope.kernels.qk_int8`` (q per (token, head), k smoothed by its mean over tokens and
scaled per (batch, head), so every scale folds into one fp32 factor f_i per query row) and S_j =
Q8 K8_j^T runs on the int8 tensor cores (2x the bf16 rate) into an int32 accumulator that starts
at the bits of the fp32 1.5 * 2^23: read as fp32, its bits are 1.5 * 2^23 + S exactly (|S| <=
128 * 127^2 < 2^22), so no int-to-float conversion runs and the offset folds into the fixed
shift (p = 2^(bits f_i - (m_i + 1.5 * 2^23 f_i)), still one FFMA per score) or into one FADD (online
softmax). The bound of the fixed shift uses the quantized vectors' norms, an exact bound on the
scores the kernel computes. P V stays bf16. Error: <= 1.25x SDPA's against float64 attention on the
same int8 scores at small shapes, <= 1.5e-2 against exact attention at the DiT shape with
q, k, v ~ N(0, 1) (k's one scale per head). Speed and error on an H200, two warpgroups against
three: benchmarks/RESULTS.md, "2026-11-30: fast mode with INT8 ``Q K^T`` in our Hopper kernel" and
"2026-11-30: fast mode, new defaults, one-pass quantizer, INT8 on three warpgroups".

Needs: an sm_90 GPU and Triton with Gluon's Hopper module (``triton.experimental.gluon``,
tested with Triton 3.6.0 only: Gluon is experimental and its API moves between releases).
This module imports only torch; Gluon is imported when the kernel first runs.

Custom op: ``wanscope::attention_hopper`` (a fake for ``torch.compile``). No CPU path: the
portable reference is SDPA (``wanscope.wan.attention``).
"""

from __future__ import annotations

import functools

import torch

from wanscope.kernels._dispatch import define_op

HEAD_DIMS = (64, 128)
DTYPES = (torch.bfloat16, torch.float16)
_CAPABILITY = (9, 0)
# Triton releases the kernel ran on (GPU tests and benchmarks): ``auto`` picks it only there.
TESTED_TRITON = ("3.6.",)


def triton_tested() -> bool:
    """Whether the installed Triton is a release in ``TESTED_TRITON`` (False without Triton)."""
    try:
        import triton
    except ImportError:
        return False
    return triton.__version__.startswith(TESTED_TRITON)


@functools.cache
def _gluon_import_error() -> str | None:
    """Why the Gluon kernel cannot be imported here (None: it can); tried once per process."""
    try:
        from wanscope.kernels import _attention_hopper_gluon  # noqa: F401
    except Exception as exc:  # noqa: BLE001 (ImportError, or a Gluon API this module does not match)
        return f"{type(exc).__name__}: {exc}"
    return None


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def unsupported_device(device: torch.device | str) -> str | None:
    """Why the kernel cannot run on ``device`` (None: it can): not CUDA, a compute capability
    other than 9.0, or no importable Gluon Hopper module. The capability and the import are
    looked up once (per device, per process)."""
    device = torch.device(device)
    if device.type != "cuda":
        return f"needs a CUDA device, got {device}"
    cc = _capability(device.index if device.index is not None else torch.cuda.current_device())
    if cc != _CAPABILITY:
        return f"needs compute capability 9.0 (Hopper, sm_90), {device} has {cc[0]}.{cc[1]}"
    error = _gluon_import_error()
    if error is not None:
        return f"needs Triton with Gluon's Hopper module (tested: Triton 3.6.0): {error}"
    return None


def unsupported(device: torch.device | str, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why the kernel cannot run inputs of this device, dtype and head dim (None: it can):
    ``unsupported_device``'s reason, or a dtype other than bf16/fp16, or a head dim not in
    ``HEAD_DIMS``."""
    reason = unsupported_device(device)
    if reason is None and dtype not in DTYPES:
        reason = f"needs bf16 or fp16, not {str(dtype).removeprefix('torch.')}"
    if reason is None and head_dim not in HEAD_DIMS:
        reason = f"needs a head dim of {' or '.join(map(str, HEAD_DIMS))}, not {head_dim}"
    return reason


def _attention_hopper_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qk_int8: bool) -> torch.Tensor:
    from wanscope.kernels._attention_hopper_gluon import launch

    return launch(q, k, v, qk_int8)


def _attention_hopper_op_fake(q, k, v, qk_int8):
    return q.new_empty(q.shape)


define_op("attention_hopper", _attention_hopper_op, _attention_hopper_op_fake)


def attention_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qk_int8: bool = False) -> torch.Tensor:
    """Softmax attention without mask, scale ``1/sqrt(D)``: see the module docstring.

    Args:
        q: [B, Lq, N, D]; k, v: [B, Lk, N, D]; bf16 or fp16, one dtype, one CUDA device of compute
            capability 9.0; D in {64, 128}; Lk >= 1. Any row strides (read in place when each
            token's heads are side by side, else copied).
        qk_int8: the fast mode's INT8 ``Q K^T`` (bf16 only; see "INT8 Q K^T" in the module
            docstring): not exact.

    Returns:
        [B, Lq, N, D] contiguous, dtype of q.

    Raises:
        ValueError: shapes, dtypes, head dim or device outside the above, ``qk_int8`` with fp16,
            or Triton without Gluon's Hopper module (the message says which).
    """
    if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape or (q.shape[0], q.shape[2:]) != (k.shape[0], k.shape[2:]):
        raise ValueError(
            f"q [B, Lq, N, D] and k, v [B, Lk, N, D] expected, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        raise ValueError(f"q, k, v must share one dtype, bf16 or fp16, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dim must be one of {HEAD_DIMS}, got {q.shape[-1]}")
    if k.shape[1] < 1:
        raise ValueError("attention over zero keys is undefined")
    if qk_int8 and q.dtype != torch.bfloat16:
        raise ValueError(f"qk_int8 needs bf16 inputs, got {q.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    reason = unsupported_device(q.device)
    if reason is not None:
        raise ValueError(f"attention_hopper {reason}")
    return torch.ops.wanscope.attention_hopper(q, k, v, qk_int8)
