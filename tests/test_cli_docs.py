"""docs/cli.md is every command's --help as wanscope prints it (scripts/gen_cli_docs.py)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "cli.md"


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", REPO / "scripts" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def sections(text: str) -> dict[str, str]:
    """Heading (``wanscope NAME``) -> the text of its block in docs/cli.md."""
    return dict(re.findall(r"^## `([^`]+)`\n\n```text\n(.*?)\n```$", text, re.M | re.S))


def test_docs_cli_md_is_up_to_date():
    expected = gen.render(gen.help_texts())
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    if current == expected:
        return
    want, have = sections(expected), sections(current)
    differ = [title for title in want if have.get(title) != want[title].rstrip()]
    extra = [title for title in have if title not in want]
    what = []
    if differ:
        what.append("differs for " + ", ".join(differ))
    if extra:
        what.append("documents commands that no longer exist: " + ", ".join(extra))
    if not what:
        what.append("differs outside the commands' help (header or contents list)")
    pytest.fail(f"docs/cli.md {'; '.join(what)}. Regenerate it: .venv/bin/{gen.COMMAND}", pytrace=False)


def test_every_command_has_a_section():
    from wanscope.cli import COMMANDS

    assert set(gen.help_texts()) == {"wanscope"} | {f"wanscope {name}" for name in COMMANDS}


def test_the_text_is_what_help_prints_in_a_terminal_of_80_columns(monkeypatch, capsys):
    from wanscope.cli import cli

    # click sizes help by the terminal (shutil reads $COLUMNS); CliRunner would force 80 columns
    monkeypatch.setenv("COLUMNS", "80")
    for title, text in gen.help_texts().items():
        code = cli.main(title.split()[1:] + ["--help"], prog_name="wanscope", standalone_mode=False)
        assert code == 0, title
        assert capsys.readouterr().out == text + "\n", title


def test_the_text_does_not_depend_on_the_terminal():
    env = {**os.environ, "COLUMNS": "200"}
    code = (
        "import sys; sys.path.insert(0, 'scripts'); import gen_cli_docs as g; print(g.render(g.help_texts()), end='')"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == gen.render(gen.help_texts())


def test_the_generator_needs_no_torch():
    """It runs in an install without the engine extra: no command module imports torch when loaded."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.path.insert(0, 'scripts'); "
        "import gen_cli_docs as g; g.help_texts(); "
        "print(sorted(m for m in ('torch', 'triton', 'diffusers', 'transformers') if sys.modules.get(m)))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
