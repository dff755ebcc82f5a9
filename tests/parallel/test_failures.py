"""A bad launch, a lost or frozen rank or ranks started differently end every live rank with
one line (``wanscope: error: ...``, exit code 2, no traceback) within a bounded time, never a
hang. CPU processes with gloo, including the heartbeat that NCCL runs rely on (``watch.py``;
the same on 2 GPUs in ``test_nccl.py``); every wait in these tests is bounded.

The time bounds are the feature here, so each is relative to the test's --dist-timeout with
``launch.SLACK_S`` to spare: a lost peer is noticed long before a whole --dist-timeout (chosen
long: 300 s), a frozen one after it and not much later (one long enough that no live rank waits
that long for another on a loaded machine: the text encoding of rank 0 once took over 5 s)."""

from __future__ import annotations

import re
import signal
import sys
import time

import pytest

pytest.importorskip("torch")

from launch import HERE, SLACK_S, Rank, error_line, free_port, rank_env, run_main, run_ranks, start_ranks, torchrun_env
from shared_fixtures import HANG_S

from wanscope.errors import UsageError
from wanscope.parallel.plan import DEFAULT_TIMEOUT_S, check_heads, degrees

TINY = ["generate", "--preset", "tiny", "--random-weights", "--prompt", "a red fox", "--size", "64x48", "--frames", "5"]
# --dist-timeout where a lost peer must be noticed at once: the broken path waits it out, far
# beyond the SLACK_S bound
LOST_TIMEOUT_S = 300
# --dist-timeout where a frozen peer must be waited for: longer than any wait for a live peer
# before the stop, even on a loaded machine: in generate, rank 1's for rank 0's text encoding
# (over 5 s once), in setup_worker.py only the rendezvous (the other process slower to start)
FROZEN_TIMEOUT_S = 30
FROZEN_SETUP_TIMEOUT_S = 10


def test_degrees_of_each_mode():
    assert degrees("cfg", 2) == (2, 1)
    assert degrees("ulysses", 2) == (1, 2) and degrees("ulysses", 8) == (1, 8)
    assert degrees("cfg+ulysses", 4) == (2, 2) and degrees("cfg+ulysses", 8) == (2, 4)
    for mode, world, message in [
        ("cfg", 4, "--parallel cfg runs on 2 processes (cond and uncond), got a world size of 4"),
        ("ulysses", 1, "--parallel ulysses needs at least 2 processes, got a world size of 1"),
        ("cfg+ulysses", 6 - 1, "--parallel cfg+ulysses needs an even world size of at least 4"),
        ("cfg+ulysses", 2, "--parallel cfg+ulysses needs an even world size of at least 4"),
        ("ring", 2, "unknown --parallel mode 'ring'; known: cfg, ulysses, cfg+ulysses"),
    ]:
        with pytest.raises(UsageError, match=message.replace("+", r"\+").replace("(", r"\(").replace(")", r"\)")):
            degrees(mode, world)


def test_heads_that_do_not_split_name_the_degrees_that_do():
    check_heads(12, 4, cfg_degree=2)  # 1.3B on 8 GPUs as cfg+ulysses: 3 heads per rank
    with pytest.raises(UsageError) as e:
        check_heads(12, 8)
    assert str(e.value) == (
        "Ulysses degree 8 does not divide the model's 12 attention heads; degrees that work: 2, 3, 4, 6, 12"
    )
    with pytest.raises(UsageError) as e:
        check_heads(40, 16, cfg_degree=2)  # 14B on 32 GPUs
    assert str(e.value) == (
        "Ulysses degree 16 does not divide the model's 40 attention heads; degrees that work: "
        "2, 4, 5, 8, 10, 20, 40 (world sizes 4, 8, 10, 16, 20, 40, 80 with cfg+ulysses)"
    )


@pytest.mark.parametrize(
    "preset, world, message",
    [
        ("tiny", 3, "Ulysses degree 3 does not divide the model's 2 attention heads; degrees that work: 2"),
        (
            "wan2.1-t2v-1.3b",
            8,
            ("Ulysses degree 8 does not divide the model's 12 attention heads; degrees that work: 2, 3, 4, 6, 12"),
        ),
    ],
)
def test_generate_rejects_heads_that_do_not_split_before_starting(
    tmp_path, capsys, monkeypatch, preset, world, message
):
    args = [
        "generate",
        "--preset",
        preset,
        "--random-weights",
        "--prompt",
        "x",
        "--parallel",
        "ulysses",
        "--out",
        str(tmp_path / "x.mp4"),
    ]
    # rank 0 of `world` (in this process: refused before any work); no other rank exists: the
    # check runs before any rendezvous
    code, err = run_main(args, capsys, monkeypatch, torchrun_env(0, world, 29999))
    assert code == 2
    assert error_line(err) == f"wanscope: error: {message}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, env_world, message",
    [
        (["--parallel", "cfg"], 3, "--parallel cfg runs on 2 processes (cond and uncond), got a world size of 3"),
        ([], 2, "launched as 2 processes without --parallel; give --parallel cfg|ulysses|cfg+ulysses"),
        (["--parallel", "cfg", "--guidance", "1"], 2, "CFG parallel needs guidance > 1"),
    ],
)
def test_bad_launches_fail_at_once(tmp_path, capsys, monkeypatch, args, env_world, message):
    started = time.monotonic()
    code, err = run_main(
        [*TINY, *args, "--out", str(tmp_path / "x.mp4")], capsys, monkeypatch, torchrun_env(0, env_world, 29999)
    )
    assert code == 2
    assert message in error_line(err)
    # before any rendezvous: one would wait for the other ranks the default --dist-timeout
    assert time.monotonic() - started < SLACK_S < DEFAULT_TIMEOUT_S


def test_parallel_without_a_launcher(tmp_path, capsys, monkeypatch):
    for key in torchrun_env(0, 1, 0):
        monkeypatch.delenv(key, raising=False)
    code, err = run_main([*TINY, "--parallel", "ulysses", "--out", str(tmp_path / "x.mp4")], capsys, monkeypatch)
    assert code == 2
    assert error_line(err).startswith(
        "wanscope: error: --parallel ulysses needs a launcher: run it as `torchrun --nproc-per-node N -m wanscope ...` "
        "(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT not set)"
    )


def test_a_rank_that_never_joins_times_out(tmp_path):
    """torchrun asked for 2 processes but only rank 0 starts (or the ranks disagree on WORLD_SIZE)."""
    started = time.monotonic()
    dist_timeout = 3
    ((code, err),) = run_ranks(
        [*TINY, "--parallel", "cfg", "--dist-timeout", str(dist_timeout), "--out", str(tmp_path / "x.mp4")],
        2,
        ranks=[0],
    )
    assert code == 2
    line = error_line(err)
    assert line.startswith("wanscope: error: rank 0/2: process group setup failed: ")
    assert "1/2 clients joined" in line and "the same WORLD_SIZE" in line
    # the rendezvous gave up after --dist-timeout (with the start of the process), not the default
    assert time.monotonic() - started < dist_timeout + SLACK_S < DEFAULT_TIMEOUT_S


def test_ranks_started_with_different_arguments(tmp_path):
    results = run_ranks(
        [*TINY, "--parallel", "cfg", "--dist-timeout", str(LOST_TIMEOUT_S), "--out", str(tmp_path / "x.mp4")],
        2,
        per_rank_args={0: ["--steps", "3"], 1: ["--steps", "4"]},
    )
    for code, err in results:
        assert code == 2
        assert error_line(err) == (
            "wanscope: error: rank 1 was started with steps=4 but rank 0 with steps=3: "
            "launch every rank with the same arguments"
        )


@pytest.mark.parametrize("mode", ["cfg", "ulysses"])
@pytest.mark.parametrize("dead", [0, 1])
def test_a_rank_dying_mid_loop_ends_the_other_with_one_line(tmp_path, mode, dead):
    # enough steps that the loop is still running when the rank is killed
    ranks = start_ranks(
        [
            *TINY,
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
        # rank 0's progress bar has counted a step: the loop runs
        assert ranks[0].wait_for(r"\| [1-9]\d*/100000", timeout_s=HANG_S), ranks[0].stderr[-2000:]
        killed_at = time.monotonic()
        ranks[dead].proc.send_signal(signal.SIGKILL)
        survivor = ranks[1 - dead]
        assert survivor.finish(timeout_s=LOST_TIMEOUT_S + SLACK_S) == 2
        # the lost peer is noticed at once (gloo's connection reset), not after --dist-timeout
        assert time.monotonic() - killed_at < SLACK_S < LOST_TIMEOUT_S
        line = error_line(survivor.stderr)
        what = (
            "the CFG exchange of velocities"
            if mode == "cfg"
            else "the Ulysses (all-to-all of q, k, v|all-to-all of the attention output|all-gather of the output)"
        )
        # e.g. "rank 0/2: the CFG exchange of velocities failed: Read error [127.0.0.1]:21733:
        # Connection reset by peer (another rank died, ...)"
        assert re.fullmatch(
            rf"wanscope: error: rank {1 - dead}/2: {what} failed: .*(closed|reset) by peer.* "
            rf"\(another rank died, hung past --dist-timeout {LOST_TIMEOUT_S} s, or was started differently\)",
            line,
        ), line
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()


def test_a_rank_that_stops_answering_times_out_with_one_line(tmp_path):
    """A rank alive but frozen (SIGSTOP) keeps its sockets open: the other fails after
    --dist-timeout, not at once, and not never."""
    timeout = FROZEN_TIMEOUT_S
    ranks = start_ranks(
        [
            *TINY,
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
        assert ranks[0].wait_for(r"\| [1-9]\d*/100000", timeout_s=HANG_S), ranks[0].stderr[-2000:]
        stopped_at = time.monotonic()
        ranks[1].proc.send_signal(signal.SIGSTOP)
        assert ranks[0].finish(timeout_s=timeout + 2 * SLACK_S) == 2
        # after --dist-timeout (less the part of a step the collective that times out may have
        # waited before the stop), and not much later: not the default --dist-timeout either
        assert timeout - 1 < time.monotonic() - stopped_at < timeout + SLACK_S < DEFAULT_TIMEOUT_S
        line = error_line(ranks[0].stderr)
        # gloo words it either way: the timed-out operation, or another one on the pair it closed
        assert re.fullmatch(
            r"wanscope: error: rank 0/2: the Ulysses (all-to-all of q, k, v|all-to-all of the attention "
            rf"output|all-gather of the output) failed: (Timed out waiting {timeout * 1000}ms .*|Application timeout "
            r"caused pair closure) \(another rank "
            rf"died, hung past --dist-timeout {timeout} s, or was started differently\)",
            line,
        ), line
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()  # SIGKILL ends a stopped process too
                r.proc.wait()


def setup_ranks(timeout_s, heartbeat, stay_rank0_s, stay_others_s, world_sizes=(2, 2), num_heads=6, bar=False):
    """Start ``setup_worker.py`` ranks; rank r believes the world has ``world_sizes[r]`` ranks;
    with ``bar`` rank 0 draws a progress bar while it stays."""
    port = free_port()
    args = [
        str(HERE / "setup_worker.py"),
        str(num_heads),
        str(timeout_s),
        str(int(heartbeat)),
        str(stay_rank0_s),
        str(stay_others_s),
        str(int(bar)),
    ]
    return [Rank([sys.executable, *args], rank_env(r, world, port)) for r, world in enumerate(world_sizes)]


def test_ranks_started_with_different_world_sizes():
    """WORLD_SIZE 2 on rank 0, 3 on rank 1 (6 heads: both degrees divide them)."""
    started = time.monotonic()
    dist_timeout = 5
    ranks = setup_ranks(dist_timeout, False, 0, 0, world_sizes=(2, 3))
    try:
        for rank, world in ((0, 2), (1, 3)):
            assert ranks[rank].finish(timeout_s=HANG_S) == 2
            line = error_line(ranks[rank].stderr)
            assert re.fullmatch(
                rf"wanscope: error: rank {rank}/{world}: (process group|subgroup) setup failed: .*"
                rf"\(check that every rank was started with the same WORLD_SIZE and "
                rf"MASTER_ADDR:MASTER_PORT, and that all {world} started\)",
                line,
            ), line
        # the setup gave up after --dist-timeout (with the start of the processes), not the default
        assert time.monotonic() - started < dist_timeout + SLACK_S < DEFAULT_TIMEOUT_S
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()


@pytest.mark.parametrize("dead", [0, 1])
def test_heartbeat_ends_a_rank_whose_peer_died(dead):
    """Under NCCL nothing else would notice (its kernels spin): the heartbeat's gloo connection
    does, at once. Rank 0 dying also takes the rendezvous store with it. Rank 0 draws a progress
    bar, as generate does: the error line must not continue it."""
    stay = LOST_TIMEOUT_S + 2 * SLACK_S  # longer than the broken path's wait: it cannot pass for an exit
    ranks = setup_ranks(LOST_TIMEOUT_S, True, stay, stay, bar=True)
    try:
        for r in ranks:
            assert r.wait_for("ready", timeout_s=HANG_S), r.stderr
        killed_at = time.monotonic()
        ranks[dead].proc.send_signal(signal.SIGKILL)
        survivor = ranks[1 - dead]
        assert survivor.finish(timeout_s=LOST_TIMEOUT_S + SLACK_S) == 2
        # at once (the next beat), not after --dist-timeout
        assert time.monotonic() - killed_at < SLACK_S < LOST_TIMEOUT_S
        line = error_line(survivor.stderr)
        assert re.fullmatch(
            rf"wanscope: error: rank {1 - dead}/2: lost contact with another rank: .*(closed|reset) by "
            rf"peer.* \(a rank died, or stopped answering for --dist-timeout {LOST_TIMEOUT_S} s\)",
            line,
        ), line
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()


def test_heartbeat_ends_a_rank_whose_peer_stopped_answering():
    timeout = FROZEN_SETUP_TIMEOUT_S
    stay = timeout + 3 * SLACK_S  # rank 0 is still there when the bound below runs out
    ranks = setup_ranks(timeout, True, stay, stay, bar=True)
    try:
        for r in ranks:
            assert r.wait_for("ready", timeout_s=HANG_S), r.stderr
        stopped_at = time.monotonic()
        ranks[1].proc.send_signal(signal.SIGSTOP)
        assert ranks[0].finish(timeout_s=timeout + 2 * SLACK_S) == 2
        # after --dist-timeout (less the moment the beat that times out may have waited before
        # the stop), and not much later: not the default --dist-timeout either
        assert timeout - 0.5 < time.monotonic() - stopped_at < timeout + SLACK_S < DEFAULT_TIMEOUT_S
        assert error_line(ranks[0].stderr) == (
            f"wanscope: error: rank 0/2: lost contact with another rank: Timed out waiting {timeout * 1000}ms for "
            f"recv operation to complete (a rank died, or stopped answering for --dist-timeout {timeout} s)"
        )
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()


def test_heartbeat_lets_ranks_leave_one_by_one():
    """Rank 1 leaves at once (as after its last collective in generate) while rank 0 stays for
    several beats (as while it decodes the video): an orderly exit is not a lost peer."""
    ranks = setup_ranks(20, True, 4, 0)
    for r in ranks:
        assert r.finish(timeout_s=HANG_S) == 0, r.stderr
        assert "error" not in r.stderr, r.stderr
