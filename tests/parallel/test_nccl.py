"""The parallel paths on 2 GPUs with NCCL (skipped without 2 CUDA devices): the pipelined
Ulysses attention and latents equal one GPU's for every head grouping, over NCCL and over
copy engines, and with both CFG branches in one batch; ``generate`` and ``profile`` under torchrun; a rank that dies or
freezes ends the other with one line (the heartbeat of ``parallel/watch.py``: NCCL itself
would spin until its watchdog aborts).

About two minutes on 2x H200. Every test ends within ``TEST_S`` seconds whatever hangs: each of
its waits takes the time its test has left (the ``left`` fixture), and a failure shows the
stderr of the rank that should have reported it. The heartbeat's time bounds are the feature,
so each is relative to the test's --dist-timeout, with ``launch.SLACK_S`` or NCCL's grace to
spare."""

from __future__ import annotations

import gzip
import json
import re
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from launch import HERE, SLACK_S, error_line, free_port, rank_env, start_ranks
from ulysses_worker import GUIDANCE, STEPS, attention_inputs, dit_inputs

from wanscope.parallel.ulysses import shard_sizes
from wanscope.parallel.watch import NCCL_GRACE_S
from wanscope.wan.attention import attention
from wanscope.wan.pipeline import denoise
from wanscope.wan.sampler import FlowSampler, flow_schedule

pytestmark = pytest.mark.gpu(2, reason="NCCL")
# 6 heads: 3 per rank. Bare specs take the default transport (copy engines: launch.py sets
# LOCAL_WORLD_SIZE), so NCCL's pipelined path needs its own spec.
SPECS = ["1", "2", "3", "1+2", "1@nccl", "1+2@nccl", "2@copy-engine", "1+2@copy-engine"]
# the most any test here may take: a hang guard (they take seconds to a minute on 2x H200)
TEST_S = 600.0
# --dist-timeout where a lost peer must be noticed at once: the broken path waits it out (and NCCL's
# grace after it), far beyond the SLACK_S bound
LOST_TIMEOUT_S = 300


@pytest.fixture
def left():
    """Seconds left of this test's ``TEST_S`` (at least 1): the timeout of its next wait."""
    end = time.monotonic() + TEST_S
    return lambda: max(1.0, end - time.monotonic())


def tail(text: str, chars: int = 4000) -> str:
    return text[-chars:]


def run(argv, timeout_s, env=None):
    """``subprocess.run`` that fails the test with the process's stderr when it runs out of time."""
    try:
        return subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"{' '.join(map(str, argv[:6]))} ... still running after {timeout_s:.0f} s; stderr:\n{tail(err)}")


def torchrun(*args, timeout_s):
    env = rank_env(0, 1, 0)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key)  # torchrun sets them per rank
    return run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            "-m",
            "wanscope",
            *args,
        ],
        timeout_s,
        env,
    )


def finish(rank, timeout_s) -> int:
    """``rank``'s exit code; the test fails with its stderr when it is still running after ``timeout_s``."""
    try:
        return rank.finish(timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout_s:.0f} s; its stderr:\n{tail(rank.stderr)}")


def test_pipelined_ulysses_equals_one_gpu_for_every_grouping(tmp_path, left):
    ranks = start_ranks([str(HERE / "ulysses_worker.py"), "cuda", str(tmp_path), *SPECS], 2, module=None)
    try:
        for rank in ranks:
            code = finish(rank, timeout_s=left() - 15)  # the rest: the one-GPU reference below
            assert code == 0, tail(rank.stderr)
    finally:
        kill_all(ranks)
    device = torch.device("cuda", 0)
    reference = attention(*attention_inputs(device)).cpu()  # [B, L, N, D] fp32 on one GPU
    sizes = shard_sizes(reference.shape[1], 2)
    for rank in (0, 1):
        rows = torch.load(tmp_path / f"attention-rank{rank}.pt")
        mine = reference[:, sum(sizes[:rank]) : sum(sizes[: rank + 1])]
        for spec in SPECS:
            # per head the same kernel on the same values: any grouping, any rank count
            assert (rows[spec] - rows["1"]).abs().max().item() <= 1e-6, spec
            assert (rows[spec] - mine).abs().max().item() <= 1e-5, spec
    dit, noise, cond, uncond = dit_inputs(device)
    single = denoise(dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), GUIDANCE).cpu()
    latents = torch.load(tmp_path / "latents.pt")
    for spec in SPECS:
        assert (latents[spec] - latents["1"]).abs().max().item() <= 1e-6, spec
        assert (latents[spec] - single).abs().max().item() <= 1e-4, spec
    batched = denoise(dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), GUIDANCE, cfg="batched").cpu()
    assert (torch.load(tmp_path / "latents-batched.pt") - batched).abs().max().item() <= 1e-4


GENERATE = [
    "generate",
    "--preset",
    "tiny",
    "--random-weights",
    "--prompt",
    "a red fox in the snow",
    "--steps",
    "3",
    "--size",
    "64x48",
    "--frames",
    "5",
    "--dtype",
    "fp32",
]


@pytest.mark.parametrize("mode", ["cfg", "ulysses"])
def test_generate_on_two_gpus_saves_the_one_gpu_latents(tmp_path, mode, left):
    single = run(
        [
            sys.executable,
            "-m",
            "wanscope",
            *GENERATE,
            "--out",
            str(tmp_path / "one.mp4"),
            "--save-latents",
            str(tmp_path / "one.pt"),
        ],
        timeout_s=left() / 2,
    )
    assert single.returncode == 0, single.stderr
    r = torchrun(
        *GENERATE,
        "--parallel",
        mode,
        "--out",
        str(tmp_path / "two.mp4"),
        "--save-latents",
        str(tmp_path / "two.pt"),
        timeout_s=left(),
    )
    assert r.returncode == 0, tail(r.stderr)
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    assert (two - one).abs().max().item() <= 1e-4
    assert json.loads((tmp_path / "two.json").read_text())["device"] == "cuda:0"


@pytest.mark.parametrize("mode", ["cfg", "ulysses"])
def test_profile_on_two_gpus_reports_nccl_kernels_per_rank(tmp_path, mode, left):
    r = torchrun(
        "profile",
        "--preset",
        "tiny",
        "--profile-steps",
        "1",
        "--parallel",
        mode,
        "--out",
        str(tmp_path),
        timeout_s=left(),
    )
    assert r.returncode == 0, tail(r.stderr)
    for rank in (0, 1):
        with gzip.open(tmp_path / f"trace-rank{rank}.json.gz") as f:
            info = json.load(f)["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("nccl", rank, 2)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["run"]["parallel"]["mode"] == mode
    comm = report["ranks"]["communication"]
    assert [(c["rank"], c["device"]) for c in comm] == [(0, 0), (1, 1)]
    for c in comm:
        assert c["communication_count"] > 0 and c["communication_ns"] > 0, c
        assert 0 <= c["exposed_communication_ns"] <= c["communication_busy_ns"], c
    (step,) = report["ranks"]["steps"]
    assert step["basis"] == "gpu" and step["slowest_rank"] in (0, 1)
    assert "communication vs compute per rank" in r.stdout


def kill_all(ranks):
    for r in ranks:
        if r.proc.poll() is None:
            r.proc.kill()  # SIGKILL ends a stopped process too
            try:
                r.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass  # the driver still tearing down its GPU context: not this test's wait


def started(ranks, timeout_s):
    """Wait until rank 0's progress bar has counted a step (the loop runs), else fail with both stderrs."""
    if not ranks[0].wait_for(r"\| [1-9]\d*/100000", timeout_s=timeout_s):
        pytest.fail(
            "the denoising loop did not start; "
            + "; ".join(
                f"rank {i} (exit code {r.proc.poll()}) stderr:\n{tail(r.stderr, 2000)}" for i, r in enumerate(ranks)
            )
        )


@pytest.mark.parametrize("mode", ["cfg", "ulysses"])
@pytest.mark.parametrize("dead", [0, 1])
def test_a_rank_dying_under_nccl_ends_the_other_with_one_line(tmp_path, mode, dead, left):
    ranks = start_ranks(
        [
            *GENERATE,
            "--steps",
            "100000",
            "--parallel",
            mode,
            "--dist-timeout",
            str(LOST_TIMEOUT_S),
            "--out",
            str(tmp_path / "x.mp4"),
        ],
        2,
    )
    try:
        started(ranks, timeout_s=left() - SLACK_S)
        killed_at = time.monotonic()
        ranks[dead].proc.send_signal(signal.SIGKILL)
        survivor = ranks[1 - dead]
        code = finish(survivor, timeout_s=min(SLACK_S, left()))
        took_s = time.monotonic() - killed_at
        why = f"rank {1 - dead}, the survivor, exited {code} {took_s:.1f} s after the kill; its stderr:\n" + tail(
            survivor.stderr
        )
        assert code == 2, why
        assert took_s < SLACK_S < LOST_TIMEOUT_S, why  # the heartbeat's next beat, not --dist-timeout
        line = error_line(survivor.stderr)
        assert re.fullmatch(
            rf"wanscope: error: rank {1 - dead}/2: (lost contact with another rank|the .* failed): .*", line
        ), why
    finally:
        kill_all(ranks)


def test_a_rank_frozen_under_nccl_ends_the_other_after_the_timeout(tmp_path, left):
    # a short --dist-timeout: the heartbeat's wait, 5 s; NCCL's watchdog would abort NCCL_GRACE_S later
    timeout = 5
    ranks = start_ranks(
        [
            *GENERATE,
            "--steps",
            "100000",
            "--parallel",
            "ulysses",
            "--dist-timeout",
            str(timeout),
            "--out",
            str(tmp_path / "x.mp4"),
        ],
        2,
    )
    try:
        started(ranks, timeout_s=left() - timeout - NCCL_GRACE_S - SLACK_S)
        stopped_at = time.monotonic()
        ranks[1].proc.send_signal(signal.SIGSTOP)
        code = finish(ranks[0], timeout_s=min(timeout + NCCL_GRACE_S + SLACK_S, left()))
        took_s = time.monotonic() - stopped_at
        why = f"rank 0 exited {code} {took_s:.1f} s after rank 1 stopped; its stderr:\n{tail(ranks[0].stderr)}"
        assert code == 2, why
        # after --dist-timeout and at most a beat, before NCCL's watchdog (the error line tells
        # the two apart too)
        assert timeout - 1 < took_s < timeout + NCCL_GRACE_S, why
        line = error_line(ranks[0].stderr)
        assert re.fullmatch(
            rf"wanscope: error: rank 0/2: lost contact with another rank: (Timed out waiting {timeout * 1000}ms .*|"
            r"Application timeout caused pair closure) \(a rank died, or stopped answering for "
            rf"--dist-timeout {timeout} s\)",
            line,
        ), why
    finally:
        kill_all(ranks)
