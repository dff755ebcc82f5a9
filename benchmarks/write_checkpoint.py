"""A complete Wan2.1 T2V checkpoint folder of a preset's real sizes and layout, with RANDOM values
(issues 25, 26): what ``generate --checkpoint`` and the load benchmarks read where no weights can
be downloaded. Nothing written here is a trained model; ``WANSCOPE_RANDOM_WEIGHTS.txt`` in the
folder says so.

Layouts (``wanscope.wan.weights.detect_layout``):

- ``official``: ``config.json`` (WanModel) and ``diffusion_pytorch_model.safetensors`` (our DiT's
  names are the official ones), ``models_t5_umt5-xxl-enc-bf16.pth`` (our UMT5 encoder renamed with
  ``text_encoder.official_t5_key``), ``Wan2.1_VAE.pth`` (the official ``vae2_1.py`` ``WanVAE_``'s
  own initialization: needs ``pip install --no-deps wan22`` and ``einops``), and the tokenizer in
  ``google/umt5-xxl/``.
- ``diffusers``: ``model_index.json``, ``transformer/`` (diffusers' ``WanTransformer3DModel``
  holding our random DiT's tensors, ``save_pretrained``), ``text_encoder/`` (transformers' layout:
  ``config.json`` and ``model-0000N-of-0000M.safetensors`` shards of at most 5 GB with their
  index), ``tokenizer/``, ``vae/`` (diffusers' ``AutoencoderKLWan``'s own initialization,
  ``save_pretrained``) and ``scheduler/``
  (UniPC in flow mode with the preset's shift), so that diffusers' ``WanPipeline.from_pretrained``
  loads the folder too.

DiT and text encoder in bf16 (as published), the VAE in fp32. The tokenizer is a Unigram model
trained here with the ``tokenizers`` library on a few sentences (UMT5's special tokens
``<pad>`` = 0, ``</s>`` = 1, ``<unk>`` = 2, ``</s>`` appended), saved as ``tokenizer.json``.

    python benchmarks/write_checkpoint.py --layout official --out /data/wan-random
    python benchmarks/write_checkpoint.py --layout diffusers --preset tiny --device cpu --out /tmp/ckpt
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
from _common import diffusers_config, diffusers_vae

from wanscope.wan.config import WanConfig, get_preset
from wanscope.wan.dit import WanDiT
from wanscope.wan.text_encoder import load_umt5, official_t5_key, transformers_config
from wanscope.wan.weights import OFFICIAL_T5, OFFICIAL_TOKENIZER, OFFICIAL_VAE, official_key

SHARD_BYTES = 5 * 10**9  # transformers' default max_shard_size ("5GB")
NOTE = "RANDOM WEIGHTS written by benchmarks/write_checkpoint.py: not a trained model.\n"
CORPUS = [  # the tokenizer's training text: the official example and negative prompts, in part
    "Two anthropomorphic cats in comfy boxing gear and bright gloves fight intensely on a spotlighted stage.",
    "A cat walks on the grass, realistic, daytime, a red fox in the snow, a city street at night.",
    "Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, "
    "still, overall gray, worst quality, low quality, JPEG compression residue, ugly, incomplete, "
    "extra fingers, poorly drawn hands, poorly drawn faces, deformed, disfigured, misshapen limbs.",
]


def official_dit_config(cfg) -> dict:
    """The official ``WanModel`` ``config.json`` of our ``DiTConfig`` ``cfg``."""
    return {
        "_class_name": "WanModel",
        "model_type": "t2v",
        "patch_size": list(cfg.patch_size),
        "text_len": cfg.text_len,
        "in_dim": cfg.in_channels,
        "dim": cfg.dim,
        "ffn_dim": cfg.ffn_dim,
        "freq_dim": cfg.freq_dim,
        "text_dim": cfg.text_dim,
        "out_dim": cfg.out_channels,
        "num_heads": cfg.num_heads,
        "num_layers": cfg.num_layers,
        "qk_norm": cfg.qk_norm,
        "cross_attn_norm": cfg.cross_attn_norm,
        "eps": cfg.eps,
    }


def write_tokenizer(folder: Path) -> None:
    """A small Unigram tokenizer with UMT5's special tokens, as ``tokenizer.json`` and its configs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    special = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(special | {"model_max_length": 512, "tokenizer_class": "PreTrainedTokenizerFast"})
    )


def save_sharded(tensors: dict[str, torch.Tensor], folder: Path, stem: str) -> None:
    """``tensors`` as safetensors shards of at most ``SHARD_BYTES`` (``stem-0000N-of-0000M``) with
    ``stem.safetensors.index.json``, or one ``stem.safetensors`` when they fit in one."""
    from safetensors.torch import save_file

    shards: list[dict] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = t.contiguous()
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], folder / f"{stem}.safetensors")
        return
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        file = f"{stem}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, folder / file)
        weight_map |= dict.fromkeys(shard, file)
        total += sum(t.numel() * t.element_size() for t in shard.values())
    # the index as transformers and diffusers write it: their sharded loading reads both keys
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / f"{stem}.safetensors.index.json").write_text(json.dumps(index))


def official_vae_module():
    """The official ``wan/modules/vae2_1.py`` (wan22), loaded from its file without running
    ``wan/__init__.py`` (which needs the whole official stack).

    Raises:
        SystemExit: wan22 is not installed.
    """
    spec = importlib.util.find_spec("wan")
    path = Path(spec.submodule_search_locations[0]) / "modules" / "vae2_1.py" if spec else None
    if path is None or not path.is_file():
        sys.exit(
            "write_checkpoint: the official layout's VAE needs the official code: pip install --no-deps wan22 einops"
        )
    mspec = importlib.util.spec_from_file_location("wan_official_vae2_1", path)
    module = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(module)
    return module


def write(config: WanConfig, layout: str, out: Path, device: torch.device) -> None:
    """The checkpoint of ``config`` in ``layout`` into the new folder ``out``."""
    out.mkdir(parents=True)
    (out / "WANSCOPE_RANDOM_WEIGHTS.txt").write_text(NOTE)
    torch.manual_seed(0)
    dit = WanDiT.random(config.dit, torch.bfloat16, device)
    dit_state = {k: v.cpu() for k, v in dit.state_dict().items()}
    del dit
    encoder = load_umt5(None, config.text_encoder, torch.bfloat16, device)
    te_state = {k: v.cpu() for k, v in encoder.state_dict().items()}
    del encoder
    if layout == "official":
        from safetensors.torch import save_file

        (out / "config.json").write_text(json.dumps(official_dit_config(config.dit), indent=2))
        save_file(dit_state, out / "diffusion_pytorch_model.safetensors")
        torch.save({official_t5_key(k): v for k, v in te_state.items()}, out / OFFICIAL_T5)
        v = config.vae
        vae = official_vae_module().WanVAE_(
            dim=v.base_dim,
            z_dim=v.z_dim,
            dim_mult=list(v.dim_mult),
            num_res_blocks=v.num_res_blocks,
            attn_scales=[],
            temperal_downsample=list(v.temporal_downsample),
            dropout=0.0,
        )
        torch.save(vae.state_dict(), out / OFFICIAL_VAE)
        write_tokenizer(out / OFFICIAL_TOKENIZER)
        return
    from diffusers import UniPCMultistepScheduler, WanTransformer3DModel

    index = {
        "_class_name": "WanPipeline",
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "PreTrainedTokenizerFast"],
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"],
    }
    (out / "model_index.json").write_text(json.dumps(index, indent=2))
    s = config.sampling  # the preset's flow shift, as the published Wan2.1 diffusers folders set it
    UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000, flow_shift=s.shift
    ).save_pretrained(out / "scheduler")
    with torch.device("meta"):
        transformer = WanTransformer3DModel(**diffusers_config(config.dit))
    transformer.load_state_dict({k: dit_state[official_key(k)] for k in transformer.state_dict()}, assign=True)
    transformer.save_pretrained(out / "transformer")
    (out / "text_encoder").mkdir()
    (out / "text_encoder" / "config.json").write_text(
        json.dumps(transformers_config(config.text_encoder) | {"architectures": ["UMT5EncoderModel"]}, indent=2)
    )
    save_sharded(te_state, out / "text_encoder", "model")
    diffusers_vae(config.vae).save_pretrained(out / "vae")
    write_tokenizer(out / "tokenizer")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", choices=("official", "diffusers"), required=True)
    p.add_argument("--preset", default="wan2.1-t2v-1.3b")
    p.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="where the values are drawn"
    )
    p.add_argument("--out", type=Path, required=True, help="a new folder")
    args = p.parse_args()
    if args.out.exists():
        sys.exit(f"write_checkpoint: {args.out} exists")
    try:
        write(get_preset(args.preset), args.layout, args.out, torch.device(args.device))
    except BaseException:
        shutil.rmtree(args.out, ignore_errors=True)  # nothing half-written
        raise
    print(args.out)


if __name__ == "__main__":
    main()
