"""CFG parallel and Ulysses on 2 CPU processes (gloo) give the single-process latents, and each
rank's own torch.profiler trace, analyzed with wanscope's SQL, shows it did only its share:
CFG one of the two DiT forwards per step, Ulysses half of the tokens outside attention and half
of the heads inside it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from launch import HERE, free_port, run_main, run_ranks
from parallel_worker import CFG, GUIDANCE, STEPS, tiny_inputs
from shared_fixtures import HANG_S

from wanscope.trace import open_traces
from wanscope.wan import ranges
from wanscope.wan.pipeline import denoise
from wanscope.wan.sampler import FlowSampler, flow_schedule

L, LC, N, D = 24, CFG.dit.text_len, CFG.dit.num_heads, CFG.dit.head_dim  # 24 tokens, 16 text tokens, 2 heads of 32
DIM, FFN = CFG.dit.dim, CFG.dit.ffn_dim


@pytest.fixture(scope="module")
def reference():
    dit, noise, cond, uncond = tiny_inputs()
    return denoise(dit, noise, cond, uncond, FlowSampler(flow_schedule(STEPS, 5.0)), GUIDANCE)


def run_worker(mode, out_dir, world_size=2):
    results = run_ranks([str(HERE / "parallel_worker.py"), mode, str(out_dir)], world_size, module=None)
    for code, err in results:
        assert code == 0, err
    return torch.load(out_dir / "latents.pt"), open_traces([out_dir])


def ops_in_ranges(con, range_name, op_names):
    """(rank, op name, input_dims) of ops inside every ``range_name`` range, with counts."""
    names = ", ".join(f"'{n}'" for n in op_names)
    return con.execute(f"""
        SELECT o.rank, o.name, o.input_dims, count(*) AS n
        FROM cpu_ops r JOIN cpu_ops o
          ON o.rank = r.rank AND o.tid = r.tid AND o.start_ns >= r.start_ns AND o.end_ns <= r.end_ns
        WHERE r.name = '{range_name}' AND o.name IN ({names})
        GROUP BY ALL ORDER BY ALL""").fetchall()


def test_cfg_parallel_equals_single_process_and_runs_one_branch_per_rank(tmp_path, reference):
    latents, con = run_worker("cfg", tmp_path)
    assert (latents - reference).abs().max().item() <= 1e-5
    # per rank and step: DiT forwards (one patch-embedding conv3d each) and the branch it ran;
    # the single process runs 2 forwards per step (tests/wan/test_pipeline.py)
    rows = con.execute(f"""
        SELECT s.rank, s.step,
               count(*) FILTER (o.name = 'aten::conv3d'),
               count(*) FILTER (o.name = '{ranges.CFG_COND}'),
               count(*) FILTER (o.name = '{ranges.CFG_UNCOND}'),
               count(*) FILTER (o.name = 'wanscope/parallel/cfg_exchange')
        FROM steps s JOIN cpu_ops o
          ON o.rank = s.rank AND o.tid = s.tid AND o.start_ns >= s.start_ns AND o.end_ns <= s.end_ns
        GROUP BY ALL ORDER BY ALL""").fetchall()
    assert rows == [(0, i, 1, 1, 0, 1) for i in range(STEPS)] + [(1, i, 1, 0, 1, 1) for i in range(STEPS)]
    # each forward is a whole one: all L tokens and all N heads
    blocks = STEPS * CFG.dit.num_layers
    assert ops_in_ranges(con, ranges.SELF_ATTN, ["aten::scaled_dot_product_attention"]) == [
        (
            r,
            "aten::scaled_dot_product_attention",
            f"[[1,{N},{L},{D}],[1,{N},{L},{D}],[1,{N},{L},{D}],[],[],[],[],[]]",
            blocks,
        )
        for r in (0, 1)
    ]


@pytest.fixture(scope="module")
def ulysses_run(tmp_path_factory):
    """(latents, traces) of the profiled 2-process Ulysses run."""
    return run_worker("ulysses", tmp_path_factory.mktemp("ulysses"))


def test_ulysses_equals_single_process_and_shards_tokens_and_heads(ulysses_run, reference):
    latents, con = ulysses_run
    assert (latents - reference).abs().max().item() <= 1e-5
    half, heads = L // 2, N // 2
    # both CFG branches on every rank: 2 forwards per step
    assert con.execute(
        "SELECT rank, count(*) FROM cpu_ops WHERE name = 'aten::conv3d' GROUP BY ALL ORDER BY ALL"
    ).fetchall() == [(0, 2 * STEPS), (1, 2 * STEPS)]
    blocks = 2 * STEPS * CFG.dit.num_layers  # block calls per rank
    for rank in (0, 1):
        # self-attention: projections on L/2 tokens, v's as one GEMM per rank's N/2 heads (its
        # chunk of the send buffer, the last input); attention over all L tokens with N/2 heads
        rows = ops_in_ranges(
            con, ranges.SELF_ATTN, ["aten::linear", "aten::addmm", "aten::scaled_dot_product_attention"]
        )
        got = {(name, dims): n for r, name, dims, n in rows if r == rank}
        assert got == {
            ("aten::linear", f"[[1,{half},{DIM}],[{DIM},{DIM}],[{DIM}]]"): 3 * blocks,  # q, k, o
            ("aten::addmm", f"[[{DIM}],[{half},{DIM}],[{DIM},{DIM}],[],[]]"): 3 * blocks,  # inside those
            ("aten::addmm", f"[[{DIM // 2}],[{half},{DIM}],[{DIM},{DIM // 2}],[],[],[{half},{DIM // 2}]]"): 2 * blocks,
            (
                "aten::scaled_dot_product_attention",
                f"[[1,{heads},{L},{D}],[1,{heads},{L},{D}],[1,{heads},{L},{D}],[],[],[],[],[]]",
            ): blocks,
        }
        # cross-attention: L/2 query tokens with all N heads against the Lc text tokens
        rows = ops_in_ranges(con, ranges.CROSS_ATTN, ["aten::linear", "aten::scaled_dot_product_attention"])
        got = {(name, dims): n for r, name, dims, n in rows if r == rank}
        assert got == {
            ("aten::linear", f"[[1,{half},{DIM}],[{DIM},{DIM}],[{DIM}]]"): 2 * blocks,  # q, o
            ("aten::linear", f"[[1,{LC},{DIM}],[{DIM},{DIM}],[{DIM}]]"): 2 * blocks,  # k, v of the text
            (
                "aten::scaled_dot_product_attention",
                f"[[1,{N},{half},{D}],[1,{N},{LC},{D}],[1,{N},{LC},{D}],[],[],[],[],[]]",
            ): blocks,
        }
        rows = ops_in_ranges(con, ranges.FFN, ["aten::linear"])
        assert {dims: n for r, _name, dims, n in rows if r == rank} == {
            f"[[1,{half},{DIM}],[{FFN},{DIM}],[{FFN}]]": blocks,
            f"[[1,{half},{FFN}],[{DIM},{FFN}],[{DIM}]]": blocks,
        }
    # per block call: the v, k and q all-to-alls, each sent when made, and the output's; one
    # gather per forward
    counts = con.execute("""SELECT rank, name, count(*) FROM cpu_ops
                            WHERE name LIKE 'wanscope/parallel/%' OR name LIKE 'c10d::%'
                            GROUP BY ALL ORDER BY ALL""").fetchall()
    assert counts == [
        (r, name, n)
        for r in (0, 1)
        for name, n in (
            ("c10d::_allgather_base_", 2 * STEPS),
            ("c10d::alltoall_base_", 4 * blocks),
            ("wanscope/parallel/ulysses_gather", 2 * STEPS),
            ("wanscope/parallel/ulysses_out", blocks),
            ("wanscope/parallel/ulysses_qkv", 3 * blocks),
        )
    ]


def test_ulysses_copies_only_the_attention_output_between_layouts(ulysses_run):
    """q, k and v are made in the all-to-all's send order, not copied into it (parallel/ulysses.py).

    Every copy between head layouts in a self-attention (an ``aten::copy_`` of 4 dims or more)
    has the destination [B, L_r, P, N/P, D], a view of a send buffer or of the output: q's and
    k's RoPE results rounded into the send buffer (the pass that casts them on one process) and
    the received output put back in token order. The copies of q, k and v into send order
    (``.contiguous()`` of a permuted [P, L_r, B, N/P, D]) are gone.
    """
    _, con = ulysses_run
    blocks = 2 * STEPS * CFG.dit.num_layers
    for rank in (0, 1):
        rows = ops_in_ranges(con, ranges.SELF_ATTN, ["aten::copy_", "aten::clone", "aten::contiguous"])
        layouts = {
            (name, dims): n
            for r, name, dims, n in rows
            if r == rank and (name != "aten::copy_" or dims.split("]")[0].count(",") >= 3)
        }
        assert layouts == {("aten::copy_", f"[[1,{L // 2},2,{N // 2},{D}],[1,{L // 2},2,{N // 2},{D}],[]]"): 3 * blocks}


def test_cfg_times_ulysses_on_4_processes(tmp_path, reference):
    """The 2 x 2 grid of issue 11: ranks 0, 1 run the cond branch on half the tokens each, ranks
    2, 3 the uncond branch; the CFG groups are {0, 2} and {1, 3}."""
    latents, con = run_worker("cfg+ulysses", tmp_path, world_size=4)
    assert (latents - reference).abs().max().item() <= 1e-5
    rows = con.execute(f"""
        SELECT o.rank, count(*) FILTER (o.name = '{ranges.CFG_COND}'), count(*) FILTER (o.name = '{ranges.CFG_UNCOND}'),
               count(*) FILTER (o.name = 'aten::conv3d')
        FROM cpu_ops o GROUP BY ALL ORDER BY ALL""").fetchall()
    assert rows == [(0, STEPS, 0, STEPS), (1, STEPS, 0, STEPS), (2, 0, STEPS, STEPS), (3, 0, STEPS, STEPS)]
    blocks = STEPS * CFG.dit.num_layers
    sdpa = ops_in_ranges(con, ranges.SELF_ATTN, ["aten::scaled_dot_product_attention"])
    assert sdpa == [
        (
            r,
            "aten::scaled_dot_product_attention",
            f"[[1,{N // 2},{L},{D}],[1,{N // 2},{L},{D}],[1,{N // 2},{L},{D}],[],[],[],[],[]]",
            blocks,
        )
        for r in range(4)
    ]


GENERATE = ["generate", "--preset", "tiny", "--random-weights", "--prompt", "a red fox in the snow", "--steps", "3"]


# 48x48 with 1 frame is a 1x3x3 grid: 9 tokens, shards of 5 and 4
@pytest.mark.parametrize("mode, size, frames", [("cfg", "64x48", "5"), ("ulysses", "48x48", "1")])
def test_generate_under_torchrun_saves_the_single_process_latents(tmp_path, capsys, monkeypatch, mode, size, frames):
    args = [*GENERATE, "--size", size, "--frames", frames]
    # the single-process reference in this process (the same command; a process of its own
    # would add torch's and transformers' imports)
    code, err = run_main(
        [*args, "--out", tmp_path / "one.mp4", "--save-latents", tmp_path / "one.pt"], capsys, monkeypatch
    )
    assert code == 0, err
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "-m",
            "wanscope",
            *args,
            "--parallel",
            mode,
            "--out",
            str(tmp_path / "two.mp4"),
            "--save-latents",
            str(tmp_path / "two.pt"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(tmp_path / f"two.{ext}") for ext in ("mp4", "png", "json", "pt")]
    assert r.stderr.count("| 0/3 [") == 1  # one progress bar (drawn once at 0): rank 0's
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    assert two.shape == one.shape and two.dtype == torch.float32
    assert (two - one).abs().max().item() <= 1e-5
    info = json.loads((tmp_path / "two.json").read_text())
    assert (info["parallel"], info["world_size"]) == (mode, 2)
