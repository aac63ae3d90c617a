"""`memoryd dirs` as a table (issue 16): rows in, text out, at a narrow and a wide terminal;
then the command: a table without DIR, the detail with one, relative times on the terminal and
absolute ones in JSON."""

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from memoryd.model.humanize import Painter
from memoryd.views.dirs import render
from tests.conftest import Env, write_memory

NOW = 1_800_000_000.0


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _row(name: str, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": name,
        "label": name,
        "kind": "project",
        "mode": "managed",
        "mode_reason": "every memory file is a pointer target",
        "memory_files": 14,
        "unparseable": [],
        "index": {"lines": 21, "max_lines": 200, "chars": 900, "max_chars": 25000},
        "in_sync": True,
        "flagged": 0,
        "last_pass": _iso(NOW - 180),
        "last_pass_result": "completed",
    }
    row.update(over)
    return row


ROWS = [
    _row("shop"),
    _row(
        "web-everything/reviewer-with-a-long-agent-name",
        kind="repo-agent-local",
        mode="unmanaged",
        mode_reason="MEMORY.md is read-only (chmod a-w): memoryd never rewrites it",
        memory_files=3,
        index={"lines": 180, "max_lines": 200, "chars": 24000, "max_chars": 25000},
        flagged=2,
        last_pass=_iso(NOW - 5 * 3600),
        last_pass_result="unmanaged",
    ),
    _row(
        "billing",
        in_sync=False,
        index=None,
        flagged=None,
        last_pass=None,
        last_pass_result=None,
        unparseable=["bad.md"],
        memory_files=0,
    ),
    _row("api", last_pass=_iso(NOW - 3 * 86400), last_pass_result="refused", flagged=1),
]

WIDE = "".join(
    line + "\n"
    for line in (
        "NAME                                            KIND        MODE      "
        " MEMORIES  INDEX    FLAGGED  LAST PASS",
        "shop                                            project     managed   "
        " 14        21 10%   0        3 min ago",
        "web-everything/reviewer-with-a-long-agent-name  repo-local  unmanaged "
        " 3         180 96%  2        5 h ago",
        "billing                                         project     managed*  "
        " 0         none     -        never",
        "api                                             project     managed   "
        " 14        21 10%   1        3 d ago, refused",
        "",
        "4 dirs (3 managed, 1 unmanaged), 31 memories, 3 flagged for review, 1 "
        "file unparseable, 1 out of step (marked *: run",
        "memoryd index).",
        "INDEX: MEMORY.md's lines and the share of the agent's load window they take.",
        "The detail of a dir, and why one is unmanaged: memoryd dirs DIR",
    )
)

NARROW = """\
NAME         KIND        MODE       MEMORIES  INDEX    FLAGGED  LAST PASS
shop         project     managed    14        21 10%   0        3 min ago
web-everyt…  repo-local  unmanaged  3         180 96%  2        5 h ago
billing      project     managed*   0         none     -        never
api          project     managed    14        21 10%   1        3 d ago, refused

4 dirs (3 managed, 1 unmanaged), 31 memories, 3 flagged for review, 1 file
unparseable, 1 out of step (marked *: run memoryd index).
INDEX: MEMORY.md's lines and the share of the agent's load window they take.
The detail of a dir, and why one is unmanaged: memoryd dirs DIR
"""


@pytest.mark.parametrize(("width", "expected"), [(120, WIDE), (80, NARROW)])
def test_the_table_at_a_wide_and_a_narrow_terminal(width: int, expected: str) -> None:
    text = render(ROWS, NOW, width)
    assert text == expected
    assert all(len(line) <= width for line in text.splitlines())
    # The reason a dir is unmanaged is the detail's, not the table's.
    assert "read-only" not in text


def test_colour_is_added_after_layout() -> None:
    plain = render(ROWS, NOW, 120)
    coloured = render(ROWS, NOW, 120, Painter(True))
    assert "\x1b[33munmanaged\x1b[0m" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


# --- the command --------------------------------------------------------------------------------
def _project(env: Env, name: str) -> Path:
    folder = env.claude / "projects" / f"-code-{name}" / "memory"
    write_memory(folder, "a.md", body="Deploys go through the release script.\n")
    write_memory(folder, "b.md", body="Invoices are rendered by the billing worker.\n")
    return folder


def test_dirs_prints_a_table_and_dirs_dir_the_detail(env: Env, cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    shop = _project(env, "shop")
    notes = _project(env, "notes")
    (notes / "MEMORY.md").write_text("# my own notes\n\nnothing here is a pointer\n")
    os.chmod(notes / "MEMORY.md", 0o444)
    assert cli("index", shop).code == 0
    assert cli("dream", shop).code == 0
    table = cli("dirs")
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "KIND",
        "MODE",
        "MEMORIES",
        "INDEX",
        "FLAGGED",
        "LAST",
        "PASS",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows["-code-shop"][1:5] == ["project", "managed", "2", "4"]  # 4 index lines
    assert rows["-code-shop"][6] == "0"  # flagged by its last pass
    assert " ".join(rows["-code-shop"][7:]) in ("just now", *(f"{n} s ago" for n in range(60)))
    assert rows["-code-notes"][1:3] == ["project", "unmanaged"]
    assert rows["-code-notes"][-1] == "never"
    assert "2 dirs (1 managed, 1 unmanaged), 4 memories." in table.out
    doc = json.loads(cli("dirs", "--json").out)
    by_name = {d["name"]: d for d in doc["dirs"]}
    reason = by_name["-code-notes"]["mode_reason"]
    assert reason and reason not in table.out  # said by `dirs DIR`, not on every listing
    detail = cli("dirs", notes)
    assert reason in detail.out and "repo root:" in detail.out
    last = by_name["-code-shop"]["last_pass"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", last)
    assert by_name["-code-shop"]["last_pass_result"] == "completed"
    assert by_name["-code-shop"]["flagged"] == 0 and by_name["-code-notes"]["flagged"] is None
    assert by_name["-code-notes"]["last_pass"] is None


def test_dirs_colours_only_when_asked_or_on_a_terminal(env: Env, cli) -> None:
    _project(env, "shop")
    assert "\x1b[" not in cli("dirs").out  # captured: not a terminal
    assert "\x1b[" in cli("dirs", "--color", "always").out
    assert "\x1b[" not in cli("dirs", "--color", "never").out
