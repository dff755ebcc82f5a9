"""Headless Chromium for the report tests: open a page with a probe script added that reads the
rendered page (widths, names, sections), clicks every gap link and reports what it saw as JSON;
full-page screenshots cut into one image per section, kept in test-artifacts/."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from shared_fixtures import HANG_S

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
VIEWPORT = 1400
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=30000",
]

# Runs after the page's own scripts (it goes in just before </body>): waits for the plots, then
# measures, clicks each gap link in turn and writes its findings into <pre id="probe">.
PROBE = """<script>
window.addEventListener("load", async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  await sleep(500);
  const out = {viewport: document.documentElement.clientWidth, scroll_width: document.documentElement.scrollWidth};
  let right = 0, widest = "";
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > right) { right = r.right; widest = `${el.tagName}#${el.id}.${el.className}`; }
  }
  Object.assign(out, {max_right: right, widest: widest});
  out.kernels = [...document.querySelectorAll(".kernel")].map((e) => [e.textContent, e.title]);
  out.sections = [...document.querySelectorAll("#toc a")].map((a) => {
    const id = a.getAttribute("href").slice(1), el = document.getElementById(id);
    if (!el) return {id, present: false};
    const r = el.getBoundingClientRect();
    return {id, present: true, plots: el.querySelectorAll(".plot").length,
            drawn: [...el.querySelectorAll(".plot")].filter((p) => p.querySelector(".main-svg")).length, rows: el.querySelectorAll("tr").length,
            text: el.textContent.trim().length, top: r.top + window.scrollY, height: r.height};
  });
  out.page_height = document.documentElement.scrollHeight;
  out.gaps = [];
  for (const a of document.querySelectorAll("a.gap-link")) {
    a.click();
    await sleep(300);
    const gd = document.getElementById(a.dataset.timeline);
    const row = document.getElementById(a.id.replace(/^gap-/, "stack-"));
    out.gaps.push({id: a.id, range: gd._fullLayout.xaxis.range.map(Number), start: Number(a.dataset.start),
                   end: Number(a.dataset.end), marked: !!row && row.classList.contains("current-gap")});
  }
  const ic = document.getElementById("icicle");
  out.icicle_roots = ic && ic.data ? ic.data[0].parents.filter((p) => p === "").map((p, i) => i).length : null;
  out.icicle_root_labels = ic && ic.data ? ic.data[0].labels.filter((l, i) => ic.data[0].parents[i] === "") : null;
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip(
            "headless Chromium not installed (Debian package chromium; the README's test command installs it where apt-get exists)"
        )
    return exe


def probe(page: Path, tmp: Path) -> tuple[dict, list[str]]:
    """(the probe's findings, console errors) for ``page`` opened at the report's viewport."""
    probed = tmp / f"probed-{page.parent.name}.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    r = subprocess.run(
        [
            chromium(),
            *FLAGS,
            f"--user-data-dir={tmp / 'profile'}",
            f"--window-size={VIEWPORT},1000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, "the probe did not finish: " + r.stderr[-2000:]
    import html

    errors = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln and re.search(r"error|uncaught", ln, re.I)]
    return json.loads(html.unescape(m.group(1))), errors


def screenshots(page: Path, name: str, found: dict, tmp: Path) -> list[Path]:
    """The whole page at the viewport's width, then one image per section of the table of
    contents, in test-artifacts/<name>/; returns the section images."""
    from PIL import Image

    out = ARTIFACTS / name
    out.mkdir(parents=True, exist_ok=True)
    whole = out / "page.png"
    height = min(int(found["page_height"]) + 20, 16_000)
    r = subprocess.run(
        [
            chromium(),
            *FLAGS,
            f"--user-data-dir={tmp / 'shot'}",
            f"--window-size={VIEWPORT},{height}",
            f"--screenshot={whole}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0 and whole.exists(), r.stderr[-2000:]
    shots = []
    with Image.open(whole) as im:
        for s in found["sections"]:
            top = int(s["top"])
            if top >= im.height:
                continue
            path = out / f"{s['id']}.png"
            im.crop((0, top, VIEWPORT, min(top + int(s["height"]) + 1, im.height))).save(path)
            shots.append(path)
    return shots
