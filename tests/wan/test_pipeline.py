"""The denoising loop is sync-free: under torch.profiler on the CPU the loop range holds the
expected DiT forwards and no op that reads the device from the host; a deliberate .item() in
the loop (the legacy step lookup) is caught by the same check. On CUDA the loop also runs
under torch.cuda.set_sync_debug_mode("error")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from wanscope.errors import UsageError
from wanscope.wan import ranges
from wanscope.wan.config import CFG_BATCHED_MAX_TOKENS, PRESETS, dit_tokens, resolve_cfg
from wanscope.wan.pipeline import Components, Request, denoise, initial_noise, latent_shape
from wanscope.wan.sampler import FlowSampler, flow_schedule

SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero")
STEPS = 3
CFG = PRESETS["tiny"]


def tiny_loop_inputs(device="cpu"):
    dit = Components(config=CFG, device=torch.device(device), dtype=torch.float32).dit()
    g = torch.Generator().manual_seed(0)
    cond = torch.randn(1, CFG.dit.text_len, CFG.dit.text_dim, generator=g).to(device)
    uncond = torch.randn(1, CFG.dit.text_len, CFG.dit.text_dim, generator=g).to(device)
    noise = initial_noise(latent_shape(CFG, 32, 48, 5), 0, torch.device(device))
    return dit, noise, cond, uncond


def profile_loop(legacy: bool, cfg: str = "sequential"):
    """Op names inside the denoising-loop range, counted."""
    dit, noise, cond, uncond = tiny_loop_inputs()
    sampler = FlowSampler(flow_schedule(STEPS, 5.0), "unipc", legacy_step_lookup=legacy)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        denoise(dit, noise, cond, uncond, sampler, guidance=5.0, cfg=cfg)
    events = prof.events()
    (loop,) = [e for e in events if e.name == ranges.DENOISE]
    counts: dict[str, int] = {}
    for e in events:
        if loop.time_range.start <= e.time_range.start and e.time_range.end <= loop.time_range.end:
            counts[e.name] = counts.get(e.name, 0) + 1
    return counts


def test_loop_has_no_syncs_and_expected_forwards():
    counts = profile_loop(legacy=False)
    assert {op: counts.get(op, 0) for op in SYNC_OPS} == {op: 0 for op in SYNC_OPS}
    # one patch-embedding convolution per DiT forward: cond and uncond at every step
    assert counts["aten::conv3d"] == 2 * STEPS
    assert counts[ranges.CFG_COND] == counts[ranges.CFG_UNCOND] == STEPS
    assert all(counts[ranges.STEP.format(i)] == 1 for i in range(STEPS))
    blocks = CFG.dit.num_layers * 2 * STEPS
    assert counts[ranges.SELF_ATTN] == counts[ranges.CROSS_ATTN] == counts[ranges.FFN] == blocks


def test_positive_control_legacy_lookup_is_detected():
    counts = profile_loop(legacy=True)
    assert counts["aten::item"] == STEPS  # one nearest-sigma .item() per step
    assert counts["aten::conv3d"] == 2 * STEPS


def test_batched_cfg_is_one_forward_per_step_and_matches_sequential():
    counts = profile_loop(legacy=False, cfg="batched")
    assert counts["aten::conv3d"] == STEPS and counts[ranges.CFG_BATCHED] == STEPS
    assert sum(counts.get(op, 0) for op in SYNC_OPS) == 0
    dit, noise, cond, uncond = tiny_loop_inputs()
    out = {}
    for mode in ("sequential", "batched"):
        sampler = FlowSampler(flow_schedule(STEPS, 5.0))
        out[mode] = denoise(dit, noise, cond, uncond, sampler, guidance=5.0, cfg=mode)
    err = ((out["batched"] - out["sequential"]).abs().max() / out["sequential"].abs().max()).item()
    assert err <= 1e-5, err


# The two sizes of the H200 measurement behind CFG_BATCHED_MAX_TOKENS (benchmarks/RESULTS.md,
# "2026-11-30: DiT forward, all contenders in one run, and CFG batching"):
# (width, height, frames), L, the mode --cfg auto picks
MEASURED = [((832, 480, 81), 32_760, "sequential"), ((416, 240, 21), 2_340, "batched")]


@pytest.mark.parametrize("size, tokens, mode", MEASURED)
def test_auto_cfg_picks_the_faster_mode_at_the_measured_sizes(size, tokens, mode):
    width, height, frames = size
    config = PRESETS["wan2.1-t2v-1.3b"]
    assert dit_tokens(config, height, width, frames) == tokens
    assert resolve_cfg("auto", tokens) == mode
    s = config.sampling
    req = Request("a fox", "", height, width, frames, s.steps, s.guidance, s.shift, 0)
    assert req.cfg == s.cfg == "auto"
    assert req.with_cfg_resolved(config).cfg == mode
    # explicit modes are kept; CFG parallel runs one B=1 branch per rank
    for explicit in ("sequential", "batched"):
        assert (
            Request("a fox", "", height, width, frames, 50, 5.0, 5.0, 0, cfg=explicit).with_cfg_resolved(config).cfg
            == explicit
        )
    assert req.with_cfg_resolved(config, cfg_parallel=True).cfg == "sequential"


def test_auto_cfg_threshold_is_inclusive_and_unknown_modes_fail():
    assert resolve_cfg("auto", CFG_BATCHED_MAX_TOKENS) == "batched"
    assert resolve_cfg("auto", CFG_BATCHED_MAX_TOKENS + 1) == "sequential"
    with pytest.raises(UsageError, match="unknown cfg mode 'parallel'; known: auto, sequential, batched"):
        resolve_cfg("parallel", 100)
    dit, noise, cond, uncond = tiny_loop_inputs()
    with pytest.raises(UsageError, match="denoise runs cfg 'sequential' or 'batched', got 'auto'"):
        denoise(dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), 5.0, cfg="auto")


def test_window_of_steps_with_callback_equals_full_run():
    """Issue 4 runs warm-up steps, then profiled steps: two windows must equal one run."""
    dit, noise, cond, uncond = tiny_loop_inputs()
    full = denoise(dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), guidance=5.0)
    seen = []
    sampler = FlowSampler(flow_schedule(STEPS, 5.0))
    x = denoise(dit, noise, cond, uncond, sampler, 5.0, stop=1, on_step=lambda i, _x: seen.append(i))
    x = denoise(dit, x, cond, uncond, sampler, 5.0, start=1, on_step=lambda i, _x: seen.append(i))
    assert seen == [0, 1, 2]
    assert torch.equal(x, full)


@pytest.mark.gpu
def test_cuda_loop_runs_under_sync_debug_error():
    dit, noise, cond, uncond = tiny_loop_inputs("cuda")
    sampler = FlowSampler(flow_schedule(STEPS, 5.0))
    denoise(dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), 5.0)  # warm-up, caches
    sampler.device_timesteps(noise.device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = denoise(dit, noise, cond, uncond, sampler, guidance=5.0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.shape == noise.shape and torch.isfinite(out).all()


@pytest.mark.parametrize(
    ("device", "fast", "expected"),
    [("cuda", True, torch.bfloat16), ("cuda", False, torch.float32), ("cpu", True, torch.float32)],
)
def test_vae_dtype_is_bf16_only_in_the_fast_mode_on_cuda(device, fast, expected):
    from wanscope.wan.precision import FastConfig

    parts = Components(
        config=CFG, device=torch.device(device), dtype=torch.bfloat16, fast=FastConfig() if fast else None
    )
    assert parts.vae_dtype == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the bf16 VAE decode is the fast mode's on CUDA")
def test_fast_mode_vae_decodes_in_bf16_close_to_fp32():
    from wanscope.wan.precision import FastConfig
    from wanscope.wan.vae import decode

    device = torch.device("cuda")
    latents = torch.randn(latent_shape(CFG, 32, 48, 5), generator=torch.Generator().manual_seed(0)).to(device)
    fp32 = decode(Components(config=CFG, device=device, dtype=torch.bfloat16).vae(), latents, CFG.vae)
    vae = Components(config=CFG, device=device, dtype=torch.bfloat16, fast=FastConfig()).vae()
    assert next(vae.parameters()).dtype == torch.bfloat16
    bf16 = decode(vae, latents, CFG.vae)
    assert bf16.dtype == torch.float32 and bf16.shape == fp32.shape
    psnr = 10 * torch.log10(4 / torch.mean((bf16 - fp32) ** 2)).item()  # over [-1, 1]: peak-to-peak 2
    assert psnr > 35, psnr
