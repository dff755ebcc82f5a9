"""Flow-matching samplers without host syncs: UniPC (order 2, B(h) = expm1(h), "bh2") and Euler.

Flow matching (Wan2.1 report, arXiv:2503.20314): ``x_sigma = (1 - sigma) x0 + sigma noise`` and
the DiT predicts the velocity ``v = noise - x0``, so ``x0 = x - sigma v``. UniPC (Zhao et al.,
arXiv:2302.04867) treats it as a data-prediction solver with ``alpha = 1 - sigma`` and
``lambda = log(alpha / sigma)``: a predictor (UniP) step from each ``x_i`` and a corrector
(UniC) that refines ``x_i`` once the model output at ``x_i`` is known. Order-2 predictor with
``rho = 1/2``, order warm-up at the first step and order 1 at the last, corrector from the
second step on: the behaviour of the official ``wan/utils/fm_solvers_unipc.py`` and diffusers'
``UniPCMultistepScheduler(use_flow_sigmas=True, prediction_type="flow_prediction")``.

Everything that depends only on the schedule (sigmas, timesteps, every update coefficient) is
computed once on the host in float64 before the loop, so each step is a few tensor-times-Python-
float operations: no ``.item()``, ``nonzero`` or host comparison of device tensors. The step
index comes from the caller's loop. ``legacy_step_lookup=True`` restores the naive lookup (the
nearest sigma found on the device, then ``.item()``), which syncs once per step, for the
profiling demonstration of issue 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from wanscope.errors import UsageError

SOLVERS = ("unipc", "euler")
SCHEDULES = ("official", "diffusers")


def _f32(x: float) -> float:
    """``x`` rounded to float32: both references store the schedule in float32."""
    return torch.tensor(x, dtype=torch.float32).item()


@dataclass(frozen=True)
class FlowSchedule:
    """A sampling schedule.

    Attributes:
        sigmas: N+1 noise levels (float32 values), from about 1 down to 0.
        timesteps: N DiT timesteps, ``trunc(1000 * sigma)`` (both references pass integers).
    """

    sigmas: tuple[float, ...]
    timesteps: tuple[float, ...]

    @property
    def steps(self) -> int:
        return len(self.timesteps)


def flow_schedule(
    steps: int, shift: float, schedule: str = "official", num_train_timesteps: int = 1000
) -> FlowSchedule:
    """Shifted flow-matching sigmas ``shift*s / (1 + (shift-1)*s)`` on an evenly spaced ``s``.

    ``official`` (``fm_solvers_unipc.py``): ``s`` from ``1 - 1/T`` to 0 over N+1 points, the
    last dropped. ``diffusers`` (``UniPCMultistepScheduler``, ``use_flow_sigmas``): ``s`` from 1
    to ``1/T``, the last dropped, and a first sigma of exactly 1 lowered by 1e-6. Both append a
    final sigma of 0.

    Raises:
        UsageError: steps < 1, shift <= 0, or an unknown schedule.
    """
    if steps < 1:
        raise UsageError(f"steps must be >= 1, got {steps}")
    if shift <= 0:
        raise UsageError(f"shift must be > 0, got {shift}")
    if schedule == "official":
        start, end = _f32(1 - 1 / num_train_timesteps), 0.0
    elif schedule == "diffusers":
        start, end = 1.0, 1 / num_train_timesteps
    else:
        raise UsageError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    s = torch.linspace(start, end, steps + 1, dtype=torch.float64)[:-1]
    s = shift * s / (1 + (shift - 1) * s)
    if schedule == "diffusers" and abs(s[0].item() - 1) < 1e-6:
        s[0] -= 1e-6
    timesteps = tuple(float(math.trunc(v * num_train_timesteps)) for v in s.tolist())
    sigmas = tuple(_f32(v) for v in s.tolist()) + (0.0,)
    return FlowSchedule(sigmas=sigmas, timesteps=timesteps)


def _lambda(sigma: float) -> float:
    """log-SNR ``log((1 - sigma) / sigma)``; +inf at sigma = 0."""
    return math.inf if sigma == 0 else math.log(1 - sigma) - math.log(sigma)


@dataclass(frozen=True)
class _Update:
    """``out = a*x + b*m0 + c*(m1 - m0) + d*(m2 - m0)`` (differences kept as the references do,
    to avoid cancellation)."""

    a: float
    b: float
    c: float = 0.0
    d: float = 0.0


def _unipc_updates(sigmas: tuple[float, ...]) -> tuple[list[int], list[_Update], list[_Update | None]]:
    """Orders, predictor and corrector coefficients of every step (UniPC bh2, data prediction).

    Predictor at step i (order p): ``x_{i+1} = (s_{i+1}/s_i) x_i - a_{i+1} phi m_i
    - a_{i+1} B rho (m_{i-1} - m_i)/r`` with ``h = lambda_{i+1} - lambda_i``, ``phi = B =
    expm1(-h)``, ``r = (lambda_{i-1} - lambda_i)/h``, ``rho = 1/2`` (p = 2 only).
    Corrector at step i >= 1, with the previous step's order p: the same form from ``x_{i-1}``
    with ``rho`` solving ``R rho = b`` (UniPC paper, Theorem 3 / Algorithm 2), where ``R`` holds
    the powers of ``(r, 1)`` and ``b_k = k! (phi_k(h)) / B`` from the ``h phi_k`` recursion.
    """
    n = len(sigmas) - 1
    lam = [_lambda(s) for s in sigmas]
    alpha = [1 - s for s in sigmas]
    orders = [min(2, n - i, i + 1) for i in range(n)]
    predictors, correctors = [], []
    for i in range(n):
        hh = -(lam[i + 1] - lam[i])
        phi = math.expm1(hh)
        ratio = sigmas[i + 1] / sigmas[i]
        upd = _Update(a=ratio, b=-alpha[i + 1] * phi)
        if orders[i] == 2:
            r = (lam[i - 1] - lam[i]) / (lam[i + 1] - lam[i])
            upd = _Update(a=upd.a, b=upd.b, c=-alpha[i + 1] * phi * 0.5 / r)
        predictors.append(upd)
    correctors.append(None)
    for i in range(1, n):
        p = orders[i - 1]
        h = lam[i] - lam[i - 1]
        hh = -h
        phi = math.expm1(hh)
        bh = phi  # B(h) = expm1(hh) for bh2
        # b_k from the h*phi_k recursion: phi_1 = expm1(hh)/hh - 1, phi_{k+1} = phi_k/hh - 1/(k+1)!
        h_phi_k = phi / hh - 1
        fact = 1
        b = []
        for k in range(1, p + 1):
            b.append(h_phi_k * fact / bh)
            fact *= k + 1
            h_phi_k = h_phi_k / hh - 1 / fact
        base_a, base_b = sigmas[i] / sigmas[i - 1], -alpha[i] * phi
        if p == 1:
            rho_t = 0.5
            correctors.append(_Update(a=base_a, b=base_b, c=-alpha[i] * bh * rho_t))
        else:
            r = (lam[i - 2] - lam[i - 1]) / h
            # R = [[1, 1], [r, 1]]; solve R [rho_0, rho_t] = b
            det = 1 - r
            rho_0 = (b[0] - b[1]) / det
            rho_t = (b[1] - r * b[0]) / det
            correctors.append(_Update(a=base_a, b=base_b, c=-alpha[i] * bh * rho_t, d=-alpha[i] * bh * rho_0 / r))
    return orders, predictors, correctors


def _apply(u: _Update, x: torch.Tensor, m0: torch.Tensor, m1=None, m2=None) -> torch.Tensor:
    out = u.a * x + u.b * m0
    if u.c:
        out = out + u.c * (m1 - m0)
    if u.d:
        out = out + u.d * (m2 - m0)
    return out


class FlowSampler:
    """A stateful flow-matching sampler over one schedule; call ``step`` once per index, in order.

    Args:
        schedule: sigmas and timesteps (``flow_schedule``).
        solver: "unipc" or "euler".
        legacy_step_lookup: find the step index from the timestep on the device with
            ``.item()`` (one host sync per step) instead of trusting the caller's index.

    Raises:
        UsageError: unknown solver.
    """

    def __init__(self, schedule: FlowSchedule, solver: str = "unipc", legacy_step_lookup: bool = False):
        if solver not in SOLVERS:
            raise UsageError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
        self.schedule = schedule
        self.solver = solver
        self.legacy_step_lookup = legacy_step_lookup
        self.orders, self._pred, self._corr = _unipc_updates(schedule.sigmas)
        self._history: list[torch.Tensor] = []  # x0 predictions m_{i-1}, m_{i-2}, newest first
        self._last_sample: torch.Tensor | None = None
        self._device_sigmas: torch.Tensor | None = None
        self._device_timesteps: torch.Tensor | None = None

    def device_timesteps(self, device: torch.device) -> torch.Tensor:
        """The schedule's timesteps as an fp32 [N] tensor on ``device``, built once.

        On CUDA the copy goes from pinned memory without blocking, so building it is not a
        host sync either.
        """
        device = torch.device(device)
        if self._device_timesteps is None or self._device_timesteps.device != device:
            host = torch.tensor(self.schedule.timesteps, dtype=torch.float32)
            if device.type == "cuda":
                host = host.pin_memory()
            self._device_timesteps = host.to(device, non_blocking=True)
        return self._device_timesteps

    def _lookup(self, timestep: torch.Tensor) -> int:
        """The naive lookup: nearest schedule sigma to ``timestep / 1000``, read with ``.item()``."""
        if self._device_sigmas is None or self._device_sigmas.device != timestep.device:
            self._device_sigmas = torch.tensor(self.schedule.sigmas[:-1], device=timestep.device)
        sigma = timestep.reshape(-1)[0].float() / 1000
        return int((self._device_sigmas - sigma).abs().argmin().item())

    def step(
        self, index: int, sample: torch.Tensor, velocity: torch.Tensor, timestep: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Advance from sigma ``index`` to ``index + 1``.

        Args:
            index: the step, 0..N-1, from the caller's loop.
            sample: x at sigma[index], [B, C, F, H, W] fp32.
            velocity: the (guided) model output at ``sample``, same shape.
            timestep: the DiT timestep tensor on the device; read only with legacy lookup.

        Returns:
            x at sigma[index + 1], fp32, same shape.
        """
        if self.legacy_step_lookup:
            index = self._lookup(timestep)
        sigmas = self.schedule.sigmas
        velocity = velocity.float()
        if self.solver == "euler":
            return sample + (sigmas[index + 1] - sigmas[index]) * velocity
        m = sample - sigmas[index] * velocity  # x0 prediction
        if index > 0:
            # the corrector refines x_index from x_{index-1}, now that m at x_index is known
            m_prev2 = self._history[1] if len(self._history) > 1 else None
            sample = _apply(self._corr[index], self._last_sample, self._history[0], m, m_prev2)
        self._last_sample = sample
        u = self._pred[index]
        out = _apply(u, sample, m, self._history[0] if u.c else None)
        self._history = [m] + self._history[:1]
        return out
