"""Triton kernels for the memory-bound chains of the Wan DiT block and the VAE decoder, each a ``torch.library``
operator (namespace ``wanscope``, ``_dispatch.define_op``) with a fake implementation, so
eager code and ``torch.compile`` call them alike.

* ``norm_modulate``: residual add (optionally gated) + LayerNorm + adaLN modulation, one pass.
* ``rms_norm_rope``: q/k RMSNorm across heads + 3-D RoPE, written head-split for attention.
* ``causal_norm_silu``: the VAE decoder's causal convolution input: its kept frames, then RMS
  norm over the channels + SiLU of the new ones, in one pass.

Where each op runs: CUDA tensors always run the Triton kernel. CPU tensors run it under
Triton's interpreter when ``TRITON_INTERPRET=1`` was set before this package was imported
(the CPU tests do that), and otherwise run the op's pure-torch ``reference`` (same math, fp32),
so a model switched to kernels still runs anywhere Triton is installed; ``causal_norm_silu``
runs its reference without Triton too (the VAE decoder always calls it).

Numerics (the same in kernel and reference): inputs are upcast to fp32 once, all statistics and
arithmetic are fp32, and each output is rounded once to its storage dtype. The one place this
differs from the torch path of ``wan/dit.py``: that path rounds the RMSNorm output to the model
dtype before RoPE; the fused op does not (one rounding fewer, closer to the fp32 reference).
"""

__all__ = ["gated_add", "norm_modulate", "rms_norm_rope"]

# Their modules import Triton, which the CPU wheel of torch does not bring; without it the
# package still imports, for the VAE decoder's ``causal_norm_silu``, whose reference runs there.
try:
    from wanscope.kernels.norm_modulate import gated_add, norm_modulate
    from wanscope.kernels.rms_norm_rope import rms_norm_rope
except ModuleNotFoundError as e:
    if e.name != "triton":
        raise
    __all__ = []
