"""Restores are final (DESIGN §5, Amendments): a restored memory is not moved again until its
bytes change, its pointer goes back where it was, and `trash restore` takes every form
`trash list` prints."""

import json
import os
import time
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from memoryd.model.index import Entry as IndexEntry
from memoryd.model.index import Place
from memoryd.model.index_edit import IndexInput, update_index
from memoryd.trash import store as trash
from tests.conftest import Env, write_memory
from tests.helpers import TOPICS, agent_write, index_text, start, wait_for

FORK = "Fork the repo with `git clone --depth 1` then rebase the clean branch on upstream main.\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A repo-scope memory dir in a small repo."""
    root = tmp_path / "app"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def handle_request():\n    return 1\n")
    out = root / ".claude" / "memory"
    out.mkdir(parents=True)
    return out


HAND_INDEX = """\
# App Memory

Notes the agent keeps. Hand-written prose stays.

## Project
- [Clean fork](project_clean_fork.md) — how the clean fork is made
- [Release train](project_release.md) — when releases leave

## Reference
- [Fork notes](reference_fork.md) — the same, newer
- [Grafana](reference_grafana.md) — dashboards
"""


def _issue_dir(folder: Path) -> None:
    """The field report: `project_clean_fork.md` is the older duplicate of `reference_fork.md`,
    its pointer sits first under `## Project`."""
    write_memory(folder, "project_clean_fork.md", body=FORK, age_days=60)
    write_memory(folder, "reference_fork.md", body=FORK, age_days=20)
    write_memory(folder, "project_release.md", body="Releases leave on Tuesdays at noon.\n")
    write_memory(folder, "reference_grafana.md", body="Dashboards live in grafana under ops.\n")
    (folder / "MEMORY.md").write_text(HAND_INDEX)


def _dream(cli, folder: Path) -> dict[str, Any]:
    result = cli("dream", "--json", folder)
    assert result.code == 0, result.err + result.out
    return json.loads(result.out)["dirs"][0]  # type: ignore[no-any-return]


def test_a_restored_duplicate_stays_put_and_its_pointer_goes_back_under_its_heading(
    env: Env, cli, folder: Path
) -> None:
    _issue_dir(folder)
    [change] = _dream(cli, folder)["changes"]
    assert (change["file"], change["reason"]) == ("project_clean_fork.md", "duplicate")
    assert cli("trash", "restore", change["id"]).code == 0
    assert (folder / "MEMORY.md").read_text() == HAND_INDEX  # every byte where it was
    for _ in range(3):  # later passes: nothing moves, neither the restored one nor its twin
        assert _dream(cli, folder)["changes"] == []
    assert (folder / "project_clean_fork.md").exists() and (folder / "reference_fork.md").exists()
    shown = cli("explain", folder / "project_clean_fork.md")
    today = date.today().isoformat()
    assert f"restored by a person on {today}; not moved again until it changes" in shown.out
    assert "decision: keep — restored by a person" in shown.out
    # Its bytes change: the pin ends, and the changed memory is judged like any other.
    write_memory(folder, "project_clean_fork.md", body=FORK + "\n", age_days=60)
    [again] = _dream(cli, folder)["changes"]
    assert again["file"] == "project_clean_fork.md"


def test_a_restored_stale_memory_survives_restarts_renames_and_repeated_passes(
    env: Env, cli, folder: Path
) -> None:
    write_memory(folder, "stale.md", body="Lived in `src/removed.py`.\n", age_days=60)
    write_memory(folder, "other.md", body="Handled by `src/app.py`.\n")
    [change] = _dream(cli, folder)["changes"]
    assert change["reason"] == "stale"
    assert cli("trash", "restore", change["id"]).code == 0
    assert _dream(cli, folder)["changes"] == []  # each command is a new process's state
    data = cli("explain", "--json", folder / "stale.md")
    guards = {g["guard"]: g["holds"] for g in json.loads(data.out)["guards"]}
    assert guards["restored"] is True
    # The agent renames it, same bytes: still the memory the person restored.
    os.rename(folder / "stale.md", folder / "stale_renamed.md")
    assert _dream(cli, folder)["changes"] == []
    assert (folder / "stale_renamed.md").exists()


def _place_input(main: str, place: Place | None) -> IndexInput:
    entry = IndexEntry("back.md", "back", "d", "project", 0.0)
    return IndexInput(
        main=main, archive=None, memories={"back.md": entry}, present={"back.md"}, seen={},
        ready={"back.md"}, heading="App", preferred={"back.md": "- [Back](back.md) — mine"},
        placements={"back.md": place} if place else {},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("place", "expected"),
    [
        # Its neighbour is there: right after it.
        (
            Place("- [A](a.md)", "## One"),
            "## One\r\n- [A](a.md)\r\n- [Back](back.md) — mine\r\n"
            "- [B](b.md)\r\n\r\n## Two\r\nprose\r\n- [C](c.md)",
        ),
        # The neighbour is gone: at the end of its heading's section.
        (
            Place("- [Gone](gone.md)", "## One"),
            "## One\r\n- [A](a.md)\r\n- [B](b.md)\r\n"
            "- [Back](back.md) — mine\r\n\r\n## Two\r\nprose\r\n- [C](c.md)",
        ),
        # It was the first under its heading: before the section's first pointer.
        (
            Place(None, "## Two"),
            "## One\r\n- [A](a.md)\r\n- [B](b.md)\r\n\r\n## Two\r\nprose\r\n"
            "- [Back](back.md) — mine\r\n- [C](c.md)",
        ),
        # The last section, no final newline: the person's missing newline stays missing.
        (
            Place("- [C](c.md)", "## Two"),
            "## One\r\n- [A](a.md)\r\n- [B](b.md)\r\n\r\n## Two\r\n"
            "prose\r\n- [C](c.md)\r\n- [Back](back.md) — mine",
        ),
        # Neither neighbour nor heading: after the last pointer, as for any new pointer.
        (
            Place("- [Gone](gone.md)", "## Gone"),
            "## One\r\n- [A](a.md)\r\n- [B](b.md)\r\n\r\n"
            "## Two\r\nprose\r\n- [C](c.md)\r\n- [Back](back.md) — mine",
        ),
        (
            None,
            "## One\r\n- [A](a.md)\r\n- [B](b.md)\r\n\r\n## Two\r\nprose\r\n- [C](c.md)\r\n"
            "- [Back](back.md) — mine",
        ),  # an old manifest, with no place
    ],
)
def test_a_restored_pointer_goes_back_where_it_sat(place: Place | None, expected: str) -> None:
    main = "## One\r\n- [A](a.md)\r\n- [B](b.md)\r\n\r\n## Two\r\nprose\r\n- [C](c.md)"
    edit = update_index(_place_input(main, place))
    assert edit.main == expected and edit.added == ["back.md"]


def test_an_empty_section_gets_its_pointer_back_under_its_heading() -> None:
    main = "# App Memory\n\n## Project\n\n## Reference\n- [C](c.md) — c\n"
    edit = update_index(_place_input(main, Place(None, "## Project")))
    assert edit.main == (
        "# App Memory\n\n## Project\n- [Back](back.md) — mine\n\n## Reference\n- [C](c.md) — c\n"
    )


def test_a_planted_place_is_no_place() -> None:
    """A manifest is a file anyone can write: a place that is not one line each is ignored."""
    assert Place.of({"after": "x\n- [Evil](evil.md)", "heading": None}) is None
    assert Place.of({"after": 3, "heading": None}) is None
    assert Place.of(["x"]) is None
    assert Place.of({"after": None, "heading": "## H"}) == Place(None, "## H")


def _six_stale(folder: Path) -> list[str]:
    names = [f"stale_{i}.md" for i in range(6)]
    for name in names:
        write_memory(folder, name, body=f"Lived in `src/gone_{name[6]}.py`.\n", age_days=60)
    for topic in TOPICS:  # 30 memories: the circuit breaker lets 6 go
        write_memory(folder, f"{topic}.md", body=f"{topic} {topic}s {topic}-like\n")
    return names


def test_restore_takes_every_form_trash_list_prints(
    env: Env, cli, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = _six_stale(folder)
    assert len(_dream(cli, folder)["changes"]) == 6
    text = cli("trash", "list", folder).out.splitlines()
    rows = {r["file"]: r for r in json.loads(cli("trash", "list", "--json", folder).out)["trash"]}
    printed = {line.split()[-1].rsplit("/", 1)[-1]: line.split()[-1] for line in text}
    day = rows[names[0]]["day"]
    forms = [
        rows[names[0]]["id"],  # the id
        printed[names[1]],  # the path the text listing prints (<dir>/<file>)
        rows[names[2]]["path"],  # the stored path --json prints
        f".trash/{day}/{names[3]}.trashed",  # relative, from the memory dir
        f"{day}/{names[4]}.trashed",  # relative, without the .trash/ prefix
        names[5],  # the original name
    ]
    monkeypatch.chdir(folder)
    before = {n: (folder / ".trash" / day / f"{n}.trashed").read_bytes() for n in names}
    for name, form in zip(names, forms, strict=True):
        restored = cli("trash", "restore", form, folder)
        assert restored.code == 0, (form, restored.err)
        assert (folder / name).read_bytes() == before[name]
    assert cli("trash", "list", folder).out == "The trash is empty.\n"
    # Each form again: each says it came back already, when, and which file it is now.
    for name, form in zip(names, forms, strict=True):
        again = cli("trash", "restore", form, folder)
        assert again.code == 1 and "already restored on " in again.err, (form, again.err)
        assert str(folder / name) in again.err


def test_a_path_means_its_newest_entry_still_in_the_trash(
    env: Env, cli, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored name is used again once its file was restored: the path means the live one."""
    write_memory(folder, "stale.md", body="Lived in `src/removed.py`.\n", age_days=60)
    write_memory(folder, "other.md", body="Handled by `src/app.py`.\n")
    [first] = _dream(cli, folder)["changes"]
    assert cli("trash", "restore", first["id"]).code == 0
    write_memory(folder, "stale.md", body="Now in `src/removed_too.py`.\n", age_days=60)
    [second] = _dream(cli, folder)["changes"]  # changed bytes: judged again, and moved
    assert first["trash"] == second["trash"]
    monkeypatch.chdir(folder)
    again = cli("trash", "restore", second["trash"], folder)
    assert again.code == 0, again.err
    assert (folder / "stale.md").read_text().endswith("Now in `src/removed_too.py`.\n")


def test_an_already_restored_id_says_when_and_what_it_is_now(env: Env, cli, folder: Path) -> None:
    write_memory(folder, "stale.md", body="Lived in `src/removed.py`.\n", age_days=60)
    [change] = _dream(cli, folder)["changes"]
    write_memory(folder, "stale.md", body="a new one\n")
    assert cli("trash", "restore", change["id"]).code == 0  # as stale.restored-1.md
    again = cli("trash", "restore", change["id"])
    assert again.code == 1
    assert f"already restored on {date.today().isoformat()}" in again.err
    assert str(folder / "stale.restored-1.md") in again.err


def test_the_daemons_pile_up_passes_leave_a_restored_memory_alone(tmp_path: Path) -> None:
    from memoryd.discover.slugs import slugify

    running = start(tmp_path, name="pin", pile_up=2)
    repo = tmp_path / "code" / "pin"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("x = 1\n")
    folder = running.claude / "projects" / slugify(str(repo)) / "memory"
    folder.mkdir(parents=True)
    (folder.parent / "s.jsonl").write_text(json.dumps({"cwd": str(repo)}) + "\n")
    try:
        agent_write(folder, "base.md", "base")
        wait_for(lambda: "base.md" in index_text(folder), what="the dir known")
        write_memory(folder, "project_clean_fork.md", body=FORK, age_days=60)
        write_memory(folder, "reference_fork.md", body=FORK, age_days=20)
        wait_for(lambda: running.rows("trash.moved"), timeout=30, what="a pile-up pass moving it")
        [moved] = running.rows("trash.moved")
        assert moved["file"] == "project_clean_fork.md"
        restored = running.cli("trash", "restore", str(moved["id"]))
        assert restored.returncode == 0, restored.stderr
        passes = len(running.rows("dream.completed"))
        write_memory(folder, "a.md", body="anchor anchors\n")
        write_memory(folder, "b.md", body="barley fields\n")
        wait_for(
            lambda: len(running.rows("dream.completed")) > passes,
            timeout=30,
            what="a pass after the restore",
        )
        assert running.stop() == 0
        running = start(tmp_path, name="pin", pile_up=2)  # a restart: the pin is on disk
        passes = len(running.rows("dream.completed"))
        write_memory(folder, "c.md", body="canyon walls\n")
        write_memory(folder, "d.md", body="dolphin pods\n")
        wait_for(
            lambda: len(running.rows("dream.completed")) > passes,
            timeout=30,
            what="a pass after the restart",
        )
        time.sleep(0.5)
        assert [r["file"] for r in running.rows("trash.moved")] == ["project_clean_fork.md"]
        assert (folder / "project_clean_fork.md").read_text().endswith(FORK)
        assert "project_clean_fork.md" in index_text(folder)
    finally:
        running.stop()


def test_old_manifests_restore_as_before(env: Env, cli, folder: Path) -> None:
    """A record without a place (an older memoryd wrote it) puts the line after the last
    pointer; a record without a line gets a generated one."""
    write_memory(folder, "stale.md", body="Lived in `src/removed.py`.\n", age_days=60)
    write_memory(folder, "other.md", body="Handled by `src/app.py`.\n")
    (folder / "MEMORY.md").write_text(
        "# M\n\n## A\n- [mine](stale.md)\n\n## B\n- [other](other.md) — a memory\n"
    )
    [change] = _dream(cli, folder)["changes"]
    manifest = folder / ".trash" / change["trash"].split("/")[1] / trash.MANIFEST
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert rows[0]["index_place"] == {"after": None, "heading": "## A"}
    rows[0].pop("index_place")
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli("trash", "restore", change["id"]).code == 0
    assert (folder / "MEMORY.md").read_text() == (
        "# M\n\n## A\n\n## B\n- [other](other.md) — a memory\n- [mine](stale.md)\n"
    )


def test_a_pin_replaces_the_one_of_its_name_or_trash_id_and_the_oldest_go_past_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dir's pins, oldest first: a new pin replaces the one of its name and the one of its
    trash id (and goes last); past PINS_KEEP the oldest go; `reset` puts a list back whole
    (a restore that could not write); another dir's pins are its own."""
    from memoryd.storage.state import StateStore
    from memoryd.storage.statedb import forget_shared
    from memoryd.trash import restored

    forget_shared()
    monkeypatch.setattr(restored, "PINS_KEEP", 3)
    store, here, there = StateStore(tmp_path), tmp_path / "here", tmp_path / "there"

    def pin(file: str, trash_id: str) -> restored.Pin:
        return restored.Pin(file, file[0] * 64, "2026-12-01T10:00:00+01:00", trash_id)

    assert restored.load(store, here) == []
    for file, trash_id in (("a.md", "1"), ("b.md", "2"), ("c.md", "3")):
        restored.record(store, here, pin(file, trash_id))
    restored.record(store, there, pin("a.md", "9"))
    restored.record(store, here, pin("a.md", "4"))  # a.md's pin again: now the newest
    restored.record(store, here, pin("d.md", "2"))  # b.md's trash id: b.md's pin goes
    before = restored.load(store, here)
    assert [(p.file, p.id) for p in before] == [("c.md", "3"), ("a.md", "4"), ("d.md", "2")]
    restored.record(store, here, pin("e.md", "5"))  # a fourth: the oldest (c.md) goes
    assert [p.file for p in restored.load(store, here)] == ["a.md", "d.md", "e.md"]
    restored.reset(store, here, before)
    assert restored.load(StateStore(tmp_path), here) == before
    assert [p.id for p in restored.load(store, there)] == ["9"]
