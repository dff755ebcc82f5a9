"""The README is the contract: every command is documented there, and CI runs exactly the
README's test command."""

import re
from pathlib import Path

from wanscope.cli import COMMANDS

REPO = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_exactly_two_setup_commands_and_ci_runs_the_second():
    setup = readme_commands()
    assert len(setup) == 2
    ci = (REPO / ".ci" / "run").read_text()
    assert setup[1] in ci.splitlines()


def test_every_command_is_in_the_readme():
    text = (REPO / "README.md").read_text()
    missing = [name for name in COMMANDS if f"`wanscope {name}" not in text]
    assert missing == []


def test_the_readme_is_a_front_page():
    size = len((REPO / "README.md").read_bytes())
    assert size <= 8192, f"README.md is {size} bytes, over 8 KB: reference material belongs in docs/"


def test_the_readme_and_docs_date_things_and_name_no_work_periods():
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        hits = re.findall(r"\bsessions? \d+", path.read_text(), re.IGNORECASE)
        assert hits == [], f"{path.relative_to(REPO)}: {hits} (use dates and commits)"


def _cells(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.strip().strip("│").split("│"))


def test_the_analyze_excerpt_is_what_analyze_prints(monkeypatch):
    """The README's ``$ wanscope analyze`` excerpt, line by line: its plain lines appear as
    they are, its table rows cell by cell (rows cut with an ellipsis are left out)."""
    from cli_context import run_main

    text = (REPO / "README.md").read_text()
    excerpt = re.search(r"```\n\$ wanscope analyze\n(.*?)```", text, re.S).group(1).splitlines()
    monkeypatch.setenv("COLUMNS", "250")  # wide enough that no row wraps
    r = run_main("analyze")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rows = {_cells(line) for line in lines if line.startswith("│")}
    checked = 0
    for line in excerpt:
        if line == "..." or "…" in line:
            continue
        if line.startswith("│"):
            assert _cells(line) in rows, line
        else:
            assert line in lines, line
        checked += 1
    assert checked >= 4
