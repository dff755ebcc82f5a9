"""wanscope::causal_norm_silu (kernels/causal_norm_silu.py) against a float64 formula: the zeros
in front, the kept frames copied as they are, the RMS norm and SiLU of the new frames; channels-
last inputs (the Triton kernel), a spatial crop of one (as the tiled decode passes), and a
default-layout input (the torch reference); widths below, at and above a power of two."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_checks import DEVICE, assert_close_to_f64

from wanscope.kernels.causal_norm_silu import causal_norm_silu, reference_norm_silu

CL = torch.channels_last_3d


def _formula(x, gamma):
    x, c = x.double(), x.shape[1]
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12) * c**0.5 * gamma.double().view(-1, 1, 1, 1)


def _silu(y):
    return y * torch.sigmoid(y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("c", "t", "kept"), [(3, 1, 0), (96, 1, 1), (130, 2, 2), (300, 3, 2)])
def test_channels_last_input_through_the_kernel(dtype, c, t, kept):
    g = torch.Generator().manual_seed(c + t)
    x = (3 * torch.randn(2, c, t, 5, 7, generator=g)).to(dtype).to(DEVICE).contiguous(memory_format=CL)
    gamma = (1 + 0.3 * torch.randn(c, 1, 1, 1, generator=g)).to(dtype).to(DEVICE)
    before = torch.randn(2, c, kept, 5, 7, generator=g).to(dtype).to(DEVICE).contiguous(memory_format=CL)
    out = causal_norm_silu(x, before if kept else None, gamma, 2)
    assert out.shape == (2, c, 2 + t, 5, 7) and out.dtype == dtype
    assert out.is_contiguous(memory_format=CL)
    assert torch.equal(out[:, :, : 2 - kept], torch.zeros_like(out[:, :, : 2 - kept]))
    assert torch.equal(out[:, :, 2 - kept : 2], before)
    ref = _silu(_formula(x, gamma))
    assert_close_to_f64(out[:, :, 2:], ref, reference_norm_silu(x, gamma, 1e-12), name=f"C={c} T={t}")


def test_a_spatial_crop_reads_through_its_strides():
    g = torch.Generator().manual_seed(5)
    whole = torch.randn(1, 40, 2, 9, 11, generator=g).to(DEVICE).contiguous(memory_format=CL)
    gamma = torch.rand(40, generator=g).to(DEVICE) + 0.5
    crop = whole[:, :, :, 2:7, 3:10]  # C stride 1, rows of the whole frame's width
    out = causal_norm_silu(crop, None, gamma, 1)
    assert_close_to_f64(out[:, :, 1:], _silu(_formula(crop, gamma)), None, name="crop")
    assert torch.equal(out[:, :, :1], torch.zeros_like(out[:, :, :1]))


def test_default_layout_and_no_norm_run_the_same_formula():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(1, 12, 2, 4, 5, generator=g, dtype=torch.float64)  # contiguous: the reference
    gamma = torch.rand(12, 1, 1, 1, generator=g, dtype=torch.float64)
    before = torch.randn(1, 12, 1, 4, 5, generator=g, dtype=torch.float64)
    out = causal_norm_silu(x, before, gamma, 2)
    assert out.is_contiguous()
    torch.testing.assert_close(out[:, :, 2:], _silu(_formula(x, gamma)), rtol=1e-12, atol=1e-12)
    plain = causal_norm_silu(x, before, None, 2)  # no norm: the frames copied as they are
    assert torch.equal(plain, torch.cat([torch.zeros_like(before), before, x], dim=2))


def test_history_that_does_not_fit_is_refused():
    x = torch.randn(1, 4, 1, 3, 3)
    with pytest.raises(ValueError, match="does not fit"):
        causal_norm_silu(x, torch.randn(1, 4, 3, 3, 3), None, 2)  # longer than front
    with pytest.raises(ValueError, match="does not fit"):
        causal_norm_silu(x, torch.randn(1, 5, 1, 3, 3), None, 2)  # another width
    with pytest.raises(ValueError, match=r"\[B, C, T, H, W\]"):
        causal_norm_silu(x[0], None, None, 2)
