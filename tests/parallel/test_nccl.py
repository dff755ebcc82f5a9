"""The parallel paths on 2 GPUs with NCCL (skipped without 2 CUDA devices): the pipelined
Ulysses attention and latents equal one GPU's for every head grouping; ``generate`` and
``profile`` under torchrun; a rank that dies or freezes ends the other with one line (the
heartbeat of ``parallel/watch.py``: NCCL itself would spin until its watchdog aborts).

About two minutes on 2x H200; every wait is bounded."""

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

from launch import HERE, error_line, free_port, rank_env, run_ranks, start_ranks
from ulysses_worker import GUIDANCE, STEPS, attention_inputs, dit_inputs

from wanscope.parallel.ulysses import shard_sizes
from wanscope.wan.attention import attention
from wanscope.wan.pipeline import denoise
from wanscope.wan.sampler import FlowSampler, flow_schedule

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices (NCCL)")
SPECS = ["1", "2", "3", "1+2"]  # 6 heads: 3 per rank


def torchrun(*args, timeout_s=300):
    env = rank_env(0, 1, 0)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key)  # torchrun sets them per rank
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "wanscope", *args],
                          check=False, env=env, capture_output=True, text=True, timeout=timeout_s)


def test_pipelined_ulysses_equals_one_gpu_for_every_grouping(tmp_path):
    results = run_ranks([str(HERE / "ulysses_worker.py"), "cuda", str(tmp_path), *SPECS], 2, module=None,
                        timeout_s=240)
    for code, err in results:
        assert code == 0, err
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


GENERATE = ["generate", "--preset", "tiny", "--random-weights", "--prompt", "a red fox in the snow", "--steps", "3",
            "--size", "64x48", "--frames", "5", "--dtype", "fp32"]


@pytest.mark.parametrize("mode", ["cfg", "ulysses"])
def test_generate_on_two_gpus_saves_the_one_gpu_latents(tmp_path, mode):
    single = subprocess.run([sys.executable, "-m", "wanscope", *GENERATE, "--out", str(tmp_path / "one.mp4"),
                             "--save-latents", str(tmp_path / "one.pt")], check=False, capture_output=True, text=True,
                            timeout=300)
    assert single.returncode == 0, single.stderr
    r = torchrun(*GENERATE, "--parallel", mode, "--out", str(tmp_path / "two.mp4"), "--save-latents",
                 str(tmp_path / "two.pt"))
    assert r.returncode == 0, r.stderr[-4000:]
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    assert (two - one).abs().max().item() <= 1e-4
    assert json.loads((tmp_path / "two.json").read_text())["device"] == "cuda:0"


@pytest.mark.parametrize("mode", ["cfg", "ulysses"])
def test_profile_on_two_gpus_reports_nccl_kernels_per_rank(tmp_path, mode):
    r = torchrun("profile", "--preset", "tiny", "--profile-steps", "1", "--parallel", mode, "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr[-4000:]
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
            r.proc.wait()


@pytest.mark.parametrize("mode", ["cfg", "ulysses"])
@pytest.mark.parametrize("dead", [0, 1])
def test_a_rank_dying_under_nccl_ends_the_other_with_one_line(tmp_path, mode, dead):
    ranks = start_ranks([*GENERATE, "--steps", "100000", "--parallel", mode, "--dist-timeout", "60",
                         "--out", str(tmp_path / "x.mp4")], 2)
    try:
        assert ranks[0].wait_for(r"\| [1-9]\d*/100000", timeout_s=120), ranks[0].stderr[-2000:]
        killed_at = time.monotonic()
        ranks[dead].proc.send_signal(signal.SIGKILL)
        survivor = ranks[1 - dead]
        assert survivor.finish(timeout_s=60) == 2
        assert time.monotonic() - killed_at < 15  # the heartbeat, long before --dist-timeout
        line = error_line(survivor.stderr)
        assert re.fullmatch(rf"wanscope: error: rank {1 - dead}/2: (lost contact with another rank|the .* failed): .*",
                            line), line
    finally:
        kill_all(ranks)


def test_a_rank_frozen_under_nccl_ends_the_other_after_the_timeout(tmp_path):
    ranks = start_ranks([*GENERATE, "--steps", "100000", "--parallel", "ulysses", "--dist-timeout", "10",
                         "--out", str(tmp_path / "x.mp4")], 2)
    try:
        assert ranks[0].wait_for(r"\| [1-9]\d*/100000", timeout_s=120), ranks[0].stderr[-2000:]
        stopped_at = time.monotonic()
        ranks[1].proc.send_signal(signal.SIGSTOP)
        assert ranks[0].finish(timeout_s=90) == 2
        # the heartbeat after --dist-timeout, before NCCL's watchdog (NCCL_GRACE_S later) aborts
        assert 9 < time.monotonic() - stopped_at < 30
        line = error_line(ranks[0].stderr)
        assert re.fullmatch(r"wanscope: error: rank 0/2: lost contact with another rank: (Timed out waiting 10000ms .*|"
                            r"Application timeout caused pair closure) \(a rank died, or stopped answering for "
                            r"--dist-timeout 10 s\)", line), line
    finally:
        kill_all(ranks)
