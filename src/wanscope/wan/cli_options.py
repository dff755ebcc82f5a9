"""The engine's command-line options, declared once for ``generate``, ``profile`` and
``compare-modes`` (as ``clitools.format_option`` is for the analysis commands). Each decorator
adds one click option; ``wan/options.py`` ``resolve_engine`` resolves and checks their values.
No torch import.
"""

from __future__ import annotations

from pathlib import Path

import click

from wanscope.parallel.plan import DEFAULT_TIMEOUT_S, PARALLEL_MODES
from wanscope.wan.config import ATTENTION_CHOICES, CFG_BATCHED_MAX_TOKENS, CFG_MODES, KERNEL_CHOICES, PRESETS
from wanscope.wan.options import CPU_PRESET, CUDA_PRESET, DTYPE_CHOICES, MODES

FAST_KEYS = "keys: linears, int8_attention, pv_fp8, exact_blocks, fast_accum"


def checkpoint_option(required: bool = False):
    return click.option(
        "--checkpoint",
        required=required,
        type=click.Path(path_type=Path),
        help="Wan2.1 checkpoint folder, official or diffusers layout.",
    )


def random_weights_option(default_without_checkpoint: bool):
    then = " (the default without --checkpoint)" if default_without_checkpoint else ""
    return click.option(
        "--random-weights",
        is_flag=True,
        help=f"No checkpoint: random weights and a byte-level stand-in tokenizer, for timing and profiling{then}.",
    )


def preset_option():
    return click.option(
        "--preset",
        type=click.Choice(sorted(PRESETS)),
        default=None,
        help="Model sizes and sampling defaults; a checkpoint's own config sets the DiT. "
        f"Default: {CPU_PRESET} for random weights on a CPU, else {CUDA_PRESET}.",
    )


def prompt_option(multiple: bool = False):
    return click.option(
        "--prompt",
        "prompts" if multiple else "prompt",
        multiple=multiple,
        required=not multiple,
        help="A prompt; repeat for several." if multiple else "What to generate.",
    )


def negative_prompt_option():
    return click.option("--negative-prompt", default=None, help="Default: the official T2V negative prompt.")


def size_option():
    return click.option("--size", default=None, help="WIDTHxHEIGHT, multiples of 16. Default: the preset's (832x480).")


def frames_option():
    return click.option("--frames", type=int, default=None, help="4k+1 video frames. Default: the preset's (81).")


def steps_option():
    return click.option(
        "--steps", type=int, default=None, help="Length of the sampling schedule. Default: the preset's (50)."
    )


def guidance_option():
    return click.option("--guidance", type=float, default=None, help="Classifier-free guidance scale. Default: 5.0.")


def shift_option():
    return click.option("--shift", type=float, default=None, help="Flow shift of the sigma schedule. Default: 5.0.")


def seed_option():
    return click.option("--seed", type=int, default=None, help="Noise seed. Default: 0.")


def solver_option():
    return click.option("--solver", type=click.Choice(["unipc", "euler"]), default=None, help="Default: unipc.")


def cfg_option():
    return click.option(
        "--cfg",
        type=click.Choice(CFG_MODES),
        default=None,
        help=f"Run cond and uncond as two forwards or one B=2 forward. Default: auto, batched up to "
        f"{CFG_BATCHED_MAX_TOKENS:,} DiT tokens (e.g. 416x240x21), sequential above (832x480x81); "
        f"sequential under --parallel cfg.",
    )


def attention_option():
    return click.option(
        "--attention",
        type=click.Choice(ATTENTION_CHOICES),
        default="auto",
        show_default=True,
        help="Attention kernel (in the fast mode, of its exact parts). auto: ours (hopper) on an sm_90 GPU "
        "with Triton's Gluon, else sdpa (PyTorch picks).",
    )


def kernels_option():
    return click.option(
        "--kernels",
        type=click.Choice(KERNEL_CHOICES),
        default="auto",
        show_default=True,
        help="DiT ops. auto: the fused Triton kernels on CUDA, the torch reference ops elsewhere.",
    )


def mode_option():
    return click.option(
        "--mode",
        type=click.Choice(MODES),
        default="exact",
        show_default=True,
        help="fast: FP8 GEMMs and INT8 Q K^T attention where they pay (the fast mode, FastConfig; "
        "not exact: measure its cost on your weights with compare-modes).",
    )


def fast_option(always_fast: bool = False):
    """``--fast SPEC``; ``always_fast``: the command runs the fast mode whatever is given (compare-modes)."""
    return click.option(
        "--fast",
        "fast_spec",
        default=None,
        metavar="SPEC",
        help=("The fast mode's config" if always_fast else "With --mode fast: its config")
        + f" over its defaults, e.g. 'linears=ffn,qkv exact_blocks=0,-1' ({FAST_KEYS}).",
    )


def device_option():
    return click.option("--device", default=None, help="cpu, cuda or cuda:N. Default: cuda if available, else cpu.")


def dtype_option():
    return click.option(
        "--dtype", type=click.Choice(DTYPE_CHOICES), default=None, help="Default: bf16 on CUDA, fp32 on CPU."
    )


def memory_budget_option():
    return click.option(
        "--memory-budget",
        type=float,
        metavar="GIB",
        default=None,
        help="Device memory the run may use (GiB): each stage's model is kept on the device, streamed "
        "from host memory or refused to fit, and the plan is printed. Default: the free memory on CUDA, "
        "no budget on the CPU.",
    )


def legacy_step_lookup_option():
    return click.option(
        "--legacy-step-lookup",
        is_flag=True,
        help="The sampler finds its step index with a device .item() (one host sync per step).",
    )


def parallel_option():
    return click.option(
        "--parallel",
        type=click.Choice(PARALLEL_MODES),
        help="Under torchrun: CFG branches on 2 ranks, Ulysses token shards on all, or both (2 x N/2).",
    )


def dist_timeout_option():
    return click.option(
        "--dist-timeout",
        type=click.FloatRange(min=1),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        help="With --parallel: seconds any rank may wait for the others (rendezvous, each collective) before failing.",
    )
