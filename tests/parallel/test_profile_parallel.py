"""``torchrun --nproc-per-node 2 -m wanscope profile --preset tiny --parallel cfg`` on the CPU
(gloo): one trace per rank, each carrying its rank in ``distributedInfo``, and one report from
rank 0 whose steps and ``ranks`` section cover both ranks with the trace's own step times; the
options --parallel cannot go with, and a launch without torchrun, fail with one line. Every
wait is bounded."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from decimal import Decimal

import pytest

torch = pytest.importorskip("torch")

from launch import error_line, free_port, rank_env, run_main, run_ranks, torchrun_env
from shared_fixtures import HANG_S

from wanscope.profile.result import CPU_NOTE, cfg_note
from wanscope.trace import open_traces
from wanscope.wan import ranges

pytestmark = pytest.mark.cpu_only(reason="gloo; with CUDA each rank needs a GPU")
TINY = ["profile", "--preset", "tiny", "--profile-steps", "1"]


def torchrun(*args, timeout_s=HANG_S):
    env = rank_env(0, 1, 0)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key)  # torchrun sets them per rank
    return subprocess.run(
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
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def step_ranges(trace) -> dict[int, int]:
    """step -> duration (ns) of the ``wanscope/step#k`` ranges, from the trace's decimal text."""
    doc = json.load(gzip.open(trace, "rt"), parse_float=Decimal)
    return {
        int(e["name"].split("#")[1]): int(round(Decimal(e["dur"]) * 1000))
        for e in doc["traceEvents"]
        if e.get("name", "").startswith("wanscope/step#")
    }


@pytest.fixture(scope="module")
def cfg_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile_cfg")
    r = torchrun(*TINY, "--parallel", "cfg", "--out", str(out))
    assert r.returncode == 0, r.stderr[-4000:]
    return out, r, json.loads((out / "report.json").read_text())


def test_one_trace_per_rank_with_its_rank_and_one_report(cfg_run):
    out, _, report = cfg_run
    assert sorted(p.name for p in out.iterdir()) == [
        "report.html",
        "report.json",
        "trace-rank0.json.gz",
        "trace-rank1.json.gz",
    ]
    for rank in (0, 1):
        info = json.load(gzip.open(out / f"trace-rank{rank}.json.gz"))["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, 2)
    assert [(s["path"], s["format"], s["rank"]) for s in report["sources"]] == [
        (str(out / "trace-rank0.json.gz"), "kineto", 0),
        (str(out / "trace-rank1.json.gz"), "kineto", 1),
    ]
    assert report["run"]["parallel"] == {
        "mode": "cfg",
        "world_size": 2,
        "cfg_degree": 2,
        "ulysses_degree": 1,
        "rank": 0,
        "timeout_s": 300.0,
    }
    assert (report["run"]["profiled_steps"], report["run"]["cfg"]) == ([1], "sequential")
    # rank 0 decodes: its run has all three stages
    assert list(report["run"]["stage_wall_ns"]) == ["text_encoding", "denoising", "vae_decode"]


def test_steps_and_ranks_section_cover_both_ranks_with_the_traces_step_times(cfg_run):
    out, _, report = cfg_run
    dur = {rank: step_ranges(out / f"trace-rank{rank}.json.gz") for rank in (0, 1)}
    assert dur[0].keys() == dur[1].keys() == {1}
    # a CPU run: no GPU activity, so no devices, no per-rank GPU figures
    assert report["devices"] == [] and report["syncs"] == []
    assert report["notes"][1] == CPU_NOTE and report["notes"][3].startswith("no GPU activity")
    assert (
        report["notes"][2]
        == cfg_note(report["run"])
        == (
            "CFG sequential: cond and uncond on ranks of their own, one B=1 forward each per step (--cfg auto, CFG parallel)."
        )
    )
    assert [(s["rank"], s["step"], s["cpu_dur_ns"], s["gpu_dur_ns"]) for s in report["steps"]] == [
        (0, 1, dur[0][1], None),
        (1, 1, dur[1][1], None),
    ]
    # each rank's busiest thread ran its step and is busy all through it
    busiest = {r: max(t["busy_ns"] for t in report["host"]["threads"] if t["rank"] == r) for r in (0, 1)}
    assert busiest == {0: dur[0][1], 1: dur[1][1]}
    ranks = report["ranks"]
    assert ranks["communication"] == []  # gloo collectives run on the host: no communication kernels
    slow, fast = sorted((0, 1), key=lambda r: (-dur[r][1], r))
    assert ranks["steps"] == [
        {
            "step": 1,
            "basis": "cpu",
            "slowest_rank": slow,
            "spread_ns": dur[slow][1] - dur[fast][1],
            "ranks": [
                {"rank": r, "dur_ns": dur[r][1], "exposed_communication_ns": 0, "work_ns": dur[r][1]}
                for r in (slow, fast)
            ],
        }
    ]


def test_each_rank_traced_its_own_cfg_branch(cfg_run):
    out, _, _ = cfg_run
    con = open_traces(sorted(out.glob("trace-rank*.json.gz")))
    rows = con.execute(f"""
        SELECT s.rank, s.step, count(*) FILTER (o.name = 'aten::conv3d'),
               count(*) FILTER (o.name = '{ranges.CFG_COND}'), count(*) FILTER (o.name = '{ranges.CFG_UNCOND}')
        FROM steps s JOIN cpu_ops o
          ON o.rank = s.rank AND o.tid = s.tid AND o.start_ns >= s.start_ns AND o.end_ns <= s.end_ns
        GROUP BY ALL ORDER BY ALL""").fetchall()
    assert rows == [(0, 1, 1, 1, 0), (1, 1, 1, 0, 1)]  # one DiT forward per rank and step


def test_rank_0_alone_prints_the_report(cfg_run):
    out, r, _ = cfg_run
    assert r.stdout.count("wanscope profile: tiny 64x64x5, steps 1-1 of 4, RANDOM WEIGHTS") == 1
    assert r.stdout.count("slowest rank per step") == 1
    assert "communication vs compute per rank: no GPU kernels in the traces" in r.stdout
    assert r.stderr.count("vae decode:") == 1 and r.stderr.count("RANDOM WEIGHTS (no checkpoint)") == 1
    assert r.stdout.count("wrote ") == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--nsys"], "--parallel captures each rank with torch.profiler: not with --nsys"),
        (["--ncu", "attention"], "--parallel captures each rank with torch.profiler: not with --ncu"),
        (["--compare-compile"], "--parallel captures each rank with torch.profiler: not with --compare-compile"),
        (["--cfg", "batched"], "CFG parallel runs each branch on its own rank; --cfg batched does not apply"),
    ],
)
def test_parallel_refuses_what_it_cannot_run(tmp_path, capsys, monkeypatch, extra, message):
    # in this process: refused before any work
    code, err = run_main([*TINY, "--parallel", "cfg", *extra, "--out", tmp_path], capsys, monkeypatch)
    assert code == 2
    assert error_line(err) == f"wanscope: error: {message}"
    assert list(tmp_path.iterdir()) == []


def test_without_a_launcher_or_without_parallel_one_line(tmp_path, capsys, monkeypatch):
    # in this process: refused before any work
    for key in torchrun_env(0, 1, 0):
        monkeypatch.delenv(key, raising=False)
    code, err = run_main([*TINY, "--parallel", "cfg", "--out", tmp_path], capsys, monkeypatch)
    assert code == 2
    assert error_line(err).startswith("wanscope: error: --parallel cfg needs a launcher: run it as `torchrun")
    code, err = run_main([*TINY, "--out", tmp_path], capsys, monkeypatch, torchrun_env(1, 2, free_port()))
    assert code == 2
    assert error_line(err) == (
        "wanscope: error: launched as 2 processes without --parallel; give --parallel cfg|ulysses|cfg+ulysses"
    )


def test_ranks_started_with_different_options_end_with_one_line(tmp_path):
    results = run_ranks(
        [*TINY, "--parallel", "cfg", "--dist-timeout", "300", "--out", str(tmp_path)],
        2,
        per_rank_args={1: ["--warmup", "2"]},
    )
    for code, err in results:
        assert code == 2, err
        line = error_line(err)
        assert line == (
            "wanscope: error: rank 1 was started with warmup=2 but rank 0 with warmup=1: "
            "launch every rank with the same arguments"
        ), line
    assert not list(tmp_path.glob("trace-rank*"))
