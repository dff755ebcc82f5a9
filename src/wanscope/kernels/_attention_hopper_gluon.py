"""The Gluon kernel and launcher behind ``wanscope.kernels.attention_hopper`` (see its docstring).

Imported only when the kernel runs: it needs Triton with Gluon's Hopper module at import time.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# The launch configurations that won on the H200, as (consumer warpgroups, BLOCK_N, STAGES,
# consumer registers); 64 query rows per consumer warpgroup, the loader warp at 24 registers.
# bf16 and fp16: two consumers, 128-token K/V tiles, a 3-deep K/V ring (with Q, the 2 KB ones tile
# and the barriers, 232,088 of the 232,448 bytes of shared memory a CTA may have at D = 128: no
# room for a fourth stage), consumers at 240 registers. Three consumers with 64-key tiles (below)
# were no faster in bf16.
# INT8 Q K^T: three consumers, 64-key tiles, a 4-deep ring; 160 registers each is what 16 warps
# leave (3 x 128 x 160 + 128 x 24 <= 65,536), enough for 64-key tiles without spills (128-key
# ones spill at 160). A third warpgroup hides more of the softmax's latency where the int8
# tensor cores leave it exposed; with two consumers a fourth stage of 128-key tiles was slower.
# The A/Bs: benchmarks/RESULTS.md, "2026-11-30: fast mode, new defaults, one-pass quantizer, INT8
# on three warpgroups" (57c8e79) and "2026-11-30: fast mode with INT8 `Q K^T` in our Hopper kernel".
BLOCK_M = 64
CONFIG = (2, 128, 3, 240)
INT8_CONFIG = (3, 64, 4, 160)
LOADER_REGS = 24
# The fixed softmax shift from this many keys on (bf16): faster than the online softmax at
# 32,760 keys, slower at 512 (the key-norm pass and the bound do not pay for 4 blocks); the
# crossover between is not measured (benchmarks/RESULTS.md, "2026-11-30: Hopper attention with a
# fixed softmax shift"); nor is it for INT8 Q K^T (64-key tiles, key norms from the quantizer),
# which only self-attention runs.
FIXED_MIN_KEYS = 2048
KEY_ROWS = 64  # key tokens per program of the key-norm pass
_LOG2E = 1.4426950408889634
# The int32 S accumulator starts at the bits of the fp32 1.5 * 2^23: read as fp32 its bits are
# then 1.5 * 2^23 + S exactly for |S| < 2^22 (|q8 . k8| <= 128 * 127^2), so no int-to-float
# conversion is needed, and the offset folds into the softmax's FFMA (the fixed shift) or one
# FADD (online softmax).
_MAGIC = gl.constexpr(0x4B400000)
_MAGIC_F = gl.constexpr(12582912.0)


@gluon.jit
def _loader(
    q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_empty, v_empty, q_row, kv_row0, col, n_kv
):
    # the consumers' Q tiles once, then K/V tiles into the ring; a K slot is refilled as soon as
    # every consumer has its S from it, a V slot after every one has done its P V. The tile
    # sizes are the shared-memory buffers' ([WGS, BM, D] Q, [STAGES, BN, D] K and V).
    WGS: gl.constexpr = q_smem.shape[0]
    BM: gl.constexpr = q_smem.shape[1]
    STAGES: gl.constexpr = k_smem.shape[0]
    BN: gl.constexpr = k_smem.shape[1]
    for i in gl.static_range(WGS):
        mbarrier.expect(q_bar.index(i), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row + i * BM, col], q_bar.index(i), q_smem.index(i))
    for j in range(n_kv):
        stage = j % STAGES
        phase = (j // STAGES) & 1
        mbarrier.wait(k_empty.index(stage), phase ^ 1)
        mbarrier.expect(k_ready.index(stage), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row0 + j * BN, col], k_ready.index(stage), k_smem.index(stage))
        mbarrier.wait(v_empty.index(stage), phase ^ 1)
        mbarrier.expect(v_ready.index(stage), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row0 + j * BN, col], v_ready.index(stage), v_smem.index(stage))


@gluon.jit
def _round_p(x, FP16: gl.constexpr):
    # P to the input dtype in inline asm, opaque to LLVM: a plain fptrunc gets folded through the
    # loop phi (instcombine), the loop then carries P in fp32 (64 more registers) and ptxas waits
    # for P V before the softmax
    if FP16:
        return gl.inline_asm_elementwise(
            "cvt.rn.f16x2.f32 $0, $2, $1;", "=r,r,r", [x], dtype=gl.float16, is_pure=True, pack=2
        )
    else:
        return gl.inline_asm_elementwise(
            "cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r", [x], dtype=gl.bfloat16, is_pure=True, pack=2
        )


@gluon.jit
def _scores(s, QK8: gl.constexpr):
    # S in fp32 from the accumulator (QK8: its bits less the offset, exact)
    if QK8:
        return s.to(gl.float32, bitcast=True) - _MAGIC_F
    else:
        return s


@gluon.jit
def _per_row(scale, QK8: gl.constexpr):
    # the softmax scale for [BM, BN] scores: a scalar, or (QK8) one factor per row
    if QK8:
        return gl.expand_dims(scale, 1)
    else:
        return scale


@gluon.jit
def _masked(s, j, Lk, BN: gl.constexpr, s_layout: gl.constexpr):
    cols = j * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    return gl.where(gl.expand_dims(cols < Lk, 0), s, -float("inf"))


@gluon.jit
def _issue(j, q_i, k_smem, v_smem, k_ready, v_ready, zero_s, o, p_op, STAGES: gl.constexpr, QK8: gl.constexpr):
    # S_j = Q K_j^T is issued before P_{j-1} V_{j-1} and waited for alone, so the softmax of
    # block j can overlap the P V of block j - 1 (FA3's intra-warpgroup overlap). Returns the
    # ring slots of blocks j and j - 1 and the two wgmma tokens.
    stage = j % STAGES
    prev = (j - 1) % STAGES
    mbarrier.wait(k_ready.index(stage), (j // STAGES) & 1)
    s_tok = warpgroup_mma(q_i, k_smem.index(stage).permute((1, 0)), zero_s, use_acc=QK8, is_async=True)
    mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
    o_tok = warpgroup_mma(p_op, v_smem.index(prev), o, is_async=True)
    return stage, prev, s_tok, o_tok


@gluon.jit
def _step(
    j,
    q_i,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    zero_s,
    o,
    p_op,
    m,
    l,
    Lk,
    qk_scale,
    BN: gl.constexpr,
    STAGES: gl.constexpr,
    MASK: gl.constexpr,
    FP16: gl.constexpr,
    QK8: gl.constexpr,
    s_layout: gl.constexpr,
    o_layout: gl.constexpr,
    p_layout: gl.constexpr,
):
    stage, prev, s_tok, o_tok = _issue(j, q_i, k_smem, v_smem, k_ready, v_ready, zero_s, o, p_op, STAGES, QK8)
    s = _scores(warpgroup_mma_wait(1, deps=(s_tok,)), QK8)
    mbarrier.arrive(k_empty.index(stage))
    if MASK:
        s = _masked(s, j, Lk, BN, s_layout)
    m_new = gl.maximum(m, gl.max(s, axis=1) * qk_scale)
    alpha = gl.exp2(m - m_new)
    p = gl.exp2(s * _per_row(qk_scale, QK8) - gl.expand_dims(m_new, 1))
    l = l * alpha + gl.sum(p, axis=1)
    o = warpgroup_mma_wait(0, deps=(o_tok,))
    mbarrier.arrive(v_empty.index(prev))
    o = o * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    p_op = gl.convert_layout(_round_p(p, FP16), p_layout)
    return o, p_op, m_new, l


@gluon.jit
def _step_fixed(
    j,
    q_i,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    zero_s,
    o,
    l,
    p_op,
    shift,
    Lk,
    qk_scale,
    ones,
    BN: gl.constexpr,
    STAGES: gl.constexpr,
    MASK: gl.constexpr,
    QK8: gl.constexpr,
    s_layout: gl.constexpr,
    p_layout: gl.constexpr,
):
    # _step with the row shift m fixed for the whole row: no running max and no rescale, so o stays
    # in the wgmma accumulator chain; bf16 P only (p may exceed fp16's range). The row sums come
    # from the tensor cores too: l [BM, 8] += P 1 (a wgmma of P with a ones tile), so l sums the
    # very bf16 P that P V sums (an fp32 sum of p would not match it: cuDNN-like error then needs
    # the row max's p = 1 exactly, which a fixed shift does not give). QK8: S stays the
    # accumulator's bits, the offset being in shift (one FFMA per score either way).
    stage, prev, s_tok, o_tok = _issue(j, q_i, k_smem, v_smem, k_ready, v_ready, zero_s, o, p_op, STAGES, QK8)
    l_tok = warpgroup_mma(p_op, ones, l, is_async=True)
    s = warpgroup_mma_wait(2, deps=(s_tok,))
    if QK8:
        s = s.to(gl.float32, bitcast=True)
    mbarrier.arrive(k_empty.index(stage))
    if MASK:
        s = _masked(s, j, Lk, BN, s_layout)
    p = gl.exp2(s * _per_row(qk_scale, QK8) - gl.expand_dims(shift, 1))
    o, l = warpgroup_mma_wait(0, deps=(o_tok, l_tok))
    mbarrier.arrive(v_empty.index(prev))
    p_op = gl.convert_layout(_round_p(p, False), p_layout)
    return o, l, p_op


@gluon.jit
def _row_norms(q_i, BM: gl.constexpr, D: gl.constexpr, s_layout: gl.constexpr):
    # the L2 norm of each of the BM query rows in shared memory, in the layout of S's rows
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    q = q_i.load(layout).to(gl.float32)
    return gl.convert_layout(gl.sqrt(gl.sum(q * q, axis=1)), gl.SliceLayout(1, s_layout))


@gluon.jit
def _last_pv(o, p_op, v_smem, v_ready, v_empty, n_kv, STAGES: gl.constexpr):
    last = n_kv - 1
    stage = last % STAGES
    mbarrier.wait(v_ready.index(stage), (last // STAGES) & 1)
    o_tok = warpgroup_mma(p_op, v_smem.index(stage), o, is_async=True)
    o = warpgroup_mma_wait(0, deps=(o_tok,))
    mbarrier.arrive(v_empty.index(stage))
    return o


@gluon.jit
def _online_loop(
    q_i,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    zero_s,
    o,
    s,
    m,
    Lk,
    n_kv,
    qk_scale,
    BN: gl.constexpr,
    STAGES: gl.constexpr,
    FP16: gl.constexpr,
    QK8: gl.constexpr,
    s_layout: gl.constexpr,
    o_layout: gl.constexpr,
    p_layout: gl.constexpr,
):
    # blocks 1.. with the online softmax, from block 0's scores s and row max m: (o, l)
    p = gl.exp2(s * _per_row(qk_scale, QK8) - gl.expand_dims(m, 1))
    l = gl.sum(p, axis=1)
    p_op = gl.convert_layout(_round_p(p, FP16), p_layout)
    for j in range(1, n_kv - 1):
        o, p_op, m, l = _step(
            j,
            q_i,
            k_smem,
            v_smem,
            k_ready,
            v_ready,
            k_empty,
            v_empty,
            zero_s,
            o,
            p_op,
            m,
            l,
            Lk,
            qk_scale,
            BN,
            STAGES,
            False,
            FP16,
            QK8,
            s_layout,
            o_layout,
            p_layout,
        )
    if n_kv > 1:  # the last block, peeled: its column mask stays out of the loop (a branch inside
        # the wgmma window makes ptxas serialize the two GEMMs)
        o, p_op, m, l = _step(
            n_kv - 1,
            q_i,
            k_smem,
            v_smem,
            k_ready,
            v_ready,
            k_empty,
            v_empty,
            zero_s,
            o,
            p_op,
            m,
            l,
            Lk,
            qk_scale,
            BN,
            STAGES,
            True,
            FP16,
            QK8,
            s_layout,
            o_layout,
            p_layout,
        )
    return _last_pv(o, p_op, v_smem, v_ready, v_empty, n_kv, STAGES), l


@gluon.jit
def _fixed_loop(
    q_i,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    zero_s,
    o,
    s,
    m,
    Lk,
    n_kv,
    qk_scale,
    ones,
    BM: gl.constexpr,
    BN: gl.constexpr,
    STAGES: gl.constexpr,
    QK8: gl.constexpr,
    s_layout: gl.constexpr,
    p_layout: gl.constexpr,
):
    # _online_loop with the row shift m fixed (bf16 only): (o, l)
    shift = m
    if QK8:  # every block's S as the accumulator's bits, 1.5 * 2^23 above S (block 0's re-added:
        # exact), so the whole row sees one rounded shift
        shift = m + _MAGIC_F * qk_scale
        s = s + _MAGIC_F
    p = gl.exp2(s * _per_row(qk_scale, QK8) - gl.expand_dims(shift, 1))
    p_op = gl.convert_layout(_round_p(p, False), p_layout)
    l = gl.zeros(
        [BM, 8], gl.float32, gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 8, 16])
    )
    for j in range(1, n_kv - 1):
        o, l, p_op = _step_fixed(
            j,
            q_i,
            k_smem,
            v_smem,
            k_ready,
            v_ready,
            k_empty,
            v_empty,
            zero_s,
            o,
            l,
            p_op,
            shift,
            Lk,
            qk_scale,
            ones,
            BN,
            STAGES,
            False,
            QK8,
            s_layout,
            p_layout,
        )
    if n_kv > 1:
        o, l, p_op = _step_fixed(
            n_kv - 1,
            q_i,
            k_smem,
            v_smem,
            k_ready,
            v_ready,
            k_empty,
            v_empty,
            zero_s,
            o,
            l,
            p_op,
            shift,
            Lk,
            qk_scale,
            ones,
            BN,
            STAGES,
            True,
            QK8,
            s_layout,
            p_layout,
        )
    l_tok = warpgroup_mma(p_op, ones, l, is_async=True)
    l = warpgroup_mma_wait(0, deps=(l_tok,))
    l = gl.convert_layout(gl.max(l, axis=1), gl.SliceLayout(1, s_layout))  # its 8 columns are equal
    return _last_pv(o, p_op, v_smem, v_ready, v_empty, n_kv, STAGES), l


@gluon.jit
def _consumer(
    WG: gl.constexpr,
    q_smem,
    k_smem,
    v_smem,
    ones_smem,
    q_bar,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    o_ptr,
    o_row_stride,
    q_row_in_batch,
    o_row0,
    col,
    Lq,
    Lk,
    n_kv,
    qk_scale,
    row_factor_ptr,
    N,
    k_norm_max,
    use_fixed,
):
    # consumer warpgroup WG: query rows WG * BM ... of the CTA's (q_row_in_batch and o_row0 are the
    # CTA's first); tile sizes and variant from the shared-memory buffers (int8 Q: QK8; fp16 V: FP16)
    BM: gl.constexpr = q_smem.shape[1]
    D: gl.constexpr = q_smem.shape[2]
    STAGES: gl.constexpr = k_smem.shape[0]
    BN: gl.constexpr = k_smem.shape[1]
    QK8: gl.constexpr = q_smem.dtype == gl.int8
    FP16: gl.constexpr = v_smem.dtype == gl.float16
    q_row_in_batch = q_row_in_batch + WG * BM
    o_row0 = o_row0 + WG * BM
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32 if QK8 else 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    q_i = q_smem.index(WG)
    if QK8:  # S's accumulator starts at the offset's bits; qk_scale becomes the row factors f.
        # Rows past Lq (zero fill, or the next batch's q8) get f = 0: their scores are 0 (NaN
        # where masked), never stored, and with bound = block-0 max = 0 they pass the fixed
        # shift's test, so they do not send the warpgroup's real rows to the online softmax.
        zero_s = gl.full([BM, BN], _MAGIC, gl.int32, s_layout)
        i = gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
        qk_scale = gl.load(
            row_factor_ptr + (o_row0 + i).to(gl.int64) * N + col // D, mask=q_row_in_batch + i < Lq, other=0.0
        )
    else:
        zero_s = gl.zeros([BM, BN], gl.float32, s_layout)
    o = gl.zeros([BM, D], gl.float32, o_layout)
    mbarrier.wait(q_bar.index(WG), 0)

    # block 0: S_0 and its softmax (no P V yet)
    mbarrier.wait(k_ready.index(0), 0)
    s_tok = warpgroup_mma(q_i, k_smem.index(0).permute((1, 0)), zero_s, use_acc=QK8, is_async=True)
    s = _scores(warpgroup_mma_wait(0, deps=(s_tok,)), QK8)
    mbarrier.arrive(k_empty.index(0))
    if n_kv == 1:
        s = _masked(s, 0, Lk, BN, s_layout)
    m = gl.max(s, axis=1) * qk_scale
    if FP16:  # p up to 2^64 would overflow fp16's P: the online softmax only
        o, l = _online_loop(
            q_i,
            k_smem,
            v_smem,
            k_ready,
            v_ready,
            k_empty,
            v_empty,
            zero_s,
            o,
            s,
            m,
            Lk,
            n_kv,
            qk_scale,
            BN,
            STAGES,
            FP16,
            QK8,
            s_layout,
            o_layout,
            p_layout,
        )
    else:
        # Fixed shift (see attention_hopper's docstring): c |q_i| max_j |k_j| bounds every score of
        # row i from above (Cauchy-Schwarz), block 0's max m bounds the row's max from below. Where
        # the two are within 128 (log2 units) for every row of this warpgroup, the shift
        # max(m, bound - 64) lies within 64 of the row's max either way: every p <= 2^64 (finite in
        # fp32 and bf16) and the largest p >= 2^-64 (terms lost to underflow weigh < 2^-62 of it).
        # QK8: the same bound on the ints (|q8_i| and max_j |k8_j|) times the row factor.
        bound = m + 256.0  # without the key norms (short key sequences): fails the test below
        if use_fixed != 0:
            bound = qk_scale * _row_norms(q_i, BM, D, s_layout) * k_norm_max
        if gl.min((bound - m <= 128.0).to(gl.int32), axis=0) == 1:
            o, l = _fixed_loop(
                q_i,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                zero_s,
                o,
                s,
                gl.maximum(m, bound - 64.0),
                Lk,
                n_kv,
                qk_scale,
                ones_smem.permute((1, 0)),
                BM,
                BN,
                STAGES,
                QK8,
                s_layout,
                p_layout,
            )
        else:
            o, l = _online_loop(
                q_i,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                zero_s,
                o,
                s,
                m,
                Lk,
                n_kv,
                qk_scale,
                BN,
                STAGES,
                FP16,
                QK8,
                s_layout,
                o_layout,
                p_layout,
            )

    o = o / gl.expand_dims(gl.convert_layout(l, gl.SliceLayout(1, o_layout)), 1)
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, o_layout))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    ptrs = o_ptr + (o_row0 + gl.expand_dims(rows, 1)).to(gl.int64) * o_row_stride + col + gl.expand_dims(cols, 0)
    gl.store(ptrs, o.to(o_ptr.dtype.element_ty), mask=gl.expand_dims(q_row_in_batch + rows < Lq, 1))


# one function per consumer partition (gl.warp_specialize takes functions, the index is a constexpr)
@gluon.jit
def _consumer0(
    q_smem,
    k_smem,
    v_smem,
    ones_smem,
    q_bar,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    o_ptr,
    o_row_stride,
    q_row_in_batch,
    o_row0,
    col,
    Lq,
    Lk,
    n_kv,
    qk_scale,
    row_factor_ptr,
    N,
    k_norm_max,
    use_fixed,
):
    _consumer(
        0,
        q_smem,
        k_smem,
        v_smem,
        ones_smem,
        q_bar,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        o_ptr,
        o_row_stride,
        q_row_in_batch,
        o_row0,
        col,
        Lq,
        Lk,
        n_kv,
        qk_scale,
        row_factor_ptr,
        N,
        k_norm_max,
        use_fixed,
    )


@gluon.jit
def _consumer1(
    q_smem,
    k_smem,
    v_smem,
    ones_smem,
    q_bar,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    o_ptr,
    o_row_stride,
    q_row_in_batch,
    o_row0,
    col,
    Lq,
    Lk,
    n_kv,
    qk_scale,
    row_factor_ptr,
    N,
    k_norm_max,
    use_fixed,
):
    _consumer(
        1,
        q_smem,
        k_smem,
        v_smem,
        ones_smem,
        q_bar,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        o_ptr,
        o_row_stride,
        q_row_in_batch,
        o_row0,
        col,
        Lq,
        Lk,
        n_kv,
        qk_scale,
        row_factor_ptr,
        N,
        k_norm_max,
        use_fixed,
    )


@gluon.jit
def _consumer2(
    q_smem,
    k_smem,
    v_smem,
    ones_smem,
    q_bar,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    o_ptr,
    o_row_stride,
    q_row_in_batch,
    o_row0,
    col,
    Lq,
    Lk,
    n_kv,
    qk_scale,
    row_factor_ptr,
    N,
    k_norm_max,
    use_fixed,
):
    _consumer(
        2,
        q_smem,
        k_smem,
        v_smem,
        ones_smem,
        q_bar,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        o_ptr,
        o_row_stride,
        q_row_in_batch,
        o_row0,
        col,
        Lq,
        Lk,
        n_kv,
        qk_scale,
        row_factor_ptr,
        N,
        k_norm_max,
        use_fixed,
    )


# Lk and use_fixed unspecialized: self- and cross-attention (Lk 32760 and 512, one of them a multiple
# of 16) share one compiled kernel, halving the JIT a first forward waits for
@gluon.jit(do_not_specialize=["Lk", "use_fixed"])
def _attention_hopper_fwd_kernel(
    q_desc,
    k_desc,
    v_desc,
    o_ptr,
    o_row_stride,
    Lq,
    Lk,
    N,
    qk_scale,
    row_factor_ptr,
    k_norm_max_ptr,
    use_fixed,
    BM: gl.constexpr,
    BN: gl.constexpr,
    D: gl.constexpr,
    STAGES: gl.constexpr,
    FP16: gl.constexpr,
    QK8: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
    WGS: gl.constexpr,
):
    # one CTA: WGS * BM query rows of one (batch, head), BM per consumer warpgroup
    gl.static_assert(WGS == 2 or WGS == 3, "2 or 3 consumer warpgroups")
    pid_m = gl.program_id(0)
    bh = gl.program_id(1)
    b = bh // N
    h = bh % N
    q_row_in_batch = pid_m * (WGS * BM)
    q_row = b * Lq + q_row_in_batch
    kv_row0 = b * Lk
    col = h * D
    n_kv = gl.cdiv(Lk, BN)
    k_norm_max = gl.load(k_norm_max_ptr + bh, mask=use_fixed != 0, other=0.0)  # max_j |k_j| of this (b, h)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [WGS, BM, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BN, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BN, D], v_desc.layout)
    ones_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    ones_smem = gl.allocate_shared_memory(gl.bfloat16, [8, BN], ones_layout)
    if not FP16:
        ones_smem.store(gl.full([8, BN], 1.0, gl.bfloat16, gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])))
    q_bar = gl.allocate_shared_memory(gl.int64, [WGS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(WGS):
        mbarrier.init(q_bar.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=WGS)  # every consumer releases each slot
        mbarrier.init(v_empty.index(i), count=WGS)
    fence_async_shared()

    consumer = (
        q_smem,
        k_smem,
        v_smem,
        ones_smem,
        q_bar,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        o_ptr,
        o_row_stride,
        q_row_in_batch,
        q_row,
        col,
        Lq,
        Lk,
        n_kv,
        qk_scale,
        row_factor_ptr,
        N,
        k_norm_max,
        use_fixed,
    )
    loader = (
        q_desc,
        k_desc,
        v_desc,
        q_smem,
        k_smem,
        v_smem,
        q_bar,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        q_row,
        kv_row0,
        col,
        n_kv,
    )
    if WGS == 3:
        gl.warp_specialize(
            [(_consumer0, consumer), (_consumer1, consumer), (_consumer2, consumer), (_loader, loader)],
            [4, 4, 1],
            [CONSUMER_REGS, CONSUMER_REGS, LOADER_REGS],
        )
    else:
        gl.warp_specialize(
            [(_consumer0, consumer), (_consumer1, consumer), (_loader, loader)], [4, 1], [CONSUMER_REGS, LOADER_REGS]
        )


def _token_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x [B, L, N, D] as the rows of a [B*L, N*D] matrix that TMA can read: (x or a contiguous
    copy, row stride in elements). In place when each token's heads are side by side (unit last
    stride, ``stride(2) == D``), batches follow each other, and rows and base are 16-byte aligned:
    the DiT's q and k, and v as a column slice of the fused QKV output."""
    b, l, n, d = x.shape
    row = x.stride(1)
    ok = (
        x.stride(3) == 1
        and (n == 1 or x.stride(2) == d)
        and (b == 1 or x.stride(0) == l * row)
        and row >= n * d
        and (row * x.element_size()) % 16 == 0
        and x.data_ptr() % 16 == 0
    )
    if not ok:
        x = x.contiguous()
        row = n * d
    return x, row


def _descriptor(x: torch.Tensor, block_rows: int) -> TensorDescriptor:
    b, l, n, d = x.shape
    x, row = _token_rows(x)
    rows = x.as_strided((b * l, n * d), (row, 1))
    layout = gl.NVMMASharedLayout.get_default_for([block_rows, d], _GL_DTYPE[x.dtype])
    return TensorDescriptor(rows, [b * l, n * d], [row, 1], [block_rows, d], layout)


_GL_DTYPE = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.int8: gl.int8}


@triton.jit
def _key_norm_max_kernel(k_ptr, out_ptr, Lk, N, row_stride, D: tl.constexpr, ROWS: tl.constexpr):
    # out[b * N + h] = max over the tokens t of one ROWS-token chunk of |k[b, t, h, :]|, folded
    # into out by atomic max (norms are >= 0, out starts at 0)
    bh = tl.program_id(1)
    b = bh // N
    h = bh % N
    t = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    ptrs = k_ptr + (b * Lk + t).to(tl.int64)[:, None] * row_stride + h * D + tl.arange(0, D)[None, :]
    x = tl.load(ptrs, mask=(t < Lk)[:, None], other=0.0).to(tl.float32)
    tl.atomic_max(out_ptr + bh, tl.sqrt(tl.max(tl.sum(x * x, axis=1), axis=0)))


def key_norm_max(k: torch.Tensor) -> torch.Tensor:
    """max over tokens of |k[b, t, h, :]| (L2 over the head dim): k [B, Lk, N, D] -> [B, N] fp32."""
    b, lk, n, d = k.shape
    rows, row = _token_rows(k)
    out = torch.zeros((b, n), dtype=torch.float32, device=k.device)
    _key_norm_max_kernel[(triton.cdiv(lk, KEY_ROWS), b * n)](rows, out, lk, n, row, D=d, ROWS=KEY_ROWS, num_warps=4)
    return out


def launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qk_int8: bool = False) -> torch.Tensor:
    """Run the kernel on checked inputs (``attention_hopper``'s): [B, Lq, N, D] contiguous.
    ``qk_int8``: q and k quantized first (``wanscope.kernels.qk_int8``), bf16 only."""
    b, lq, n, d = q.shape
    lk = k.shape[1]
    out = torch.empty((b, lq, n, d), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    fp16 = q.dtype == torch.float16
    if qk_int8 and fp16:
        raise ValueError("qk_int8 needs bf16 inputs (P may exceed fp16's range on the fixed shift)")
    c = _LOG2E / math.sqrt(d)
    use_fixed = not fp16 and lk >= FIXED_MIN_KEYS
    if qk_int8:
        from wanscope.kernels.qk_int8 import quantize_qk_int8

        q, row_factor, k, k_norms = quantize_qk_int8(q, k, c)
    else:
        unused = torch.empty(1, dtype=torch.float32, device=q.device)
        row_factor = unused
        k_norms = key_norm_max(k) if use_fixed else unused
    wgs, bn, stages, regs = INT8_CONFIG if qk_int8 else CONFIG
    grid = (triton.cdiv(lq, wgs * BLOCK_M), b * n)
    _attention_hopper_fwd_kernel[grid](
        _descriptor(q, BLOCK_M),
        _descriptor(k, bn),
        _descriptor(v, bn),
        out,
        n * d,
        lq,
        lk,
        n,
        c,
        row_factor,
        k_norms,
        int(use_fixed),
        BM=BLOCK_M,
        BN=bn,
        D=d,
        STAGES=stages,
        FP16=fp16,
        QK8=qk_int8,
        CONSUMER_REGS=regs,
        LOADER_REGS=LOADER_REGS,
        WGS=wgs,
        num_warps=4,
    )
    return out
