"""Every command's output for a terminal goes through one escaping step
(memoryd.model.display.shown): names, paths, memory text and record stores that carry escape
sequences, lone carriage returns, bidi controls or newlines are printed as escapes, never acted
on, and never start a line of their own. `--json` stays JSON and keeps the values exact."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.model.display import shown
from tests.conftest import Env, Result

TITLE = "\x1b]0;owned\x07"  # sets the terminal's title
CLEAR = "\x1b[2J"  # clears the screen
NAME = f"evil{CLEAR}\nFAKE LINE\u202e"  # a newline and a right-to-left override in a name
BODY = f"Body {CLEAR} and\rFAKE LINE over it, \u2066isolated\u2069, see `src/app.py`\nline two\n"


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A repo whose folder name sets the terminal's title, with a memory whose file name,
    name, description and body carry control sequences, and a record store whose record
    does too."""
    repo = tmp_path / f"app{TITLE}"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("def handle_request():\n    return 1\n")
    folder = repo / ".claude" / "memory"
    folder.mkdir(parents=True)
    (folder / f"evil{TITLE}{CLEAR}.md").write_text(
        f"---\nname: {json.dumps(NAME)}\ndescription: {json.dumps('desc' + CLEAR + 'x')}\n"
        f"type: project\n---\n{BODY}"
    )
    (folder / "fake\nFAKE LINE.md").write_text("---\nname: n\ndescription: d\ntype: user\n---\nb\n")
    store = repo / ".agent" / "memory.jsonl"
    store.parent.mkdir()
    record = {
        "id": f"r-{CLEAR}", "scope": ["handle_request"], "rule": f"rule {TITLE}\nFAKE LINE",
        "because": "b", "evidence": "e", "createdAt": "2026-10-01T00:00:00Z",
        "lastConfirmedAt": "2099-01-01T00:00:00Z",
    }  # fmt: skip
    store.write_text(json.dumps(record) + "\n")
    (tmp_path / f"empty{TITLE}" / ".git").mkdir(parents=True)  # a repo with no memory dir
    return repo


def _memory(repo: Path) -> Path:
    return repo / ".claude" / "memory" / f"evil{TITLE}{CLEAR}.md"


COMMANDS: dict[str, Callable[[Path], list[object]]] = {
    "index": lambda repo: ["index", "-v", repo / ".claude" / "memory"],
    "index --check": lambda repo: ["index", "--check", repo / ".claude" / "memory"],
    "search": lambda repo: ["search", "evil", repo],
    "search records": lambda repo: ["search", "rule", repo],
    "recall": lambda repo: ["recall", repo, "--path", repo / "src" / "app.py"],
    "recall records": lambda repo: ["recall", repo, "--symbol", "handle_request"],
    "show": lambda repo: ["show", _memory(repo)],
    "show by name": lambda repo: ["show", "evil", repo],
    "explain": lambda repo: ["explain", _memory(repo)],
    "explain store": lambda repo: ["explain", repo / ".agent" / "memory.jsonl"],
    "dirs": lambda repo: ["dirs", repo],
    "trash list": lambda repo: ["trash", "list", repo / ".claude" / "memory"],
    "log": lambda repo: ["log"],
    "a warning on stderr": lambda repo: ["search", "x", repo.parent / f"empty{TITLE}"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_command_prints_a_control_character_it_did_not_write(
    env: Env, cli: Callable[..., Result], hostile: Path, command: str
) -> None:
    """After an index pass over the hostile repo, each command's output (stdout and stderr)
    holds no character a terminal acts on but the newlines ending memoryd's own lines, and
    no line of it starts with what a name or text tried to put on a line of its own."""
    if command != "index --check":
        cli("index", hostile / ".claude" / "memory")
    result = cli(*COMMANDS[command](hostile))
    printed = result.out + result.err
    assert printed.strip(), result
    assert {c for c in printed if not c.isprintable() and c != "\n"} == set(), printed
    assert not [line for line in printed.splitlines() if line.startswith("FAKE LINE")], printed


def test_show_keeps_the_lines_of_a_memory_and_escapes_the_rest(
    env: Env, cli: Callable[..., Result], hostile: Path
) -> None:
    """A memory's text is printed line by line as written; the sequences in it are escapes."""
    out = cli("show", _memory(hostile)).out
    assert "Body \\x1b[2J and\\rFAKE LINE over it, \\u2066isolated\\u2069" in out
    assert "\nline two\n" in out


def test_json_output_keeps_the_values_exact(
    env: Env, cli: Callable[..., Result], hostile: Path
) -> None:
    """--json is for programs: the encoder escapes control characters, and the values come
    back exactly as the files hold them."""
    found = json.loads(cli("search", "evil", hostile, "--json").out)["results"]
    assert found[0]["name"] == NAME.replace("\n", " ")  # a name is one line in frontmatter
    assert found[0]["file"] == str(_memory(hostile))
    shown_doc = json.loads(cli("show", _memory(hostile), "--json").out)
    assert shown_doc["text"].endswith(BODY)


@pytest.mark.parametrize(
    ("text", "lines", "expected"),
    [
        ("plain name.md", False, "plain name.md"),
        ("a\nb\tc", False, "a\\nb\\tc"),
        (f"{TITLE}x", False, "\\x1b]0;owned\\x07x"),
        ("\u202eabc\u2066", False, "\\u202eabc\\u2066"),
        ("one\r\ntwo\rthree\n\tfour\r", True, "one\r\ntwo\\rthree\n\tfour\\r"),
        (f"{CLEAR}\n", True, "\\x1b[2J\n"),
    ],
)
def test_shown_escapes_what_a_terminal_acts_on(text: str, lines: bool, expected: str) -> None:
    """One line: every non-printable escaped; many lines: newlines, tabs and a CR before a
    newline stay."""
    assert shown(text, lines=lines) == expected


def test_history_diff_prints_no_control_character_of_the_memory(
    env: Env, cli: Callable[..., Result], hostile: Path
) -> None:
    """A kept version's diff is memory text: escaped line by line as `show` prints it."""
    memory = _memory(hostile)
    cli("index", hostile / ".claude" / "memory")
    memory.write_text(memory.read_text() + f"added {TITLE} and {CLEAR}\rFAKE LINE\n")
    cli("index", hostile / ".claude" / "memory")
    result = cli("history", memory, "--diff")
    printed = result.out + result.err
    assert "added" in printed, result
    assert {c for c in printed if not c.isprintable() and c != "\n"} == set(), printed
