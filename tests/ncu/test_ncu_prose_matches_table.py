"""``ncu`` prose never contradicts its table: the occupancy sentence states the block limits
and the theoretical occupancy the table shows (Nsight Compute's own values where the report
has them; on an RTX 3070 report the table said 80 blocks by shared memory, ncu's value, and
the sentence the calculator's "allows 6"). And ncu's own ``==WARNING==`` / ``==PROF==``
lines before the CSV header are kept as warnings in the JSON, not dropped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wanscope.ncu.diagnosis import diagnose
from wanscope.ncu.readers import read_report

DATA = Path(__file__).resolve().parents[1] / "data" / "ncu"
FA2 = DATA / "h200_fa2_attn_480p.details.csv"


def stated(explanation: str) -> dict:
    """The numbers the occupancy sentence states (its first number for each)."""
    pats = {
        "block_limit_registers": r"registers(?: per thread)? allow (\d+)",
        "block_limit_warps": r"-warp limit (\d+)",
        "block_limit_blocks": r"the SM's block limit (\d+)",
        "block_limit_shared_mem": r"\) allows (\d+)(?: \([^)]*\))? in the",
        "theoretical_occupancy_pct": r"([\d.]+)% theoretical occupancy",
    }
    out = {}
    for key, pat in pats.items():
        m = re.search(pat, explanation)
        if m:
            out[key] = float(m[1])
    return out


def assert_prose_matches_table(d):
    said = stated(d.explanation)
    assert {"block_limit_registers", "block_limit_warps", "theoretical_occupancy_pct"} <= said.keys(), d.explanation
    for key, value in said.items():
        assert value == pytest.approx(d.facts[key], abs=0.005), (key, d.explanation)


def edited(tmp_path, replacements: dict[str, str]) -> Path:
    """FA2's details CSV with the Occupancy rows ``label`` set to a new value."""
    text = FA2.read_text()
    for label, value in replacements.items():
        text, n = re.subn(rf'("Occupancy","{re.escape(label)}","[^"]*",)"[^"]*"', rf'\1"{value}"', text)
        assert n == 1, label
    path = tmp_path / "edited.details.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize("report", sorted(DATA.glob("*.csv")), ids=lambda p: p.name)
def test_ncu_prose_matches_table_on_real_reports(report):
    for k in read_report(report).kernels:
        d = diagnose(k)
        if d.occupancy is not None:
            assert_prose_matches_table(d)


@pytest.mark.parametrize(
    "replacements",
    [
        {"Block Limit Shared Mem": "80"},  # ncu's limit above the calculator's
        {"Block Limit Shared Mem": "1", "Theoretical Occupancy": "6.25"},  # below it: binding
        {"Block Limit Registers": "3", "Block Limit Shared Mem": "3", "Theoretical Occupancy": "18.75"},
        {"Theoretical Occupancy": "25"},  # a percentage of ncu's own
    ],
)
def test_ncu_prose_matches_table_where_ncu_and_the_calculator_differ(tmp_path, replacements):
    (k,) = read_report(edited(tmp_path, replacements)).kernels
    d = diagnose(k)
    assert_prose_matches_table(d)
    calc = d.occupancy
    for label, key in (
        ("Block Limit Shared Mem", "block_limit_shared_mem"),
        ("Block Limit Registers", "block_limit_registers"),
    ):
        if label in replacements:
            value = int(replacements[label])
            assert d.facts[key] == value and getattr(calc, key) != value
            assert f"the calculator gives {getattr(calc, key)}" in d.explanation


def test_ncu_warnings_before_the_header_are_kept(tmp_path):
    tool = [
        "==PROF== Connected to process 536 (/usr/bin/python3.12)",
        "==WARNING== Unable to access the following 1 metrics: sm__sass_inst_executed.sum.",
        "==PROF== Disconnected from process 536",
    ]
    lines = FA2.read_text().splitlines(keepends=True)
    path = tmp_path / "with_tool_lines.details.csv"
    path.write_text(tool[0] + "\n" + tool[1] + "\n" + "".join(lines[:5]) + tool[2] + "\n" + "".join(lines[5:]))
    report = read_report(path)
    assert report.warnings == tool
    assert [k.name for k in report.kernels] == [k.name for k in read_report(FA2).kernels]
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", "ncu", str(path), "--format", "json"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["warnings"] == tool
    r = subprocess.run([sys.executable, "-m", "wanscope", "ncu", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and tool[1] in " ".join(r.stdout.split())
    clean = subprocess.run(
        [sys.executable, "-m", "wanscope", "ncu", str(FA2), "--format", "json"], capture_output=True, text=True
    )
    assert json.loads(clean.stdout)["warnings"] == []
