"""The Wan2.1 VAE decode, with both checkpoint layouts (``vae_decoder.VAEDecoder``).

Official layout: ``Wan2.1_VAE.pth`` (a state dict of the official ``vae2_1.py`` ``WanVAE_``),
renamed with ``decoder_key``. Diffusers layout: the ``vae/`` folder (``AutoencoderKLWan``'s
``config.json`` and ``diffusion_pytorch_model.safetensors``), whose names are ours. Either way
the encoder's tensors are left unread: the engine only decodes. Latents are un-normalized with
the per-channel statistics before decoding, ``z = latents * std + mean`` (official ``vae2_1.py``
``decode``: ``z / scale[1] + scale[0]`` with ``scale = [mean, 1/std]``).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import torch

from wanscope.errors import InputError, UsageError
from wanscope.wan.config import VAEConfig
from wanscope.wan.meta import materialize, meta_device
from wanscope.wan.vae_decoder import VAEDecoder
from wanscope.wan.weights import assign_state_dict, read_json, read_pth, read_safetensors, safetensors_files

# official WanVAE_ name prefix -> ours (diffusers'); the encoder's (encoder.*, conv1.*) are dropped
_PREFIXES = {
    "conv2.": "post_quant_conv.",
    "decoder.conv1.": "decoder.conv_in.",
    "decoder.middle.0.": "decoder.mid_block.resnets.0.",
    "decoder.middle.1.": "decoder.mid_block.attentions.0.",
    "decoder.middle.2.": "decoder.mid_block.resnets.1.",
    "decoder.head.0.": "decoder.norm_out.",
    "decoder.head.2.": "decoder.conv_out.",
}
# inside a residual block: the official nn.Sequential's indices (norm, SiLU, conv, norm, SiLU,
# dropout, conv) -> ours
_RESIDUAL = {
    "residual.0.": "norm1.",
    "residual.2.": "conv1.",
    "residual.3.": "norm2.",
    "residual.6.": "conv2.",
    "shortcut.": "conv_shortcut.",
}
_ENCODER = ("encoder.", "conv1.")


def _swap_prefix(name: str, table: dict[str, str]) -> str:
    for old, new in table.items():
        if name.startswith(old):
            return new + name[len(old) :]
    return name


def decoder_key(official_key: str, num_res_blocks: int) -> str:
    """Our (diffusers') name of an official ``WanVAE_`` decoder parameter. The official
    ``decoder.upsamples`` is one flat list: per level ``num_res_blocks + 1`` residual blocks and
    (but the last level) the upsampler; ours nests them, ``decoder.up_blocks.L.resnets.M`` and
    ``decoder.up_blocks.L.upsamplers.0``. A name of neither layout is returned as it is."""
    m = re.match(r"decoder\.upsamples\.(\d+)\.", official_key)
    if m:
        level, index = divmod(int(m.group(1)), num_res_blocks + 2)
        rest = official_key[m.end() :]
        if index <= num_res_blocks:
            return f"decoder.up_blocks.{level}.resnets.{index}.{_swap_prefix(rest, _RESIDUAL)}"
        return f"decoder.up_blocks.{level}.upsamplers.0.{rest}"
    name = _swap_prefix(official_key, _PREFIXES)
    m = re.match(r"decoder\.mid_block\.resnets\.\d\.", name)
    return name[: m.end()] + _swap_prefix(name[m.end() :], _RESIDUAL) if m else name


# diffusers AutoencoderKLWan config.json key -> VAEConfig field: required
_SIZE_KEYS = {
    "base_dim": "base_dim",
    "z_dim": "z_dim",
    "dim_mult": "dim_mult",
    "num_res_blocks": "num_res_blocks",
    "temperal_downsample": "temporal_downsample",
}
# optional keys whose every other value is a different VAE (Wan2.2's is residual with patches)
_WAN21_ONLY = {"is_residual": False, "attn_scales": [], "in_channels": 3, "out_channels": 3, "patch_size": None}


def vae_config_from_json(path: Path, preset: VAEConfig) -> VAEConfig:
    """The VAE's config from a diffusers ``AutoencoderKLWan`` ``config.json``: its sizes, which
    must give the ``preset``'s latent channels (``z_dim``) and strides, with the ``preset``'s
    latent statistics (a file that states them must agree, to float32 precision).

    Raises:
        InputError: unreadable, a size missing or out of range, not a Wan2.1 VAE (``is_residual``,
            ``attn_scales``, a ``decoder_base_dim`` other than ``base_dim``, ...), or a z_dim,
            strides or statistics other than the preset's.
    """
    raw = read_json(path)
    missing = [key for key in _SIZE_KEYS if key not in raw]
    if missing:
        raise InputError(path, f"config lacks {', '.join(missing)}")
    for key, value in _WAN21_ONLY.items():
        if key in raw and raw[key] != value:
            raise InputError(path, f"{key} {raw[key]!r}: not a Wan2.1 VAE (which has {value!r})")
    if raw.get("decoder_base_dim") not in (None, raw["base_dim"]):
        raise InputError(path, f"decoder_base_dim {raw['decoder_base_dim']!r}: not a Wan2.1 VAE (whose is base_dim)")
    if raw["z_dim"] != preset.z_dim:
        raise InputError(path, f"z_dim {raw['z_dim']!r}: the latents have {preset.z_dim} channels")
    sizes = {field: tuple(raw[k]) if isinstance(raw[k], list) else raw[k] for k, field in _SIZE_KEYS.items()}
    try:
        cfg = replace(preset, **sizes)
    except UsageError as e:
        raise InputError(path, str(e)) from None
    if cfg.stride != preset.stride:
        raise InputError(
            path, f"dim_mult and temperal_downsample give strides {cfg.stride}, the latents need {preset.stride}"
        )
    for key in ("latents_mean", "latents_std"):
        ours = getattr(preset, key)
        theirs = raw.get(key, ours)
        if not (
            isinstance(theirs, list | tuple)
            and len(theirs) == len(ours)
            and all(isinstance(t, int | float) and math.isclose(t, o, rel_tol=1e-6) for t, o in zip(theirs, ours))
        ):
            raise InputError(path, f"{key} differs from the preset's, with which the engine un-normalizes")
    return cfg


def load_vae(path: Path | None, cfg: VAEConfig, dtype: torch.dtype, device) -> VAEDecoder:
    """The VAE decoder (``vae_decoder.VAEDecoder``) from an official ``.pth``, a diffusers
    folder (its ``config.json`` gives the sizes: ``vae_config_from_json``), or random (None:
    PyTorch's default convolution initialization, ``VAEDecoder.init_weights``), in ``dtype`` on
    ``device``, eval, without gradients. Built on the meta device, so no copy in another dtype
    is made.

    Raises:
        InputError: unreadable file, a bad config, missing/unexpected keys or wrong shapes.
    """
    if path is not None and Path(path).is_dir():
        return _load_folder(Path(path), cfg, dtype, device)
    with meta_device():
        model = VAEDecoder(cfg)
    if path is None:
        model = materialize(model.to(dtype), device)
        model.init_weights()
        return model.eval().requires_grad_(False)
    state = read_pth(Path(path))
    tensors = {decoder_key(k, cfg.num_res_blocks): v for k, v in state.items() if not k.startswith(_ENCODER)}
    assign_state_dict(model, tensors, Path(path), device, dtype_of=lambda name, p: dtype)
    return model.eval().requires_grad_(False)


def _load_folder(folder: Path, preset: VAEConfig, dtype: torch.dtype, device) -> VAEDecoder:
    """A diffusers ``AutoencoderKLWan`` folder, memory-mapped: only the decoder's tensors are read
    (``encoder.*`` and ``quant_conv.*`` are skipped).

    Raises:
        InputError: as ``vae_config_from_json``, ``safetensors_files`` and ``assign_state_dict``
            (naming the weights file, or the folder for shards); levels or residual blocks per
            level other than the config's.
    """
    cfg = vae_config_from_json(folder / "config.json", preset)
    files = safetensors_files(folder, "diffusion_pytorch_model")
    source = files[0] if len(files) == 1 else folder
    tensors = {k: v for k, v in read_safetensors(files).items() if not k.startswith(("encoder.", "quant_conv."))}
    # the counts from the names before anything is built (a config can say anything)
    blocks = {
        tuple(map(int, m.groups()))
        for k in tensors
        if (m := re.match(r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.", k))
    }
    levels = {level for level, _ in blocks}
    per_level = {index for level, index in blocks if level == 0}
    if len(levels) != len(cfg.dim_mult) or len(per_level) != cfg.num_res_blocks + 1:
        raise InputError(
            source,
            f"config.json says {len(cfg.dim_mult)} levels (dim_mult) of {cfg.num_res_blocks + 1} residual blocks "
            f"(num_res_blocks + 1), the weights hold {len(levels)} of {len(per_level)}",
        )
    with meta_device():
        model = VAEDecoder(cfg)
    assign_state_dict(model, tensors, source, device, dtype_of=lambda name, p: dtype)
    return model.eval().requires_grad_(False)


def channels_last(vae: torch.nn.Module) -> torch.nn.Module:
    """The 3-D convolutions' weights in channels-last order (``torch.channels_last_3d``), in place:
    cuDNN then runs the decode in NDHWC (its speed and difference against the default layout:
    ``benchmarks/vae_decode.py``). Returns ``vae``."""
    for m in vae.modules():
        if isinstance(m, torch.nn.Conv3d):
            m.weight.data = m.weight.data.contiguous(memory_format=torch.channels_last_3d)
    return vae


@torch.no_grad()
def decode(vae: VAEDecoder, latents: torch.Tensor, cfg: VAEConfig, plan=None) -> torch.Tensor:
    """Normalized DiT latents -> video.

    Args:
        latents: [B, z_dim, F, H, W], any float dtype.
        plan: the run's ``memory_plan.MemoryPlan``, whose ``vae`` placement says how the
            decoder runs (all frames, frame by frame or tiled: ``VAEDecoder.forward``); None:
            frame by frame, untiled.

    Returns:
        [B, 3, 4*(F-1)+1, 8*H, 8*W] fp32 in [-1, 1].
    """
    dtype = next(vae.parameters()).dtype
    mean = torch.tensor(cfg.latents_mean, device=latents.device).view(1, -1, 1, 1, 1)
    std = torch.tensor(cfg.latents_std, device=latents.device).view(1, -1, 1, 1, 1)
    z = (latents.float() * std + mean).to(dtype)
    per_frame = plan is None or plan.vae != "all_frames"
    tiles = (1, 1) if plan is None else plan.vae_tiles
    return vae(z, per_frame, tiles).float().clamp_(-1, 1)
