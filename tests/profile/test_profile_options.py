"""Profile options: defaults by machine, the child's argument list reproduces the options, and
bad arguments are one-line errors (exit 2) that write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_context import parse_profile

from wanscope.cli import main
from wanscope.profile.options import resolve
from wanscope.wan.precision import FastConfig


def test_defaults_by_machine():
    gpu, cpu = resolve(1), resolve(0)
    assert (gpu.preset, gpu.width, gpu.height, gpu.frames, gpu.steps, gpu.device, gpu.dtype) == (
        "wan2.1-t2v-1.3b",
        832,
        480,
        81,
        50,
        "cuda",
        "bf16",
    )
    assert (cpu.preset, cpu.width, cpu.height, cpu.frames, cpu.steps, cpu.device, cpu.dtype) == (
        "tiny",
        64,
        64,
        5,
        4,
        "cpu",
        "fp32",
    )
    for o in (gpu, cpu):
        assert (o.warmup, o.profile_steps, o.profiled_steps, o.random_weights) == (1, 3, [1, 2, 3], True)
        assert (o.attention, o.compile, o.legacy_step_lookup, o.cfg_auto) == ("auto", False, False, True)
    # --cfg auto: 32,760 DiT tokens at 832x480x81 run sequential, tiny's 32 batched
    assert (gpu.cfg, cpu.cfg) == ("sequential", "batched")


# the two sizes of the H200 measurement behind CFG_BATCHED_MAX_TOKENS (benchmarks/RESULTS.md,
# "2026-11-30: DiT forward, all contenders in one run, and CFG batching")
@pytest.mark.parametrize("size, frames, auto", [("832x480", 81, "sequential"), ("416x240", 21, "batched")])
def test_cfg_auto_by_size_and_explicit_overrides(size, frames, auto, monkeypatch):
    def cfg(**kw):
        if "parallel" in kw:  # rank 0 of the world the mode runs on, as torchrun starts it
            world = {"cfg": 2, "cfg+ulysses": 4, "ulysses": 2}[kw["parallel"]]
            for key, value in {
                "RANK": 0,
                "LOCAL_RANK": 0,
                "WORLD_SIZE": world,
                "MASTER_ADDR": "h",
                "MASTER_PORT": 1,
            }.items():
                monkeypatch.setenv(key, str(value))
        o = resolve(1, size=size, frames=frames, **kw)
        return o.cfg, o.cfg_auto

    assert cfg() == cfg(cfg="auto") == (auto, True)
    assert cfg(cfg="sequential") == ("sequential", False)
    assert cfg(cfg="batched") == ("batched", False)
    # CFG parallel runs each branch as a B=1 forward on its own rank; Ulysses keeps the rule
    assert cfg(parallel="cfg") == cfg(parallel="cfg+ulysses") == ("sequential", True)
    assert cfg(parallel="ulysses") == (auto, True)


@pytest.mark.parametrize("cuda, cfg", [(True, "batched"), (False, "sequential"), (True, None)])
def test_child_arguments_reproduce_the_options(cuda, cfg, monkeypatch):
    cuda = int(cuda)
    # the checkpoint's DiT is read through resolve_engine; this test is about the arguments
    monkeypatch.setattr("wanscope.wan.options.dit_config", lambda checkpoint, config: config.dit)
    opts = resolve(
        cuda,
        preset="wan2.1-t2v-14b",
        checkpoint=Path("/ckpt"),
        size="1280x720",
        frames=21,
        steps=30,
        warmup=2,
        profile_steps=4,
        compile=True,
        attention="math",
        cfg=cfg,
        legacy_step_lookup=True,
        memory_budget=64.0,
    )
    p = parse_profile(opts.cli_args()).params
    keys = ("preset", "checkpoint", "random_weights", "size", "frames", "steps", "attention", "memory_budget")
    engine = {k: p[k] for k in keys}
    again = resolve(
        cuda,
        warmup=p["warmup"],
        profile_steps=p["profile_steps"],
        compile=p["compile_"],
        cfg=p["cfg"],
        legacy_step_lookup=p["legacy_step_lookup"],
        kernels=p["kernels"],
        **engine,
    )
    assert again == opts
    assert (opts.height, opts.width, opts.profiled_steps) == (720, 1280, [2, 3, 4, 5])


def test_fast_mode_options():
    opts = resolve(0, mode="fast", fast="exact_blocks=0")
    assert (opts.kernels, opts.fast) == ("triton", FastConfig.parse("exact_blocks=0").spec())
    assert resolve(0).fast is None and resolve(0).kernels == "torch"  # auto on a CPU
    ctx = parse_profile(opts.cli_args())
    assert (ctx.params["mode"], ctx.params["fast_spec"], ctx.params["kernels"]) == ("fast", opts.fast, "triton")


BAD = [
    (["--warmup", "3"], "--warmup 3 + --profile-steps 3 exceed the 4-step schedule; raise --steps or lower them"),
    (["--profile-steps", "0"], "--profile-steps must be >= 1, got 0"),
    (["--checkpoint", "ckpt", "--random-weights"], "give --checkpoint DIR or --random-weights, not both"),
    (["--size", "64x60"], "size 64x60: width must be a positive multiple of 16 and height of 16"),
    (["--frames", "6"], "frames must be 4k+1 (1, 5, ..., 81), got 6"),
    (["--checkpoint", "no-such-folder"], "no-such-folder: not a directory"),
    (
        ["--compare-compile", "--compile"],
        "--compare-compile runs eager and compiled under torch.profiler: not with --compile, --nsys or --ncu",
    ),
    (
        ["--compare-compile", "--warmup", "0"],
        "--compare-compile needs --warmup >= 1: compilation would land in the profiled steps",
    ),
    (["--fast", "linears=o"], "--fast SPEC configures the fast mode: add --mode fast"),
    (["--mode", "fast", "--kernels", "torch"], "--mode fast runs the fused Triton kernels; drop --kernels torch"),
    (
        ["--mode", "fast", "--fast", "pv_fp8=yes"],
        "fast-mode spec: pv_fp8=true (e4m3 P V, in attention_int8 only) needs int8_attention=true",
    ),
    (["--mode", "fast", "--fast", "exact_blocks=7"], "fast-mode spec: exact_blocks 7 out of range for 2 blocks"),
    (["--memory-budget", "0"], "--memory-budget must be a positive number of GiB, got 0.0"),
    (
        ["--memory-budget", "0.1"],
        "--memory-budget 0.10 GiB cannot hold this run: the smallest budget that works is 1.26 GiB (the vae stage)",
    ),
]
if not torch.cuda.is_available():
    BAD += [
        (["--nsys"], "--nsys needs a CUDA GPU; this machine has none"),
        (["--ncu", "attention"], "--ncu needs a CUDA GPU; this machine has none"),
    ]


@pytest.mark.parametrize("args, message", BAD)
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["profile", "--preset", "tiny", *args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err == f"wanscope: error: {message}\n"
    assert list(tmp_path.iterdir()) == []
