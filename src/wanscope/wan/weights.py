"""Checkpoint layouts and DiT weight loading (official and diffusers layouts).

Layouts, as published:

* official (Wan-Video/Wan2.1): ``config.json`` (``WanModel``: ``dim``, ``num_heads``, ...) and
  ``diffusion_pytorch_model*.safetensors`` at the root, ``models_t5_umt5-xxl-enc-bf16.pth``,
  ``Wan2.1_VAE.pth``, tokenizer in ``google/umt5-xxl/``;
* diffusers (Wan-AI/Wan2.1-T2V-*-Diffusers): ``model_index.json`` and the folders
  ``transformer/`` (``WanTransformer3DModel``), ``text_encoder/``, ``tokenizer/``, ``vae/``.

Weights are read memory-mapped from safetensors (single file, or shards with an index) into a
model built on the meta device, so a checkpoint is never held twice in memory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from wanscope.errors import InputError, UsageError
from wanscope.wan.config import DiTConfig, check_positive_int
from wanscope.wan.dit import WanDiT, keeps_fp32
from wanscope.wan.meta import meta_device
from wanscope.wan.transfer import to_device

OFFICIAL_T5 = "models_t5_umt5-xxl-enc-bf16.pth"
OFFICIAL_VAE = "Wan2.1_VAE.pth"
OFFICIAL_TOKENIZER = "google/umt5-xxl"
_DIT_WEIGHTS = "diffusion_pytorch_model"

EXPECTED_FILES = (
    f"official: config.json, {_DIT_WEIGHTS}*.safetensors, {OFFICIAL_T5}, {OFFICIAL_VAE}, "
    f"{OFFICIAL_TOKENIZER}/; diffusers: model_index.json, transformer/, text_encoder/, tokenizer/, vae/"
)


@dataclass(frozen=True)
class CheckpointLayout:
    """Where each part of a checkpoint directory is.

    Attributes:
        kind: "official" or "diffusers".
        dit: folder with the DiT's config.json and safetensors.
        text_encoder: the official .pth file or the diffusers ``text_encoder/`` folder.
        tokenizer: folder with the UMT5 tokenizer files.
        vae: the official .pth file or the diffusers ``vae/`` folder.
    """

    kind: str
    dit: Path
    text_encoder: Path
    tokenizer: Path
    vae: Path


def detect_layout(root: str | Path) -> CheckpointLayout:
    """Recognize an official or diffusers Wan2.1 checkpoint directory.

    Raises:
        InputError: ``root`` is not a directory, or is neither layout (the message lists the
            files each layout needs).
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(root, "not a directory")
    if (root / "model_index.json").is_file() and (root / "transformer").is_dir():
        layout = CheckpointLayout(
            "diffusers", root / "transformer", root / "text_encoder", root / "tokenizer", root / "vae"
        )
    elif (root / "config.json").is_file() and any(root.glob(f"{_DIT_WEIGHTS}*.safetensors")):
        layout = CheckpointLayout("official", root, root / OFFICIAL_T5, root / OFFICIAL_TOKENIZER, root / OFFICIAL_VAE)
    else:
        raise InputError(root, f"not a Wan2.1 checkpoint; expected {EXPECTED_FILES}")
    missing = [p.name for p in (layout.text_encoder, layout.tokenizer, layout.vae) if not p.exists()]
    if missing:
        raise InputError(root, f"{layout.kind} checkpoint lacks {', '.join(missing)}")
    return layout


def read_json(path: Path) -> dict:
    """A JSON object from ``path``.

    Raises:
        InputError: missing, unreadable or not a JSON object.
    """
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(path, f"cannot read JSON ({e.__class__.__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise InputError(path, "not a JSON object")
    return obj


def _present(config: dict, fields: dict[str, str]) -> dict:
    """{DiTConfig field: value} for the checkpoint keys ``config`` has; an absent key leaves
    the field to DiTConfig's own default (every default lives in ``config.py``)."""
    out = {field: config[key] for key, field in fields.items() if key in config}
    if isinstance(out.get("patch_size"), list):
        out["patch_size"] = tuple(out["patch_size"])
    return out


def dit_config_from_json(path: Path) -> tuple[DiTConfig, str]:
    """The DiT config and layout ("official" or "diffusers") from a checkpoint's config.json.

    Raises:
        InputError: neither layout's keys, or an image-conditioned (I2V) model.
    """
    c = read_json(path)
    try:
        if "num_attention_heads" in c:
            if c.get("image_dim") or c.get("added_kv_proj_dim"):
                raise InputError(path, "image-to-video models are not supported (image_dim is set)")
            if c.get("qk_norm") not in ("rms_norm_across_heads", None):
                raise InputError(path, f"qk_norm {c['qk_norm']!r} unsupported")
            optional = _present(
                c,
                {
                    "freq_dim": "freq_dim",
                    "text_dim": "text_dim",
                    "patch_size": "patch_size",
                    "in_channels": "in_channels",
                    "eps": "eps",
                    "cross_attn_norm": "cross_attn_norm",
                    "rope_max_seq_len": "rope_max_len",
                },
            )
            if c.get("out_channels") or c.get("in_channels"):
                optional["out_channels"] = c.get("out_channels") or c.get("in_channels")
            for key in ("num_attention_heads", "attention_head_dim"):  # before they are multiplied
                check_positive_int(key, c[key])
            cfg = DiTConfig(
                dim=c["num_attention_heads"] * c["attention_head_dim"],
                num_layers=c["num_layers"],
                num_heads=c["num_attention_heads"],
                ffn_dim=c["ffn_dim"],
                qk_norm=c.get("qk_norm") is not None,
                **optional,
            )
            return cfg, "diffusers"
        if "num_heads" in c and "dim" in c:
            if c.get("model_type", "t2v") != "t2v":
                raise InputError(path, f"model_type {c['model_type']!r} unsupported (t2v only)")
            cfg = DiTConfig(
                dim=c["dim"],
                num_layers=c["num_layers"],
                num_heads=c["num_heads"],
                ffn_dim=c["ffn_dim"],
                **_present(
                    c,
                    {
                        "freq_dim": "freq_dim",
                        "text_len": "text_len",
                        "text_dim": "text_dim",
                        "patch_size": "patch_size",
                        "in_dim": "in_channels",
                        "out_dim": "out_channels",
                        "eps": "eps",
                        "qk_norm": "qk_norm",
                        "cross_attn_norm": "cross_attn_norm",
                    },
                ),
            )
            return cfg, "official"
    except KeyError as e:
        raise InputError(path, f"config lacks {e.args[0]!r}") from None
    except (UsageError, TypeError) as e:  # a value of the wrong type or range (DiTConfig's checks)
        raise InputError(path, str(e)) from None
    raise InputError(path, "neither an official WanModel nor a diffusers WanTransformer3DModel config")


# diffusers key -> official key, applied in order (derived from the two published layouts;
# diffusers names the cross-attention norm norm2 and the FFN norm norm3, official the reverse).
_DIFFUSERS_TO_OFFICIAL = [
    (r"^condition_embedder\.time_embedder\.linear_1\.", "time_embedding.0."),
    (r"^condition_embedder\.time_embedder\.linear_2\.", "time_embedding.2."),
    (r"^condition_embedder\.text_embedder\.linear_1\.", "text_embedding.0."),
    (r"^condition_embedder\.text_embedder\.linear_2\.", "text_embedding.2."),
    (r"^condition_embedder\.time_proj\.", "time_projection.1."),
    (r"^scale_shift_table$", "head.modulation"),
    (r"^proj_out\.", "head.head."),
    (r"^(blocks\.\d+)\.scale_shift_table$", r"\1.modulation"),
    (r"^(blocks\.\d+)\.attn1\.", r"\1.self_attn."),
    (r"^(blocks\.\d+)\.attn2\.", r"\1.cross_attn."),
    (r"\.to_q\.", ".q."),
    (r"\.to_k\.", ".k."),
    (r"\.to_v\.", ".v."),
    (r"\.to_out\.0\.", ".o."),
    (r"^(blocks\.\d+)\.norm2\.", r"\1.norm3."),
    (r"^(blocks\.\d+)\.ffn\.net\.0\.proj\.", r"\1.ffn.0."),
    (r"^(blocks\.\d+)\.ffn\.net\.2\.", r"\1.ffn.2."),
]
_DIFFUSERS_RULES = [(re.compile(p), r) for p, r in _DIFFUSERS_TO_OFFICIAL]


def official_key(diffusers_key: str) -> str:
    """The official-layout name of a diffusers ``WanTransformer3DModel`` parameter."""
    for pattern, repl in _DIFFUSERS_RULES:
        diffusers_key = pattern.sub(repl, diffusers_key)
    return diffusers_key


def safetensors_files(folder: Path, stem: str) -> list[Path]:
    """The safetensors files of ``stem`` in ``folder``: the shards listed by
    ``{stem}.safetensors.index.json`` if present, else ``{stem}.safetensors``.

    Raises:
        InputError: no weights file, or an index naming a missing shard.
    """
    index = folder / f"{stem}.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise InputError(index, "no weight_map")
        if not all(isinstance(name, str) for name in weight_map.values()):
            raise InputError(index, "weight_map values must be file names")
        files = [folder / name for name in sorted(set(weight_map.values()))]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise InputError(index, f"names missing shards: {', '.join(absent)}")
        return files
    single = folder / f"{stem}.safetensors"
    if single.is_file():
        return [single]
    raise InputError(folder, f"no {stem}.safetensors or {stem}.safetensors.index.json")


def read_safetensors(files: list[Path]) -> dict[str, torch.Tensor]:
    """All tensors of ``files``, memory-mapped on the CPU (not copied until used).

    Raises:
        InputError: a file that is not valid safetensors.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            tensors.update(load_file(f, device="cpu"))
        except (SafetensorError, OSError) as e:
            raise InputError(f, f"not a readable safetensors file ({e})") from None
    return tensors


def read_pth(path: Path) -> dict[str, torch.Tensor]:
    """A PyTorch state dict file (the official T5 and VAE ``.pth``), memory-mapped on the CPU,
    tensors only (``weights_only``).

    Raises:
        InputError: not a readable state dict.
    """
    try:
        return torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises several types for a bad file
        raise InputError(path, f"not a readable PyTorch state dict ({e.__class__.__name__})") from None


def _summarize(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def read_shapes(files: list[Path]) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from safetensors headers only (no data read).

    Raises:
        InputError: a file that is not valid safetensors.
    """
    from safetensors import SafetensorError, safe_open

    shapes = {}
    for f in files:
        try:
            with safe_open(f, framework="pt") as handle:
                for key in handle.keys():
                    shapes[key] = tuple(handle.get_slice(key).get_shape())
        except (SafetensorError, OSError) as e:
            raise InputError(f, f"not a readable safetensors file ({e})") from None
    return shapes


def check_keys_and_shapes(model: torch.nn.Module, shapes: dict[str, tuple[int, ...]], source: Path) -> None:
    """Raises InputError naming ``source`` on missing or unexpected keys (listed) or the first
    shape that differs from ``model``'s."""
    expected = dict(model.named_parameters())
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(set(shapes) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys: {_summarize(missing)}")
        if unexpected:
            parts.append(f"unexpected keys: {_summarize(unexpected)}")
        raise InputError(source, "; ".join(parts))
    for name, p in expected.items():
        if tuple(shapes[name]) != tuple(p.shape):
            raise InputError(source, f"{name} has shape {tuple(shapes[name])}, the config needs {tuple(p.shape)}")


def assign_state_dict(
    model: torch.nn.Module,
    tensors: dict[str, torch.Tensor],
    source: Path,
    device: torch.device | str,
    dtype_of=lambda name, p: p.dtype,
) -> None:
    """Load ``tensors`` into a meta-device ``model`` by assignment, exactly.

    Each tensor is cast to ``dtype_of(name, param)`` and moved to ``device`` (on CUDA through
    pinned staging, ``transfer.to_device``: the copies are queued on the device's current
    stream, and work on another stream must wait for it).

    Raises:
        InputError: missing or unexpected keys (listed), or a shape mismatch, naming ``source``.
    """
    check_keys_and_shapes(model, {k: tuple(v.shape) for k, v in tensors.items()}, source)
    expected = dict(model.named_parameters())
    names = list(expected)
    moved = to_device([tensors[n] for n in names], [dtype_of(n, expected[n]) for n in names], device)
    state = dict(zip(names, moved, strict=True))
    # tied parameters (one tensor under two names) get the same loaded tensor under each name
    canonical = {id(p): name for name, p in expected.items()}
    for name, p in model.named_parameters(remove_duplicate=False):
        state.setdefault(name, state[canonical[id(p)]])
    model.load_state_dict(state, strict=True, assign=True)


def _dit_source(path: str | Path, overrides: dict) -> tuple[Path, DiTConfig, str, list[Path]]:
    folder = Path(path)
    if (folder / "model_index.json").is_file() and (folder / "transformer").is_dir():
        folder = folder / "transformer"
    cfg, layout = dit_config_from_json(folder / "config.json")
    return folder, replace(cfg, **overrides), layout, safetensors_files(folder, _DIT_WEIGHTS)


def check_parts(layout: CheckpointLayout) -> None:
    """The text encoder's, tokenizer's and VAE's files read as what they must be (their JSON
    configs as JSON objects, their safetensors headers), from headers alone, before any model
    loads; the DiT has ``check_dit``. The official layout's ``.pth`` files are read when loaded.

    Raises:
        InputError: naming the file and the problem.
    """
    for folder in (layout.text_encoder, layout.tokenizer, layout.vae):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            read_json(path)
        weights = sorted(folder.glob("*.safetensors"))
        if weights:
            read_shapes(weights)


def check_dit(path: str | Path) -> DiTConfig:
    """Check a DiT checkpoint's config, keys and shapes from the safetensors headers alone
    (seconds, no weights read), so a bad checkpoint fails before any model runs.

    Raises:
        InputError: as ``load_dit``.
    """
    folder, cfg, layout, files = _dit_source(path, {})
    shapes = read_shapes(files)
    if layout == "diffusers":
        shapes = {official_key(k): v for k, v in shapes.items()}
    blocks = {int(m.group(1)) for k in shapes if (m := re.match(r"blocks\.(\d+)\.", k))}
    if len(blocks) != cfg.num_layers:  # before a model of num_layers blocks is built, even on meta
        raise InputError(
            folder, f"the config says {cfg.num_layers} blocks (num_layers), the weights hold {len(blocks)}"
        )
    with meta_device():
        check_keys_and_shapes(WanDiT(cfg), shapes, folder)
    return cfg


def load_dit(
    path: str | Path,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cpu",
    **config_overrides,
) -> WanDiT:
    """Build a ``WanDiT`` from a checkpoint, official or diffusers layout.

    Args:
        path: a folder with the DiT's ``config.json`` and safetensors (the official root, a
            diffusers ``transformer/`` folder), or a diffusers pipeline root.
        dtype: compute dtype; the fp32 parameters (``dit.keeps_fp32``) stay fp32.
        device: where the weights go.
        config_overrides: ``DiTConfig`` fields to change (e.g. ``fp32_residual=False``).

    Returns:
        The model in eval mode, without gradients.

    Raises:
        InputError: no config or weights, an unsupported config, missing or unexpected keys,
            or shapes that do not match the config.
    """
    folder, cfg, layout, files = _dit_source(path, config_overrides)
    tensors = read_safetensors(files)
    if layout == "diffusers":
        tensors = {official_key(k): v for k, v in tensors.items()}
    with meta_device():
        model = WanDiT(cfg)
    assign_state_dict(
        model,
        tensors,
        folder,
        device,
        dtype_of=lambda name, p: torch.float32 if keeps_fp32(name) else dtype,
    )
    return model.eval().requires_grad_(False)
