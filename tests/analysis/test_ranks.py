"""The ``ranks`` section of analyze on two real NCCL ranks (HTA's trace_filter fixture), checked
against values computed here from the raw Kineto JSON with plain Python: communication kernel
time and union, its overlap with compute kernels, and the slowest rank of each step."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal

import pytest
from shared_fixtures import shared_fixture

from wanscope.analysis.ranks import rank_summary
from wanscope.analysis.scope import Scope
from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

FIXTURE = "kineto/hta/trace_filter"
# the category rules that come before "communication" (categories.csv); none matches here
EARLIER_RULES = r"^triton_"


def ns(us) -> int:
    return int((Decimal(str(us)) * 1000).to_integral_value())


def union(intervals) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(i) for i in out]


def length(intervals) -> int:
    return sum(e - s for s, e in union(intervals))


def intersect(a, b) -> list[tuple[int, int]]:
    """Intersection of two interval sets (each merged first)."""
    a, b, out, i, j = union(a), union(b), [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def clip(intervals, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def read_rank(path):
    doc = json.load(gzip.open(path))
    events = doc["traceEvents"]
    kernels = [
        (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"], e["args"]["device"], e["args"]["correlation"])
        for e in events
        if e.get("cat") == "kernel" and e.get("dur", 0) > 0
    ]
    gpu = {
        e["args"]["correlation"]: (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("dur", 0) > 0
    }
    launches = [
        (ns(e["ts"]), e["args"]["correlation"]) for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
    ]
    steps = {
        int(e["name"].split("#")[1]): (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    return doc["distributedInfo"]["rank"], kernels, gpu, launches, steps


def expected():
    """The ranks section, computed from the raw files."""
    communication, per_step = [], {}
    for path in sorted(shared_fixture(FIXTURE).iterdir()):
        rank, kernels, gpu, launches, steps = read_rank(path)
        for name in {k[2] for k in kernels}:
            assert not re.search(EARLIER_RULES, name, re.I)
        comm = [(s, e) for s, e, name, _d, _c in kernels if "nccl" in name.lower()]
        compute = [(s, e) for s, e, name, _d, _c in kernels if "nccl" not in name.lower()]
        (device,) = {k[3] for k in kernels}
        overlap = length(intersect(comm, compute))
        communication.append(
            {
                "rank": rank,
                "device": device,
                "communication_count": len(comm),
                "communication_ns": sum(e - s for s, e in comm),
                "communication_busy_ns": length(comm),
                "compute_busy_ns": length(compute),
                "overlap_ns": overlap,
                "overlap_pct": round(100.0 * overlap / length(comm), 4),
                "exposed_communication_ns": length(comm) - overlap,
            }
        )
        for step, (lo, hi) in steps.items():
            # the step's GPU interval: GPU work whose launch lies inside the step's CPU range
            work = [gpu[c] for t, c in launches if lo <= t <= hi and c in gpu]
            g0, g1 = min(s for s, _ in work), max(e for _, e in work)
            exposed = length(clip(comm, g0, g1)) - length(intersect(clip(comm, g0, g1), clip(compute, g0, g1)))
            per_step.setdefault(step, []).append(
                {"rank": rank, "dur_ns": g1 - g0, "exposed_communication_ns": exposed, "work_ns": g1 - g0 - exposed}
            )
    steps = []
    for step, ranks in sorted(per_step.items()):
        ranks.sort(key=lambda r: (-r["work_ns"], r["rank"]))
        steps.append(
            {
                "step": step,
                "basis": "gpu",
                "slowest_rank": ranks[0]["rank"],
                "spread_ns": ranks[0]["work_ns"] - ranks[-1]["work_ns"],
                "ranks": ranks,
            }
        )
    return {"communication": communication, "steps": steps}


@pytest.fixture(scope="module")
def con():
    return open_traces([shared_fixture(FIXTURE)])


def test_ranks_section_matches_an_independent_computation(con):
    want = expected()
    assert rank_summary(con, Scope()) == want
    # the numbers themselves, as read from the files by the computation above
    assert [
        (c["rank"], c["communication_count"], c["communication_ns"], c["overlap_ns"]) for c in want["communication"]
    ] == [(0, 10, 396_199_000, 59_216_000), (1, 10, 379_053_000, 75_530_000)]
    assert [(s["step"], s["slowest_rank"], s["spread_ns"]) for s in want["steps"]] == [
        (551, 1, 38_539_000),
        (552, 1, 3_222_000),
    ]


def test_step_range_limits_the_ranks_section(con):
    got = rank_summary(con, Scope((552, None)))
    assert [s["step"] for s in got["steps"]] == [552]
    assert got["steps"] == expected()["steps"][1:]
    assert [c["communication_count"] for c in got["communication"]] == [5, 5]


def test_analyze_has_a_ranks_section_only_with_several_ranks(con):
    assert analyze(con)["ranks"] == expected()
    single = open_traces([shared_fixture(FIXTURE) / "sampled_rank-0.json.gz"])
    assert "ranks" not in analyze(single)


def test_symmetric_memory_barriers_are_communication():
    """The copy-engine Ulysses transport's waits (parallel/exchange.py) are torch's symmetric-memory
    barrier kernels: communication, like NCCL's, not compute."""
    from wanscope.analysis.categories import categorize

    assert (
        categorize("void c10d::symmetric_memory::barrier_kernel(unsigned int**, unsigned long, unsigned long)")
        == "communication"
    )
    assert categorize("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "communication"


def test_a_single_rank_gets_its_communication_too():
    """Class: communication/compute overlap only with two or more ranks. One rank's file alone
    reports the same numbers per device as the two-rank analysis does for it."""
    single = open_traces([shared_fixture(FIXTURE) / "sampled_rank-0.json.gz"])
    (device,) = analyze(single)["devices"]
    want = {k: v for k, v in expected()["communication"][0].items() if k not in ("rank", "device")}
    assert device["communication"] == want and want["communication_count"] == 10


def test_communication_per_device_on_a_trace_built_here(tmp_path):
    """One rank: on device 0 compute on stream 7 at 0-100 and 150-200 us, NCCL on stream 8 at
    80-160 us and 300-310 us (from 1000 us). Communication union 90 us, overlap with compute 20 + 10 = 30 us,
    exposed 60 us; a device without NCCL kernels has none."""

    def k(name, ts, dur, stream, device=0, corr=0):
        args = {"device": device, "stream": stream, "correlation": corr}
        return {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": device,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": args,
        }

    events = [  # at 1000 us on: a timestamp of 0 reads as none
        k("gemm_kernel", 1000, 100, 7, corr=1),
        k("gemm_kernel", 1150, 50, 7, corr=2),
        k("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1080, 80, 8, corr=3),
        k("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1300, 10, 8, corr=4),
        k("gemm_kernel", 1000, 10, 7, device=1, corr=5),
    ]
    path = tmp_path / "one_rank.json"
    path.write_text(json.dumps({"traceEvents": events}))
    d0, d1 = analyze(open_traces([path]))["devices"]
    assert d0["communication"] == {
        "communication_count": 2,
        "communication_ns": 90_000,
        "communication_busy_ns": 90_000,
        "compute_busy_ns": 150_000,
        "overlap_ns": 30_000,
        "overlap_pct": round(100 * 30 / 90, 4),
        "exposed_communication_ns": 60_000,
    }
    assert d1["communication"] is None
