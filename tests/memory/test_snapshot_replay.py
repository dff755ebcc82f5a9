"""``analyze_snapshot`` on snapshots built here (``synthetic_snapshots``), each number worked out
by hand in the test: the peak, the grouping by the innermost frame outside torch, reserved but
unused memory, an out-of-memory error, pending frees, a trace whose ring buffer dropped its
oldest events, a snapshot without a trace, several devices, and a trace that contradicts its
segments."""

from __future__ import annotations

import pytest
from synthetic_snapshots import GIB, MIB, TORCH_LINEAR, TORCH_MODULE, Allocator, frames, snapshot

from wanscope.memory.analysis import BEFORE_NO_FRAME, NO_FRAME, TIMELINE_POINTS, analyze_snapshot, where
from wanscope.memory.snapshot import check

STEP = frames(TORCH_LINEAR, TORCH_MODULE, "/home/u/train.py:10:step", "/home/u/train.py:30:main")
CACHE = frames("/home/u/train.py:14:make_cache", "/home/u/train.py:31:main")


def analyzed(snap: dict, top: int = 10) -> dict:
    check(snap)
    return analyze_snapshot(snap, top)


def only(doc: dict) -> dict:
    (d,) = doc["devices"]
    return d


def four_events() -> Allocator:
    """64 MiB segment; A 16 MiB (step), B 32 MiB (cache), A freed, C 8 MiB (step):
    allocated 16, 48, 32, 40 MiB: the peak is B's allocation, event 2."""
    a = Allocator()
    a.segment(0, 64 * MIB)
    a.alloc(0, 16 * MIB, STEP)
    a.alloc(16 * MIB, 32 * MIB, CACHE)
    a.free(0)
    a.alloc(0, 8 * MIB, STEP)
    return a


def test_the_peak_and_what_is_live_there():
    d = only(analyzed(snapshot(four_events())))
    assert d["at"] == {"kind": "peak", "index": 2, "time_ns": 20_000}  # 2 events of 10 us after the first
    assert (d["peak_allocated_bytes"], d["peak_index"]) == (48 * MIB, 2)
    assert (d["allocated_bytes"], d["allocations"], d["reserved_bytes"]) == (48 * MIB, 2, 64 * MIB)
    assert (d["reserved_unused_bytes"], d["reserved_unused_pct"]) == (16 * MIB, 25.0)
    cache, step = d["groups"]
    assert (cache["where"], cache["bytes"], cache["allocations"], cache["pct"]) == (
        "/home/u/train.py:14 in make_cache",
        32 * MIB,
        1,
        pytest.approx(66.6667),
    )
    # the innermost frame outside torch names the group; the whole stack is kept
    assert step["where"] == "/home/u/train.py:10 in step" and step["frame"] == STEP[2]
    assert step["stack"] == STEP and step["bytes"] == 16 * MIB
    assert d["oom"] is None and d["other"] == {"groups": 0, "allocations": 0, "bytes": 0}
    assert d["trace"]["begins_mid_run"] is False and d["trace"]["dump_mismatches"] == 0
    # the dump: C (8 MiB) and B live, the rest of the segment one free block
    assert d["dump"]["allocated_bytes"] == 40 * MIB and d["dump"]["inactive_bytes"] == 24 * MIB
    assert d["dump"]["largest_inactive_block_bytes"] == 16 * MIB


def test_the_timeline_follows_every_event_of_a_short_trace():
    d = only(analyzed(snapshot(four_events())))
    mib = [[t, a // MIB, r // MIB] for t, a, r in d["timeline"]]
    assert mib == [[0, 0, 64], [10_000, 16, 64], [20_000, 48, 64], [30_000, 32, 64], [40_000, 32, 64], [50_000, 40, 64]]
    assert d["trace"]["timeline_axis"] == "time_ns"


def test_allocations_under_one_user_frame_are_one_group_and_the_rest_apart():
    a = Allocator()
    a.segment(0, 64 * MIB)
    a.alloc(0, 4 * MIB, STEP)  # step, through torch's Linear
    a.alloc(4 * MIB, 2 * MIB, frames(TORCH_MODULE, "/home/u/train.py:10:step"))  # step, another torch path
    a.alloc(6 * MIB, 1 * MIB, frames(TORCH_LINEAR, TORCH_MODULE))  # torch's frames only
    a.alloc(7 * MIB, 3 * MIB, [])  # no Python frame (autograd's backward thread)
    d = only(analyzed(snapshot(a)))
    got = [(g["where"], g["bytes"] // MIB, g["allocations"], g["largest_bytes"] // MIB) for g in d["groups"]]
    assert got == [
        ("/home/u/train.py:10 in step", 6, 2, 4),
        (NO_FRAME, 3, 1, 3),
        ("torch/nn/modules/linear.py:125 in forward", 1, 1, 1),  # the innermost, the install prefix cut
    ]
    assert d["groups"][0]["stack"] == STEP  # the largest allocation's stack
    top1 = only(analyzed(snapshot(a), top=1))
    assert len(top1["groups"]) == 1 and top1["other"] == {"groups": 2, "allocations": 2, "bytes": 4 * MIB}


def test_where_passes_over_the_standard_library_and_inductors_code():
    stack = frames(
        "/usr/lib/python3.11/contextlib.py:81:inner",
        "/tmp/torchinductor_u/ab/cab123.py:40:call",
        "/home/u/model.py:7:forward",
    )
    assert where(stack) == ("/home/u/model.py:7 in forward", stack[2])
    site = frames("/usr/lib/python3.11/site-packages/diffusers/models/attention.py:9:forward")
    assert where(site)[0] == "diffusers/models/attention.py:9 in forward"  # a library's own frame counts
    assert where([]) == (NO_FRAME, None) and where([], before=True) == (BEFORE_NO_FRAME, None)


def test_an_out_of_memory_error_is_the_moment():
    """Two segments: 2 GiB (A, live), 4 GiB (B 1 GiB live, C 2 GiB freed); the allocator frees no
    segment (each is partly in use), then a 3 GiB request fails with 512 MiB free on the device:
    3 GiB reserved but unused (2 GiB of them in B's segment), as much as the request."""
    a = Allocator()
    a.segment(0, 2 * GIB)
    a.alloc(0, 2 * GIB, STEP)
    a.segment(4 * GIB, 4 * GIB)
    a.alloc(4 * GIB, 1 * GIB, CACHE)
    a.alloc(5 * GIB, 2 * GIB, STEP)  # the peak: 5 GiB
    a.free(5 * GIB)
    failing = frames(TORCH_LINEAR, "/home/u/train.py:12:step", "/home/u/train.py:30:main")
    a.oom(3 * GIB, 512 * MIB, failing)
    a.alloc(5 * GIB, 1 * MIB, STEP)  # after the error, the program goes on
    doc = analyzed(snapshot(a))
    d = only(doc)
    assert d["at"]["kind"] == "oom" and d["at"]["index"] == 7
    assert d["oom"] == {
        "index": 7,
        "time_ns": 70_000,
        "size_bytes": 3 * GIB,
        "stream": 0,
        "device_free_bytes": 512 * MIB,
        "where": "/home/u/train.py:12 in step",
        "frame": failing[1],
        "stack": failing,
        "events": 1,
    }
    assert (d["allocated_bytes"], d["reserved_bytes"], d["reserved_unused_bytes"]) == (3 * GIB, 6 * GIB, 3 * GIB)
    assert d["peak_allocated_bytes"] == 5 * GIB and d["peak_index"] == 4
    assert [(g["where"], g["bytes"]) for g in d["groups"]] == [
        ("/home/u/train.py:10 in step", 2 * GIB),
        ("/home/u/train.py:14 in make_cache", 1 * GIB),
    ]
    (note,) = doc["notes"]
    assert note.startswith("device 0: the failed allocation asked for 3.00 GiB while the allocator held 3.00 GiB")
    assert "fragmentation" in note and "expandable_segments:True" in note


def test_an_out_of_memory_error_with_the_memory_full_and_with_a_limit():
    a = Allocator()
    a.segment(0, 8 * GIB)
    a.alloc(0, 8 * GIB, STEP)
    a.oom(2 * GIB, 100 * MIB)
    (note,) = analyzed(snapshot(a))["notes"]
    assert note == (
        "device 0: the failed allocation asked for 2.00 GiB, more than the device's free 100.0 MiB and the "
        "allocator's 0 B reserved but unused: the live allocations listed fill the memory."
    )
    a.oom(2 * GIB, 40 * GIB)  # the device had room: a memory fraction refused it
    notes = analyzed(snapshot(a))["notes"]
    assert "torch.cuda.set_per_process_memory_fraction" in notes[0]
    assert notes[1] == "device 0: 2 out-of-memory errors in the trace; the last is shown."
    assert only(analyzed(snapshot(a)))["oom"]["index"] == 3


def test_a_pending_free_holds_memory_but_is_not_allocated():
    """A 8 MiB freed while another stream still uses it, then C 16 MiB: allocated 20 MiB at the
    peak (B and C), 8 MiB pending free, 4 MiB of the 32 MiB segment unused."""
    a = Allocator()
    a.segment(0, 32 * MIB)
    a.alloc(0, 8 * MIB, STEP)
    a.alloc(8 * MIB, 4 * MIB, CACHE)
    a.free(0, complete=False)  # free_requested only
    a.alloc(12 * MIB, 16 * MIB, STEP)
    d = only(analyzed(snapshot(a)))
    assert d["at"]["index"] == 4 and (d["allocated_bytes"], d["allocations"]) == (20 * MIB, 2)
    assert (d["pending_free_bytes"], d["reserved_unused_bytes"]) == (8 * MIB, 4 * MIB)
    assert sum(g["bytes"] for g in d["groups"]) == 20 * MIB  # a pending free is in no group
    assert d["dump"]["pending_free_bytes"] == 8 * MIB
    assert d["trace"]["dump_mismatches"] == 0 and d["trace"]["inconsistent_events"] == 0


def test_a_ring_buffer_that_dropped_the_oldest_events():
    """Six events kept of twelve: from A's free on. Before the kept part: A (4 MiB, freed in it)
    and B (8 MiB, live at the dump with its stack) were live, the 16 MiB allocation had come and
    gone, and the 32 MiB segment existed; the recorded peak is 8 + 16 = 24 MiB, not the run's 28."""
    a = Allocator()
    a.segment(0, 32 * MIB)
    a.alloc(0, 4 * MIB, STEP)  # A
    a.alloc(4 * MIB, 8 * MIB, CACHE)  # B
    a.alloc(12 * MIB, 16 * MIB, STEP)  # the run's peak: 28 MiB
    a.free(12 * MIB)
    a.free(0)  # kept from here: A's free (free_requested, free_completed), without its allocation
    a.segment(32 * MIB, 32 * MIB)
    a.alloc(32 * MIB, 16 * MIB, STEP)  # the recorded peak: 24 MiB
    a.free(32 * MIB)
    assert len(a.events) == 12
    recording = {"max_entries": 6, "context": "state", "stacks": "python", "dumped": "exit", "torch": "2.11.0"}
    doc = analyzed(snapshot(a, keep_last=6, recording=recording))
    d = only(doc)
    tr = d["trace"]
    assert (tr["events"], tr["begins_mid_run"], tr["ring_buffer_full"]) == (6, True, True)
    assert (tr["start_allocations"], tr["start_allocated_bytes"], tr["start_reserved_bytes"]) == (2, 12 * MIB, 32 * MIB)
    assert (d["peak_allocated_bytes"], d["at"]["index"]) == (24 * MIB, 3)
    assert (d["reserved_bytes"], d["allocated_bytes"]) == (64 * MIB, 24 * MIB)
    groups = {g["where"]: g["bytes"] for g in d["groups"]}
    # B kept its stack from its block at the dump
    assert groups == {"/home/u/train.py:10 in step": 16 * MIB, "/home/u/train.py:14 in make_cache": 8 * MIB}
    assert doc["recording"] == recording
    assert any("ring buffer is full" in n for n in doc["notes"])
    assert any("the trace begins after allocations were made (2 were live" in n for n in doc["notes"])


def test_an_allocation_made_before_the_trace_keeps_its_stack_from_its_free_in_our_recordings():
    a = Allocator()
    a.segment(0, 32 * MIB)
    a.alloc(0, 4 * MIB, STEP)
    a.alloc(4 * MIB, 8 * MIB, CACHE)
    a.free(4 * MIB)  # kept: B's free, which carries B's stack where context='alloc'
    a.alloc(16 * MIB, 1 * MIB, STEP)
    for context, expected in (("alloc", "/home/u/train.py:14 in make_cache"), ("all", BEFORE_NO_FRAME)):
        recording = {"max_entries": 100, "context": context}
        d = only(analyzed(snapshot(a, keep_last=3, recording=recording)))
        assert d["at"]["index"] is None  # the peak (12 MiB: A and B) is before the first kept event
        assert {g["where"] for g in d["groups"]} == {"/home/u/train.py:10 in step", expected}


def test_a_snapshot_without_a_trace_lists_the_dump():
    a = four_events()
    snap = snapshot(a)
    snap["device_traces"] = [[]]
    doc = analyzed(snap)
    d = only(doc)
    assert d["at"] == {"kind": "dump", "index": None, "time_ns": None}
    assert (d["allocated_bytes"], d["reserved_bytes"], d["reserved_unused_bytes"]) == (40 * MIB, 64 * MIB, 24 * MIB)
    assert [(g["where"], g["bytes"]) for g in d["groups"]] == [
        ("/home/u/train.py:14 in make_cache", 32 * MIB),
        ("/home/u/train.py:10 in step", 8 * MIB),
    ]
    assert "has no trace events" in doc["notes"][0]


def test_each_device_on_its_own():
    a0, a1 = Allocator(0), Allocator(1)
    a0.segment(0, 2 * MIB)
    a0.alloc(0, MIB, STEP)
    a1.segment(1 << 40, 20 * MIB)
    a1.alloc(1 << 40, 20 * MIB, CACHE)
    doc = analyzed(snapshot(a0, a1))
    assert [(d["device"], d["allocated_bytes"]) for d in doc["devices"]] == [(0, MIB), (1, 20 * MIB)]
    empty = analyzed({"segments": [], "device_traces": [[], []]})
    assert empty["devices"] == [] and "the snapshot is empty" in empty["notes"][0]


def test_a_long_trace_is_thinned_to_its_highest_points_with_the_peak_on_it():
    a = Allocator()
    a.segment(0, GIB)
    for i in range(1000):
        a.alloc(0, (i % 37 + 1) * MIB, STEP)
        a.free(0)
    d = only(analyzed(snapshot(a)))
    assert len(d["timeline"]) == TIMELINE_POINTS
    assert max(p[1] for p in d["timeline"]) == d["peak_allocated_bytes"] == 37 * MIB
    assert d["trace"]["events"] == 3001


def test_a_trace_that_contradicts_its_segments_says_so():
    a = four_events()
    snap = snapshot(a)
    snap["device_traces"][0].insert(5, dict(snap["device_traces"][0][4]))  # A's free_completed twice
    doc = analyzed(snap)
    tr = only(doc)["trace"]
    assert tr["inconsistent_events"] == 1 and tr["dump_mismatches"] == 0
    del snap["segments"][0]["blocks"][0]  # C is live in the trace, gone from the dump
    tr = only(analyzed(snap))["trace"]
    assert tr["dump_mismatches"] == 1
    assert any("the trace and the segments disagree" in n for n in analyzed(snap)["notes"])
