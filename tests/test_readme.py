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
