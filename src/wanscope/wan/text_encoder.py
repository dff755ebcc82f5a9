"""The text stage: prompts -> UMT5 states, with both checkpoint layouts (``umt5.UMT5Encoder``).

Official layout: ``models_t5_umt5-xxl-enc-bf16.pth`` (a state dict of the official ``t5.py``
``T5Encoder``), tokenizer in ``google/umt5-xxl/``. Diffusers layout: ``text_encoder/`` (a
transformers checkpoint) and ``tokenizer/``. Prompts are cleaned as the official
``HuggingfaceTokenizer(clean="whitespace")`` does, padded to ``text_len`` tokens, encoded with
the padding masked, and the padding positions of the output set to zero: the official code cuts
each sequence to its length and the DiT zero-pads it back (``model.py``), diffusers does the same.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import torch

from wanscope.errors import InputError, UsageError
from wanscope.wan.config import TextEncoderConfig
from wanscope.wan.meta import materialize, meta_device
from wanscope.wan.umt5 import UMT5Encoder
from wanscope.wan.weights import (
    assign_state_dict,
    read_json,
    read_pth,
    read_safetensors,
    read_shapes,
    safetensors_files,
)

# official t5.py T5Encoder key prefix <-> transformers UMT5EncoderModel key prefix (ours:
# umt5.py); {n} a block index, {p} one of q, k, v, o. Our table from both layouts; the official
# FFN is fc1(x) * gelu(gate(x)), transformers' wi_1(x) * gelu(wi_0(x)).
_KEYS = [
    ("token_embedding.", "shared."),
    ("blocks.{n}.norm1.", "encoder.block.{n}.layer.0.layer_norm."),
    ("blocks.{n}.attn.{p}.", "encoder.block.{n}.layer.0.SelfAttention.{p}."),
    ("blocks.{n}.pos_embedding.embedding.", "encoder.block.{n}.layer.0.SelfAttention.relative_attention_bias."),
    ("blocks.{n}.norm2.", "encoder.block.{n}.layer.1.layer_norm."),
    ("blocks.{n}.ffn.gate.0.", "encoder.block.{n}.layer.1.DenseReluDense.wi_0."),
    ("blocks.{n}.ffn.fc1.", "encoder.block.{n}.layer.1.DenseReluDense.wi_1."),
    ("blocks.{n}.ffn.fc2.", "encoder.block.{n}.layer.1.DenseReluDense.wo."),
    ("norm.", "encoder.final_layer_norm."),
]
_FIELDS = {"n": r"(?P<n>\d+)", "p": r"(?P<p>[qkvo])"}


def _pattern(template: str) -> re.Pattern:
    parts = re.split(r"\{(\w)\}", template)  # literal, field, literal, ...
    return re.compile("^" + "".join(re.escape(t) if i % 2 == 0 else _FIELDS[t] for i, t in enumerate(parts)))


_TO_HF = [(_pattern(o), h) for o, h in _KEYS]
_TO_OFFICIAL = [(_pattern(h), o) for o, h in _KEYS]


def _rename(key: str, rules) -> str:
    for pattern, template in rules:
        m = pattern.match(key)
        if m:
            return template.format(**m.groupdict()) + key[m.end() :]
    return key


def hf_key(official_key: str) -> str:
    """The transformers ``UMT5EncoderModel`` name of an official T5 encoder parameter."""
    return _rename(official_key, _TO_HF)


def official_t5_key(hf_name: str) -> str:
    """The official ``t5.py`` ``T5Encoder`` name of a transformers (and our) parameter: the
    inverse of ``hf_key``, for writing official-layout files."""
    return _rename(hf_name, _TO_OFFICIAL)


def clean_prompt(text: str) -> str:
    """The official "whitespace" cleaning: ftfy (when installed), HTML unescape twice, collapse
    whitespace (``wan/modules/tokenizers.py``)."""
    try:
        import ftfy

        text = ftfy.fix_text(text)
    except ImportError:
        pass
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


class ByteTokenizer:
    """Deterministic stand-in tokenizer for random-weight runs: UTF-8 bytes + 3, then EOS (1),
    padded with 0 (T5's pad/EOS ids). Not a real tokenizer: outputs made with it say so."""

    def __call__(self, texts: list[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.zeros(len(texts), length, dtype=torch.long)
        for row, text in enumerate(texts):
            tokens = [b + 3 for b in text.encode("utf-8")][: length - 1] + [1]
            ids[row, : len(tokens)] = torch.tensor(tokens)
        return ids, (ids != 0).long()


def _first_line(e: BaseException) -> str:
    """The first line of ``e``'s message (at most 120 characters), or its type without one."""
    lines = str(e).splitlines()
    return lines[0][:120] if lines else type(e).__name__


class CheckpointTokenizer:
    """The UMT5 tokenizer of a checkpoint folder (never fetched): its ``tokenizer.json`` read with
    the ``tokenizers`` library, or, in a folder without one (``spiece.model`` alone), through
    transformers' ``AutoTokenizer``. Either way: the special tokens added (UMT5's ``</s>``),
    truncated to ``length`` with them kept, padded with ``<pad>`` to ``length``, as transformers'
    ``tokenizer(..., padding="max_length", truncation=True, max_length=length)`` does.

    Raises:
        InputError: the folder has no loadable tokenizer.
    """

    def __init__(self, folder: Path):
        self.tokenizer = self.hf = None
        if (folder / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            try:
                self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as e:  # noqa: BLE001 (tokenizers raises a bare Exception)
                raise InputError(folder / "tokenizer.json", f"not a tokenizer ({_first_line(e)})") from None
            pad = self.tokenizer.token_to_id("<pad>")
            self.pad_id = 0 if pad is None else pad
            return
        from transformers import AutoTokenizer

        try:
            self.hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError, ImportError) as e:
            raise InputError(
                folder, f"no tokenizer.json, and no loadable tokenizer ({type(e).__name__}: {_first_line(e)})"
            ) from None

    @property
    def vocab_size(self) -> int:
        """Token ids run from 0 to this, exclusive."""
        return self.tokenizer.get_vocab_size() if self.tokenizer is not None else len(self.hf)

    def __call__(self, texts: list[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids int64 [B, length], mask int64 [B, length]: 1 for tokens, 0 for padding)."""
        if self.hf is not None:
            out = self.hf(
                texts,
                padding="max_length",
                truncation=True,
                max_length=length,
                add_special_tokens=True,
                return_tensors="pt",
            )
            return out.input_ids, out.attention_mask
        self.tokenizer.enable_truncation(max_length=length)
        self.tokenizer.enable_padding(length=length, pad_id=self.pad_id, pad_token="<pad>")
        encoded = self.tokenizer.encode_batch(texts, add_special_tokens=True)
        ids = torch.tensor([e.ids for e in encoded], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in encoded], dtype=torch.long)
        return ids, mask


# transformers UMT5 config.json key -> TextEncoderConfig field (the sizes first: required)
_CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "d_model": "dim",
    "d_ff": "ffn_dim",
    "num_heads": "num_heads",
    "d_kv": "head_dim",
    "num_layers": "num_layers",
    "relative_attention_num_buckets": "num_buckets",
    "relative_attention_max_distance": "max_distance",
    "layer_norm_epsilon": "eps",
}
_REQUIRED_KEYS = list(_CONFIG_KEYS)[:6]


def config_from_json(path: Path) -> TextEncoderConfig:
    """The encoder's config from a transformers UMT5 ``config.json``: the sizes are required, the
    relative-position settings and the norm's epsilon take ``TextEncoderConfig``'s defaults
    (transformers' too) when absent.

    Raises:
        InputError: unreadable, a size missing, a value out of range, or an FFN other than gated
            GELU.
    """
    raw = read_json(path)
    ffn = raw.get("feed_forward_proj", "gated-gelu")
    if ffn not in ("gated-gelu", "gated-gelu_new"):
        raise InputError(path, f"feed_forward_proj {ffn!r}: only UMT5's gated-gelu is supported")
    missing = [key for key in _REQUIRED_KEYS if key not in raw]
    if missing:
        raise InputError(path, f"config lacks {', '.join(missing)}")
    try:
        return TextEncoderConfig(**{field: raw[key] for key, field in _CONFIG_KEYS.items() if key in raw})
    except UsageError as e:
        raise InputError(path, str(e)) from None


def encoder_config(path: Path, preset: TextEncoderConfig) -> TextEncoderConfig:
    """The config of the encoder at ``path``: a transformers folder's ``config.json``; for the
    official ``.pth``, ``preset`` (its tensors are checked against it when they load).

    Raises:
        InputError: as ``config_from_json``.
    """
    return config_from_json(path / "config.json") if Path(path).is_dir() else preset


def transformers_config(cfg: TextEncoderConfig) -> dict:
    """The transformers ``UMT5Config`` fields (as ``config.json`` holds them) of ``cfg``: what a
    diffusers ``text_encoder/`` folder of this encoder says, for writing one."""
    out = {key: getattr(cfg, field) for key, field in _CONFIG_KEYS.items()}
    return out | {"model_type": "umt5", "feed_forward_proj": "gated-gelu", "dropout_rate": 0.0}


def load_umt5(path: Path | None, cfg: TextEncoderConfig, dtype: torch.dtype, device) -> UMT5Encoder:
    """The UMT5 encoder (``umt5.UMT5Encoder``), from an official ``.pth``, a transformers folder
    (its ``config.json`` gives the sizes), or random (None: transformers' initialization scheme,
    ``UMT5Encoder.init_weights``), in ``dtype`` on ``device``. Built on the meta device, so the
    peak is the model's size.

    Raises:
        InputError: unreadable file, missing/unexpected keys or wrong shapes.
    """
    if path is not None and Path(path).is_dir():
        return _load_folder(Path(path), dtype, device)
    with meta_device():
        model = UMT5Encoder(cfg)
    if path is None:
        model = materialize(model.to(dtype), device)
        model.init_weights()
        return model.eval().requires_grad_(False)
    state = {hf_key(k): v for k, v in read_pth(Path(path)).items()}
    assign_state_dict(model, state, Path(path), device, dtype_of=lambda name, p: dtype)
    return model.eval().requires_grad_(False)


# transformers saves the shared embedding under this name too (tied to ``shared.weight``)
_EMBEDDING_ALIAS = "encoder.embed_tokens.weight"


def _load_folder(folder: Path, dtype: torch.dtype, device) -> UMT5Encoder:
    """A transformers ``UMT5EncoderModel`` folder (``config.json``, ``model.safetensors`` or its
    shards), memory-mapped and assigned onto a meta-device model tensor by tensor: no copy of
    the whole model is staged in host memory. The embedding saved under a tied alias
    (``encoder.embed_tokens.weight``) loads as ``shared.weight``; saved under both names, the two
    must be equal.

    Raises:
        InputError: as ``config_from_json``, ``safetensors_files`` and ``assign_state_dict``; a
            block count other than the config's; the two embedding names holding different values.
    """
    cfg = config_from_json(folder / "config.json")
    files = safetensors_files(folder, "model")
    # the block count from the headers before anything is built (a config can say anything)
    blocks = {int(m.group(1)) for k in read_shapes(files) if (m := re.match(r"encoder\.block\.(\d+)\.", k))}
    if len(blocks) != cfg.num_layers:
        raise InputError(folder, f"config.json says num_layers {cfg.num_layers}, the weights hold {len(blocks)} blocks")
    with meta_device():
        model = UMT5Encoder(cfg)
    tensors = read_safetensors(files)
    if _EMBEDDING_ALIAS in tensors:
        alias = tensors.pop(_EMBEDDING_ALIAS)
        shared = tensors.setdefault("shared.weight", alias)
        if shared is not alias and not (shared.shape == alias.shape and torch.equal(shared, alias)):
            raise InputError(
                folder, f"shared.weight and {_EMBEDDING_ALIAS} differ: one embedding is tied to both names"
            )
    assign_state_dict(model, tensors, folder, device, dtype_of=lambda name, p: dtype)
    return model.eval().requires_grad_(False)


class TextEncoder:
    """Prompts -> UMT5 states ``[B, text_len, dim]`` with padding positions zeroed.

    Args:
        model: a ``UMT5Encoder``.
        tokenizer: ``CheckpointTokenizer`` or ``ByteTokenizer``.
        text_len: tokens per prompt (512 for Wan2.1).
    """

    def __init__(self, model: torch.nn.Module, tokenizer, text_len: int):
        self.model = model
        self.tokenizer = tokenizer
        self.text_len = text_len

    @torch.no_grad()
    def encode(self, prompts: list[str]) -> torch.Tensor:
        """[B, text_len, dim] in the model dtype, on the model device."""
        device = self.model.encoder.final_layer_norm.weight.device  # the embedding may be on the host
        ids, mask = self.tokenizer([clean_prompt(p) for p in prompts], self.text_len)
        ids, mask = ids.to(device), mask.to(device)
        states = self.model(ids, mask)
        return states * mask[..., None].to(states.dtype)
