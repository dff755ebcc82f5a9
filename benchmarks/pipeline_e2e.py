"""Wan2.1 text-to-video end to end, ours against diffusers' ``WanPipeline`` (issue 8): text
encoding, the 50-step denoising loop with CFG, VAE decode, random weights, one process.

Both pipelines share the text encoder's weights (ours runs a ``UMT5Encoder``; diffusers gets a
transformers ``UMT5EncoderModel`` holding the same tensors), bf16, and the VAE's, fp32 as the
official code keeps it (ours runs our ``VAEDecoder``; diffusers gets an ``AutoencoderKLWan``
holding the same decoder tensors, ``_common.diffusers_vae``, channels-last on CUDA as ours), so
the comparison isolates the DiT and the sampling loop. Diffusers runs its own
``WanTransformer3DModel`` (bf16 as ``from_pretrained(torch_dtype=bf16)`` casts it, default
attention: cuDNN on an H200, eager) with ``UniPCMultistepScheduler`` in flow mode; ours runs
``wanscope.wan.pipeline`` with its defaults (UniPC; ``kernels`` and ``attention`` auto: the fused
Triton kernels and our Hopper attention where they run; the JSON says which ran). Same
prompt, negative prompt, size, frames, steps, guidance and flow shift. Tokenizers differ (no
real one can be downloaded here): ours is the byte stand-in of random-weight runs, diffusers'
a word-level one built here; both pad to 512 tokens, so the encoder does the same work.

Each side first runs one 1-step request with its decode (what a first request pays once:
Triton/Gluon JIT, cuDNN plans), then the timed request; ours runs first. Stage times are
wall-clock with a device sync at each boundary; diffusers' stages come from timing its
``encode_prompt`` and ``vae.decode`` inside the call, its denoising is the rest (so it also holds
the latents' set-up and ``postprocess_video``; ours excludes the frames' conversion). Diffusers
runs eager, its pipeline's default. Writes ``OUT/pipeline_e2e-YYYY-MM-DD.json``.

    python benchmarks/pipeline_e2e.py --out benchmarks/results          # 1.3B, 832x480x81, 50 steps
    python benchmarks/pipeline_e2e.py --smoke --out /tmp/bench          # tiny preset on the CPU
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
from _common import diffusers_bf16, diffusers_config, diffusers_vae, result_label, sync, version, write_result

from wanscope.wan.attention import resolve_backend
from wanscope.wan.config import get_preset
from wanscope.wan.pipeline import Components, Request, encode_prompts, sample
from wanscope.wan.text_encoder import ByteTokenizer, TextEncoder, transformers_config
from wanscope.wan.vae import channels_last, decode

PROMPT = "A cat walks on the grass, realistic, daytime"
NEGATIVE = "blurry, low quality, static, distorted"


def word_tokenizer(vocab_size: int):
    """A transformers tokenizer that needs no download: whitespace words, hashed into the vocab."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, min(vocab_size, 4096))}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


class Clock:
    """Wall-clock stages with a device sync at each boundary."""

    def __init__(self, device):
        self.device, self.stages = device, {}

    def run(self, name, fn, *args, **kwargs):
        sync(self.device)
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        sync(self.device)
        self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - t
        return out


def ours(parts: Components, req: Request, encoder: TextEncoder, vae) -> dict:
    cfg, device = parts.config, parts.device
    dit = parts.dit()
    ran = {
        "kernels": dit.kernels.value,
        "attention": resolve_backend(dit.attention_backend, device, dit.dtype, cfg.dit.head_dim).value,
    }
    # warm-up as diffusers' 1-step call: encode, one step, decode
    decode(vae, sample(dit, replace(req, steps=1), *encode_prompts(parts, req, encoder=encoder), cfg, device), cfg.vae)
    clock = Clock(device)
    start = time.perf_counter()
    cond, uncond = clock.run("text_encoding", encode_prompts, parts, req, encoder=encoder)
    latents = clock.run("denoising", sample, dit, req, cond, uncond, cfg, device)
    clock.run("vae_decode", decode, vae, latents, cfg.vae)
    clock.stages["total"] = time.perf_counter() - start
    del dit
    return {**{k: round(v, 3) for k, v in clock.stages.items()}, **ran}


def theirs(parts: Components, req: Request, encoder: TextEncoder, ours_vae, dtype) -> dict:
    from diffusers import UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    cfg, device = parts.config, parts.device
    vae = diffusers_vae(cfg.vae, ours_vae.state_dict(), device)
    if device.type == "cuda":
        channels_last(vae)  # as ours
    torch.manual_seed(0)
    with torch.device(device):
        transformer = diffusers_bf16(WanTransformer3DModel(**diffusers_config(cfg.dit)), dtype).eval()
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000, flow_shift=req.shift
    )
    from transformers import UMT5Config, UMT5EncoderModel

    # transformers' encoder holding ours's very tensors (the parameter names are the same)
    with torch.device("meta"):
        text_encoder = UMT5EncoderModel(UMT5Config(**transformers_config(cfg.text_encoder)))
    state = encoder.model.state_dict()
    state["encoder.embed_tokens.weight"] = state["shared.weight"]  # transformers' tied alias
    text_encoder.load_state_dict(state, assign=True)
    pipe = WanPipeline(
        tokenizer=word_tokenizer(cfg.text_encoder.vocab_size),
        text_encoder=text_encoder.eval(),
        transformer=transformer,
        vae=vae,
        scheduler=scheduler,
    )
    pipe.set_progress_bar_config(disable=True)
    clock = Clock(device)
    encode_prompt, vae_decode = pipe.encode_prompt, vae.decode
    pipe.encode_prompt = lambda *a, **k: clock.run("text_encoding", encode_prompt, *a, **k)
    vae.decode = lambda *a, **k: clock.run("vae_decode", vae_decode, *a, **k)

    def call(steps):
        return pipe(
            prompt=req.prompt,
            negative_prompt=req.negative_prompt,
            height=req.height,
            width=req.width,
            num_frames=req.frames,
            num_inference_steps=steps,
            guidance_scale=req.guidance,
            max_sequence_length=cfg.dit.text_len,
            output_type="pt",
            generator=torch.Generator(device).manual_seed(req.seed),
        )

    try:
        call(1)  # warm-up
        clock.stages.clear()
        start = time.perf_counter()
        call(req.steps)
        sync(device)
        total = time.perf_counter() - start
    finally:
        vae.decode = vae_decode
    stages = dict(clock.stages)
    stages["denoising"] = total - stages["text_encoding"] - stages["vae_decode"]
    stages["total"] = total
    return {k: round(v, 3) for k, v in stages.items()}


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for pipeline_e2e-YYYY-MM-DD.json")
    ap.add_argument(
        "--label",
        type=result_label,
        default=None,
        help="what the run is, for the file name (NAME-YYYY-MM-DD-LABEL.json): lower-case, e.g. int8-3wg-a",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny preset, 64x64x5, 2 steps, on the CPU")
    ap.add_argument("--steps", type=_positive, default=None, help="default 50 (2 with --smoke)")
    args = ap.parse_args(argv)
    try:  # fails now, not after minutes of GPU time
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        ap.error(f"--out {args.out}: {e.strerror}")
    if not os.access(args.out, os.W_OK | os.X_OK):
        ap.error(f"--out {args.out}: not writable")

    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.bfloat16
    config = get_preset("tiny" if args.smoke else "wan2.1-t2v-1.3b")
    height, width, frames = (64, 64, 5) if args.smoke else (480, 832, 81)
    steps = args.steps or (2 if args.smoke else 50)
    req = Request(
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        height=height,
        width=width,
        frames=frames,
        steps=steps,
        guidance=5.0,
        shift=5.0,
        seed=0,
    )
    parts = Components(config=config, device=device, dtype=dtype)
    # the two models both pipelines run: built once (random weights)
    encoder = TextEncoder(parts.text_encoder().model, ByteTokenizer(), config.dit.text_len)
    vae = parts.vae()
    result = {
        "benchmark": "pipeline_e2e",
        "date": datetime.date.today().isoformat(),
        "smoke": args.smoke,
        "preset": config.name,
        "size": f"{width}x{height}",
        "frames": frames,
        "steps": steps,
        "guidance": 5.0,
        "shift": 5.0,
        "random_weights": True,
        "dtype": "bf16 (VAE fp32)",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "triton": version("triton"),
        "diffusers": version("diffusers"),
        "transformers": version("transformers"),
    }
    ours_s = ours(parts, req.with_cfg_resolved(config), encoder, vae)
    ours_s["cfg"] = req.with_cfg_resolved(config).cfg
    theirs_s = theirs(parts, req, encoder, vae, dtype)
    result["seconds"] = {"ours": ours_s, "diffusers": theirs_s}
    result["ratio_total"] = round(ours_s["total"] / theirs_s["total"], 3)
    result["ratio_denoising"] = round(ours_s["denoising"] / theirs_s["denoising"], 3)
    path = write_result(args.out, "pipeline_e2e", result, args.label)
    print(f"{'stage':<14} {'ours s':>9} {'diffusers s':>12}")
    for stage in ("text_encoding", "denoising", "vae_decode", "total"):
        print(f"{stage:<14} {ours_s[stage]:>9.2f} {theirs_s[stage]:>12.2f}")
    print(f"ours / diffusers: total {result['ratio_total']}, denoising {result['ratio_denoising']}; wrote {path}")
    return result


if __name__ == "__main__":
    main()
