"""Ulysses pipelined by head group (``parallel/ulysses.py``): the group sizes a spec gives, and
on 2 and 3 CPU processes (gloo) the same attention rows and the same latents whatever the
grouping, equal to one process, also with both CFG branches in one B=2 forward."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from launch import HERE, run_ranks
from ulysses_worker import GUIDANCE, STEPS, attention_inputs, dit_inputs

from wanscope.errors import UsageError
from wanscope.parallel.exchange import make_transport
from wanscope.parallel.group import ParallelContext
from wanscope.parallel.plan import (
    TRANSPORT_ENV,
    head_group_sizes,
    parse_head_groups,
    ulysses_transport,
)
from wanscope.parallel.ulysses import Ulysses, shard_sizes
from wanscope.wan.attention import attention
from wanscope.wan.pipeline import denoise
from wanscope.wan.sampler import FlowSampler, flow_schedule


def test_head_group_sizes():
    assert head_group_sizes(6, 1) == [6]
    assert head_group_sizes(6, 3) == [2, 2, 2]
    assert head_group_sizes(6, 4) == [2, 2, 1, 1]  # larger groups first
    assert head_group_sizes(6, 10) == [1] * 6  # at most one group per head
    assert head_group_sizes(20, 3) == [7, 7, 6]  # 14B on 2 ranks
    assert head_group_sizes(6, (1, 4, 1)) == [1, 4, 1]
    for groups, message in [
        (0, "Ulysses head groups must be at least 1, got 0"),
        ((1, 4), "Ulysses head group sizes 1+4 must be positive and add up to the 6 heads each rank holds"),
        ((3, 0, 3), "Ulysses head group sizes 3+0+3 must be positive"),
    ]:
        with pytest.raises(UsageError, match=message.replace("+", r"\+")):
            head_group_sizes(6, groups)


def test_parse_head_groups():
    assert parse_head_groups("3") == 3
    assert parse_head_groups("1+4+1") == (1, 4, 1)
    with pytest.raises(UsageError, match=r"Ulysses head groups '3x': expected a count \(3\) or sizes joined by \+"):
        parse_head_groups("3x")


def cpu_context(**changes) -> ParallelContext:
    """A rank of a 2-rank Ulysses run on the CPU, without a process group (nothing here talks)."""
    fields = {
        "mode": "ulysses",
        "rank": 1,
        "world_size": 2,
        "local_rank": 1,
        "cfg_degree": 1,
        "ulysses_degree": 2,
        "device": torch.device("cpu"),
        "timeout_s": 60.0,
        "cfg_group": None,
        "ulysses_group": None,
    }
    return ParallelContext(**(fields | changes))


def test_transports(monkeypatch):
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    assert ulysses_transport("cpu", 2, 2, False) == "nccl"
    assert ulysses_transport("cuda", 8, 4, True) == "copy-engine"  # each group of 4 on one host
    assert ulysses_transport("cuda", 2, 4, True) == "nccl"  # a group across hosts
    assert ulysses_transport("cuda", 8, 4, False) == "nccl"  # GPUs without peer access
    monkeypatch.setenv(TRANSPORT_ENV, "nccl")
    assert ulysses_transport("cuda", 8, 4, True) == "nccl"
    monkeypatch.setenv(TRANSPORT_ENV, "nvlink")
    with pytest.raises(
        UsageError, match="WANSCOPE_ULYSSES_TRANSPORT='nvlink' is not a Ulysses transport; known: nccl, copy-engine"
    ):
        ulysses_transport("cuda", 8, 4, True)
    with pytest.raises(UsageError, match="the copy-engine Ulysses transport needs CUDA devices; use nccl"):
        make_transport("copy-engine", cpu_context())
    with pytest.raises(UsageError, match="unknown Ulysses transport 'nvlink'; known: nccl, copy-engine"):
        make_transport("nvlink", cpu_context())
    # NCCL's buffers: this rank's 4 tokens for each of 2 ranks, every rank's 9 tokens back
    call = make_transport("nccl", cpu_context()).start([5, 4], 1, 2, [2, 1], 8, torch.float32, torch.device("cpu"))
    assert call.groups == [(0, 2), (2, 1)]
    assert [tuple(t.shape) for t in call.send_buffers] == [(3, 2, 4, 2, 2, 8), (3, 2, 4, 2, 1, 8)]
    assert [tuple(t.shape) for t in call.recv] == [(3, 9, 2, 2, 8), (3, 9, 2, 1, 8)]
    assert tuple(call.output().shape) == (2, 4, 6, 8)  # B, L_r, N = P h, D


def test_a_bad_head_group_count_is_refused_not_replaced_by_the_default(monkeypatch):
    monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    assert Ulysses(cpu_context(), 6).group_sizes == [2, 1]  # nccl's default of 2 groups over 3 heads
    for bad in (0, ()):
        with pytest.raises(UsageError, match="Ulysses head group"):
            Ulysses(cpu_context(), 6, bad)


@pytest.mark.parametrize(
    "world_size, specs",
    [
        (2, ["1", "2", "3", "1+2", "9", "2@nccl"]),  # 3 heads per rank; 9 groups -> one per head
        (3, ["1", "2"]),  # 2 heads per rank, 13 tokens -> shards of 5, 4, 4
    ],
)
def test_every_grouping_gives_the_same_attention_and_latents(tmp_path, world_size, specs):
    results = run_ranks([str(HERE / "ulysses_worker.py"), "cpu", str(tmp_path), *specs], world_size, module=None)
    for code, err in results:
        assert code == 0, err
    q, k, v = attention_inputs()
    reference = attention(q, k, v)  # [B, L, N, D], one process
    sizes = shard_sizes(q.shape[1], world_size)
    for rank in range(world_size):
        rows = torch.load(tmp_path / f"attention-rank{rank}.pt")
        start = sum(sizes[:rank])
        mine = reference[:, start : start + sizes[rank]]
        for spec in specs:
            assert rows[spec].shape == mine.shape
            # each head's attention is the same computation in any group: bitwise equal
            assert torch.equal(rows[spec], rows["1"]), spec
            assert (rows[spec] - mine).abs().max().item() <= 1e-6, spec
    dit, noise, cond, uncond = dit_inputs()
    single = denoise(dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), GUIDANCE)
    latents = torch.load(tmp_path / "latents.pt")
    assert list(latents) == specs
    for spec in specs:
        assert torch.equal(latents[spec], latents["1"]), spec
        assert (latents[spec] - single).abs().max().item() <= 1e-5, spec
    # B = 2: the send buffers hold both branches' rows token by token (v's GEMMs one per row)
    batched = denoise(dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), GUIDANCE, cfg="batched")
    assert (torch.load(tmp_path / "latents-batched.pt") - batched).abs().max().item() <= 1e-5
