"""The ``ranks`` section in the terminal and in report.html, for two real NCCL ranks (HTA's
trace_filter fixture): each table row carries analyze's numbers for its rank or step, and a
single-rank report has no ranks section."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest
from rich.console import Console
from shared_fixtures import HANG_S, shared_fixture

from wanscope.analysis.summary import analyze
from wanscope.report.text import render_analysis
from wanscope.report.units import fmt_ns, fmt_pct
from wanscope.trace import open_traces

FIXTURE = "kineto/hta/trace_filter"


def communication_cells(r: dict) -> list[str]:
    return [
        str(r["rank"]),
        str(r["device"]),
        f"{r['communication_count']:,}",
        fmt_ns(r["communication_ns"]),
        fmt_ns(r["communication_busy_ns"]),
        fmt_ns(r["compute_busy_ns"]),
        fmt_ns(r["overlap_ns"]),
        fmt_pct(r["overlap_pct"]),
        fmt_ns(r["exposed_communication_ns"]),
    ]


def step_cells(s: dict, r: dict) -> list[str]:
    slowest = f"slowest, +{fmt_ns(s['spread_ns'])}" if r["rank"] == s["slowest_rank"] else ""
    return [str(r["rank"]), fmt_ns(r["dur_ns"]), fmt_ns(r["exposed_communication_ns"]), fmt_ns(r["work_ns"]), slowest]


@pytest.fixture(scope="module")
def result():
    return analyze(open_traces([shared_fixture(FIXTURE)]))


def test_the_numbers_rendered_are_analyzes(result):
    """Pin the values the tables below show (they come from tests/analysis/test_ranks.py)."""
    assert [communication_cells(r) for r in result["ranks"]["communication"]] == [
        ["0", "0", "10", "396.2 ms", "396.2 ms", "210.3 ms", "59.2 ms", "14.95%", "337.0 ms"],
        ["1", "1", "10", "379.1 ms", "379.1 ms", "272.0 ms", "75.5 ms", "19.93%", "303.5 ms"],
    ]
    assert [step_cells(s, r) for s in result["ranks"]["steps"] for r in s["ranks"]] == [
        ["1", "600.7 ms", "134.3 ms", "466.3 ms", "slowest, +38.5 ms"],
        ["0", "600.1 ms", "172.3 ms", "427.8 ms", ""],
        ["1", "623.3 ms", "169.2 ms", "454.1 ms", "slowest, +3.222 ms"],
        ["0", "615.6 ms", "164.7 ms", "450.9 ms", ""],
    ]


def test_terminal_shows_the_ranks_section(result):
    buf = io.StringIO()
    render_analysis(result, Console(file=buf, width=220, color_system=None))
    text = buf.getvalue()
    section = text[text.index("─ ranks ─") :]
    rows = [[c.strip() for c in ln.strip("│").split("│")] for ln in section.splitlines() if ln.startswith("│")]
    comm = [communication_cells(r) for r in result["ranks"]["communication"]]
    steps = [
        [str(s["step"]) if i == 0 else "", s["basis"] if i == 0 else "", *step_cells(s, r)]
        for s in result["ranks"]["steps"]
        for i, r in enumerate(s["ranks"])
    ]
    assert rows == comm + steps
    assert rows[2][:3] == ["551", "gpu", "1"] and rows[4][:3] == ["552", "gpu", "1"]
    assert "the slowest rank of a step has the most work" in section.replace("\n", " ")


def test_html_shows_the_ranks_section(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "wanscope", "report", str(shared_fixture(FIXTURE)), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert r.returncode == 0, r.stderr
    ranks = json.loads((tmp_path / "report.json").read_text())["ranks"]
    page = (tmp_path / "report.html").read_text()

    def table(table_id):
        body = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S).group(1)
        return [
            [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
            if "<td" in row
        ]

    assert table("ranks-communication") == [communication_cells(c) for c in ranks["communication"]]
    # the step and basis cells span the step's rows
    assert table("ranks-steps") == [
        ([str(s["step"]), s["basis"]] if i == 0 else []) + step_cells(s, rr)
        for s in ranks["steps"]
        for i, rr in enumerate(s["ranks"])
    ]
    assert page.count('rowspan="2">551<') == 1 and "slowest, +38.5 ms" in page


def test_one_rank_has_no_ranks_section():
    result = analyze(open_traces([shared_fixture(FIXTURE) / "sampled_rank-0.json.gz"]))
    buf = io.StringIO()
    render_analysis(result, Console(file=buf, width=220, color_system=None))
    assert "ranks" not in result and "slowest rank per step" not in buf.getvalue()
