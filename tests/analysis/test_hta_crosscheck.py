"""Cross-check with Holistic Trace Analysis (HTA 0.5.0, test-only dependency).

Where HTA and wanscope measure the same thing they agree; each place they differ on
purpose is named and shown, with ours being the exact interval-union value."""

import shutil

import pytest
from shared_fixtures import shared_fixture

from wanscope.analysis.scope import Scope
from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

hta_analysis = pytest.importorskip(
    "hta.trace_analysis", reason="HTA is a test-only dependency: pip install -e '.[test]'"
)
hta_trace = pytest.importorskip("hta.common.trace")

TRACE_FILTER = ["kineto/hta/trace_filter/sampled_rank-0.json.gz", "kineto/hta/trace_filter/sampled_rank-1.json.gz"]
NS_RESOLUTION = "kineto/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


def hta_on(paths, tmp_path):
    for p in paths:
        shutil.copy(p, tmp_path / p.name)
    # HTA parses several ranks in a forked pool; a fork of this multithreaded process (DuckDB's
    # and torch's threads) can crash in the child, and the pool then waits forever. So HTA
    # parses in this process.
    load = hta_trace.Trace.load_traces
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            hta_trace.Trace, "load_traces", lambda self, *a, **k: load(self, *a, **{**k, "use_multiprocessing": False})
        )
        return hta_analysis.TraceAnalysis(trace_dir=str(tmp_path))


@pytest.fixture(scope="module")
def trace_filter(tmp_path_factory):
    paths = [shared_fixture(p) for p in TRACE_FILTER]
    return paths, hta_on(paths, tmp_path_factory.mktemp("hta_tf")), open_traces(paths)


def test_idle_time_agrees_on_the_steps_hta_keeps(trace_filter):
    """trace_filter is >50% idle. HTA keeps step 551 of 551-552; on that step our idle share
    (1 - utilization over the union of the step's GPU interval) agrees within 1 point."""
    _, hta, con = trace_filter
    temporal = hta.get_temporal_breakdown(visualize=False).set_index("rank")
    ours = {d["rank"]: d for d in analyze(con, scope=Scope((551, 552)))["devices"]}
    for rank in (0, 1):
        assert temporal.loc[rank, "idle_time_pctg"] >= 10
        our_idle_pct = 100 - ours[rank]["utilization_pct"]
        assert our_idle_pct == pytest.approx(temporal.loc[rank, "idle_time_pctg"], abs=1.0)
        # Same window: HTA's "kernel_time" is the span of the iteration, in us.
        assert ours[rank]["window_ns"] == temporal.loc[rank, "kernel_time(us)"] * 1000


def test_hta_drops_the_last_step(trace_filter):
    _, hta, con = trace_filter
    assert sorted(hta.t.get_trace(0)["iteration"].unique()) == [551]
    assert [s["step"] for s in analyze(con)["steps"] if s["rank"] == 0] == [551, 552]


def test_hta_keeps_streams_apart_for_idle_time(trace_filter):
    """HTA's idle-time breakdown is per stream; summed over rank 0's streams it far exceeds
    the window, while ours is the hole in the union of all streams."""
    _, hta, con = trace_filter
    per_stream = hta.get_idle_time_breakdown(visualize=False, show_idle_interval_stats=False)[0]
    rank0 = per_stream[per_stream["rank"] == 0]
    assert rank0["stream"].nunique() == 5
    hta_idle_us = rank0["idle_time"].sum()
    (d,) = [d for d in analyze(con, scope=Scope((551, 552)))["devices"] if d["rank"] == 0]
    assert hta_idle_us * 1000 > d["window_ns"]  # more idle than there is time
    assert d["window_ns"] - d["busy_ns"] == 321_378_000  # union hole = HTA's temporal idle


def test_hta_rounds_ns_timestamps_to_microseconds(tmp_path):
    path = shared_fixture(NS_RESOLUTION)
    hta = hta_on([path], tmp_path)
    assert (hta.t.get_trace(0)["ts"] % 1 == 0).all()  # integer microseconds
    con = open_traces([path])
    assert con.execute("SELECT count(*) FROM kernels WHERE start_ns % 1000 <> 0").fetchall()[0][0] > 4000
    temporal = hta.get_temporal_breakdown(visualize=False).set_index("rank")
    ours = analyze(con, scope=Scope((101, 105)))["devices"][0]
    assert 100 - ours["utilization_pct"] == pytest.approx(temporal.loc[0, "idle_time_pctg"], abs=1.0)
