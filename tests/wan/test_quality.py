"""PSNR and SSIM (wan/quality.py) against independent computations: closed forms, a direct
per-window SSIM, and scikit-image's values for the same video (recorded, see below)."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from wanscope.errors import UsageError
from wanscope.wan import quality


def _video(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two [2, 24, 30, 3] uint8 videos: color gradients, and the same plus noise in [-12, 12]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:24, 0:30]
    base = np.stack([(xx * 8) % 256, (yy * 10) % 256, ((xx + yy) * 5) % 256], -1)
    a = np.stack([base, base[::-1]]).astype(np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-12, 13, a.shape), 0, 255).astype(np.uint8)
    return a, b


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def test_identical_videos():
    a, _ = _video()
    assert quality.psnr(_t(a), _t(a)) == math.inf and quality.mse(_t(a), _t(a)) == 0.0
    assert quality.ssim(_t(a), _t(a)) == 1.0  # exactly: numerator and denominator are the same sums


def test_psnr_of_a_known_perturbation():
    """Half of the values off by 10 levels: MSE = (10/255)^2 / 2."""
    a = np.full((3, 16, 16, 3), 100, dtype=np.uint8)
    b = a.copy()
    b[:, :8] += 10
    expected = 20 * math.log10(255 / 10) + 10 * math.log10(2)
    assert quality.psnr(_t(b), _t(a)) == pytest.approx(expected, abs=1e-12)
    assert quality.mse(_t(b), _t(a)) == pytest.approx((10 / 255) ** 2 / 2, rel=1e-15)


@pytest.mark.parametrize("p, q", [(100, 100), (100, 110), (0, 255), (30, 200)])
def test_ssim_of_flat_frames_is_the_luminance_term(p, q):
    """Constant frames: every variance and covariance is 0, so SSIM = (2pq + C1) / (p^2 + q^2 + C1)."""
    a = np.full((2, 12, 14, 3), p, dtype=np.uint8)
    b = np.full((2, 12, 14, 3), q, dtype=np.uint8)
    x, y, c1 = p / 255, q / 255, 0.01**2
    assert quality.ssim(_t(a), _t(b)) == pytest.approx((2 * x * y + c1) / (x * x + y * y + c1), abs=1e-12)


def _ssim_direct(a: np.ndarray, b: np.ndarray) -> float:
    """The Wang et al. formula window by window (numpy, no convolution): weighted means,
    variances and covariance over each 11x11 window inside the frame."""
    g = np.exp(-((np.arange(11) - 5.0) ** 2) / (2 * 1.5**2))
    w = np.outer(g, g) / np.outer(g, g).sum()
    c1, c2 = 0.01**2, 0.03**2
    values = []
    for f in range(a.shape[0]):
        for ch in range(3):
            x = np.lib.stride_tricks.sliding_window_view(a[f, :, :, ch] / 255.0, (11, 11))
            y = np.lib.stride_tricks.sliding_window_view(b[f, :, :, ch] / 255.0, (11, 11))
            mx, my = (x * w).sum((-1, -2)), (y * w).sum((-1, -2))
            vx = (((x - mx[..., None, None]) ** 2) * w).sum((-1, -2))
            vy = (((y - my[..., None, None]) ** 2) * w).sum((-1, -2))
            cov = ((x - mx[..., None, None]) * (y - my[..., None, None]) * w).sum((-1, -2))
            s = (2 * mx * my + c1) * (2 * cov + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
            values.append(s)
    return float(np.mean(values))


def test_ssim_matches_a_direct_window_computation():
    a, b = _video()
    assert quality.ssim(_t(b), _t(a)) == pytest.approx(_ssim_direct(b, a), abs=1e-12)
    assert 0.5 < quality.ssim(_t(b), _t(a)) < 0.99


def test_matches_scikit_image():
    """Recorded from scikit-image 0.26.0 (not a dependency) on ``_video()``:
    mean over frames of ``structural_similarity(a/255, b/255, gaussian_weights=True, sigma=1.5,
    use_sample_covariance=False, data_range=1.0, channel_axis=-1)``, and
    ``peak_signal_noise_ratio(a, b, data_range=255)``."""
    a, b = _video()
    assert quality.ssim(_t(b), _t(a)) == pytest.approx(0.8776884080721588, abs=1e-12)
    assert quality.psnr(_t(b), _t(a)) == pytest.approx(30.963043885256777, abs=1e-9)


def test_bad_shapes():
    a = torch.zeros(2, 16, 16, 3, dtype=torch.uint8)
    with pytest.raises(UsageError, match="one shape"):
        quality.ssim(a, a[:1])
    with pytest.raises(UsageError, match="at least 11x11"):
        quality.ssim(a[:, :10], a[:, :10])
