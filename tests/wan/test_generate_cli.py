"""``wanscope generate`` end to end on the CPU (tiny preset, random weights) and its one-line
errors for bad input (exit code 2, no traceback, nothing written)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
import torch
from PIL import Image

pytest.importorskip("torch")
imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")

from cli_context import run_main
from shared_fixtures import HANG_S
from wan_helpers import write_diffusers_checkpoint, write_official_dit

from wanscope.wan.attention import AttentionBackend, resolve_backend

TINY = ["generate", "--preset", "tiny", "--prompt", "a red fox in the snow"]


def wanscope(*args, cwd=None):
    return run_main(*args, cwd=cwd)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_generate_off_hopper_runs_sdpa_and_the_triton_kernels(tmp_path, mode):
    """The engine with our Hopper attention's dispatch off (what a GPU other than sm_90 runs)."""
    out = tmp_path / "x.mp4"
    args = ["--random-weights", "--size", "64x64", "--frames", "5", "--steps", "2", "--device", "cuda"]
    r = wanscope(*TINY, *args, "--attention", "sdpa", "--mode", mode, "--out", str(out))
    assert r.returncode == 0, r.stderr
    info = json.loads(out.with_suffix(".json").read_text())
    assert (info["attention"], info["attention_ran"], info["kernels_ran"], info["mode"]) == (
        "sdpa",
        "sdpa",
        "triton",
        mode,
    )
    assert (info["fast"] is None) == (mode == "exact")
    assert info["vae_dtype"] == ("bf16" if mode == "fast" else "fp32")


def test_generate_random_weights_writes_decodable_mp4(tmp_path):
    out = tmp_path / "new" / "sub" / "x.mp4"  # its folders are made, as profile --out makes its
    r = wanscope(
        *TINY,
        "--random-weights",
        "--size",
        "64x64",
        "--frames",
        "5",
        "--steps",
        "2",
        "--memory-budget",
        "64",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    plan = "memory plan (budget 64.00 GiB, each stage on its own): text encoder resident (0.50 GiB), dit resident (0.50 GiB), vae all_frames ("
    assert plan in r.stderr
    assert "RANDOM WEIGHTS" in r.stderr and "denoising" in r.stderr
    assert "kept in float32" not in r.stderr  # diffusers' warning on a dtype cast of the VAE
    reader = imageio_ffmpeg.read_frames(str(out))
    meta = reader.__next__()
    frames = list(reader)
    assert meta["size"] == (64, 64)
    assert len(frames) == 5 and all(len(f) == 64 * 64 * 3 for f in frames)
    assert b"RANDOM WEIGHTS" in out.read_bytes()  # the MP4's comment metadata
    info = json.loads(out.with_suffix(".json").read_text())
    assert info["random_weights"] is True and info["note"].startswith("RANDOM WEIGHTS")
    assert (info["frames"], info["height"], info["width"], info["steps"]) == (5, 64, 64, 2)
    # 2 x 4 x 4 = 32 DiT tokens: --cfg auto batches cond and uncond
    assert (info["tokens"], info["cfg"], info["cfg_auto"]) == (32, "batched", True)
    # auto: PyTorch's SDPA off CUDA, our Hopper kernel where it runs
    auto = resolve_backend(AttentionBackend.AUTO, torch.device(info["device"]), torch.bfloat16, 32).value
    assert (info["attention"], info["attention_ran"]) == ("auto", auto)
    assert (info["kernels"], info["kernels_ran"]) == ("auto", "torch" if not torch.cuda.is_available() else "triton")
    assert (info["mode"], info["fast"], info["vae_dtype"]) == ("exact", None, "fp32")
    plan = info["memory_plan"]
    assert (plan["budget_bytes"], plan["text_encoder"], plan["dit"], plan["vae"], plan["vae_tiles"]) == (
        64 << 30,
        "resident",
        "resident",
        "all_frames",
        [1, 1],
    )
    assert set(plan["estimate_bytes"]) == {"text_encoder", "dit", "vae"}
    if not torch.cuda.is_available():
        assert info["peak_memory_bytes"] == {"text_encoding": None, "denoising": None, "vae_decode": None}
        assert info["peak_reserved_bytes"] == info["peak_memory_bytes"]
    stages = info["stage_s"]
    assert list(stages) == [
        "text_encoder_load",
        "text_encoding",
        "dit_load",
        "denoising",
        "vae_load",
        "vae_decode",
        "video_write",
    ]
    assert all(v > 0 for v in stages.values())
    assert len(info["step_s"]) == 2 and all(s > 0 for s in info["step_s"])
    assert (
        sum(info["step_s"]) <= stages["denoising"] <= sum(stages.values()) <= info["elapsed_s"] + stages["video_write"]
    )
    with Image.open(out.with_suffix(".png")) as sheet:
        assert sheet.size == (4 * 64, 2 * 64)  # 5 frames tiled 4 wide
        assert sheet.text["Comment"].startswith("RANDOM WEIGHTS")
    assert sorted(p.name for p in out.parent.iterdir()) == ["x.json", "x.mp4", "x.png"]  # no temp files left


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--random-weights", "--size", "64x60"],
            "size 64x60: width must be a positive multiple of 16 and height of 16",
        ),
        (["--random-weights", "--size", "big"], "--size 'big': expected WIDTHxHEIGHT"),
        (["--random-weights", "--frames", "6"], "frames must be 4k+1"),
        ([], "give --checkpoint DIR or --random-weights"),
        (["--random-weights", "--checkpoint", "ckpt"], "give --checkpoint DIR or --random-weights, not both"),
        (["--random-weights", "--fast", "linears=o"], "--fast SPEC configures the fast mode: add --mode fast"),
        (["--random-weights", "--mode", "fast", "--fast", "linears=up"], "unknown fast-mode linears ['up']"),
        (["--random-weights", "--mode", "fast", "--kernels", "torch"], "--mode fast runs the fused Triton kernels"),
        (
            ["--random-weights", "--mode", "fast", "--parallel", "ulysses"],
            "--mode fast does not run under --parallel ulysses (Ulysses) yet; use --parallel cfg",
        ),
        (
            ["--random-weights", "--mode", "fast", "--fast", "exact_blocks=99"],
            "fast-mode spec: exact_blocks 99 out of range for 2 blocks",
        ),
        (["--random-weights", "--memory-budget", "nan"], "--memory-budget must be a positive number of GiB"),
        (["--random-weights", "--memory-budget", "-2"], "--memory-budget must be a positive number of GiB"),
        (
            ["--random-weights", "--size", "64x64", "--memory-budget", "0.1"],
            "cannot hold this run: the smallest budget that works is",
        ),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, args, message):
    r = wanscope(*TINY, *args, "--out", str(tmp_path / "x.mp4"))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_generate_fast_mode(tmp_path):
    """--mode fast end to end (on a CPU the fused ops and FP8 GEMMs run their torch references;
    INT8 attention only where our Hopper kernel runs): the sidecar names the mode and its config."""
    out = tmp_path / "x.mp4"
    r = wanscope(
        *TINY,
        "--random-weights",
        "--size",
        "64x64",
        "--frames",
        "5",
        "--steps",
        "2",
        "--mode",
        "fast",
        "--fast",
        "exact_blocks=-1",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(out.with_suffix(".json").read_text())
    assert info["mode"] == "fast" and info["kernels_ran"] == "triton"
    assert (
        info["fast"] == "linears=qkv,ffn_up,ffn_down int8_attention=auto pv_fp8=false exact_blocks=-1 fast_accum=true"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "x.mp4", "x.png"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--attention", "hopper"], "--attention hopper needs a CUDA device, got cpu; use auto (the default) or sdpa"),
        (["--kernels", "triton"], "--kernels triton needs a CUDA device"),
        (["--attention", "cudnn"], "--attention cudnn needs a CUDA device"),
        (["--attention", "flash"], "--attention flash needs a CUDA device"),
        (["--device", "bogus"], "--device 'bogus': expected cpu, cuda or cuda:N"),
        (["--device", "meta"], "--device 'meta': expected cpu, cuda or cuda:N"),
    ],
)
def test_device_choices_are_checked_before_any_work(tmp_path, args, message):
    if torch.cuda.is_available() and "--device" not in args:
        pytest.skip("these need a machine without CUDA")
    r = wanscope(*TINY, "--random-weights", "--device", "cpu", *args, "--out", str(tmp_path / "x.mp4"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "out, message",
    [
        ("keep", "is a directory, where an output file goes"),  # an existing folder: never replaced
        ("x.mp4", "x.json: is a directory, where an output file goes"),  # a side file's name
        ("x_frames.mp4", "x_frames_frames: holds files other than PNG frames"),
        ("x.png", "the .png written next to the video would overwrite it"),
        ("x.json", "the .json written next to the video would overwrite it"),
        ("y", "is not a .mp4 path"),  # ffmpeg picks the container from the suffix
        ("y.txt", "is not a .mp4 path"),
        ("fifo.mp4", "fifo.mp4: is a named pipe (FIFO), not a regular file; not replacing it"),
        ("..", "is not a file name"),
        (".", "is not a file name"),
        ("afile/x.mp4", "afile: exists and is not a directory"),
        ("new/sub/x.png", "the .png written next to the video would overwrite it"),  # new/sub made, then removed
        (os.fsdecode(b"v\xff.mp4"), "is not UTF-8 text"),  # the sidecar's JSON could not record it
    ],
)
def test_output_paths_are_checked_before_any_work(tmp_path, out, message):
    """No run starts (and nothing is replaced or deleted) when the outputs cannot be written."""
    work = tmp_path / "work"
    (work / "keep" / "sub").mkdir(parents=True)
    (work / "keep" / "sub" / "a.txt").write_text("mine")
    (work / "x.json").mkdir()
    (work / "x.json" / "b.txt").write_text("mine")
    (work / "x_frames_frames").mkdir()
    (work / "x_frames_frames" / "notes.txt").write_text("mine")
    os.mkfifo(work / "fifo.mp4")
    (work / "afile").write_text("mine")
    before = _tree(tmp_path)
    r = wanscope(*TINY, "--random-weights", "--out", out, cwd=work)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert _tree(tmp_path) == before


def test_a_folder_that_cannot_hold_a_file_is_refused_before_any_work(tmp_path, monkeypatch):
    """As root, os.access calls /proc or a read-only mount writable: a file is tried there."""
    import tempfile

    def refused(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    r = wanscope(*TINY, "--random-weights", "--out", str(tmp_path / "x.mp4"))
    assert (r.returncode, r.stderr) == (
        2,
        f"wanscope: error: {tmp_path / 'x.mp4'}: its folder cannot hold a new file (Read-only file system)\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_the_outputs_are_checked_before_torch_is_imported(tmp_path):
    (tmp_path / "afile").write_text("mine")
    code = (
        "import sys\n"
        "from wanscope.cli import main\n"
        "try:\n"
        f"    main({[*TINY, '--random-weights', '--out', str(tmp_path / 'afile' / 'x.mp4')]!r})\n"
        "except SystemExit as e:\n"
        "    print(e.code, 'torch' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S)
    assert (r.stdout, r.stderr) == (
        "2 False\n",
        f"wanscope: error: {tmp_path / 'afile'}: exists and is not a directory\n",
    )


def test_save_latents_is_never_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "l.pt")
    r = wanscope(*TINY, "--random-weights", "--out", str(tmp_path / "x.mp4"), "--save-latents", str(tmp_path / "l.pt"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "l.pt: is a named pipe (FIFO)" in r.stderr, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["l.pt"]


def test_save_latents_cannot_be_an_output(tmp_path):
    r = wanscope(
        *TINY, "--random-weights", "--out", str(tmp_path / "x.mp4"), "--save-latents", str(tmp_path / "x.json")
    )
    assert r.returncode == 2 and "is one of the video's outputs" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_latents_that_cannot_be_saved_leave_no_outputs(tmp_path, monkeypatch):
    """torch's writer fails (a full disk, /proc, as root): one line naming the path, exit 2, and
    neither the video's outputs nor the latents' temporary file left."""

    def failing_save(obj, f, *args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", failing_save)
    latents = tmp_path / "l.pt"
    r = wanscope(
        *TINY, "--random-weights", "--steps", "1", "--out", str(tmp_path / "x.mp4"), "--save-latents", str(latents)
    )
    assert r.returncode == 2 and r.stderr.splitlines()[-1] == (
        f"wanscope: error: {latents}: cannot save the latents: [enforce fail at inline_container.cc:664] . "
        "unexpected pos 704 vs 598"
    ), r.stderr
    assert list(tmp_path.iterdir()) == []


def test_saved_latents_come_with_the_outputs(tmp_path):
    latents = tmp_path / "l.pt"
    r = wanscope(
        *TINY, "--random-weights", "--steps", "1", "--out", str(tmp_path / "x.mp4"), "--save-latents", str(latents)
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(latents)
    assert torch.load(latents).shape[:2] == (1, 16)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.pt", "x.json", "x.mp4", "x.png"]


def test_empty_prompt(tmp_path):
    r = wanscope("generate", "--preset", "tiny", "--random-weights", "--prompt", "  ", "--out", str(tmp_path / "x.mp4"))
    assert (r.returncode, r.stderr) == (2, "wanscope: error: the prompt is empty\n")


def test_directory_that_is_no_checkpoint(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "notes.txt").write_text("hi")
    r = wanscope(*TINY, "--checkpoint", str(tmp_path / "ckpt"), "--out", str(tmp_path / "x.mp4"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"{tmp_path / 'ckpt'}: not a Wan2.1 checkpoint; expected official: config.json" in r.stderr
    assert "diffusers: model_index.json, transformer/" in r.stderr


def test_checkpoint_with_wrong_shapes(tmp_path, diffusers_dit_dir):
    """A complete official-layout folder whose DiT weights do not fit its config.json."""
    import torch
    from safetensors.torch import load_file, save_file

    ckpt = write_official_dit(tmp_path / "ckpt", diffusers_dit_dir)
    weights = ckpt / "diffusion_pytorch_model.safetensors"
    tensors = load_file(weights)
    tensors["blocks.1.ffn.0.weight"] = torch.zeros(100, 64)
    save_file(tensors, weights)
    (ckpt / "models_t5_umt5-xxl-enc-bf16.pth").write_bytes(b"")
    (ckpt / "Wan2.1_VAE.pth").write_bytes(b"")
    (ckpt / "google" / "umt5-xxl").mkdir(parents=True)
    r = wanscope(*TINY, "--checkpoint", str(ckpt), "--out", str(tmp_path / "x.mp4"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr == (
        f"wanscope: error: {ckpt}: blocks.1.ffn.0.weight has shape (100, 64), the config needs (128, 64)\n"
    )
    assert not (tmp_path / "x.mp4").exists()
    from wanscope.errors import InputError
    from wanscope.wan.weights import load_dit

    with pytest.raises(
        InputError, match=r"blocks\.1\.ffn\.0\.weight has shape \(100, 64\), the config needs \(128, 64\)"
    ):
        load_dit(ckpt, dtype=torch.float32)
    tensors.pop("blocks.1.ffn.0.weight")
    tensors["blocks.1.extra"] = torch.zeros(1)
    save_file(tensors, weights)
    with pytest.raises(InputError, match=r"missing keys: blocks\.1\.ffn\.0\.weight; unexpected keys: blocks\.1\.extra"):
        load_dit(ckpt, dtype=torch.float32)


def test_a_text_encoder_narrower_than_the_dit_takes_is_refused_before_loading(tmp_path, diffusers_dit):
    root = write_diffusers_checkpoint(tmp_path / "ckpt", diffusers_dit)
    config = root / "text_encoder" / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"d_model": 48}))
    r = wanscope(*TINY, "--checkpoint", str(root), "--out", str(tmp_path / "x.mp4"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr == f"wanscope: error: {config}: the text encoder's states are 48 wide, the DiT's text_dim is 32\n"
    assert not (tmp_path / "x.mp4").exists()


def test_generate_from_diffusers_layout_checkpoint(tmp_path, diffusers_dit):
    """A complete tiny diffusers-layout folder (transformer, UMT5 encoder, word-level tokenizer,
    VAE) is detected and runs end to end; its outputs do not claim random weights."""
    root = write_diffusers_checkpoint(tmp_path / "ckpt", diffusers_dit)
    out = tmp_path / "real.mp4"
    r = wanscope(
        *TINY,
        "--checkpoint",
        str(root),
        "--size",
        "32x32",
        "--frames",
        "5",
        "--steps",
        "2",
        "--cfg",
        "sequential",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert "RANDOM" not in r.stderr
    info = json.loads(out.with_suffix(".json").read_text())
    assert info["random_weights"] is False and info["note"] is None and info["checkpoint"] == str(root)
    assert (info["cfg"], info["cfg_auto"]) == ("sequential", False)  # the explicit mode, not auto's batched
    reader = imageio_ffmpeg.read_frames(str(out))
    assert reader.__next__()["size"] == (32, 32) and len(list(reader)) == 5


@pytest.mark.cpu_only(reason="the CPU default")
def test_random_weights_on_a_cpu_default_to_the_tiny_preset(tmp_path):
    out = tmp_path / "x.mp4"
    r = wanscope("generate", "--random-weights", "--prompt", "a cat", "--steps", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    info = json.loads(out.with_suffix(".json").read_text())
    assert (info["preset"], info["height"], info["width"], info["frames"]) == ("tiny", 64, 64, 5)
