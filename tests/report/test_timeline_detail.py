"""The report's timeline merges ops into pixel-sized segments, but draws each op on its own in
the views around the listed gaps, so that a jump to a gap shows the gap."""

from synthetic_traces import kernel, launch, step, write_trace

from wanscope.analysis.scope import Scope
from wanscope.analysis.timeline import timeline_segments
from wanscope.report.html import gap_windows
from wanscope.trace import open_traces


def test_ops_inside_a_detail_view_are_not_merged(tmp_path):
    # 100 kernels of 9 us every 10 us from 1000 us: a 1 us gap between each two
    events = [step(1, 990)]
    for i in range(100):
        events += [launch(995 + i * 0.01, i + 1), kernel("gemm_kernel", 1000 + 10 * i, 9, i + 1)]
    con = open_traces([str(write_trace(tmp_path / "t.json", events))])
    coarse = timeline_segments(con, Scope(), max_segments=10)
    assert [s["ops"] for s in coarse] == [10] * 10  # a quantum of 99.9 us: ten kernels each
    window_start = con.execute("SELECT min(start_ns) FROM kernels").fetchall()[0][0]
    # a view 540..560 us into the window, inside the merged segment of kernels 50..59
    a, b = window_start + 540_000, window_start + 560_000
    fine = timeline_segments(con, Scope(), max_segments=10, detail=[(0, 0, a, b)])
    around = [(s["start_ns"], s["end_ns"], s["ops"]) for s in fine if 500_000 <= s["start_ns"] < 600_000]
    # kernels 54, 55 and 56 (56 starts at the view's end: overlap is inclusive) each on its own;
    # 50..53 before the view and 57..59 after it merge, but not across it
    assert around == [
        (500_000, 539_000, 4),
        (540_000, 549_000, 1),
        (550_000, 559_000, 1),
        (560_000, 569_000, 1),
        (570_000, 599_000, 3),
    ]
    assert sum(s["ops"] for s in fine) == 100


def test_a_gaps_view_spans_ten_gap_lengths_each_side_and_at_least_20_us():
    result = {
        "devices": [
            {
                "rank": 0,
                "device": 0,
                "window_start_ns": 1_000,
                "gaps": {
                    "largest": [
                        {"start_ns": 11_000, "dur_ns": 4_000, "next_op": {"name": "k"}},
                        {"start_ns": 51_000, "dur_ns": 1_000, "next_op": {"name": "k"}},
                    ]
                },
            }
        ]
    }
    ((g1, g2),) = gap_windows(result).values()
    assert (g1["i"], g1["start_ms"], g1["end_ms"], g1["from_ms"], g1["to_ms"]) == (1, 0.01, 0.014, -0.03, 0.054)
    assert (g1["from_ns"], g1["to_ns"]) == (-29_000, 55_000)
    assert (g2["i"], g2["from_ms"], g2["to_ms"]) == (2, 0.03, 0.071)
