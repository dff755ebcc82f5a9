"""The fast mode: a built ``WanDiT`` switched, block by block, to FP8 GEMMs and INT8 attention.

Applied from outside the model: ``apply_fast_mode(dit, FastConfig())`` switches the DiT to the
fused kernels (``kernels="triton"``, which fuses the q/k/v weights) and then gives each chosen
block a ``fast`` module (its FP8 weights) and ``fast_block_forward``, the fused block of
``wan/fused.py`` with these changes, per layer as ``FastConfig`` says (defaults: FP8 q/k/v and
both FFN GEMMs with fast accumulation, and INT8 Q K^T where our Hopper attention kernel runs, the
rest exact; the others are options):

=================  ==========================================  ==============================
part               exact mode (bf16 with fp32 islands)          fast mode option
=================  ==========================================  ==============================
q/k/v, o           bf16 GEMM                                    e4m3, per-token x per-channel
cross q, o         bf16 GEMM                                    e4m3
cross k/v (Lc)     bf16 GEMM                                    bf16 (512 tokens: no gain)
FFN up, down       bf16 GEMM, GELU in the epilogue              e4m3; GELU fused into the
                                                                down-projection's quantizer
self-attention     the model's backend, bf16 (our Hopper           INT8 QK^T, bf16 PV on our Hopper
                   kernel where it runs, else SDPA)             kernel (default where it runs);
                                                                elsewhere attention_int8: INT8
                                                                QK^T, bf16 or e4m3 PV (option)
cross-attention    the model's backend                          unchanged (L x 512: 2.6% of FLOPs)
norms, modulation  fp32 (fused Triton ops)                      unchanged
=================  ==========================================  ==============================

``exact_blocks`` keeps some blocks (e.g. the first and last) on the exact path. A config can be
written as text, ``FastConfig.parse("linears=ffn_up,qkv exact_blocks=0,-1")`` (the CLI's ``--fast``
and the benchmarks' variants), and back, ``FastConfig.spec()``. Kernels and their
error bounds: ``wanscope.kernels.fp8_linear``, ``wanscope.kernels.attention_hopper`` (with
``qk_int8``) and ``wanscope.kernels.attention_int8``. On the CPU the FP8 GEMMs and
``attention_int8`` run their torch references of the same quantization, so the mode runs (and is
tested) anywhere. ``benchmarks/fast_mode.py`` measures speed and error of each choice on the H200.

Setting ``dit.kernels`` afterwards returns every block to the exact path (it resets the block
forwards); ``exact_mode`` does that and frees the FP8 weights.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from wanscope.errors import UsageError
from wanscope.wan import ranges
from wanscope.wan.attention import AttentionBackend
from wanscope.wan.dit import WanDiT

LINEARS = ("qkv", "o", "cross_q", "cross_o", "ffn_up", "ffn_down")
# names a spec may use for several linear families at once
LINEAR_GROUPS = {
    "all": LINEARS,
    "none": (),
    "attn": ("qkv", "o"),
    "cross": ("cross_q", "cross_o"),
    "ffn": ("ffn_up", "ffn_down"),
}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class FastConfig:
    """Which parts of which blocks run in low precision.

    The defaults are the fastest config within issue 9's bound (forward error <= 5x the bf16
    path's) measured on an H200 (torch 2.11, Triton 3.6.0, Wan2.1 1.3B at L = 32760, random
    weights): FP8 q/k/v and both FFN GEMMs with ``_scaled_mm``'s fast accumulation (the FFN
    down-projection's quantizer applies the GELU, so the up-projection's output is read once),
    and, where the attention backend resolves to our Hopper kernel, its INT8 ``Q K^T``. Their
    speed and error against the exact path and the configs they replaced: benchmarks/RESULTS.md,
    "2026-11-30: fast mode, new defaults, one-pass quantizer, INT8 on three warpgroups". The error
    ratio depends on the weights' initialization: ``benchmarks/fast_mode.py`` runs on our
    ``init_weights()``, ``benchmarks/dit_forward.py`` on diffusers' initialization of the same
    config, and the two measure different ratios for the same defaults. ``attention_int8``
    (Triton, FA2-style) is slower than cuDNN, so off the Hopper kernel INT8 attention stays an
    option; with e4m3 P V it exceeds the bound (benchmarks/RESULTS.md, "2026-11-30: fast mode per
    FP8 family against issue 9's 5x bound").

    Args:
        linears: the GEMMs run in FP8, a subset of ``LINEARS``.
        int8_attention: self-attention with INT8 ``Q K^T`` (which kernel: ``attention_kernel``).
            ``"auto"``: where the model's attention backend resolves to ``hopper`` only (our
            Hopper kernel's variant), elsewhere the model's backend; True: always (our Hopper
            kernel's where it runs and ``pv_fp8`` is off, else ``attention_int8``); False: never.
        pv_fp8: the INT8 attention's P V in e4m3, which only ``attention_int8`` has: needs
            ``int8_attention=True``.
        exact_blocks: block indices kept exact (negative counts from the end: ``(0, -1)``).
        fast_accum: ``_scaled_mm`` fast accumulation (CUDA only): the FP8 tensor cores carry the
            sums over all of K at their reduced precision (no promotion to fp32 in registers).
    """

    linears: tuple[str, ...] = ("qkv", "ffn_up", "ffn_down")
    int8_attention: bool | str = "auto"
    pv_fp8: bool = False
    exact_blocks: tuple[int, ...] = ()
    fast_accum: bool = True

    def __post_init__(self):
        if self.int8_attention not in (True, False, "auto"):
            raise UsageError(f"int8_attention must be true, false or auto, got {self.int8_attention!r}")
        if self.pv_fp8 and self.int8_attention is not True:
            raise UsageError("fast-mode spec: pv_fp8=true (e4m3 P V, in attention_int8 only) needs int8_attention=true")
        unknown = set(self.linears) - set(LINEARS)
        if unknown:
            raise UsageError(
                f"unknown fast-mode linears {_clip(str(sorted(unknown)))}; known: {', '.join(LINEARS)} "
                f"and the groups {', '.join(LINEAR_GROUPS)}"
            )

    def check_blocks(self, num_blocks: int) -> None:
        """Refuse ``exact_blocks`` outside a DiT of ``num_blocks`` blocks (UsageError)."""
        bad = [i for i in self.exact_blocks if not -num_blocks <= i < num_blocks]
        if bad:
            raise UsageError(
                f"fast-mode spec: exact_blocks {_clip(','.join(map(str, bad)))} out of range for {num_blocks} blocks"
            )

    @classmethod
    def parse(cls, spec: str) -> FastConfig:
        """A config from ``key=value`` fields over the defaults, separated by spaces or ``;``.

        ``linears``: comma-separated ``LINEARS`` names or groups (``all``, ``none``, ``attn`` =
        qkv,o, ``cross`` = cross_q,cross_o, ``ffn`` = ffn_up,ffn_down); ``exact_blocks``: comma-
        separated integers or ``none``; the flags: true/false, yes/no, on/off, 1/0. An empty
        spec is the default config. Example: ``"linears=ffn,qkv exact_blocks=0,-1 pv_fp8=no"``.

        Raises:
            UsageError: an unknown key or linear name, a value that does not parse, or a
                field given twice.
        """
        values: dict[str, object] = {}
        known = {f.name: f for f in fields(cls)}
        for item in filter(None, re.split(r"[\s;]+", spec.strip())):
            key, sep, text = item.partition("=")
            if not sep or key not in known:
                raise UsageError(
                    f"fast-mode spec {_clip(item)!r}: expected KEY=VALUE with KEY one of {', '.join(known)}"
                )
            if key in values:
                raise UsageError(f"fast-mode spec: {key} given twice")
            values[key] = _parse_field(key, text.strip())
        return cls(**values)

    def attention_kernel(self, backend: AttentionBackend) -> str | None:
        """The self-attention kernel of the fast mode on this resolved backend: ``"hopper"``
        (``attention_hopper(..., qk_int8=True)``), ``"attention_int8"``, or None (the model's
        backend, exact)."""
        if backend is AttentionBackend.AUTO:
            raise ValueError("attention_kernel needs a resolved backend, not auto")
        on_hopper = backend is AttentionBackend.HOPPER and not self.pv_fp8
        if self.int8_attention == "auto":
            return "hopper" if on_hopper else None
        if self.int8_attention:
            return "hopper" if on_hopper else "attention_int8"
        return None

    def spec(self) -> str:
        """The config as ``parse`` reads it, every field written out."""
        parts = []
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, tuple):
                text = ",".join(map(str, v)) or "none"
            else:
                text = str(v).lower()
            parts.append(f"{f.name}={text}")
        return " ".join(parts)


def _clip(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters for an error line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_field(key: str, raw: str):
    text = raw.lower()
    if key == "linears":
        if not text.strip(","):
            raise UsageError("fast-mode spec: linears= needs names or groups (none for no FP8 linears)")
        names: list[str] = []
        for name in filter(None, text.split(",")):
            for linear in LINEAR_GROUPS.get(name, (name,)):
                if linear not in names:
                    names.append(linear)
        return tuple(names)  # unknown names: FastConfig.__post_init__
    if key == "exact_blocks":
        if text == "none":
            return ()
        if not re.fullmatch(r"-?[0-9]+(,-?[0-9]+)*", text):
            raise UsageError(f"fast-mode spec: exact_blocks={_clip(raw)!r} is not a comma-separated list of integers")
        try:
            return tuple(int(i) for i in text.split(","))
        except ValueError:  # past Python's 4300-digit limit on int()
            raise UsageError(f"fast-mode spec: exact_blocks={_clip(raw)!r} holds a number too long") from None
    if key == "int8_attention" and text == "auto":
        return text
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise UsageError(
        f"fast-mode spec: {key}={_clip(raw)!r} is not true or false" + (" or auto" if key == "int8_attention" else "")
    )


def _fp8(weight, bias, **kw):
    from wanscope.kernels.fp8_linear import FP8Linear  # imports triton: only when asked for

    return FP8Linear(weight, bias, **kw)


class FastBlock(nn.Module):
    """One block's fast-mode state: the FP8 copies of its chosen linears (``linears``, keyed by
    ``LINEARS`` names) and the attention choice."""

    def __init__(self, block: nn.Module, cfg: FastConfig, quantize_on: torch.device | None = None):
        super().__init__()
        sa, ca, ffn = block.self_attn, block.cross_attn, block.ffn
        sources = {
            "qkv": (sa.fused_weight, sa.fused_bias),
            "o": (sa.o.weight, sa.o.bias),
            "cross_q": (ca.q.weight, ca.q.bias),
            "cross_o": (ca.o.weight, ca.o.bias),
            "ffn_up": (ffn[0].weight, ffn[0].bias),
            "ffn_down": (ffn[2].weight, ffn[2].bias),
        }
        linears = {}
        for name in cfg.linears:
            weight, bias = sources[name]
            home = weight.device
            if quantize_on is not None:  # the same rounding as a resident model's, then back
                weight = weight.to(quantize_on)
            lin = _fp8(weight, bias, gelu_input=name == "ffn_down", fast_accum=cfg.fast_accum)
            for key in ("weight_fp8", "weight_scale"):
                lin._buffers[key] = lin._buffers[key].to(home)
            linears[name] = lin
        self.linears = nn.ModuleDict(linears)
        self.cfg = cfg


def apply_fast_mode(dit: WanDiT, cfg: FastConfig = FastConfig(), quantize_on: torch.device | None = None) -> WanDiT:
    """Switch ``dit`` (weights loaded and cast) to the fast mode in place; returns it.
    ``quantize_on``: the device the FP8 weights are computed on, one weight at a time, where the
    model is in host memory (a streamed DiT: its FP8 weights round as a resident one's).

    Raises:
        UsageError: a sequence-parallel DiT (the INT8 attention does not go through its
            all-to-alls), or an ``exact_blocks`` index out of range.
    """
    if dit.sequence_parallel is not None:
        raise UsageError("the fast mode does not run under sequence parallelism yet")
    n = len(dit.blocks)
    cfg.check_blocks(n)
    exact = {i % n for i in cfg.exact_blocks}
    dit.kernels = "triton"  # fuses q/k/v and resets every block to the exact fused forward
    for i, block in enumerate(dit.blocks):
        if i not in exact:
            block.fast = FastBlock(block, cfg, quantize_on)
            block.fused_forward = fast_block_forward
    return dit


def exact_mode(dit: WanDiT) -> WanDiT:
    """Return every block to the exact fused path and drop the FP8 weights; returns ``dit``."""
    for block in dit.blocks:
        if hasattr(block, "fast"):
            del block.fast
    dit.kernels = dit.kernels
    return dit


def _linear(fast: FastBlock, name: str, lin_weight, lin_bias, h):
    """``h @ W^T + b`` through the FP8 copy when the block has one, else in the model dtype."""
    return fast.linears[name](h) if name in fast.linears else F.linear(h, lin_weight, lin_bias)


def int8_self_attention(kernel: str, q, k, v, pv_fp8: bool):
    """Run the INT8 ``Q K^T`` self-attention ``kernel`` that ``FastConfig.attention_kernel``
    named: q, k, v [B, L, N, D] -> [B, L, N, D]."""
    if kernel == "hopper":
        from wanscope.kernels.attention_hopper import attention_hopper

        return attention_hopper(q, k, v, qk_int8=True)
    from wanscope.kernels.attention_int8 import attention_int8

    return attention_int8(q, k, v, pv_fp8)


def _attend(attn, fast: FastBlock, q, k, v, backend):
    kernel = fast.cfg.attention_kernel(backend)
    if kernel is not None:
        return int8_self_attention(kernel, q, k, v, fast.cfg.pv_fp8)
    return attn.attend(q, k, v, backend)


def fast_block_forward(block, x, e, context, rope, backend):
    """``fused.block_forward`` with the block's ``fast`` choices; same arguments and result."""
    from wanscope.kernels import gated_add, norm_modulate, rms_norm_rope
    from wanscope.wan.fused import add_norm3

    fast, dtype, eps = block.fast, context.dtype, block.norm1.eps
    sa, ca = block.self_attn, block.cross_attn
    x = x.contiguous()
    shift, scale, gate, c_shift, c_scale, c_gate = (block.modulation + e).unbind(1)  # [B, C] fp32
    with ranges.named_range(ranges.SELF_ATTN):
        h = norm_modulate(x, shift=shift, scale=scale, eps=eps, out_dtype=dtype)  # [B, L, C]
        c, n = h.shape[-1], sa.num_heads
        qkv = _linear(fast, "qkv", sa.fused_weight, sa.fused_bias, h)  # [B, L, 3C]
        q = rms_norm_rope(qkv[..., :c], sa.norm_q.weight, rope, n, sa.norm_q.eps)  # [B, L, N, D]
        k = rms_norm_rope(qkv[..., c : 2 * c], sa.norm_k.weight, rope, n, sa.norm_k.eps)
        v = qkv[..., 2 * c :].unflatten(-1, (n, -1))  # [B, L, N, D] view
        y = _linear(fast, "o", sa.o.weight, sa.o.bias, _attend(sa, fast, q, k, v, backend).flatten(2))
    with ranges.named_range(ranges.CROSS_ATTN):
        x, h = add_norm3(block, x, y, gate, dtype)
        q = rms_norm_rope(
            _linear(fast, "cross_q", ca.q.weight, ca.q.bias, h), ca.norm_q.weight, None, n, ca.norm_q.eps
        )  # [B, L, N, D]
        kv = F.linear(context, ca.fused_weight, ca.fused_bias)  # [B, Lc, 2C]
        k = rms_norm_rope(kv[..., :c], ca.norm_k.weight, None, n, ca.norm_k.eps)  # [B, Lc, N, D]
        v = kv[..., c:].unflatten(-1, (n, -1))
        y = _linear(fast, "cross_o", ca.o.weight, ca.o.bias, ca.attend(q, k, v, backend).flatten(2))
    with ranges.named_range(ranges.FFN):
        x, h = norm_modulate(x, residual=y, shift=c_shift, scale=c_scale, eps=eps, out_dtype=dtype)
        up, down = block.ffn[0], block.ffn[2]
        hidden = _linear(fast, "ffn_up", up.weight, up.bias, h)  # [B, L, F] before GELU
        if "ffn_down" in fast.linears:  # GELU inside the quantizer
            y = fast.linears["ffn_down"](hidden)
        else:
            y = down(F.gelu(hidden, approximate="tanh"))
        x = gated_add(x, y, c_gate)
    return x
