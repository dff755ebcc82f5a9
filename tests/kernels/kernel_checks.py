"""Error checks shared by the kernel tests (a plain module: ``conftest`` names collide across
test folders)."""

from __future__ import annotations

import torch

# Where the kernel tests put their tensors: the GPU when there is one (CPU tensors there would
# run only the torch references), else the CPU, where the conftest turns on the interpreter.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"


def _interpreting() -> bool:
    from wanscope.kernels._dispatch import INTERPRET

    return INTERPRET


# Triton's interpreter converts fp32 to bf16 by truncation (round toward zero, whatever
# ``fp_downcast_rounding`` says; checked with triton 3.8), the GPU by round-to-nearest-even:
# truncation doubles the mean rounding error, so the mean bound is looser there.
def mean_slack() -> float:
    return 2.5 if _interpreting() else 1.1


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64."""
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def err_stats(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max, mean) absolute error of ``out`` against the float64 ``ref``."""
    d = (out.double() - ref.double()).abs()
    return d.max().item(), d.mean().item()


def assert_close_to_f64(out, ref, lowp, *, name: str, fp32_rtol: float = 2e-6) -> None:
    """Check ``out`` against the float64 ``ref``.

    fp32 outputs: max error <= ``fp32_rtol`` x max|ref|. Low-precision outputs: max error no
    worse than PyTorch's own computation in that dtype (``lowp``) and within one ulp of the
    dtype at max|ref|; mean error (of 64 or more elements) no worse than 1.1x PyTorch's (2.5x under the interpreter).
    """
    mx, mean = err_stats(out, ref)
    scale = ref.double().abs().max().item() or 1.0
    msg = f"{name}: max err {mx:.3e}, mean err {mean:.3e}, max|ref| {scale:.3e}"
    if out.dtype == torch.float32:
        assert mx <= fp32_rtol * scale, msg
        return
    lp_max, lp_mean = err_stats(lowp, ref)
    ulp = torch.finfo(out.dtype).eps * scale
    msg += f"; torch {out.dtype} max {lp_max:.3e}, mean {lp_mean:.3e}"
    assert mx <= max(lp_max, ulp), msg
    if out.numel() >= 64:  # a mean over a few elements says nothing
        assert mean <= mean_slack() * lp_mean + 1e-12, msg
