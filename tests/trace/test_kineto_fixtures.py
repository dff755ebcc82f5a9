"""Every Kineto fixture ingests and analyzes, checked against an independent reference:
a plain-Python union of GPU activity intervals computed with exact decimal arithmetic."""

import gzip
import json
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal

import pytest
from shared_fixtures import shared_fixture

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

HTA = "kineto/hta/"
FIXTURES = {
    "h200": ["kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz"],
    "trace_filter": [HTA + "trace_filter/sampled_rank-0.json.gz", HTA + "trace_filter/sampled_rank-1.json.gz"],
    "triton": [HTA + "triton_example/triton_example.json.gz"],
    "ns_resolution": [HTA + "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"],
    "cuda_sync": [HTA + "critical_path/cuda_event_sync/event_sync_trace.json.gz"],
    "amd": [HTA + "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"],
    "cpu_only": [HTA + "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"],
}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _ns(x) -> int:
    return int((Decimal(str(x)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def reference(paths):
    """(rank, device) -> (window_ns, busy_ns, kernel_count) from the raw JSON."""
    out = {}
    for i, p in enumerate(paths):
        with gzip.open(p, "rt") as f:
            doc = json.load(f, parse_float=Decimal)
        rank = (doc.get("distributedInfo") or {}).get("rank", i)
        per_dev = defaultdict(list)
        kernels = defaultdict(int)
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") in GPU_CATS and e.get("ts") and _ns(e["dur"]) > 0:
                dev = e["args"].get("device", e["pid"])
                start = _ns(e["ts"])
                per_dev[dev].append((start, start + _ns(e["dur"])))
                kernels[dev] += e["cat"] == "kernel"
        for dev, ivs in per_dev.items():
            ivs.sort()
            busy, cur_s, cur_e = 0, *ivs[0]
            for s, e in ivs[1:]:
                if s > cur_e:
                    busy += cur_e - cur_s
                    cur_s, cur_e = s, e
                else:
                    cur_e = max(cur_e, e)
            busy += cur_e - cur_s
            out[(rank, dev)] = (max(e for _, e in ivs) - ivs[0][0], busy, kernels[dev])
    return out


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_matches_independent_union(name):
    paths = [shared_fixture(p) for p in FIXTURES[name]]
    result = analyze(open_traces(paths))
    ours = {(d["rank"], d["device"]): (d["window_ns"], d["busy_ns"], d["kernel_count"]) for d in result["devices"]}
    assert ours == reference(paths)
    for d in result["devices"]:
        assert d["busy_ns"] <= d["window_ns"]


def test_trace_filter_two_ranks_streams_merged():
    paths = [shared_fixture(p) for p in FIXTURES["trace_filter"]]
    con = open_traces(paths)
    streams = con.execute("""
        SELECT rank, count(DISTINCT stream), count(DISTINCT stream) FILTER (kind = 'kernel') FROM (
          SELECT rank, stream, 'kernel' AS kind FROM kernels UNION ALL SELECT rank, stream, kind FROM memops)
        GROUP BY rank ORDER BY rank""").fetchall()
    assert streams == [(0, 5, 4), (1, 5, 4)]
    result = analyze(con)
    assert [(d["rank"], d["device"]) for d in result["devices"]] == [(0, 0), (1, 1)]
    # Streams overlap, so the merged busy time is below the sum of kernel times.
    for d in result["devices"]:
        assert d["busy_ns"] < d["kernel_time_ns"]
    assert {s["rank"] for s in result["steps"]} == {0, 1}


def test_triton_kernel_linked_to_cuLaunchKernel():
    con = open_traces([shared_fixture(FIXTURES["triton"][0])])
    rows = con.execute("""
        SELECT k.name, a.name FROM kernels k
        JOIN api_calls a ON a.rank = k.rank AND a.pid = k.pid AND a.correlation = k.correlation""").fetchall()
    assert rows == [("triton_poi_fused_add_cos_sin_0", "cuLaunchKernel")]


def test_ns_resolution_no_negative_durations():
    con = open_traces([shared_fixture(FIXTURES["ns_resolution"][0])])
    for table in ("kernels", "memops", "api_calls", "cpu_ops"):
        assert con.execute(f"SELECT count(*) FROM {table} WHERE end_ns < start_ns OR dur_ns < 0").fetchall() == [(0,)]
    # ts with sub-ns decimals keep their precision: some starts are not multiples of 1000 ns.
    assert con.execute("SELECT count(*) FROM kernels WHERE start_ns % 1000 <> 0").fetchall()[0][0] > 0


def test_cuda_sync_records_are_not_activity():
    con = open_traces([shared_fixture(FIXTURES["cuda_sync"][0])])
    assert con.execute("SELECT count(*) FROM cuda_syncs").fetchall() == [(4,)]
    (d,) = analyze(con)["devices"]
    assert d["kernel_count"] == 4 and d["memop_count"] == 1


def test_cpu_only_says_no_gpu_activity():
    result = analyze(open_traces([shared_fixture(FIXTURES["cpu_only"][0])]))
    assert result["devices"] == []
    assert result["notes"] and result["notes"][0].startswith("no GPU activity")
    assert [s["step"] for s in result["steps"]] == [551]
    assert result["steps"][0]["rank"] == 34


def test_minified_layout_gives_the_same_analysis(tmp_path):
    src = shared_fixture(FIXTURES["h200"][0])
    with gzip.open(src, "rb") as f:
        doc = json.loads(f.read())
    minified = tmp_path / "minified.json"
    minified.write_text(json.dumps(doc, separators=(",", ":")))
    a = analyze(open_traces([src]))
    b = analyze(open_traces([minified]))
    for r in (a, b):
        r.pop("sources")
    assert a == b
