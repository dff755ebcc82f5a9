"""``wanscope compare-modes`` end to end on the CPU, on a tiny diffusers-layout checkpoint made
here: its numbers against an independent scoring of the same videos, identical modes, and
one-line errors for bad input (exit code 2, nothing written)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")  # both modes run the fused kernels' torch references on the CPU

from test_quality import _ssim_direct
from wan_helpers import write_diffusers_checkpoint

from wanscope.wan.compare import compare_modes
from wanscope.wan.config import get_preset
from wanscope.wan.pipeline import Components, Request
from wanscope.wan.precision import FastConfig

SIZE = ["--preset", "tiny", "--size", "32x32", "--frames", "5", "--steps", "2", "--device", "cpu"]


def wanscope(*args, cwd):
    # the kernel tests' interpreter setting must not leak into the command: the CPU runs the
    # torch references here, as a user's CPU would
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, "-m", "wanscope", *args], capture_output=True, text=True, cwd=cwd, env=env, check=False
    )


@pytest.fixture(scope="module")
def checkpoint(diffusers_dit, tmp_path_factory):
    return write_diffusers_checkpoint(tmp_path_factory.mktemp("compare") / "ckpt", diffusers_dit)


def test_json_matches_an_independent_scoring(checkpoint, tmp_path, monkeypatch):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# my prompts\n\nthe snow\n")
    r = wanscope(
        "compare-modes",
        "--checkpoint",
        str(checkpoint),
        *SIZE,
        "--prompt",
        "a red fox in the snow",
        "--prompts-file",
        str(prompts),
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [p["prompt"] for p in doc["prompts"]] == ["a red fox in the snow", "the snow"]
    assert (doc["width"], doc["height"], doc["frames"], doc["steps"], doc["seed"]) == (32, 32, 5, 2, 0)
    assert doc["fast"]["spec"] == FastConfig().spec() and doc["dtype"] == "fp32"

    # the same two runs in this process, scored here by numpy: PSNR from its formula, SSIM
    # window by window (test_quality._ssim_direct)
    from wanscope.kernels import _dispatch

    monkeypatch.setattr(_dispatch, "INTERPRET", False)
    parts = Components(
        config=get_preset("tiny"), device=torch.device("cpu"), dtype=torch.float32, checkpoint=checkpoint
    )
    s = parts.config.sampling
    reqs = [
        Request(p, s.negative_prompt, 32, 32, 5, 2, s.guidance, s.shift, 0)
        for p in ("a red fox in the snow", "the snow")
    ]
    result = compare_modes(parts, reqs, FastConfig(), keep_frames=True)
    mses = []
    for got, score in zip(doc["prompts"], result.scores):
        exact, fast = score.exact_frames.numpy(), score.fast_frames.numpy()
        assert exact.shape == (5, 32, 32, 3) and exact.dtype == np.uint8
        mse = np.mean((fast / 255.0 - exact / 255.0) ** 2)
        assert 0 < mse < 1e-2  # the fast mode differs, a little
        mses.append(mse)
        assert got["psnr_db"] == pytest.approx(10 * math.log10(1 / mse), abs=1e-4)
        assert got["ssim"] == pytest.approx(_ssim_direct(fast, exact), abs=1e-6)
        assert got["identical"] is False and 0 < got["ssim"] < 1
    assert doc["overall"]["psnr_db"] == pytest.approx(10 * math.log10(1 / np.mean(mses)), abs=1e-4)
    assert doc["overall"]["ssim"] == pytest.approx(np.mean([p["ssim"] for p in doc["prompts"]]), abs=1e-6)
    assert doc["overall"]["worst_psnr_db"] == min(p["psnr_db"] for p in doc["prompts"])
    assert list(tmp_path.iterdir()) == [prompts]  # prints, writes nothing


def test_identical_modes_give_infinite_psnr_and_ssim_1(checkpoint, tmp_path):
    """A fast mode with nothing in low precision is the exact path op for op on the CPU."""
    r = wanscope(
        "compare-modes",
        "--checkpoint",
        str(checkpoint),
        *SIZE,
        "--prompt",
        "a red fox",
        "--fast",
        "linears=none int8_attention=no",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "fast: linears=none int8_attention=false" in lines[1]
    assert lines[3].split()[-2:] == ["inf", "1.0000"] and lines[4].split()[-2:] == ["inf", "1.0000"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--checkpoint", "{tmp}/nowhere"], "{tmp}/nowhere: not a directory"),
        (["--prompts-file", "{tmp}/missing.txt"], "{tmp}/missing.txt: no such file"),
        (["--prompts-file", "{tmp}/comments.txt"], "{tmp}/comments.txt: no prompts (one per line"),
        (["--prompts-file", "{tmp}/latin1.txt"], "{tmp}/latin1.txt: not UTF-8 text"),
        (["--prompts-file", "{tmp}"], "{tmp}: not a regular file"),
        (["--fast", "linears=ffn,up"], "unknown fast-mode linears ['up']"),
        (["--prompt", "  "], "the prompt is empty"),
        (["--size", "30x32"], "size 30x32: width must be a positive multiple of 16"),
    ],
)
def test_bad_input_is_one_line(checkpoint, tmp_path, args, message, capsys, monkeypatch):
    """Through the CLI's entry point in this process (every check comes before a model loads)."""
    from wanscope.cli import main

    (tmp_path / "comments.txt").write_text("# nothing\n\n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    before = sorted(tmp_path.iterdir())
    monkeypatch.chdir(tmp_path)
    args = [a.format(tmp=tmp_path) for a in args]
    if "--checkpoint" not in args:
        args = ["--checkpoint", str(checkpoint), *args]
    with pytest.raises(SystemExit) as exit_info:
        main(["compare-modes", *SIZE, *args])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == ""
    assert err.startswith(f"wanscope: error: {message.format(tmp=tmp_path)}") and err.count("\n") == 1, err
    assert sorted(tmp_path.iterdir()) == before
