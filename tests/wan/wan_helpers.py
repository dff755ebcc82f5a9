"""Shared helpers for the engine tests: tiny checkpoints in both layouts and the official
Wan code (PyPI ``wan22``, installed with --no-deps) loaded module by module, with SDPA standing
in for its flash-attention call so it runs on the CPU."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

# Small but awkward: head_dim 32 splits RoPE 12/10/10; latents are non-square with 3 frames.
TINY_DIFFUSERS_CONFIG = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=2,
    attention_head_dim=32,
    in_channels=16,
    out_channels=16,
    text_dim=32,
    freq_dim=32,
    ffn_dim=128,
    num_layers=2,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
)
TEXT_LEN = 16
LATENT_SHAPE = (1, 16, 3, 8, 12)  # [B, C, F, H, W]


def rel_l2(ours, theirs) -> float:
    """||ours - theirs|| / ||theirs|| in float64."""
    ours, theirs = ours.double(), theirs.double()
    return ((ours - theirs).norm() / theirs.norm()).item()


def rel_max_err(ours, theirs) -> float:
    """max |ours - theirs| / max |theirs| in float64."""
    ours, theirs = ours.double(), theirs.double()
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def _sdpa_flash_attention(
    q,
    k,
    v,
    q_lens=None,
    k_lens=None,
    dropout_p=0.0,
    softmax_scale=None,
    q_scale=None,
    causal=False,
    window_size=(-1, -1),
    deterministic=False,
    dtype=None,
    version=None,
):
    # [B, L, N, D] in and out, like the official flash_attention; lens are full in these tests.
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
    )
    return out.transpose(1, 2).type_as(q)


def _official_module(name: str):
    """``wan/modules/<name>.py`` from the wan22 package, without running wan/__init__.py."""
    pkg = "wan_official"
    if f"{pkg}.{name}" in sys.modules:
        return sys.modules[f"{pkg}.{name}"]
    spec = importlib.util.find_spec("wan")
    # without wan22, "wan" can still resolve: to this folder, as a namespace package
    root = Path(spec.submodule_search_locations[0]) / "modules" if spec is not None else None
    if root is None or not (root / f"{name}.py").is_file():
        pytest.skip("the official code (pip install --no-deps wan22) is not installed")
    if pkg not in sys.modules:
        package = types.ModuleType(pkg)
        package.__path__ = []
        sys.modules[pkg] = package
        attention = types.ModuleType(f"{pkg}.attention")
        attention.flash_attention = _sdpa_flash_attention
        sys.modules[f"{pkg}.attention"] = attention
        tokenizers = types.ModuleType(f"{pkg}.tokenizers")
        tokenizers.HuggingfaceTokenizer = None  # t5.py imports it; the tests pass token ids
        sys.modules[f"{pkg}.tokenizers"] = tokenizers
    mspec = importlib.util.spec_from_file_location(f"{pkg}.{name}", root / f"{name}.py")
    module = importlib.util.module_from_spec(mspec)
    sys.modules[f"{pkg}.{name}"] = module
    # t5.py evaluates torch.cuda.current_device() in a default argument at import time
    current_device = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"
    try:
        mspec.loader.exec_module(module)
    finally:
        torch.cuda.current_device = current_device
    return module


@pytest.fixture(scope="session")
def official():
    """Loader of official modules by name: ``official("model").WanModel``."""
    return _official_module


@pytest.fixture(scope="session")
def diffusers_dit():
    """A tiny diffusers WanTransformer3DModel with random weights (fp32, eval)."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    model = WanTransformer3DModel(**TINY_DIFFUSERS_CONFIG).eval()
    with torch.no_grad():  # the default init leaves the modulation tables tiny; make them count
        for name, p in model.named_parameters():
            if "scale_shift_table" in name or "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model


@pytest.fixture(scope="session")
def diffusers_dit_dir(diffusers_dit, tmp_path_factory):
    """The tiny model saved with save_pretrained (a diffusers ``transformer/`` folder)."""
    path = tmp_path_factory.mktemp("diffusers_dit")
    diffusers_dit.save_pretrained(path)
    return path


def write_official_dit(folder: Path, diffusers_dir: Path, shards: int = 1) -> Path:
    """The diffusers checkpoint renamed to the official layout: WanModel config.json and
    safetensors with official keys, split into ``shards`` files with an index if > 1."""
    from safetensors.torch import load_file, save_file

    from wanscope.wan.weights import official_key

    folder.mkdir(parents=True, exist_ok=True)
    c = TINY_DIFFUSERS_CONFIG
    (folder / "config.json").write_text(
        json.dumps(
            {
                "_class_name": "WanModel",
                "model_type": "t2v",
                "dim": c["num_attention_heads"] * c["attention_head_dim"],
                "ffn_dim": c["ffn_dim"],
                "freq_dim": c["freq_dim"],
                "in_dim": c["in_channels"],
                "out_dim": c["out_channels"],
                "num_heads": c["num_attention_heads"],
                "num_layers": c["num_layers"],
                "text_len": TEXT_LEN,
                "text_dim": c["text_dim"],
                "eps": c["eps"],
            }
        )
    )
    tensors = {official_key(k): v for k, v in load_file(diffusers_dir / "diffusion_pytorch_model.safetensors").items()}
    if shards == 1:
        save_file(tensors, folder / "diffusion_pytorch_model.safetensors")
        return folder
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        shard = f"diffusion_pytorch_model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k].contiguous() for k in names[i::shards]}
        save_file(part, folder / shard)
        weight_map.update({k: shard for k in part})
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def write_diffusers_checkpoint(root: Path, dit) -> Path:
    """A complete tiny diffusers-layout pipeline folder: ``dit`` (a WanTransformer3DModel) as
    ``transformer/``, a random tiny-preset UMT5 encoder, a word-level tokenizer that knows
    "a red fox in the snow" (other words map to <unk>) and a base_dim 8 VAE."""
    from diffusers import AutoencoderKLWan
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

    from wanscope.wan.config import PRESETS
    from wanscope.wan.text_encoder import transformers_config

    root.mkdir(parents=True)
    (root / "model_index.json").write_text("{}")
    dit.save_pretrained(root / "transformer")
    torch.manual_seed(0)
    UMT5EncoderModel(UMT5Config(**transformers_config(PRESETS["tiny"].text_encoder))).save_pretrained(
        root / "text_encoder"
    )
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "a": 3, "red": 4, "fox": 5, "in": 6, "the": 7, "snow": 8}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(root / "tokenizer")
    AutoencoderKLWan(base_dim=8).save_pretrained(root / "vae")
    return root


@pytest.fixture(scope="session")
def official_dit_dir(diffusers_dit_dir, tmp_path_factory):
    return write_official_dit(tmp_path_factory.mktemp("official_dit"), diffusers_dit_dir, shards=3)


@pytest.fixture(scope="session")
def dit_inputs():
    """(latents [1, 16, 3, 8, 12], timestep [1], context [1, 16, 32]), fp32."""
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(LATENT_SHAPE, generator=g)
    timestep = torch.tensor([637.25])
    context = torch.randn(1, TEXT_LEN, TINY_DIFFUSERS_CONFIG["text_dim"], generator=g)
    return latents, timestep, context
