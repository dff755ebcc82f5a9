"""report.html: self-contained, renders in headless Chromium with no console errors, every
plot container drawn, the key numbers on the page; a screenshot is kept as an artifact in
test-artifacts/."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from shared_fixtures import HANG_S, shared_fixture

REPO = Path(__file__).resolve().parents[2]
H200 = "kineto/h200_diffusers_wan21_1p3b_eager_forward.json.gz"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=15000",
]


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", "report", str(shared_fixture(H200)), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return out


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip(
            "headless Chromium not installed (Debian package chromium; the README's test command installs it where apt-get exists)"
        )
    return exe


def test_report_files_are_self_contained(report_dir):
    page = (report_dir / "report.html").read_text()
    assert (report_dir / "report.html").stat().st_size <= 8 << 20
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js inlined, no CDN
    assert not re.search(r"<link[^>]+href=\"?https?:", page)  # no external stylesheet either
    doc = json.loads((report_dir / "report.json").read_text())
    assert doc["devices"][0]["busy_ns"] == 606_512_150
    assert not list(report_dir.glob(".report.*"))  # no temporary files left


def test_report_renders_in_chromium(report_dir, tmp_path):
    exe = chromium()
    url = (report_dir / "report.html").as_uri()
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run(
        [exe, *CHROMIUM_FLAGS, *profile, "--dump-dom", url], capture_output=True, text=True, timeout=HANG_S
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    console_errors = [
        ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln and re.search(r"error|uncaught", ln, re.I)
    ]
    assert console_errors == []
    plot_ids = re.findall(r'<div class="plot" id="([^"]+)"', (report_dir / "report.html").read_text())
    assert {"timeline-r0d0", "categories-r0d0", "kernels-r0d0", "icicle"} <= set(plot_ids)
    for pid in plot_ids:
        block = re.search(rf'id="{re.escape(pid)}"(.*?)</div>\s*(<h[23]|<table|<script)', dom.stdout, re.S)
        assert block and "main-svg" in block.group(1), f"plot {pid} did not render"
    for number in ("99.25%", "611.1 ms", "58.29%", "205.7 us", "aten::cudnn_convolution"):
        assert number in dom.stdout
    shot = REPO / "test-artifacts" / "report_h200.png"
    shot.parent.mkdir(exist_ok=True)
    r = subprocess.run(
        [exe, *CHROMIUM_FLAGS, *profile, "--window-size=1400,5000", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0 and shot.stat().st_size > 50_000


def test_run_fields_are_written_for_people():
    from wanscope.report.html import run_value

    run = json.loads((REPO / "tests" / "data" / "h200_wan21_1p3b_profile_report.json").read_text())["run"]
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
