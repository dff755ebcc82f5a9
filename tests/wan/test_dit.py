"""DiT parity: our WanDiT against diffusers' WanTransformer3DModel and the official WanModel,
fp32 on the CPU, loaded from both checkpoint layouts."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from wan_helpers import TEXT_LEN, TINY_DIFFUSERS_CONFIG, rel_max_err

from wanscope.wan.attention import AttentionBackend
from wanscope.wan.weights import load_dit, official_key


@pytest.fixture(scope="module")
def diffusers_out(diffusers_dit, dit_inputs):
    with torch.no_grad():
        return diffusers_dit(*dit_inputs, return_dict=False)[0]


def test_diffusers_layout_matches_diffusers(diffusers_dit_dir, dit_inputs, diffusers_out):
    model = load_dit(diffusers_dit_dir, dtype=torch.float32)
    with torch.no_grad():
        ours = model(*dit_inputs)
    assert ours.shape == diffusers_out.shape == (1, 16, 3, 8, 12)
    assert ours.dtype == torch.float32
    err = rel_max_err(ours, diffusers_out)
    print(f"diffusers rel max err {err:.2e}")
    assert err <= 1e-5, err


def test_official_layout_sharded_gives_same_output(official_dit_dir, diffusers_dit_dir, dit_inputs):
    official = load_dit(official_dit_dir, dtype=torch.float32)
    diffusers = load_dit(diffusers_dit_dir, dtype=torch.float32)
    assert official.cfg.text_len == TEXT_LEN
    with torch.no_grad():
        err = rel_max_err(official(*dit_inputs), diffusers(*dit_inputs))
    assert err <= 1e-6, err


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_matches_official_wanmodel(official, diffusers_dit, official_dit_dir, dit_inputs):
    c = TINY_DIFFUSERS_CONFIG
    ref = (
        official("model")
        .WanModel(
            model_type="t2v",
            dim=64,
            ffn_dim=c["ffn_dim"],
            freq_dim=c["freq_dim"],
            text_dim=c["text_dim"],
            num_heads=2,
            num_layers=2,
            text_len=TEXT_LEN,
            in_dim=16,
            out_dim=16,
        )
        .eval()
    )
    state = {official_key(k): v for k, v in diffusers_dit.state_dict().items()}
    ref.load_state_dict(state, strict=True)
    latents, timestep, context = dit_inputs
    seq_len = 3 * 4 * 6
    with torch.no_grad():
        theirs = ref([latents[0]], t=timestep, context=[context[0]], seq_len=seq_len)[0][None]
        ours = load_dit(official_dit_dir, dtype=torch.float32)(*dit_inputs)
    err = rel_max_err(ours, theirs)
    print(f"official WanModel rel max err {err:.2e}")
    assert err <= 1e-5, err


def test_batch_of_two_equals_two_batches_of_one(diffusers_dit_dir, dit_inputs):
    model = load_dit(diffusers_dit_dir, dtype=torch.float32)
    latents, timestep, context = dit_inputs
    lat2 = torch.cat([latents, latents.flip(-1)])
    t2 = torch.cat([timestep, timestep / 3])
    ctx2 = torch.cat([context, context.flip(1)])
    with torch.no_grad():
        both = model(lat2, t2, ctx2)
        one = model(lat2[1:], t2[1:], ctx2[1:])
    assert rel_max_err(both[1:], one) <= 1e-6


@pytest.mark.parametrize("backend", [AttentionBackend.MATH, AttentionBackend.FLASH])
def test_forced_cpu_backends_agree_with_default(backend, diffusers_dit_dir, dit_inputs):
    model = load_dit(diffusers_dit_dir, dtype=torch.float32)
    with torch.no_grad():
        ref = model(*dit_inputs)
        model.attention_backend = backend
        assert rel_max_err(model(*dit_inputs), ref) <= 1e-5


def test_bf16_keeps_fp32_islands(diffusers_dit_dir, dit_inputs):
    model = load_dit(diffusers_dit_dir, dtype=torch.bfloat16)
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    assert dtypes["blocks.0.self_attn.q.weight"] == torch.bfloat16
    assert dtypes["blocks.0.ffn.0.weight"] == torch.bfloat16
    for name in (
        "blocks.0.modulation",
        "head.modulation",
        "time_embedding.0.weight",
        "time_projection.1.weight",
        "blocks.0.norm3.weight",
        "blocks.0.self_attn.norm_q.weight",
        "head.head.weight",
    ):
        assert dtypes[name] == torch.float32, name
    ref = load_dit(diffusers_dit_dir, dtype=torch.float32)
    with torch.no_grad():
        out = model(*dit_inputs)
        assert out.dtype == torch.float32
        # bf16 rounding of weights and activations: percent-level, not garbage
        assert rel_max_err(out, ref(*dit_inputs)) < 0.05


def test_resolve_kernels(monkeypatch):
    """auto: the fused Triton kernels on CUDA where Triton is installed and q/k are normalized, the
    torch ops elsewhere; named kernels as they are; other names a one-line UsageError."""
    import importlib.util

    from wanscope.errors import UsageError
    from wanscope.wan.config import KERNEL_CHOICES
    from wanscope.wan.dit import Kernels, resolve_kernels

    assert sorted(KERNEL_CHOICES) == sorted(["auto", *(k.value for k in Kernels)])
    assert resolve_kernels("auto", "cpu") is Kernels.TORCH
    assert resolve_kernels("triton", "cpu") is Kernels.TRITON and resolve_kernels("torch", "cuda") is Kernels.TORCH
    with pytest.raises(UsageError, match="unknown kernels 'fast'"):
        resolve_kernels("fast", "cpu")
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "triton" else found(name))
    assert resolve_kernels("auto", "cuda:0") is Kernels.TRITON
    assert resolve_kernels("auto", "cuda:0", qk_norm=False) is Kernels.TORCH  # e.g. a checkpoint without q/k norm
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "triton" else found(name))
    assert resolve_kernels("auto", "cuda") is Kernels.TORCH
