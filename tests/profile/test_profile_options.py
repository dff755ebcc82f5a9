"""Profile options: defaults by machine, the child's argument list reproduces the options, and
bad arguments are one-line errors (exit 2) that write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from wanscope.cli import main  # noqa: E402
from wanscope.profile.cli import profile  # noqa: E402
from wanscope.profile.options import resolve  # noqa: E402


def test_defaults_by_machine():
    gpu, cpu = resolve(cuda=True), resolve(cuda=False)
    assert (gpu.preset, gpu.width, gpu.height, gpu.frames, gpu.steps, gpu.device, gpu.dtype) == (
        "wan2.1-t2v-1.3b", 832, 480, 81, 50, "cuda", "bf16")
    assert (cpu.preset, cpu.width, cpu.height, cpu.frames, cpu.steps, cpu.device, cpu.dtype) == (
        "tiny", 64, 64, 5, 4, "cpu", "fp32")
    for o in (gpu, cpu):
        assert (o.warmup, o.profile_steps, o.profiled_steps, o.random_weights) == (1, 3, [1, 2, 3], True)
        assert (o.attention, o.cfg, o.compile, o.legacy_step_lookup) == ("sdpa", "sequential", False, False)


@pytest.mark.parametrize("cuda", [True, False])
def test_child_arguments_reproduce_the_options(cuda):
    opts = resolve(cuda, preset="wan2.1-t2v-14b", checkpoint=Path("/ckpt"), size="1280x720", frames=21,
                   steps=30, warmup=2, profile_steps=4, compile=True, attention="flash", cfg="batched",
                   legacy_step_lookup=True)
    ctx = profile.make_context("profile", opts.cli_args())
    p = ctx.params
    again = resolve(cuda, p["preset"], p["checkpoint"], p["random_weights"], p["size"], p["frames"], p["steps"],
                    p["warmup"], p["profile_steps"], p["compile_"], p["attention"], p["cfg"], p["legacy_step_lookup"])
    assert again == opts
    assert (opts.height, opts.width, opts.profiled_steps) == (720, 1280, [2, 3, 4, 5])


BAD = [
    (["--warmup", "3"], "--warmup 3 + --profile-steps 3 exceed the 4-step schedule; raise --steps or lower them"),
    (["--profile-steps", "0"], "--profile-steps must be >= 1, got 0"),
    (["--checkpoint", "ckpt", "--random-weights"], "give --checkpoint DIR or --random-weights, not both"),
    (["--size", "64x60"], "size 64x60: width must be a positive multiple of 16 and height of 16"),
    (["--frames", "6"], "frames must be 4k+1 (1, 5, ..., 81), got 6"),
    (["--checkpoint", "no-such-folder"], "no-such-folder: not a directory"),
    (["--compare-compile", "--compile"],
     "--compare-compile runs eager and compiled under torch.profiler: not with --compile, --nsys or --ncu"),
    (["--compare-compile", "--warmup", "0"],
     "--compare-compile needs --warmup >= 1: compilation would land in the profiled steps"),
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
