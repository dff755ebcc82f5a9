"""Two inputs that claim the same rank (two jobs' rank 0, two runs of one worker in one
folder) stay apart: the later one gets the next free rank, each device says which file it
came from, and a note names both files. Merged, their windows spanned the time between the
runs (decades on a wall clock) at about 0% utilization."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from shared_fixtures import shared_fixture
from synthetic_traces import kernel, launch

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

DAY_US = 86_400 * 10**6


def trace(path, t0_us: int, rank: int | None, where: str = "before", kernels: int = 2):
    """A trace of ``kernels`` 10 us kernels 10 us apart from ``t0_us`` on device 0, each with
    its launch; ``distributedInfo`` with ``rank`` before or after the events (none when
    ``rank`` is None)."""
    events = []
    for i in range(kernels):
        ts = t0_us + 20 * i
        events += [launch(ts - 5, i + 1), kernel(f"k{i}", ts, 10, i + 1)]
    info = "" if rank is None else f'"distributedInfo": {{"rank": {rank}, "world_size": 8}}'
    body = '"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events) + "\n]"
    if info:
        body = f"{info}, {body}" if where == "before" else f"{body}, {info}"
    path.write_text("{" + body + "}\n")
    return path


def summary(paths) -> dict:
    return analyze(open_traces(paths))


def windows(result) -> list[tuple]:
    return [
        (d["rank"], d["device"], d["source"], d["window_ns"], d["busy_ns"], d["kernel_count"])
        for d in result["devices"]
    ]


@pytest.mark.parametrize("where", ["before", "after"])
def test_two_inputs_that_claim_the_same_rank_stay_apart(tmp_path, where):
    a = trace(tmp_path / "a.json", 1_000, rank=0, where=where)
    b = trace(tmp_path / "b.json", 1_000 + 365 * DAY_US, rank=0, where=where)
    r = summary([a, b])
    # each device spans its own two kernels: 30 us window, 20 us busy
    assert windows(r) == [(0, 0, 0, 30_000, 20_000, 2), (1, 0, 1, 30_000, 20_000, 2)]
    assert [(s["path"], s["rank"], s["claimed_rank"]) for s in r["sources"]] == [
        (str(a), 0, None),
        (str(b), 1, 0),
    ]
    (note,) = [n for n in r["notes"] if "claims rank" in n]
    assert str(a) in note and str(b) in note and "rank 1" in note
    # the launches joined their own kernels, not the other file's
    con = open_traces([a, b])
    assert con.execute(
        "SELECT k.rank, count(*) FROM kernels k JOIN api_calls a USING (rank, correlation) GROUP BY 1 ORDER BY 1"
    ).fetchall() == [(0, 2), (1, 2)]


def test_two_inputs_that_claim_the_same_rank_in_one_folder(tmp_path):
    """Two runs of one worker left in one folder: the folder's files sort by name."""
    trace(tmp_path / "run1-rank0.json", 1_000, rank=0)
    trace(tmp_path / "run2-rank0.json", 5_000_000, rank=0, kernels=3)
    r = summary([tmp_path])
    assert windows(r) == [(0, 0, 0, 30_000, 20_000, 2), (1, 0, 1, 50_000, 30_000, 3)]
    assert [s["claimed_rank"] for s in r["sources"]] == [None, 0]


def test_inputs_that_claim_no_rank_keep_their_position(tmp_path):
    """Files without distributedInfo have their position as rank and claim nothing; a
    distributedInfo rank already given by position moves to the next free rank."""
    a = trace(tmp_path / "a.json", 1_000, rank=None)
    b = trace(tmp_path / "b.json", 9_000_000, rank=None)
    c = trace(tmp_path / "c.json", 1_000, rank=1)
    r = summary([a, b, c])
    assert [(s["rank"], s["claimed_rank"]) for s in r["sources"]] == [(0, None), (1, None), (2, 1)]
    assert [d["source"] for d in r["devices"]] == [0, 1, 2]
    assert len([n for n in r["notes"] if "claims rank" in n]) == 1
    r = summary([a, b])
    assert [(s["rank"], s["claimed_rank"]) for s in r["sources"]] == [(0, None), (1, None)]
    assert not [n for n in r["notes"] if "claims rank" in n]


def test_two_inputs_that_claim_the_same_rank_from_the_cli(tmp_path):
    a = trace(tmp_path / "a.json", 1_000, rank=0)
    b = trace(tmp_path / "b.json", 1_000 + 30 * DAY_US, rank=0)
    r = subprocess.run(  # a wide terminal: a device's heading is cut at its width
        [sys.executable, "-m", "wanscope", "analyze", str(a), str(b)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())  # rich wraps long lines
    assert f"rank 0 · device 0 · {a}" in out and f"rank 1 · device 0 · {b}" in out
    assert f"{b} claims rank 0, which {a} has" in out


def test_a_kineto_trace_that_claims_a_rank_of_an_nsys_export(tmp_path):
    """An Nsight Systems export of two processes holds ranks 0 and 1; a Kineto trace of
    rank 1 after it gets rank 2."""
    nsys = shared_fixture("nsys/nsysai_mfu_2gpu_before.sqlite")
    k = trace(tmp_path / "k.json", 1_000, rank=1)
    alone = summary([nsys])
    r = summary([nsys, k])
    assert [(s["rank"], s["claimed_rank"]) for s in r["sources"]] == [(0, None), (2, 1)]
    assert [d for d in r["devices"] if d["rank"] < 2] == [{**d, "source": 0} for d in alone["devices"]]
    assert windows(r)[-1] == (2, 0, 1, 30_000, 20_000, 2)
