"""The UMT5 text encoder (transformers' ``UMT5EncoderModel``) with both checkpoint layouts.

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

from wanscope.errors import InputError
from wanscope.wan.config import TextEncoderConfig
from wanscope.wan.weights import assign_state_dict, read_json, read_pth, read_safetensors, safetensors_files

# official t5.py T5Encoder key -> transformers UMT5EncoderModel key (our table from both layouts;
# the official FFN is fc1(x) * gelu(gate(x)), transformers' is wi_1(x) * gelu(wi_0(x))).
_OFFICIAL_TO_HF = [
    (r"^token_embedding\.", "shared."),
    (r"^blocks\.(\d+)\.norm1\.", r"encoder.block.\1.layer.0.layer_norm."),
    (r"^blocks\.(\d+)\.attn\.([qkvo])\.", r"encoder.block.\1.layer.0.SelfAttention.\2."),
    (r"^blocks\.(\d+)\.pos_embedding\.embedding\.", r"encoder.block.\1.layer.0.SelfAttention.relative_attention_bias."),
    (r"^blocks\.(\d+)\.norm2\.", r"encoder.block.\1.layer.1.layer_norm."),
    (r"^blocks\.(\d+)\.ffn\.gate\.0\.", r"encoder.block.\1.layer.1.DenseReluDense.wi_0."),
    (r"^blocks\.(\d+)\.ffn\.fc1\.", r"encoder.block.\1.layer.1.DenseReluDense.wi_1."),
    (r"^blocks\.(\d+)\.ffn\.fc2\.", r"encoder.block.\1.layer.1.DenseReluDense.wo."),
    (r"^norm\.", "encoder.final_layer_norm."),
]
_RULES = [(re.compile(p), r) for p, r in _OFFICIAL_TO_HF]


def hf_key(official_key: str) -> str:
    """The transformers ``UMT5EncoderModel`` name of an official T5 encoder parameter."""
    for pattern, repl in _RULES:
        official_key = pattern.sub(repl, official_key)
    return official_key


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


class HFTokenizer:
    """The UMT5 tokenizer read from a checkpoint folder (never fetched).

    Raises:
        InputError: the folder has no loadable tokenizer.
    """

    def __init__(self, folder: Path):
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError) as e:
            raise InputError(folder, f"no loadable tokenizer ({e.__class__.__name__})") from None

    def __call__(self, texts: list[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.tokenizer(
            texts,
            padding="max_length",
            truncation=True,
            max_length=length,
            add_special_tokens=True,
            return_tensors="pt",
        )
        return out.input_ids, out.attention_mask


def umt5_config(cfg: TextEncoderConfig):
    """transformers ``UMT5Config`` for ``cfg`` (gated tanh-GELU FFN, as the official GELU)."""
    from transformers import UMT5Config

    return UMT5Config(
        vocab_size=cfg.vocab_size,
        d_model=cfg.dim,
        d_kv=cfg.head_dim,
        d_ff=cfg.ffn_dim,
        num_layers=cfg.num_layers,
        num_heads=cfg.num_heads,
        relative_attention_num_buckets=cfg.num_buckets,
        relative_attention_max_distance=cfg.max_distance,
        feed_forward_proj="gated-gelu",
        layer_norm_epsilon=cfg.eps,
        dropout_rate=0.0,
        tie_word_embeddings=False,
    )


def load_umt5(path: Path | None, cfg: TextEncoderConfig, dtype: torch.dtype, device) -> torch.nn.Module:
    """The UMT5 encoder, from an official ``.pth``, a transformers folder, or random (None:
    transformers' initialization, in ``dtype`` on ``device``).

    Raises:
        InputError: unreadable file, missing/unexpected keys or wrong shapes.
    """
    from transformers import UMT5EncoderModel

    if path is not None and Path(path).is_dir():
        return _load_folder(Path(path), dtype, device)
    if path is None:
        # built on the meta device and initialized in ``dtype`` on ``device`` (transformers' own
        # init scheme): the peak is the model's size, as a checkpoint's load is
        with torch.device("meta"):
            model = UMT5EncoderModel(umt5_config(cfg))
        model = model.to(dtype).to_empty(device=device)
        model.tie_weights()  # to_empty gives each name of the shared embedding its own tensor
        model.apply(model._init_weights)
        return model.eval().requires_grad_(False)
    with torch.device("meta"):
        model = UMT5EncoderModel(umt5_config(cfg))
    state = {hf_key(k): v for k, v in read_pth(Path(path)).items()}
    assign_state_dict(model, state, Path(path), device, dtype_of=lambda name, p: dtype)
    return model.eval().requires_grad_(False)


def _load_folder(folder: Path, dtype: torch.dtype, device) -> torch.nn.Module:
    """A transformers ``UMT5EncoderModel`` folder (``config.json``, ``model.safetensors`` or its
    shards), memory-mapped and assigned onto a meta-device model tensor by tensor: no copy of
    the whole model is staged in host memory (``from_pretrained(...).to(device)`` stages one).
    A tensor saved under a tied alias (``encoder.embed_tokens.weight`` for ``shared.weight``)
    loads as its parameter."""
    from transformers import UMT5Config, UMT5EncoderModel

    read_json(folder / "config.json")  # a one-line InputError for a missing or malformed file
    try:
        config = UMT5Config.from_json_file(folder / "config.json")
    except (OSError, ValueError, TypeError) as e:
        raise InputError(folder / "config.json", f"not a UMT5 config ({e.__class__.__name__}: {e})") from None
    with torch.device("meta"):
        model = UMT5EncoderModel(config)
    tensors = read_safetensors(safetensors_files(folder, "model"))
    canonical = {id(p): name for name, p in model.named_parameters()}
    for alias, p in model.named_parameters(remove_duplicate=False):
        name = canonical[id(p)]
        if alias != name and alias in tensors:
            tensors.setdefault(name, tensors[alias])
            del tensors[alias]
    assign_state_dict(model, tensors, folder, device, dtype_of=lambda name, p: dtype)
    return model.eval().requires_grad_(False)


class TextEncoder:
    """Prompts -> UMT5 states ``[B, text_len, dim]`` with padding positions zeroed.

    Args:
        model: a ``UMT5EncoderModel``.
        tokenizer: ``HFTokenizer`` or ``ByteTokenizer``.
        text_len: tokens per prompt (512 for Wan2.1).
    """

    def __init__(self, model: torch.nn.Module, tokenizer, text_len: int):
        self.model = model
        self.tokenizer = tokenizer
        self.text_len = text_len

    @torch.no_grad()
    def encode(self, prompts: list[str]) -> torch.Tensor:
        """[B, text_len, dim] in the model dtype, on the model device."""
        device = next(self.model.parameters()).device
        ids, mask = self.tokenizer([clean_prompt(p) for p in prompts], self.text_len)
        ids, mask = ids.to(device), mask.to(device)
        states = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        return states * mask[..., None].to(states.dtype)
