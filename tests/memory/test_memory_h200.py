"""Snapshots recorded on an H200 by ``benchmarks/memory_snapshot_capture.py`` and committed in
tests/data: torch's own pickles, read by our data-only reader, replayed, and checked against
what the programs did. ``h200_memory_snapshot.pickle``: our 1.3B DiT built and run at a small
size; ``h200_oom_snapshot.pickle``: ``benchmarks/oom_program.py`` under ``wanscope profile
--memory-history``, doubling an allocation until the GPU was full. Each test skips where its
file is absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_context import run_main

from wanscope.memory.analysis import analyze_snapshot
from wanscope.memory.snapshot import read_snapshot

DATA = Path(__file__).resolve().parents[1] / "data"
GIB = 1 << 30


def load(name: str) -> tuple[dict, dict]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"tests/data/{name} is not committed (benchmarks/memory_snapshot_capture.py records it)")
    snap = read_snapshot(path)
    return snap, analyze_snapshot(snap)


def test_the_dit_snapshot_replays_to_what_its_segments_say():
    snap, doc = load("h200_memory_snapshot.pickle")
    assert doc["recording"]["context"] == "alloc" and doc["recording"]["dumped"] == "end"
    (d,) = doc["devices"]
    tr = d["trace"]
    assert tr["events"] > 0 and tr["inconsistent_events"] == 0 and tr["dump_mismatches"] == 0
    assert d["at"]["kind"] == "peak" and d["peak_allocated_bytes"] == d["allocated_bytes"]
    assert d["peak_allocated_bytes"] >= d["dump"]["allocated_bytes"] > 0  # the weights stay to the end
    assert sum(g["bytes"] for g in d["groups"]) + d["other"]["bytes"] == d["allocated_bytes"]
    # the engine's own lines hold the memory: the DiT's modules and its forward
    assert any(g["where"].startswith(("wanscope/", "src/wanscope/")) or "/wanscope/" in g["where"] for g in d["groups"])
    assert 0 <= d["reserved_unused_bytes"] <= d["reserved_bytes"]


def test_the_out_of_memory_snapshot_shows_the_failed_allocation_and_its_stack():
    snap, doc = load("h200_oom_snapshot.pickle")
    (d,) = doc["devices"]
    oom = d["oom"]
    assert d["at"]["kind"] == "oom" and oom is not None
    assert [f["name"] for f in oom["stack"][:3]] == ["make_activation", "train_step", "main"]
    assert oom["frame"]["filename"].endswith("benchmarks/oom_program.py")
    size = oom["size_bytes"]
    assert size % GIB == 0 and (size // GIB) & (size // GIB - 1) == 0  # 1 GiB doubled k times
    assert oom["device_free_bytes"] < size
    # held then: the weights (1 GiB) and every activation before, 1 + 2 + ... + size/2 GiB
    assert d["allocated_bytes"] == GIB + (size - GIB)
    held = {g["where"].split(":")[-1].split(" in ")[-1]: g for g in d["groups"]}
    assert held["make_activation"]["bytes"] == size - GIB and held["load_weights"]["bytes"] == GIB


def test_the_command_reads_torchs_own_pickle(monkeypatch):
    path = DATA / "h200_oom_snapshot.pickle"
    if not path.exists():
        pytest.skip("tests/data/h200_oom_snapshot.pickle is not committed")
    monkeypatch.setenv("COLUMNS", "200")
    r = run_main("memory", path)
    assert r.returncode == 0, r.stderr
    assert "out of memory - the failed allocation asked for" in r.stdout and "in make_activation" in r.stdout
