"""``wanscope profile --ncu attention``: Nsight Compute on the DiT's self-attention kernel.

The child is ``python -m wanscope profile`` with the same model, size and backend, one
denoising step and no VAE decode, run through ``wanscope.ncu.capture`` with the kernel-name
regex of the attention backend and one launch. Within a DiT block self-attention runs before
cross-attention, so the first matching launch is block 0's self-attention; the child runs the
text encoder's (masked) attention with SDPA's math backend, so no earlier attention kernel can
match. Writes ``attention.ncu-rep``, ``attention.details.csv`` and ``attention.raw.csv``.
"""

from __future__ import annotations

from pathlib import Path

from wanscope.errors import InputError, UsageError

# Kernel names of each attention backend (benchmarks/ncu_attention_capture.py; docs/design.md, "Capturing").
ATTENTION_KERNELS = {
    "flash": "flash_fwd",  # FlashAttention-2 in PyTorch: pytorch_flash::flash_fwd_kernel
    "cudnn": "cudnn_generated_fort_native_sdpa",  # e.g. ..._sdpa_sm90_flash_fprop_*
    "efficient": "fmha_cutlassF",  # memory-efficient attention
    "hopper": "_attention_hopper_fwd_kernel",  # ours (wanscope.kernels.attention_hopper)
}
_SDPA = ("flash", "cudnn", "efficient")
STEM = "attention"


def kernel_regex(backend: str) -> str:
    """The ncu ``--kernel-name regex:`` for ``backend``'s attention kernel; ``sdpa`` lets PyTorch
    pick, so it matches any of SDPA's; ``auto`` (ours or SDPA's, by GPU) any of them all.

    Raises:
        UsageError: the math backend (no single attention kernel: a GEMM, a softmax, a GEMM).
    """
    if backend == "math":
        raise UsageError(
            "--ncu attention: the math backend runs no attention kernel "
            "(a GEMM, a softmax and a GEMM); pick auto, sdpa, cudnn, flash, efficient or hopper"
        )
    if backend == "sdpa":
        return "|".join(ATTENTION_KERNELS[b] for b in _SDPA)
    if backend == "auto":
        return "|".join(ATTENTION_KERNELS.values())
    return ATTENTION_KERNELS[backend]


def capture_attention(child: list[str], backend: str, out_dir: Path) -> tuple[object, list]:
    """Run ``child`` under ncu on the first self-attention launch; (files, diagnoses).

    Raises:
        CaptureError: ncu missing, no counter access, or nothing profiled (one line).
    """
    from wanscope.ncu.capture import capture

    files = capture(child, out_dir / STEM, kernel_regex(backend), launch_skip=0, launch_count=1)
    return files, diagnose_capture(files)


def diagnose_capture(files) -> list:
    """The diagnosis of each kernel of an ncu capture (``ncu.capture.Capture``)."""
    from wanscope.ncu.diagnosis import diagnose
    from wanscope.ncu.readers import read_report

    try:
        report = read_report(files.report)
    except InputError:  # ncu-report not installed: the raw page holds the same metrics
        report = read_report(files.raw_csv)
    return [diagnose(k) for k in report.kernels]
