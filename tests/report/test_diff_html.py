"""The diff page renders in headless Chromium with no console errors, both plots drawn and
the key numbers on it; a screenshot is kept in test-artifacts/."""

import re
import subprocess
import sys
from pathlib import Path

from browser import FLAGS, chromium
from shared_fixtures import HANG_S
from synthetic_traces import base_and_new

REPO = Path(__file__).resolve().parents[2]


def test_diff_page_renders(tmp_path):
    exe = chromium()
    base, new = base_and_new(tmp_path)
    page = tmp_path / "diff.html"
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", "diff", base, new, "--format", "html", "--out", page],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run(
        [exe, *FLAGS, *profile, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=HANG_S
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln and re.search(r"error|uncaught", ln, re.I)] == []
    for pid in ("categories", "changes"):
        block = re.search(rf'id="{pid}"(.*?)</div>\s*(<h[23]|<table|<script)', dom.stdout, re.S)
        assert block and "main-svg" in block.group(1), f"plot {pid} did not render"
    for text in (
        "77.5 us → 60.0 us",
        "57.14% → 69.57%",
        "(+12.42 pp)",
        "triton_red_fused_mean_pow_1",
        "Fused Triton kernels in NEW",
        "mean, pow",
    ):
        assert text in dom.stdout
    shot = REPO / "test-artifacts" / "diff_synthetic.png"
    shot.parent.mkdir(exist_ok=True)
    r = subprocess.run(
        [exe, *FLAGS, *profile, "--window-size=1400,3000", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0 and shot.stat().st_size > 50_000
