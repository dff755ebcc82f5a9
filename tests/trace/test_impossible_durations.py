"""Impossible durations: a GPU record that extends past the end of the next record on its
stream (a 2 s kernel among 50 us ones, a known CUPTI artifact) is clipped to that record's
start and counted (``warnings.clipped_duration`` and a note); one that only overlaps the
next one's start (programmatic dependent launch) is counted in a note and kept; equal
timestamps are neither. Kineto traces and Nsight Systems exports alike."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from shared_fixtures import shared_fixture
from synthetic_traces import launch

from wanscope.analysis.summary import analyze
from wanscope.trace import open_traces

T0 = 1_000  # us


def gpu(ts, dur, corr, stream=7, cat="kernel", name="k"):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": T0 + ts,
        "dur": dur,
        "args": {"device": 0, "stream": stream, "correlation": corr},
    }


def trace(tmp_path, records) -> dict:
    events = []
    for corr, r in enumerate(records, start=1):
        events.append(launch(T0, corr, dur=0.5))
        events.append(gpu(*r[:2], corr, *r[2:]))
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    con = open_traces([path])
    return con, analyze(con)


def kernel_times(con) -> list[tuple[int, int, int]]:
    rows = con.execute(
        "SELECT stream, start_ns, end_ns, dur_ns FROM kernels UNION ALL SELECT stream, start_ns, end_ns, dur_ns FROM memops "
        "ORDER BY 1, 2, 3"
    ).fetchall()
    assert all(e - s == d for _, s, e, d in rows)
    return [(st, (s - T0 * 1000) // 1000, (e - T0 * 1000) // 1000) for st, s, e, _ in rows]


def notes_about(result, word):
    return [n for n in result["notes"] if word in n]


def test_impossible_durations_are_clipped_to_the_next_record(tmp_path):
    records = [
        (0, 50),
        (60, 2_000_000),  # 2 s, past the end of the next kernel: clipped to its start, 120
        (120, 50),
        (180, 50),
        (10, 1_000_000, 8, "gpu_memcpy", "Memcpy DtoD (Device -> Device)"),  # stream 8: clipped to 20
        (20, 5, 8, "gpu_memset", "Memset (Device)"),
        (30, 1_000_000, 8),  # the last record of its stream: nothing to end before
    ]
    con, r = trace(tmp_path, records)
    assert r["warnings"] == {"clipped_duration": 2}
    assert kernel_times(con) == [
        (7, 0, 50),
        (7, 60, 120),
        (7, 120, 170),
        (7, 180, 230),
        (8, 10, 20),
        (8, 20, 25),
        (8, 30, 1_000_030),
    ]
    (d,) = r["devices"]
    assert d["kernel_time_ns"] == (50 + 60 + 50 + 50 + 1_000_000) * 1000
    assert d["memop_time_ns"] == (10 + 5) * 1000
    (note,) = notes_about(r, "clipped")
    assert note.startswith("2 GPU records extended past the end of the next record on their stream")
    assert not notes_about(r, "programmatic dependent launch")


def test_impossible_durations_partial_overlaps_are_counted_not_clipped(tmp_path):
    records = [
        (0, 50),
        (40, 50),  # starts before the first ends, ends after it: the first overlaps its start
        (100, 50),
        (140, 20),  # likewise: the one before ends at 150, inside this one
        (200, 30),
        (200, 30),  # equal times: neither
        (250, 20),
        (260, 10),  # same end as the previous one: neither
    ]
    con, r = trace(tmp_path, records)
    assert r["warnings"] == {}
    assert kernel_times(con) == [(7, s, s + d) for s, d in records]
    (note,) = notes_about(r, "programmatic dependent launch")
    assert note.startswith("2 GPU records end after the next record on their stream has started")
    assert not notes_about(r, "clipped")


@pytest.mark.parametrize("copies", [1, 3])
def test_impossible_durations_clipped_in_order(tmp_path, copies):
    """A record enclosing several: clipped to the first one's start."""
    records = [(0, 10_000)] + [(100 * i, 50) for i in range(1, 1 + copies)]
    con, r = trace(tmp_path, records)
    assert r["warnings"] == {"clipped_duration": 1}
    assert kernel_times(con)[0] == (7, 0, 100)


def test_impossible_durations_in_nsys(tmp_path):
    path = tmp_path / "overrun.sqlite"
    shutil.copy(shared_fixture("nsys/fuser_64ee035dc_report1_h200_test_matmul.sqlite"), path)
    db = sqlite3.connect(path)
    rows = db.execute(
        'SELECT rowid, start, "end", deviceId, streamId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY deviceId, streamId, start'
    ).fetchall()
    # the first two kernels of one stream
    (rid, start, *_), (_, next_start, next_end, *_) = next(
        (a, b) for a, b in zip(rows, rows[1:]) if a[3:] == b[3:] and b[1] > a[1]
    )
    db.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = ? WHERE rowid = ?', [next_end + 2_000_000_000, rid])
    db.commit()
    db.close()
    con = open_traces([path])
    r = analyze(con)
    assert r["warnings"].get("clipped_duration") == 1
    assert con.execute("SELECT end_ns FROM kernels WHERE start_ns = ?", [start]).fetchall() == [(next_start,)]
    assert notes_about(r, "clipped")
