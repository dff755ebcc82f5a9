"""What the fast mode costs in image quality, on the user's own weights and prompts
(``wanscope compare-modes``).

Exact: the DiT on the fused kernels (``kernels="triton"``, the path the fast mode is built on:
the torch path's math, one rounding per fused op) in the model dtype. Fast: the same DiT after
``precision.apply_fast_mode(dit, fast)``. Both sample from the same text states, noise and
schedule; per request, PSNR and SSIM (``quality.py``) of the fast video against the exact one.

The stages are ``pipeline.generate``'s, with each model loaded once for all requests: the text
encoder encodes every request, the DiT samples every request exact, is switched to the fast
mode in place and samples them again, and the VAE decodes each pair, which is scored and dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from wanscope.wan import quality
from wanscope.wan.pipeline import (
    Components,
    Request,
    encode_prompts,
    release,
    sample,
    to_frames,
)
from wanscope.wan.precision import FastConfig, apply_fast_mode

# progress hook: (mode "exact" or "fast", request index, step index) -> None
Progress = Callable[[str, int, int], None]


@dataclass
class PromptScore:
    """One request's fast video against its exact one (frames [F, H, W, 3] uint8, kept only
    when asked)."""

    prompt: str
    mse: float  # over all values on [0, 1]
    psnr_db: float  # inf for identical videos
    ssim: float
    exact_frames: torch.Tensor | None = None
    fast_frames: torch.Tensor | None = None


@dataclass
class Comparison:
    """Per-request scores and their summary: PSNR of the MSE pooled over all requests (they
    share one size), SSIM averaged over requests, and the worst request's of each."""

    scores: list[PromptScore]

    @property
    def mse(self) -> float:
        return sum(s.mse for s in self.scores) / len(self.scores)

    @property
    def psnr_db(self) -> float:
        return quality.psnr_from_mse(self.mse)

    @property
    def ssim(self) -> float:
        return sum(s.ssim for s in self.scores) / len(self.scores)

    @property
    def worst_psnr_db(self) -> float:
        return min(s.psnr_db for s in self.scores)

    @property
    def worst_ssim(self) -> float:
        return min(s.ssim for s in self.scores)


def compare_modes(
    parts: Components,
    requests: list[Request],
    fast: FastConfig,
    progress: Progress | None = None,
    keep_frames: bool = False,
) -> Comparison:
    """Generate every request exact and fast, and score fast against exact.

    Args:
        parts: the model loaders (checkpoint or random weights, device, dtype).
        requests: one or more requests of one size (``Request.validate`` is called here).
        fast: the fast mode's configuration.
        progress: called after each denoising step.
        keep_frames: keep both videos in each ``PromptScore``.

    Raises:
        UsageError: a bad request, requests of different sizes, or a fast-mode configuration
            that does not fit the model (``apply_fast_mode``).
        InputError: an unusable checkpoint.
    """
    from wanscope.errors import UsageError
    from wanscope.wan.vae import decode

    config = parts.config
    for req in requests:
        req.validate(config.vae.stride, config.dit.patch_size)
    if len({(r.height, r.width, r.frames) for r in requests}) != 1:
        raise UsageError("compare-modes requests must share one size and frame count")

    encoder = parts.text_encoder()
    texts = [encode_prompts(parts, req, encoder=encoder) for req in requests]
    del encoder
    release()

    dit = replace(parts, kernels="triton").dit()
    latents: dict[str, list[torch.Tensor]] = {"exact": [], "fast": []}
    for mode in ("exact", "fast"):
        if mode == "fast" and dit.block_stream is not None:  # packed blocks: load it again, fast
            del dit
            release()
            dit = replace(parts, kernels="triton", fast=fast).dit()
        elif mode == "fast":
            apply_fast_mode(dit, fast)
        for i, (req, (cond, uncond)) in enumerate(zip(requests, texts)):
            on_step = None if progress is None else (lambda step, _lat, m=mode, i=i: progress(m, i, step))
            latents[mode].append(sample(dit, req, cond, uncond, config, parts.device, on_step).cpu())
    del dit, texts
    release()

    vae = parts.vae()
    scores = []
    for req, exact, fast_latents in zip(requests, latents["exact"], latents["fast"]):
        a = to_frames(decode(vae, exact.to(parts.device), config.vae, parts.plan))
        b = to_frames(decode(vae, fast_latents.to(parts.device), config.vae, parts.plan))
        err = quality.mse(b, a)
        scores.append(
            PromptScore(
                req.prompt,
                err,
                quality.psnr_from_mse(err),
                quality.ssim(b, a),
                a if keep_frames else None,
                b if keep_frames else None,
            )
        )
    del vae
    release()
    return Comparison(scores)


def as_json(comparison: Comparison) -> dict:
    """``scores`` and ``overall`` with JSON-safe numbers: an infinite PSNR (identical videos)
    is null, with ``identical`` true."""

    def db(x: float) -> float | None:
        return None if math.isinf(x) else round(x, 4)

    return {
        "prompts": [
            {
                "prompt": s.prompt,
                "psnr_db": db(s.psnr_db),
                "ssim": round(s.ssim, 6),
                "mse": s.mse,
                "identical": s.mse == 0,
            }
            for s in comparison.scores
        ],
        "overall": {
            "psnr_db": db(comparison.psnr_db),
            "ssim": round(comparison.ssim, 6),
            "mse": comparison.mse,
            "worst_psnr_db": db(comparison.worst_psnr_db),
            "worst_ssim": round(comparison.worst_ssim, 6),
        },
    }
