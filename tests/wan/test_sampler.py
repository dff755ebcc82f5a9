"""Sampler parity: our sync-free UniPC and Euler against diffusers' schedulers and the official
FlowUniPCMultistepScheduler, driven by the same toy velocity model for 10 steps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from wan_helpers import rel_max_err

from wanscope.errors import UsageError
from wanscope.wan.sampler import FlowSampler, flow_schedule

STEPS, SHIFT = 10, 5.0


def toy_velocity(x: torch.Tensor, t: float) -> torch.Tensor:
    """A smooth nonlinear stand-in for the DiT: depends on x and on the timestep."""
    return torch.tanh(x) * (0.5 + t / 1000) + 0.3 * x.roll(1, -1) - 0.1


def run_ours(schedule, solver, x, timesteps=None):
    sampler = FlowSampler(schedule, solver)
    for i, t in enumerate(timesteps or schedule.timesteps):
        x = sampler.step(i, x, toy_velocity(x, t))
    return x


def run_reference(scheduler, x):
    for t in scheduler.timesteps:
        x = scheduler.step(toy_velocity(x, float(t)), t, x, return_dict=False)[0]
    return x


@pytest.fixture
def noise():
    return torch.randn(1, 4, 3, 6, 5, generator=torch.Generator().manual_seed(0))


def test_unipc_matches_diffusers(noise):
    from diffusers import UniPCMultistepScheduler

    ref = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=SHIFT)
    ref.set_timesteps(STEPS)
    schedule = flow_schedule(STEPS, SHIFT, schedule="diffusers")
    assert schedule.timesteps == tuple(float(t) for t in ref.timesteps.tolist())
    assert schedule.sigmas == tuple(ref.sigmas.tolist())
    err = rel_max_err(run_ours(schedule, "unipc", noise), run_reference(ref, noise))
    print(f"UniPC vs diffusers: {err:.2e}")
    assert err <= 1e-5


def test_unipc_matches_official(noise):
    """The official solver (wan22's wan/utils/fm_solvers_unipc.py; it imports only diffusers)."""
    import importlib.util

    spec = importlib.util.find_spec("wan")
    if spec is None:
        pytest.skip("the official code (pip install --no-deps wan22) is not installed")
    path = f"{spec.submodule_search_locations[0]}/utils/fm_solvers_unipc.py"
    mspec = importlib.util.spec_from_file_location("wan_official_fm_solvers_unipc", path)
    module = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(module)
    ref = module.FlowUniPCMultistepScheduler(num_train_timesteps=1000, shift=1, use_dynamic_shifting=False)
    ref.set_timesteps(STEPS, shift=SHIFT)
    schedule = flow_schedule(STEPS, SHIFT, schedule="official")
    assert schedule.timesteps == tuple(float(t) for t in ref.timesteps.tolist())
    assert schedule.sigmas == tuple(ref.sigmas.tolist())
    err = rel_max_err(run_ours(schedule, "unipc", noise), run_reference(ref, noise))
    print(f"UniPC vs official: {err:.2e}")
    assert err <= 1e-5


def test_euler_matches_diffusers(noise):
    from diffusers import FlowMatchEulerDiscreteScheduler

    schedule = flow_schedule(STEPS, SHIFT, schedule="diffusers")
    ref = FlowMatchEulerDiscreteScheduler(shift=1.0)
    ref.set_timesteps(sigmas=list(schedule.sigmas[:-1]))
    timesteps = [float(t) for t in ref.timesteps]
    err = rel_max_err(run_ours(schedule, "euler", noise, timesteps), run_reference(ref, noise))
    assert err <= 1e-5, err


def test_solvers_are_exact_on_a_straight_flow():
    """With a perfect denoiser for a fixed x0 (v = (x - x0)/sigma) the flow is a straight line:
    both solvers must land on x0 (the final sigma is 0, so the last step returns the x0 guess)."""
    x0 = torch.linspace(-1, 1, 24).reshape(1, 2, 3, 2, 2)
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(3))
    schedule = flow_schedule(STEPS, SHIFT)
    for solver in ("unipc", "euler"):
        sampler, x = FlowSampler(schedule, solver), noise.clone()
        for i in range(STEPS):
            x = sampler.step(i, x, (x - x0) / schedule.sigmas[i])
        assert torch.allclose(x, x0, atol=1e-5), solver


def test_official_schedule_values():
    s = flow_schedule(50, 5.0)
    assert s.steps == 50 and len(s.sigmas) == 51 and s.sigmas[-1] == 0.0
    assert s.timesteps[0] == 999.0  # trunc(1000 * shift(0.999))
    assert s.sigmas[0] == pytest.approx(5 * 0.999 / (1 + 4 * 0.999), rel=1e-7)
    assert list(s.sigmas) == sorted(s.sigmas, reverse=True)


@pytest.mark.parametrize(
    "kwargs", [dict(steps=0, shift=5.0), dict(steps=4, shift=0.0), dict(steps=4, shift=5.0, schedule="karras")]
)
def test_bad_schedule_arguments(kwargs):
    with pytest.raises(UsageError):
        flow_schedule(**kwargs)
