"""The Wan2.1 VAE decoder: diffusers' ``AutoencoderKLWan``, from either checkpoint layout.

Official layout: ``Wan2.1_VAE.pth`` (a state dict of the official ``vae2_1.py`` ``WanVAE_``),
renamed with diffusers' own converter; diffusers layout: the ``vae/`` folder. Latents are
un-normalized with the per-channel statistics before decoding, ``z = latents * std + mean``
(official ``vae2_1.py`` ``decode``: ``z / scale[1] + scale[0]`` with ``scale = [mean, 1/std]``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from wanscope.errors import InputError
from wanscope.wan.config import VAEConfig
from wanscope.wan.weights import assign_state_dict, read_pth


def _build(cfg: VAEConfig):
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(
        base_dim=cfg.base_dim,
        z_dim=cfg.z_dim,
        dim_mult=list(cfg.dim_mult),
        num_res_blocks=cfg.num_res_blocks,
        temperal_downsample=list(cfg.temporal_downsample),
        latents_mean=list(cfg.latents_mean),
        latents_std=list(cfg.latents_std),
    )


def load_vae(path: Path | None, cfg: VAEConfig, dtype: torch.dtype, device) -> torch.nn.Module:
    """The VAE from an official ``.pth``, a diffusers folder, or random weights (None).

    Raises:
        InputError: unreadable file, missing/unexpected keys or wrong shapes.
    """
    from diffusers import AutoencoderKLWan

    if path is not None and Path(path).is_dir():
        try:
            vae = AutoencoderKLWan.from_pretrained(str(path), torch_dtype=dtype, local_files_only=True)
        except (OSError, ValueError, RuntimeError) as e:
            raise InputError(path, f"cannot load the VAE ({e.__class__.__name__}: {e})") from None
        return vae.to(device).eval().requires_grad_(False)
    if path is None:
        with torch.device(device):
            vae = _build(cfg)
        # nn.Module.to, not diffusers' ModelMixin.to: that one logs "There are modules ... that
        # should be kept in float32: []" on every dtype cast, even for a model that keeps none
        # (AutoencoderKLWan._keep_in_fp32_modules is None; diffusers 0.42.1), and it landed in
        # the middle of the progress bar.
        return torch.nn.Module.to(vae, dtype).eval().requires_grad_(False)
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    state = read_pth(Path(path))
    with torch.device("meta"):
        vae = _build(cfg)
    assign_state_dict(vae, convert_wan_vae_to_diffusers(state), Path(path), device, lambda n, p: dtype)
    return vae.eval().requires_grad_(False)


def channels_last(vae: torch.nn.Module) -> torch.nn.Module:
    """The 3-D convolutions' weights in channels-last order (``torch.channels_last_3d``), in place:
    cuDNN then runs the decode in NDHWC (its speed and difference against the default layout:
    ``benchmarks/vae_decode.py``). Returns ``vae``."""
    for m in vae.modules():
        if isinstance(m, torch.nn.Conv3d):
            m.weight.data = m.weight.data.contiguous(memory_format=torch.channels_last_3d)
    return vae


@torch.no_grad()
def decode(vae: torch.nn.Module, latents: torch.Tensor, cfg: VAEConfig) -> torch.Tensor:
    """Normalized DiT latents -> video.

    Args:
        latents: [B, z_dim, F, H, W], any float dtype.

    Returns:
        [B, 3, 4*(F-1)+1, 8*H, 8*W] fp32 in [-1, 1].
    """
    dtype = next(vae.parameters()).dtype
    mean = torch.tensor(cfg.latents_mean, device=latents.device).view(1, -1, 1, 1, 1)
    std = torch.tensor(cfg.latents_std, device=latents.device).view(1, -1, 1, 1, 1)
    z = (latents.float() * std + mean).to(dtype)
    return vae.decode(z, return_dict=False)[0].float().clamp(-1, 1)
