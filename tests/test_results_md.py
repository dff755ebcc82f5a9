"""benchmarks/RESULTS.md and benchmarks/results/: sections and result files named by date (and
what the run was), never by a work period; RESULTS.md opens with a table of the current numbers
whose rows link to dated sections; every result file carries its commit (or says why it cannot)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS_MD = REPO / "benchmarks" / "RESULTS.md"
RESULTS_DIR = REPO / "benchmarks" / "results"

DATED = re.compile(r"\d{4}-\d{2}-\d{2}\b")
RESULT_FILE = re.compile(r"(?P<name>[a-z0-9_]+)-(?P<date>\d{4}-\d{2}-\d{2})(?:-(?P<label>[a-z0-9][a-z0-9.+-]*))?\.json")
# a work period: "session" or "sessions" and a number, or "run" and a number naming one of a
# day's numbered runs (not "kernels run 2.3x faster")
WORK_PERIOD = re.compile(r"\b(?:sessions?\s+[0-9]+|run\s+[0-9]+)\b(?![.,]?[0-9])", re.IGNORECASE)
WORK_PERIOD_LABEL = re.compile(r"(?:session|run)-?[0-9]+")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation other than '-' and '_'
    dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"(?m)^#{1,6} (.+)$", text):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_matches_github():
    assert slug("2026-11-30: fast mode, INT8 `Q K^T` (57c8e79; issue 9: must met)") == (
        "2026-11-30-fast-mode-int8-q-kt-57c8e79-issue-9-must-met"
    )
    assert anchors("## A b\n### A b\n## A b\n") == {"a-b", "a-b-1", "a-b-2"}


def test_sections_are_dated():
    text = RESULTS_MD.read_text(encoding="utf-8")
    heads = re.findall(r"(?m)^## (.+)$", text)
    assert heads[0] == "Current numbers", "RESULTS.md opens with the table of current numbers"
    undated = [h for h in heads[1:] if not DATED.match(h)]
    assert not undated, f"sections not named by date: {undated}"


def test_current_numbers_link_to_dated_sections():
    text = RESULTS_MD.read_text(encoding="utf-8")
    table = text.split("## Current numbers", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| result |")]
    assert len(rows) >= 5, rows
    known = anchors(text)
    for row in rows:
        links = re.findall(r"\]\(#([^)]+)\)", row)
        assert links, f"row without a link to its section: {row}"
        for anchor in links:
            assert anchor in known, f"{anchor!r} is no heading of RESULTS.md"
            assert DATED.match(anchor), f"{anchor!r} is not a dated section"


def test_every_anchor_link_resolves():
    text = RESULTS_MD.read_text(encoding="utf-8")
    known = anchors(text)
    missing = [a for a in re.findall(r"\]\(#([^)]+)\)", text) if a not in known]
    assert not missing, missing


def _tree_texts():
    for top in ("src", "tests", "benchmarks"):
        for path in sorted((REPO / top).rglob("*")):
            rel = path.relative_to(REPO)
            if path.suffix in (".py", ".md", ".sql") and path.is_file() and "data" not in rel.parts:
                yield path


def test_no_work_periods_in_the_tree():
    found = []
    for path in _tree_texts():
        text = path.read_text(encoding="utf-8")
        for m in WORK_PERIOD.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{path.relative_to(REPO)}:{line}: {m.group(0)!r}")
    assert not found, "name the date and the commit instead:\n" + "\n".join(found)


def test_work_period_pattern():
    # spelled in two parts, so that a grep of the tree for work periods does not find this file
    for word, rest in (
        ("session", " 7"),
        ("Session", " 3's"),
        ("sessions", " 3 and 4"),
        ("(run", " 2)"),
        ("session", "\n 6"),
    ):
        text = word + rest
        assert WORK_PERIOD.search(text), text
    for text in ("kernels run 2.3-9.4x faster", "a second run", "call 4", "15 runs 3.66-4.28", "run 1,000 steps"):
        assert not WORK_PERIOD.search(text), text


@pytest.mark.parametrize("path", sorted(RESULTS_DIR.glob("*.json")), ids=lambda p: p.name)
def test_result_file(path):
    m = RESULT_FILE.fullmatch(path.name)
    assert m, f"{path.name}: not NAME-YYYY-MM-DD[-label].json"
    assert not (m["label"] and WORK_PERIOD_LABEL.search(m["label"])), f"{path.name}: the label names a work period"
    result = json.loads(path.read_text(encoding="utf-8"))
    assert "commit" in result, f"{path.name}: no commit"
    commit = result["commit"]
    if commit is None:
        assert result.get("commit_note"), f"{path.name}: commit null without a commit_note saying why"
    else:
        assert re.fullmatch(r"[0-9a-f]{7,40}", commit), commit
    if "date" in result:
        assert result["date"] == m["date"], path.name


def test_result_files_named_in_results_md_exist():
    text = RESULTS_MD.read_text(encoding="utf-8")
    named = set(re.findall(r"[a-z0-9_]+-\d{4}-\d{2}-\d{2}(?:-[a-z0-9.+-]+)?\.json", text))
    # brace forms (``name-{a,b}.json``) and ``...-x.json`` abbreviations are not checked here
    missing = sorted(n for n in named if not (RESULTS_DIR / n).is_file())
    assert not missing, missing


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def test_section_names_cited_in_the_tree_exist():
    """``benchmarks/RESULTS.md, "2026-11-30: DiT forward with ..."`` in a comment or docstring
    names the start of a section's heading."""
    heads = [_plain(h) for h in re.findall(r"(?m)^#{2,3} (.+)$", RESULTS_MD.read_text(encoding="utf-8"))]
    cited = {}
    for path in _tree_texts():
        if path in (RESULTS_MD, Path(__file__).resolve()):  # this file: examples, not citations
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r'"(\d{4}-\d{2}-\d{2}: [^"]+)"', text):
            name = _plain(re.sub(r"\n\s*#", " ", m.group(1)))
            cited.setdefault(name, f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}")
    assert cited, "no section names cited: the check would check nothing"
    missing = [f"{where}: {name!r}" for name, where in cited.items() if not any(h.startswith(name) for h in heads)]
    assert not missing, "no such section in RESULTS.md:\n" + "\n".join(missing)
