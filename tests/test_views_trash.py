"""`memoryd trash list` says when each file was moved as a relative time, and `--json` the
absolute one (issue 16)."""

import json
from datetime import datetime
from pathlib import Path

from memoryd.model.humanize import Painter
from memoryd.views.trash import render
from tests.conftest import Env, write_memory

NOW = 1_800_000_000.0


def _at(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


ROWS = [
    {
        "id": "ad34b4a0ca",
        "dir": "/m",
        "day": "2027-01-15",
        "file": "deploy_steps.md",
        "reason": "duplicate",
        "duplicate_of": "deploy_howto.md",
        "superseded_by": None,
        "time": _at(NOW - 180),
    },
    {
        "id": "2a9a2b0a18",
        "dir": "/m",
        "day": "2027-01-03",
        "file": "legacy_cart.md",
        "reason": "stale",
        "duplicate_of": None,
        "superseded_by": None,
        "time": _at(NOW - 12 * 86400),
    },
    {
        "id": "fab0398bf7",
        "dir": "/m",
        "day": "2027-01-15",
        "file": "pkg.md",
        "reason": "contradiction",
        "duplicate_of": None,
        "superseded_by": "pkg_new.md",
        "time": "not a time",
    },
]

EXPECTED = """\
ID          MOVED       REASON         FILE
ad34b4a0ca  3 min ago   duplicate      /m/deploy_steps.md (kept: deploy_howto.md)
2a9a2b0a18  12 d ago    stale          /m/legacy_cart.md
fab0398bf7  2027-01-15  contradiction  /m/pkg.md (kept: pkg_new.md)
"""


def test_the_listing_rows_in_text_out() -> None:
    assert render(ROWS, NOW) == EXPECTED
    assert render([], NOW) == "The trash is empty.\n"
    coloured = render(ROWS, NOW, Painter(True))
    assert "\x1b[" in coloured and "/m/deploy_steps.md" in coloured


def test_trash_list_says_how_long_ago_and_json_when(env: Env, cli, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    folder = repo / ".claude" / "memory"
    body = "Stale: `src/gone_{}.py` held it.\n"
    for i in range(6):
        write_memory(folder, f"m{i}.md", body=f"Topic {i} words alpha{i} beta{i}.\n")
    write_memory(folder, "old.md", body=body.format(1), age_days=90)
    assert cli("dream", folder).code == 0
    listed = cli("trash", "list", folder)
    [line] = [x for x in listed.out.splitlines() if "old.md" in x]
    assert " just now " in line or " s ago " in line, line
    [row] = json.loads(cli("trash", "list", "--json", folder).out)["trash"]
    assert datetime.fromisoformat(row["time"]).tzinfo is not None
