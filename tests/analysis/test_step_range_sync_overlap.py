"""``--step-range``: a sync whose wait overlaps the selected steps is listed, whole, also
when it began before the first selected step or ends after the last; waits outside every
selected step, or of another process, are not.

One Kineto trace, times in us, process 1 (a second process, pid 2, has a wait during step
2): step 1 host 1000..1100, step 2 1200..1300, step 3 1400..1500 on thread 1, each launching
one kernel. Waits (cudaStreamSynchronize, each under its own aten::item, each on a thread of
its own; in a CPU run the aten::item alone):
  a 1090..1210  begins in step 1, ends in step 2
  b 1150..1190  between steps 1 and 2
  c 1290..1410  begins in step 2, ends in step 3
  d 1195..1305  encloses step 2
  e 1240..1250  pid 2, inside step 2's times but not its process
"""

from __future__ import annotations

import json

import pytest
from synthetic_traces import kernel as gpu_kernel

from wanscope.analysis.scope import Scope
from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces


def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel(ts, corr):
    return gpu_kernel("gemm", ts, 5, corr)


WAITS = {"a": (1090, 120), "b": (1150, 40), "c": (1290, 120), "d": (1195, 110), "e": (1240, 10)}


def events(cpu: bool) -> list[dict]:
    out = []
    for n, t in ((1, 1000), (2, 1200), (3, 1400)):
        out.append(ev("user_annotation", f"ProfilerStep#{n}", t, 100))
        if not cpu:
            out.append(ev("cuda_runtime", "cudaLaunchKernel", t + 2, 2, correlation=n))
            out.append(kernel(t + 5, n))
    for corr, (name, (ts, dur)) in enumerate(WAITS.items(), start=10):
        pid, tid = (2 if name == "e" else 1), corr
        out.append(ev("cpu_op", "aten::item", ts, dur, pid=pid, tid=tid))
        if not cpu:
            out.append(ev("cuda_runtime", "cudaStreamSynchronize", ts + 1, dur - 2, pid=pid, tid=tid, correlation=corr))
    if not cpu:  # pid 2 has a step of its own, far from its wait
        out.append(ev("user_annotation", "ProfilerStep#9", 5000, 100, pid=2))
    return out


@pytest.fixture(scope="module", params=["gpu", "cpu"])
def con(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "t.json"
    path.write_text(json.dumps({"traceEvents": events(request.param == "cpu")}))
    return open_traces([path])


def listed(con, step_range) -> list[tuple[str, int]]:
    """(wait letter, wait_ns) of the syncs listed."""
    by_start = {ts: name for name, (ts, _) in WAITS.items()}
    out = []
    for s in analyze(con, scope=Scope(step_range))["syncs"]:
        start_us = s["start_ns"] // 1000
        out.append((by_start.get(start_us, by_start.get(start_us - 1)), s["wait_ns"]))
    return out


def wait_ns(con, name):
    ts, dur = WAITS[name]
    gpu = con.execute("SELECT count(*) FROM kernels").fetchall()[0][0] > 0
    return (dur - 2) * 1000 if gpu else dur * 1000


@pytest.mark.parametrize(
    "step_range, names",
    [
        ((2, 3), "acd"),  # step 2: the waits that end in it, begin in it or enclose it
        ((1, 2), "a"),  # step 1: a begins in it
        ((3, 4), "c"),  # step 3: c ends in it
        ((1, 4), "acd"),  # b falls between steps, e is another process's
        (None, "abdec"),  # no range: every wait, by start (e is pid 2's, rank 0 all the same)
    ],
)
def test_a_sync_whose_wait_overlaps_the_selected_steps_is_listed(con, step_range, names):
    got = listed(con, step_range)
    assert got == [(n, wait_ns(con, n)) for n in sorted(names, key=lambda n: WAITS[n][0])]
