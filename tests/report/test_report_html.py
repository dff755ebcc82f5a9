"""report.html in headless Chromium at a 1400 px viewport, asserted on the rendered page: it is
self-contained and draws without console errors; every section in its table of contents is there
and not empty; no element is wider than the viewport; distinct kernels never share a displayed
name; clicking gap i puts gap i inside the timeline's visible range; the icicle has one root per
thread. Screenshots of the page and of each section stay in test-artifacts/<fixture>/."""

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from browser import VIEWPORT, probe, screenshots
from cli_context import run_main
from shared_fixtures import shared_fixture

from wanscope.trace import open_traces

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
H200 = "kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz"
GPU_SECTIONS = ["overview", "device-r0d0", "steps", "host", "launch-queue", "icicle-section", "roofline", "syncs"]


def cpu_only_trace(path: Path) -> Path:
    """Three profiler steps on a main thread (a Python frame, an op inside it) and a gloo
    thread: no GPU activity at all."""
    events = []
    for n, t0 in enumerate((1000, 2000, 3000), 1):
        events += [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": 800,
            },
            {
                "ph": "X",
                "cat": "python_function",
                "name": "train.py(12): step",
                "pid": 1,
                "tid": 1,
                "ts": t0 + 10,
                "dur": 700,
            },
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 20, "dur": 500, "args": {}},
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "gloo:all_reduce",
                "pid": 1,
                "tid": 2,
                "ts": t0 + 100,
                "dur": 300,
            },
        ]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


CASES = {
    "h200_eager": (lambda tmp: shared_fixture(H200), [s for s in GPU_SECTIONS if s != "steps"]),
    "h200_step2": (lambda tmp: DATA / "h200_wan21_1p3b_profile_step2.json.gz", GPU_SECTIONS),
    "h200_memory": (
        lambda tmp: DATA / "h200_wan21_1p3b_memory_steps.json.gz",
        [*GPU_SECTIONS[:-2], "memory", "roofline", "syncs"],
    ),
    "cpu_only": (
        lambda tmp: cpu_only_trace(tmp / "cpu.json"),
        ["overview", "steps", "host", "icicle-section", "syncs"],
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def rendered(request, tmp_path_factory):
    """(case name, trace, report dir, the probe's findings) per case."""
    tmp = tmp_path_factory.mktemp(request.param)
    trace = CASES[request.param][0](tmp)
    out = tmp / "report"
    r = run_main("report", trace, "--out", out)
    assert r.returncode == 0, r.stderr
    found, errors = probe(out / "report.html", tmp)
    assert errors == []
    return request.param, trace, out, found, tmp


def test_every_listed_section_is_there_and_not_empty(rendered):
    name, _, out, found, tmp = rendered
    assert [s["id"] for s in found["sections"]] == CASES[name][1]
    for s in found["sections"]:
        assert s["present"], s["id"]
        assert s["drawn"] == s["plots"], f"{s['id']}: {s['plots'] - s['drawn']} plots not drawn"
        assert s["drawn"] or s["rows"] > 1 or s["id"] in ("overview", "syncs"), s
        assert s["text"] > len("Overview"), s
    shots = screenshots(out / "report.html", name, found, tmp)
    assert [p.stem for p in shots] == CASES[name][1]
    assert all(p.stat().st_size > 2_000 for p in shots)


def test_nothing_is_wider_than_the_viewport(rendered):
    found = rendered[3]
    assert found["viewport"] == VIEWPORT
    assert found["scroll_width"] <= VIEWPORT
    assert found["max_right"] <= VIEWPORT, found["widest"]


def test_distinct_kernels_never_share_a_displayed_name(rendered):
    name, _, _, found, _ = rendered
    full_names = defaultdict(set)
    for shown, full in found["kernels"]:
        full_names[shown].add(full)
        assert len(shown) <= 120 or shown == full.removeprefix("void ")
    assert {k: v for k, v in full_names.items() if len(v) > 1} == {}
    if name != "cpu_only":
        assert len(full_names) >= 10


def test_clicking_gap_i_shows_gap_i_on_the_timeline(rendered):
    name, _, out, found, _ = rendered
    doc = json.loads((out / "report.json").read_text())
    listed = sum(len(d["gaps"]["largest"]) for d in doc["devices"])
    assert len(found["gaps"]) == listed
    if name != "cpu_only":
        assert listed >= 5
    window_ms = {f"r{d['rank']}d{d['device']}": d["window_ns"] / 1e6 for d in doc["devices"]}
    for g in found["gaps"]:
        lo, hi = g["range"]
        assert lo <= g["start"] <= g["end"] <= hi, g
        assert hi - lo < window_ms[g["id"].split("-")[1]] / 10, g  # zoomed in, not the whole window
        assert g["marked"], g


def test_the_icicle_has_one_root_per_thread(rendered):
    _, trace, _, found, _ = rendered
    con = open_traces([str(trace)])
    threads = con.execute("SELECT DISTINCT rank, pid, tid FROM cpu_ops").fetchall()
    assert found["icicle_roots"] == len(threads)
    assert sorted(found["icicle_root_labels"]) == sorted(f"rank {r} · pid {p} · thread {t}" for r, p, t in threads)


def test_report_files_are_self_contained():
    out = REPO / "test-artifacts" / "self-contained"
    r = run_main("report", shared_fixture(H200), "--out", out)
    assert r.returncode == 0, r.stderr
    page = (out / "report.html").read_text()
    assert (out / "report.html").stat().st_size <= 8 << 20
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js inlined, no CDN
    assert not re.search(r"<link[^>]+href=\"?https?:", page)  # no external stylesheet either
    doc = json.loads((out / "report.json").read_text())
    assert doc["devices"][0]["busy_ns"] == 606_512_150
    for number in ("99.25%", "611.1 ms", "58.29%", "205.7 us", "aten::cudnn_convolution"):
        assert number in page
    assert not list(out.glob(".report.*"))  # no temporary files left


def test_run_fields_are_written_for_people():
    from wanscope.report.html import run_value

    run = json.loads((DATA / "h200_wan21_1p3b_profile_report.json").read_text())["run"]
    assert (
        run_value(run["peak_memory_bytes"], "peak_memory_bytes")
        == "text_encoding: 25.08 GiB, denoising: 5.34 GiB, vae_decode: 9.30 GiB"
    )
    assert run_value(run["gpu"], "gpu").startswith(
        "name: NVIDIA H200, compute_capability: 9.0, sm_count: 132, memory_bytes: 139.80 GiB"
    )
    assert (
        run_value(run["stage_wall_ns"], "stage_wall_ns")
        == "text_encoding: 8.200 s, denoising: 12.2 s, vae_decode: 5.221 s"
    )
    assert (run_value(True), run_value(None), run_value([1, 2, 3])) == ("yes", "-", "1, 2, 3")
