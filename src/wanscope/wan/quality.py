"""Full-reference video quality: PSNR and SSIM of one video against another.

Both take videos as [F, H, W, 3] uint8 (what the pipeline writes) and work on RGB in [0, 1]
(value / 255), in float64 on the CPU, one frame at a time (bounded memory at 81 frames of 832x480).

* PSNR = 10 log10(1 / MSE), the mean squared error over every value of every frame (peak 1);
  infinite for identical videos. ``mse`` is returned too, so that several videos of one size
  can be pooled (``psnr_from_mse``).
* SSIM: Wang, Bovik, Sheikh and Simoncelli, "Image quality assessment: from error visibility to
  structural similarity", IEEE Trans. Image Processing 13(4), 2004, with the paper's constants:
  an 11x11 Gaussian window of sigma 1.5 (normalized), K1 = 0.01, K2 = 0.03, dynamic range L = 1,
  C1 = (K1 L)^2, C2 = (K2 L)^2::

      SSIM(x, y) = (2 mu_x mu_y + C1)(2 sigma_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(sigma_x^2 + sigma_y^2 + C2))

  with the local means, variances and covariance weighted by the window (not the sample
  covariance), evaluated where the window fits inside the frame (as the authors' MATLAB
  ``ssim_index``'s 'valid' filtering). Each color channel is scored on its own; a video's SSIM
  is the mean over channels, windows and frames (scikit-image's ``structural_similarity`` with
  ``gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1`` per channel
  gives the same per-frame value). Identical videos score exactly 1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from wanscope.errors import UsageError

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
SSIM_K1, SSIM_K2 = 0.01, 0.03


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape != b.shape or a.ndim != 4 or a.shape[-1] != 3:
        raise UsageError(f"videos must be two [F, H, W, 3] of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")


def _frame(video: torch.Tensor, i: int) -> torch.Tensor:
    """Frame ``i`` as [3, H, W] float64 in [0, 1]."""
    return video[i].permute(2, 0, 1).to(torch.float64) / 255.0


def mse(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean squared error over all values of two [F, H, W, 3] uint8 videos, on [0, 1]."""
    _check(a, b)
    total = sum(((_frame(a, i) - _frame(b, i)) ** 2).sum().item() for i in range(a.shape[0]))
    return total / a.numel()


def psnr_from_mse(err: float) -> float:
    """10 log10(1 / err) in dB for a peak of 1; ``inf`` where ``err`` is 0."""
    return math.inf if err == 0 else 10.0 * math.log10(1.0 / err)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR in dB of two [F, H, W, 3] uint8 videos (peak 1 on [0, 1]); ``inf`` if identical."""
    return psnr_from_mse(mse(a, b))


def _gaussian_window() -> torch.Tensor:
    x = torch.arange(SSIM_WINDOW, dtype=torch.float64) - (SSIM_WINDOW - 1) / 2
    g = torch.exp(-(x**2) / (2 * SSIM_SIGMA**2))
    return g / g.sum()  # [11]; the 2-D window is its outer product


def _blur(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Separable 'valid' Gaussian filter of [C, H, W] -> [C, H - 10, W - 10]."""
    c = x.shape[0]
    x = F.conv2d(x[None], g.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
    return F.conv2d(x, g.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)[0]


def ssim_map(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-window SSIM of two [C, H, W] float images on [0, 1]: [C, H - 10, W - 10] float64.

    Raises:
        UsageError: H or W below the 11-pixel window.
    """
    if min(x.shape[-2:]) < SSIM_WINDOW:
        raise UsageError(f"SSIM needs frames of at least {SSIM_WINDOW}x{SSIM_WINDOW} pixels, got {tuple(x.shape[-2:])}")
    g = _gaussian_window()
    x, y = x.to(torch.float64), y.to(torch.float64)
    mu_x, mu_y = _blur(x, g), _blur(y, g)
    var_x = _blur(x * x, g) - mu_x * mu_x
    var_y = _blur(y * y, g) - mu_y * mu_y
    cov = _blur(x * y, g) - mu_x * mu_y
    c1, c2 = SSIM_K1**2, SSIM_K2**2  # (K L)^2 with L = 1
    return ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))


def ssim(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean SSIM of two [F, H, W, 3] uint8 videos: over channels, windows and frames."""
    _check(a, b)
    return sum(ssim_map(_frame(a, i), _frame(b, i)).mean().item() for i in range(a.shape[0])) / a.shape[0]
