"""Commands that agree with each other: options anywhere in every command, one resolver of a
memory's name or path, one label per dir, the same words for the same facts."""

from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.cli import build_parser
from tests.conftest import Env, Result, write_memory

Cli = Callable[..., Result]


@pytest.fixture
def memdir(env: Env, tmp_path: Path) -> Path:
    folder = tmp_path / "app" / ".claude" / "memory"
    (tmp_path / "app" / ".git").mkdir(parents=True)
    for n in range(6):
        write_memory(folder, f"project_m{n}.md", description=f"memory {n}", body=f"topic{n}\n")
    write_memory(folder, "project_zookeeper.md", description="zk", body="zookeeper quorum\n")
    return folder


# --- options go anywhere ------------------------------------------------------------------------
def test_forget_takes_its_options_after_a_query_word(cli: Cli, memdir: Path) -> None:
    done = cli("forget", "zookeeper", "--dry-run", memdir)
    assert done.code == 0, done.err
    assert "project_zookeeper.md" in done.out
    assert (memdir / "project_zookeeper.md").exists()


@pytest.mark.parametrize(
    "words",
    [
        ["forget", "q", "--dry-run", "D"],
        ["history", "n", "--json", "D"],
        ["show", "n", "--json", "D"],
        ["search", "q", "--json", "D", "--limit", "3"],
        ["trash", "list", "--json", "D"],
        ["dream", "D", "--dry-run", "E"],
        ["index", "D", "--check", "E"],
        ["recall", "--path", "a", "--json", "D"],
    ],
)
def test_every_command_takes_options_between_its_positionals(words: list[str]) -> None:
    parser = build_parser(words[0])
    args = parser.parse_args(words)
    assert args.command == words[0]
