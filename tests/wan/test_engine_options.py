"""The engine's options: declared once for generate, profile and compare-modes
(``wan/cli_options.py``), resolved once (``wan/options.py``), with the checks made before a
model loads reading the DiT from the checkpoint; and the engine commands in an install without
the engine (no torch): one line naming the extra, exit 2."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from wan_helpers import write_diffusers_checkpoint

from wanscope.errors import UsageError
from wanscope.wan.options import resolve_engine

SRC = Path(__file__).resolve().parents[2] / "src" / "wanscope"
ENGINE_COMMANDS = ("generate", "profile", "compare-modes")
# The options more than one engine command takes, each declared once, in wan/cli_options.py.
SHARED = {
    "--checkpoint": ENGINE_COMMANDS,
    "--random-weights": ("generate", "profile"),
    "--preset": ENGINE_COMMANDS,
    "--prompt": ("generate", "compare-modes"),
    "--negative-prompt": ("generate", "compare-modes"),
    "--size": ENGINE_COMMANDS,
    "--frames": ENGINE_COMMANDS,
    "--steps": ENGINE_COMMANDS,
    "--seed": ("generate", "compare-modes"),
    "--cfg": ("generate", "profile"),
    "--attention": ENGINE_COMMANDS,
    "--kernels": ("generate", "profile"),
    "--mode": ("generate", "profile"),
    "--fast": ENGINE_COMMANDS,
    "--device": ("generate", "compare-modes"),
    "--dtype": ("generate", "compare-modes"),
    "--legacy-step-lookup": ("generate", "profile"),
    "--parallel": ("generate", "profile"),
    "--dist-timeout": ("generate", "profile"),
}


def option_declarations() -> dict[str, list[str]]:
    """Option name -> the files whose ``click.option(...)`` calls declare it."""
    found: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "option":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                        found.setdefault(arg.value, []).append(str(path.relative_to(SRC)))
    return found


def test_each_shared_option_is_declared_once():
    declared = option_declarations()
    assert {name: declared.get(name) for name in SHARED} == {name: ["wan/cli_options.py"] for name in SHARED}


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_each_engine_command_takes_its_shared_options(command):
    from wanscope.cli import cli

    cmd = cli.get_command(None, command)
    names = {opt for p in cmd.params for opt in p.opts}
    assert {name for name, commands in SHARED.items() if command in commands} <= names
    assert {name for name, commands in SHARED.items() if command not in commands} & names == set()


@pytest.fixture(scope="module")
def two_head_checkpoint(diffusers_dit, tmp_path_factory):
    """A diffusers-layout checkpoint whose DiT has 2 heads and 2 blocks (the 1.3B preset: 12 and 30)."""
    return write_diffusers_checkpoint(tmp_path_factory.mktemp("ckpt") / "wan", diffusers_dit)


def resolve_with(checkpoint, preset="tiny", size="64x64", **kw):
    """The tiny checkpoint's DiT fits the tiny preset's text encoder and VAE."""
    return resolve_engine(
        cuda_devices=0, prompt="a fox", checkpoint=checkpoint, preset=preset, size=size, frames=5, **kw
    )


def launched_as(monkeypatch, world_size: int) -> None:
    """The environment torchrun gives rank 0 of ``world_size``."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size), "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def test_the_dit_comes_from_the_checkpoint(two_head_checkpoint):
    opts = resolve_with(two_head_checkpoint)
    assert (opts.dit.num_heads, opts.dit.num_layers, opts.dit.dim) == (2, 2, 64)
    assert (opts.preset, opts.device, opts.dtype, opts.random_weights) == ("tiny", "cpu", "fp32", False)


def test_profile_checks_the_checkpoints_heads(two_head_checkpoint, monkeypatch):
    from wanscope.profile.options import resolve

    launched_as(monkeypatch, 4)
    with pytest.raises(UsageError, match=r"^Ulysses degree 4 does not divide the model's 2 attention heads; "):
        resolve(0, checkpoint=two_head_checkpoint, preset="tiny", size="64x64", frames=5, parallel="ulysses")


def test_pre_load_checks_use_the_checkpoints_dit(two_head_checkpoint, monkeypatch):
    with pytest.raises(UsageError, match=r"^fast-mode spec: exact_blocks 5 out of range for 2 blocks$"):
        resolve_with(two_head_checkpoint, mode="fast", fast="exact_blocks=5")
    # 4 Ulysses ranks split the 1.3B preset's 12 heads but not the checkpoint's 2
    launched_as(monkeypatch, 4)
    resolve_with(None, preset="wan2.1-t2v-1.3b", parallel="ulysses")
    with pytest.raises(UsageError, match=r"^Ulysses degree 4 does not divide the model's 2 attention heads; "):
        resolve_with(two_head_checkpoint, parallel="ulysses")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"device": "cuda"}, "--device cuda: no CUDA device is available here"),
        ({"device": "cuda:x"}, "--device 'cuda:x': expected cpu, cuda or cuda:N"),
        ({"dtype": "fp16"}, "unknown dtype 'fp16'; known: bf16, fp32"),
        ({"kernels": "cuda"}, "unknown kernels 'cuda'; known: auto, torch, triton"),
        ({"mode": "quick"}, "unknown mode 'quick'; known: exact, fast"),
        ({"cfg": "batched", "parallel": "cfg"}, "CFG parallel runs each branch on its own rank; --cfg batched"),
    ],
)
def test_bad_values_are_refused(kw, message, monkeypatch):
    if "parallel" in kw:
        launched_as(monkeypatch, 2)
    with pytest.raises(UsageError) as e:
        resolve_with(None, **kw)
    assert str(e.value).startswith(message)


def test_defaults_by_machine():
    cpu = resolve_engine(cuda_devices=0, prompt="a fox")
    gpu = resolve_engine(cuda_devices=2, prompt="a fox")
    assert (cpu.preset, cpu.device, cpu.dtype, cpu.request.cfg, cpu.cfg_auto) == (
        "tiny",
        "cpu",
        "fp32",
        "batched",
        True,
    )
    assert (gpu.preset, gpu.device, gpu.dtype, gpu.request.cfg) == ("wan2.1-t2v-1.3b", "cuda", "bf16", "sequential")
    assert resolve_engine(cuda_devices=2, prompt="a fox", device="cuda:1").device == "cuda:1"
    with pytest.raises(UsageError, match=r"^--device cuda:2: there are 2 CUDA devices$"):
        resolve_engine(cuda_devices=2, prompt="a fox", device="cuda:2")


# sys.modules[name] = None: `import name` fails and importlib.util.find_spec(name) is None, as
# where the package is not installed
WITHOUT_TORCH = "import sys; sys.modules['torch'] = None; from wanscope.cli import main; main()"


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--random-weights", "--prompt", "a fox"],
        ["profile"],
        ["compare-modes", "--checkpoint", "ckpt"],
    ],
)
def test_engine_commands_without_torch_name_the_extra(argv, tmp_path):
    r = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *argv], capture_output=True, text=True, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (
        f"wanscope: error: wanscope {argv[0]} runs the Wan engine, which this install lacks (torch missing): "
        "pip install 'wanscope[engine]'\n"
    )
    assert list(tmp_path.iterdir()) == []
    # the help needs no engine
    r = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, argv[0], "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--checkpoint" in r.stdout, r.stderr


def test_require_triton(monkeypatch):
    """--mode fast (and compare-modes) without Triton: a one-line usage error before any model
    loads, not an ImportError from the kernels (the engine's CPU install has no Triton)."""
    import importlib.util

    from wanscope.wan.options import require_triton

    require_triton("x")  # installed here: no error
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else found(name, *a))
    with pytest.raises(UsageError, match=r"^--mode fast runs the fused Triton kernels .*: pip install triton$"):
        require_triton("--mode fast runs")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"shift": float("nan")}, "shift must be a finite number > 0, got nan"),
        ({"guidance": float("inf")}, "guidance must be a finite number >= 0, got inf"),
        ({"seed": 10**23}, "seed must fit in 64 bits"),
        ({"steps": 10**20}, "steps must be <= 1,000,000"),
        ({"size": "16400x16"}, "--size '16400x16': at most 16384 pixels a side"),
        ({"size": "\uff16\uff14x\uff16\uff14"}, "--size '\uff16\uff14x\uff16\uff14': expected WIDTHxHEIGHT"),
        ({"size": ""}, "--size '': expected WIDTHxHEIGHT"),
        ({"device": "cpu:" + "9" * 20}, "--device 'cpu:99999999999999999999': expected cpu, cuda or cuda:N"),
        ({"dist_timeout": float("nan")}, "--dist-timeout must be a finite number of seconds, got nan"),
        ({"negative_prompt": "fox\udcff"}, "the negative prompt is not UTF-8 text"),
        ({"parallel": "ulysses"}, "--parallel ulysses needs a launcher"),
    ],
)
def test_values_no_run_could_take_are_refused(kw, message):
    with pytest.raises(UsageError) as e:
        resolve_with(None, **kw)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' in the environment: not a process count"),
        (
            {"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
            "RANK='x' in the environment: not a number",
        ),
        (
            {"RANK": "5", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
            "RANK 5 is not below WORLD_SIZE 2",
        ),
    ],
)
def test_a_malformed_launcher_environment_is_refused(env, message, monkeypatch):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(UsageError) as e:
        resolve_with(None, parallel="ulysses" if "RANK" in env else None)
    assert str(e.value) == message


def edited_checkpoint(src: Path, dst: Path, **config) -> Path:
    """A copy of the checkpoint ``src`` whose transformer/config.json has ``config`` over its own."""
    shutil.copytree(src, dst)
    path = dst / "transformer" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return dst


@pytest.mark.parametrize(
    "config, message",
    [
        ({"num_attention_heads": "2"}, "transformer/config.json: num_attention_heads '2': expected a positive integer"),
        ({"patch_size": 2}, "transformer/config.json: patch_size 2: expected three positive integers"),
        ({"eps": float("nan")}, "transformer/config.json: eps nan: expected a positive finite number"),
        ({"num_layers": 10**9}, "transformer: the config says 1000000000 blocks (num_layers), the weights hold 2"),
    ],
)
def test_a_checkpoint_config_no_model_could_have_is_refused(two_head_checkpoint, tmp_path, config, message):
    from wanscope.errors import InputError

    ckpt = edited_checkpoint(two_head_checkpoint, tmp_path / "ckpt", **config)
    with pytest.raises(InputError) as e:
        resolve_with(ckpt)
    assert str(e.value) == f"{ckpt}/{message}"


def test_a_checkpoint_that_does_not_fit_the_preset_is_refused(two_head_checkpoint):
    """The tiny checkpoint's DiT takes 32-feature text states; the 1.3B preset's encoder gives 4096,
    the tiny one's 32: the DiT must fit the preset's text encoder and VAE before any model loads."""
    from wanscope.errors import InputError

    with pytest.raises(InputError, match=r"its DiT takes text states of 32 features; the wan2.1-t2v-1.3b preset"):
        resolve_engine(cuda_devices=0, prompt="a fox", checkpoint=two_head_checkpoint, preset="wan2.1-t2v-1.3b")
    opts = resolve_engine(cuda_devices=0, prompt="a fox", checkpoint=two_head_checkpoint, preset="tiny")
    assert opts.dit.text_dim == opts.config.text_encoder.dim == 32


@pytest.mark.parametrize(
    "part, text, message",
    [
        ("vae/config.json", "{broken", "cannot read JSON"),
        ("vae/config.json", '{"base_dim": 8}', "config lacks z_dim, dim_mult, num_res_blocks, temperal_downsample"),
        ("text_encoder/config.json", "[1, 2]", "not a JSON object"),
        ("vae/diffusion_pytorch_model.safetensors", "not safetensors", "not a readable safetensors file"),
    ],
)
def test_the_other_parts_are_read_before_any_model_loads(two_head_checkpoint, tmp_path, part, text, message):
    from wanscope.errors import InputError

    ckpt = tmp_path / "ckpt"
    shutil.copytree(two_head_checkpoint, ckpt)
    (ckpt / part).write_text(text)
    with pytest.raises(InputError) as e:
        resolve_with(ckpt)
    assert str(e.value).startswith(f"{ckpt / part}: {message}")


def test_the_engine_allocator_expands_segments_unless_told_otherwise(monkeypatch):
    from wanscope.wan.options import engine_allocator

    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "x")  # so that undoing the delete restores it
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    engine_allocator()
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "")  # a user's own setting, even none, wins
    engine_allocator()
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == ""
