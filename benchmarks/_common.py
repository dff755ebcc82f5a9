"""Timing, error, output and diffusers-model helpers shared by the benchmark scripts
(``attention_sweep.py``, ``dit_forward.py``, ``fast_mode.py``, ``kernels_bench.py``,
``pipeline_e2e.py``, ``multi_gpu.py``, ``vae_decode.py``, ``write_checkpoint.py``). Imported after each script has set its environment (compile
caches) and put ``src`` on the path.

Result files are ``NAME-YYYY-MM-DD[-label].json`` (``--label``: what the run was) and carry the
commit they ran at; on a copy of the tree without ``.git`` (a device machine), set
``WANSCOPE_COMMIT=$(git rev-parse --short HEAD)`` from the checkout that sent it."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from pathlib import Path

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_ms(fn, device: torch.device, warmup: int, repeats: int) -> tuple[list[float], object]:
    """Per-call times in ms of ``repeats`` calls after ``warmup`` calls (CUDA events on the GPU,
    perf_counter on the CPU), and the last call's result."""
    out = None
    for _ in range(warmup):
        out = fn()
    sync(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            times.append((start, end))
        else:
            t0 = time.perf_counter()
            out = fn()
            times.append((time.perf_counter() - t0) * 1e3)
    sync(device)
    if device.type == "cuda":
        times = [s.elapsed_time(e) for s, e in times]
    return times, out


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64."""
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def attention_f64(q, k, v, chunk: int = 4096) -> torch.Tensor:
    """Softmax attention in float64, query rows in chunks: [B, L, N, D] -> [B, L, N, D] fp64
    (a [B, N, chunk, L] fp64 score block at a time: 12.9 GB at 1.3B/480p)."""
    l, d = q.shape[1], q.shape[3]
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    kd, vd = k.double().transpose(1, 2), v.double().transpose(1, 2)  # [B, N, L, D]
    for i in range(0, l, chunk):
        qd = q[:, i : i + chunk].double().transpose(1, 2)  # [B, N, c, D]
        p = torch.softmax(qd @ kd.transpose(-1, -2) / math.sqrt(d), dim=-1)
        out[:, i : i + chunk] = (p @ vd).transpose(1, 2)
    return out


def self_attention_inputs(model, *inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The q, k, v [B, L, N, D] that the first block's self-attention receives in one forward of
    ``model`` (a ``WanDiT`` on the exact path: its ``attend`` is the dispatch), as copies."""
    attn = model.blocks[0].self_attn
    seen = []

    def recording(q, k, v, backend):
        if not seen:
            seen.extend(t.detach().clone() for t in (q, k, v))
        return dispatch(q, k, v, backend)

    dispatch = attn.attend
    attn.attend = recording
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        attn.attend = dispatch
    return tuple(seen)


def version(module: str) -> str | None:
    """``module.__version__``, or None where it is not installed."""
    try:
        return __import__(module).__version__
    except ImportError:
        return None


REPO = Path(__file__).resolve().parents[1]
# a result file's label says what the run was (``int8-3wg-a``, ``whole-model-compile``)
_LABEL = re.compile(r"[a-z0-9][a-z0-9.+-]*")
_WORK_PERIOD = re.compile(r"(?:session|run)-?[0-9]+")


def git_commit(repo: Path = REPO) -> str | None:
    """The commit the benchmark runs at: ``WANSCOPE_COMMIT`` where it is set (a copy of the tree
    without ``.git``, such as a device machine's), else ``git rev-parse --short HEAD`` in ``repo``;
    None outside a git checkout or without git. Uncommitted changes are not seen here: run on a
    committed tree, or say what was uncommitted in RESULTS.md."""
    if os.environ.get("WANSCOPE_COMMIT"):
        return os.environ["WANSCOPE_COMMIT"]
    try:
        run = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout.strip() or None if run.returncode == 0 else None


def result_name(name: str, date: str, label: str | None = None, smoke: bool = False) -> str:
    """``NAME-YYYY-MM-DD[-label][-smoke].json``. ValueError for a label that is not lower-case
    letters, digits, '.', '+' and '-', or that names a work period (``session7``, ``run-10``)
    instead of what the run was."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ValueError(f"date {date!r}: not YYYY-MM-DD")
    if label is not None and (not _LABEL.fullmatch(label) or _WORK_PERIOD.search(label)):
        raise ValueError(f"label {label!r}: lower-case letters, digits, '.', '+', '-', saying what the run was")
    return f"{name}-{date}{f'-{label}' if label else ''}{'-smoke' if smoke else ''}.json"


def result_label(label: str) -> str:
    """``label`` if ``result_name`` takes it (an argparse ``type``: a bad ``--label`` is refused
    before the run instead of at its end); ValueError otherwise."""
    result_name("x", "2000-01-01", label)
    return label


def write_result(out_dir: Path, name: str, result: dict, label: str | None = None) -> Path:
    """``result`` as ``out_dir/<name>-<date>[-label][-smoke].json`` (``result_name``), written
    through a temporary name, with ``result["commit"]`` set to ``git_commit()`` unless the result
    already has one."""
    path = out_dir / result_name(name, result["date"], label, bool(result.get("smoke")))
    result.setdefault("commit", git_commit())
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{path.name}.partial"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def diffusers_config(cfg) -> dict:
    """WanTransformer3DModel arguments for our ``wan.config.DiTConfig`` ``cfg``."""
    return dict(
        patch_size=cfg.patch_size,
        num_attention_heads=cfg.num_heads,
        attention_head_dim=cfg.head_dim,
        in_channels=cfg.in_channels,
        out_channels=cfg.out_channels,
        text_dim=cfg.text_dim,
        freq_dim=cfg.freq_dim,
        ffn_dim=cfg.ffn_dim,
        num_layers=cfg.num_layers,
        cross_attn_norm=cfg.cross_attn_norm,
        qk_norm="rms_norm_across_heads",
        eps=cfg.eps,
    )


def diffusers_bf16(model, dtype):
    """Cast as ``from_pretrained(torch_dtype=bf16)`` does: modules named in
    ``_keep_in_fp32_modules`` stay fp32."""
    keep = set(model._keep_in_fp32_modules or [])
    for name, p in model.named_parameters():
        p.data = p.data.to(torch.float32 if keep & set(name.split(".")) else dtype)
    return model


def diffusers_vae(cfg, state: dict | None = None, device="cpu"):
    """diffusers' ``AutoencoderKLWan`` of our ``wan.config.VAEConfig`` ``cfg`` on ``device``, fp32,
    eval: random (its own initialization), or holding the decoder tensors of ``state`` (a
    ``wan.vae_decoder.VAEDecoder`` state dict: the names are the same; the encoder, which no
    decode runs, keeps its random values).

    Raises:
        AssertionError: ``state`` is not the decoder of ``cfg``.
    """
    from diffusers import AutoencoderKLWan

    with torch.device(device):
        vae = AutoencoderKLWan(
            base_dim=cfg.base_dim,
            z_dim=cfg.z_dim,
            dim_mult=list(cfg.dim_mult),
            num_res_blocks=cfg.num_res_blocks,
            temperal_downsample=list(cfg.temporal_downsample),
            latents_mean=list(cfg.latents_mean),
            latents_std=list(cfg.latents_std),
        )
    if state is not None:
        missing, unexpected = vae.load_state_dict(state, strict=False)
        assert not unexpected and all(k.startswith(("encoder.", "quant_conv.")) for k in missing), unexpected
    return vae.eval().requires_grad_(False)
