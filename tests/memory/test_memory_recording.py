"""``--memory-history`` without a GPU: the recording's calls into torch replaced by fakes that
check them (what a CUDA machine runs is ``benchmarks/memory_snapshot_capture.py``). The
bootstrap starts recording when the program starts CUDA, writes the snapshot at the first
out-of-memory error and at exit; our engine's recording dumps at its end or at an
out-of-memory error, which ends the run in one line; a COMMAND whose CUDA start-up is played
by the program itself gets the summary, ``report.json``'s ``memory_snapshot`` and the
report's charts; the refusals."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from browser import VIEWPORT, probe
from cli_context import run_main
from synthetic_snapshots import GIB, Allocator, frames, snapshot, write

from wanscope.errors import UsageError
from wanscope.memory.snapshot import read_snapshot

torch = pytest.importorskip("torch")

from wanscope.memory import record

BOOT = Path(__file__).resolve().parents[2] / "src" / "wanscope" / "profile" / "bootstrap" / "_wanscope_boot.py"
RECORDING = {"enabled": "all", "context": "alloc", "stacks": "python", "max_entries": 100_000}
GROW = frames("/home/u/oom.py:8:grow", "/home/u/oom.py:15:main")


def oom_snapshot(with_oom: bool = True) -> dict:
    a = Allocator()
    a.segment(0, 2 * GIB)
    a.alloc(0, 2 * GIB, GROW)
    if with_oom:
        a.oom(8 * GIB, GIB, GROW)
    return snapshot(a)


class FakeTorch:
    """What the bootstrap calls of torch's, recorded."""

    __version__ = "2.11.0+cu130"

    def __init__(self, snap: dict, fail: bool = False):
        self.queued, self.recorded, self.observers, self.snap = [], [], [], snap

        def record_memory_history(**kw):
            if fail:
                raise RuntimeError("no CUDA here")
            self.recorded.append(kw)

        memory = SimpleNamespace(
            _record_memory_history=record_memory_history, _snapshot=lambda: copy.deepcopy(self.snap)
        )
        self.cuda = SimpleNamespace(_lazy_call=self.queued.append, memory=memory)
        self._C = SimpleNamespace(_cuda_attach_out_of_memory_observer=self.observers.append)


@pytest.fixture
def boot(tmp_path, monkeypatch):
    """A fresh ``_wanscope_boot`` with ``--memory-history`` settings, its output in tmp_path."""
    settings = {"out": str(tmp_path), "memory_history": True, "warmup": 1, "profile_steps": 1, "step_rule": "auto"}
    monkeypatch.setenv("WANSCOPE_PROFILE", json.dumps(settings))
    monkeypatch.delenv("RANK", raising=False)
    spec = importlib.util.spec_from_file_location("_wanscope_boot_under_test", BOOT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._State.pid = os.getpid()
    return module


def armed(boot, snap, fail=False) -> FakeTorch:
    fake = FakeTorch(snap, fail)
    boot._State.torch = fake
    boot._arm_memory_history()
    return fake


def test_the_bootstrap_records_from_the_programs_cuda_start_up(boot, tmp_path):
    fake = armed(boot, oom_snapshot())
    assert fake.recorded == [] and len(fake.queued) == 1  # importing torch starts no CUDA
    fake.queued[0]()  # the program starts CUDA: torch runs the calls queued for then
    assert fake.recorded == [RECORDING] and fake.observers == [boot._on_out_of_memory]
    assert (boot.MEMORY_MAX_ENTRIES, boot.MEMORY_CONTEXT, boot.MEMORY_STACKS, boot.RECORDING_KEY) == (
        record.MAX_ENTRIES,
        record.CONTEXT,
        record.STACKS,
        "wanscope_recording",
    )
    assert list(tmp_path.iterdir()) == []  # nothing written before an error or the exit


def test_the_first_out_of_memory_error_writes_the_snapshot_and_the_exit_replaces_it(boot, tmp_path):
    fake = armed(boot, oom_snapshot())
    fake.queued[0]()
    fake.observers[0](0, 8 * GIB, 80 * GIB, GIB)  # the allocator's observer, before it raises
    path = tmp_path / "memory_snapshot.pickle"
    assert read_snapshot(path)["wanscope_recording"] == {
        "max_entries": 100_000,
        "context": "alloc",
        "stacks": "python",
        "dumped": "oom",
        "torch": "2.11.0+cu130",
    }
    fake.snap["device_traces"][0][0]["size"] += 1  # a later error writes nothing
    fake.observers[0](0, 8 * GIB, 80 * GIB, GIB)
    assert read_snapshot(path)["device_traces"][0][0]["size"] == 2 * GIB
    boot._dump_memory_at_exit()  # its trace still holds the error: the exit's snapshot replaces it
    assert read_snapshot(path)["wanscope_recording"]["dumped"] == "exit"
    assert [p.name for p in tmp_path.iterdir()] == ["memory_snapshot.pickle"]  # no temporary file left


def test_the_out_of_memory_snapshot_stays_where_the_exits_lost_the_error(boot, tmp_path):
    fake = armed(boot, oom_snapshot())
    fake.queued[0]()
    fake.observers[0](0, 8 * GIB, 80 * GIB, GIB)
    fake.snap = oom_snapshot(with_oom=False)  # the ring buffer dropped the error since
    boot._dump_memory_at_exit()
    assert read_snapshot(tmp_path / "memory_snapshot.pickle")["wanscope_recording"]["dumped"] == "oom"


def test_a_program_that_never_starts_cuda_leaves_no_snapshot(boot, tmp_path):
    armed(boot, oom_snapshot())
    boot._dump_memory_at_exit()
    assert list(tmp_path.iterdir()) == []


def test_a_failing_start_is_one_line_and_the_program_goes_on(boot, tmp_path, capsys):
    fake = armed(boot, oom_snapshot(), fail=True)
    fake.queued[0]()  # must not raise: torch would fail the program's CUDA start-up
    assert capsys.readouterr().err == "wanscope: could not record the CUDA allocator's history: no CUDA here\n"
    boot._dump_memory_at_exit()
    assert list(tmp_path.iterdir()) == []


def test_a_forked_child_that_starts_cuda_does_not_record(boot, monkeypatch):
    fake = armed(boot, oom_snapshot())
    parent = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: parent + 1)
    fake.queued[0]()
    assert fake.recorded == []


def test_a_rank_names_its_snapshot(boot, monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "3")
    fake = armed(boot, oom_snapshot())
    fake.queued[0]()
    boot._dump_memory_at_exit()
    assert [p.name for p in tmp_path.iterdir()] == ["memory_snapshot-rank3.pickle"]


@pytest.fixture
def fake_recording(monkeypatch):
    """torch's recording calls in this process, replaced: the calls made, and the snapshot."""
    calls = []
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: calls.append(kw))
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: oom_snapshot())
    return calls


def test_the_engines_recording_dumps_at_its_end_or_at_an_out_of_memory_error(fake_recording, tmp_path):
    with record.recorded(tmp_path / "end.pickle"):
        pass
    assert fake_recording == [RECORDING, {"enabled": None}]
    assert read_snapshot(tmp_path / "end.pickle")["wanscope_recording"]["dumped"] == "end"
    with pytest.raises(torch.cuda.OutOfMemoryError), record.recorded(tmp_path / "oom.pickle"):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has ...")
    assert read_snapshot(tmp_path / "oom.pickle")["wanscope_recording"]["dumped"] == "oom"
    with pytest.raises(KeyboardInterrupt), record.recorded(tmp_path / "interrupted.pickle"):
        raise KeyboardInterrupt
    assert not (tmp_path / "interrupted.pickle").exists() and fake_recording[-1] == {"enabled": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["end.pickle", "oom.pickle"]


def test_an_out_of_memory_error_of_our_engine_is_one_line_after_the_summary(
    fake_recording, tmp_path, monkeypatch, capsys
):
    from wanscope.profile import cli, kineto

    def fails(opts, out_dir):
        raise torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which ..."
        )

    monkeypatch.setattr(kineto, "profile_here", fails)
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(UsageError) as e:
        cli._profile_here(None, tmp_path, memory_history=True)
    snap = tmp_path / "memory_snapshot.pickle"
    assert str(e.value) == (
        f"CUDA out of memory. Tried to allocate 8.00 GiB; the allocator's history is in {snap} (wanscope memory {snap})"
    )
    out = capsys.readouterr().out
    assert "device 0: out of memory - the failed allocation asked for 8.00 GiB on stream 0" in out
    with pytest.raises(UsageError) as e:
        cli._profile_here(None, tmp_path / "elsewhere", memory_history=False)
    assert (
        str(e.value) == "CUDA out of memory. Tried to allocate 8.00 GiB; --memory-history records what held the memory"
    )


def test_our_engines_run_writes_the_snapshot_prints_it_and_reports_it(fake_recording, tmp_path, monkeypatch):
    """The tiny preset on the CPU standing in for a GPU run: torch's recording calls are fakes."""
    from wanscope.profile import cli

    monkeypatch.setattr(cli, "_check_memory_history", lambda *args: None)
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "out"
    r = run_main("profile", "--memory-history", "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert fake_recording == [RECORDING, {"enabled": None}]  # from the run's start to its end
    assert read_snapshot(out / "memory_snapshot.pickle")["wanscope_recording"]["dumped"] == "end"
    assert "device 0: out of memory - the failed allocation asked for 8.00 GiB" in r.stdout
    assert r.stdout.splitlines()[-1].endswith(f"{out / 'report.html'}, {out / 'memory_snapshot.pickle'}")
    memory = json.loads((out / "report.json").read_text())["memory_snapshot"]
    assert memory["devices"][0]["groups"][0]["where"] == "/home/u/oom.py:8 in grow"
    assert '"snapshot-d0-timeline"' in (out / "report.html").read_text()


def test_our_engines_run_refuses_it_without_cuda(tmp_path):
    r = run_main("profile", "--memory-history", "--out", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == (
        "wanscope: error: --memory-history records the CUDA caching allocator's history: it needs a CUDA GPU; "
        "this machine has none\n"
    )
    assert not (tmp_path / "out").exists()


# The program plays its CUDA start-up: torch's recording calls replaced, it runs the calls torch
# queued for CUDA's start (ours among them), then the allocator's out-of-memory observer, and
# dies of the error as a program does.
PROGRAM = """
import pickle, sys
import torch

with open(sys.argv[1], "rb") as f:
    SNAPSHOT = pickle.load(f)
observers = []
torch.cuda.memory._record_memory_history = lambda **kw: print("recording", sorted(kw.items()), flush=True)
torch.cuda.memory._snapshot = lambda *a, **k: dict(SNAPSHOT)
torch._C._cuda_attach_out_of_memory_observer = observers.append
for call, *_ in torch.cuda._queued_calls:
    call()
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(5):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
observers[0](0, 8 << 30, 80 << 30, 1 << 30)
raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB.")
"""


def profile_command(tmp_path, program: str, *args) -> tuple[subprocess.CompletedProcess, Path]:
    script = tmp_path / "prog.py"
    script.write_text(program)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "wanscope", "profile", "--memory-history", "--out", str(out)]
    env = dict(os.environ, COLUMNS="200")
    r = subprocess.run([*argv, "--", sys.executable, str(script), *args], capture_output=True, text=True, env=env)
    return r, out


def test_a_command_that_runs_out_of_memory_gets_the_summary_and_the_report_its_charts(tmp_path):
    source = write(tmp_path / "source.pickle", oom_snapshot())
    r, out = profile_command(tmp_path, PROGRAM, str(source))
    assert r.returncode == 1, r.stderr
    assert (
        "recording [('context', 'alloc'), ('enabled', 'all'), ('max_entries', 100000), ('stacks', 'python')]"
        in r.stdout
    )
    assert "OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB." in r.stderr  # the program's own
    assert "exited with status 1; analyzing what was captured" in r.stderr
    assert "device 0: out of memory - the failed allocation asked for 8.00 GiB on stream 0" in r.stdout
    assert f"{out / 'memory_snapshot.pickle'}" in r.stdout.splitlines()[-1]  # the files written
    assert read_snapshot(out / "memory_snapshot.pickle")["wanscope_recording"]["dumped"] == "exit"
    doc = json.loads((out / "report.json").read_text())
    memory = doc["memory_snapshot"]
    assert memory["snapshot"] == str(out / "memory_snapshot.pickle")
    assert memory["devices"][0]["oom"]["size_bytes"] == 8 * GIB
    assert memory["devices"][0]["groups"][0]["bytes"] == 2 * GIB
    page = (out / "report.html").read_text()
    assert "The CUDA allocator's snapshot" in page
    assert '"snapshot-d0-stacks"' in page and '"snapshot-d0-timeline"' in page
    assert "/home/u/oom.py:8 in grow" in page
    found, errors = probe(out / "report.html", tmp_path)
    assert errors == []
    memory = next(s for s in found["sections"] if s["id"] == "memory")
    assert memory["plots"] == memory["drawn"] == 2  # the stacks at the failed allocation, the timeline
    assert found["max_right"] <= VIEWPORT


def test_a_command_without_cuda_is_told_and_runs_on(tmp_path):
    (tmp_path / "out").mkdir()
    stale = write(tmp_path / "out" / "memory_snapshot.pickle", oom_snapshot())  # an earlier run's
    r, out = profile_command(tmp_path, "import torch\nprint((torch.ones(4) * 2).sum().item())\n")
    assert r.returncode == 0, r.stderr
    assert "started no CUDA device, so there is no allocator history" in r.stderr
    assert not stale.exists() and "memory_snapshot" not in json.loads((out / "report.json").read_text())
