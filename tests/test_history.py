"""Supersession history: both ways and transitively from the manifests of real dream passes,
for a file in the trash too; `explain` shows it; a restored loser says what it lost to."""

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from memoryd.trash import lineage
from memoryd.trash.manifest import Entry
from memoryd.trash.store import TrashRecord
from tests.conftest import Env, Result, tree_digest, write_memory

BODY = (
    "Deploys go through the staging cluster first and then production after the smoke "
    "checks pass cleanly.\n"
)


def _age(path: Path, days: float) -> None:
    old = time.time() - days * 86400
    os.utime(path, (old, old))


def test_history_walks_both_ways_through_two_real_passes(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """Pass 1: old.md loses to mid.md (a duplicate); pass 2: mid.md loses to new.md. new.md
    superseded mid.md directly and old.md through it; old.md, now in the trash, was
    superseded by mid.md and then new.md; each entry has its day, reason and pass id."""
    folder = repo / ".claude" / "memory"
    for n in range(6):
        write_memory(folder, f"project_other{n}.md", body=f"unrelated{n} words{n} here{n}\n")
    write_memory(folder, "project_old.md", body=BODY, age_days=40)
    write_memory(folder, "project_mid.md", body=BODY + "Also tag the release.\n", age_days=30)
    first = cli("dream", repo)
    assert first.code == 0, first.out + first.err
    assert not (folder / "project_old.md").exists()
    write_memory(folder, "project_new.md", body=BODY + "Also tag it.\n", age_days=20)
    second = cli("dream", repo)
    assert second.code == 0, second.out + second.err
    assert not (folder / "project_mid.md").exists()

    doc = json.loads(cli("history", folder / "project_new.md", "--json").out)
    (h,) = doc["histories"]
    got = [(e["kind"], e["depth"], e["loser"], e["winner"], e["reason"]) for e in h["entries"]]
    assert got == [
        ("superseded", 1, "project_mid.md", "project_new.md", "duplicate"),
        ("superseded", 2, "project_old.md", "project_mid.md", "duplicate"),
    ]
    assert all(e["pass_id"] and e["day"] and e["time"] for e in h["entries"])
    passes = {e["loser"]: e["pass_id"] for e in h["entries"]}
    assert passes["project_mid.md"] != passes["project_old.md"]

    # By name, for a file that is in the trash now.
    text = cli("history", "project_old.md", repo)
    assert text.code == 0, text.err
    assert "(not in the dir now)" in text.out
    assert "project_old.md lost to project_mid.md" in text.out
    assert "project_mid.md lost to project_new.md" in text.out
    doc = json.loads(cli("history", "project_old", repo, "--json").out)
    (h,) = doc["histories"]
    assert [(e["depth"], e["winner"]) for e in h["entries"]] == [
        (1, "project_mid.md"),
        (2, "project_new.md"),
    ]
    assert h["in_trash"][0]["reason"] == "duplicate" and not h["exists"]
    # By its trashed path.
    stored = folder / h["in_trash"][0]["stored"]
    doc = json.loads(cli("history", stored, "--json").out)
    assert doc["histories"][0]["file"] == "project_old.md"

    explained = cli("explain", folder / "project_new.md")
    assert "history: project_new.md won over project_mid.md" in explained.out
    assert "history: project_mid.md won over project_old.md" in explained.out

    before = tree_digest(repo)
    for args in (("history", "project_new.md", repo), ("history", stored)):
        cli(*args)
    assert tree_digest(repo) == before  # history reads only

    restored = cli("trash", "restore", h["in_trash"][0]["id"], repo)
    assert restored.code == 0, restored.err
    assert "it had lost to project_mid.md" in restored.out
    again = cli("explain", folder / "project_old.md")
    assert "history: project_old.md lost to project_mid.md" in again.out
    assert "restored as project_old.md" in again.out


def _entry(loser: str, winner: str, day: str, rid: str) -> Entry:
    record = TrashRecord(
        id=rid, original_name=loser, stored_name=loser, day=day, sha256="0" * 64, size=1,
        reason="duplicate", pass_id=f"p-{rid}", time=f"{day}T10:00:00+00:00",
        duplicate_of=winner,
    )  # fmt: skip
    return Entry(record, Path("/m/.trash") / day)


def test_a_cycle_of_supersessions_ends_and_each_name_is_expanded_once() -> None:
    """a lost to b, then (restored) b lost to a: the walk ends; a branch counts each loser."""
    entries = [
        _entry("a.md", "b.md", "2026-01-01", "1"),
        _entry("b.md", "a.md", "2026-02-01", "2"),
        _entry("c.md", "a.md", "2026-03-01", "3"),
    ]
    h = lineage.history("a.md", entries)
    assert [(e.kind, e.depth, e.loser, e.winner) for e in h.entries] == [
        ("superseded_by", 1, "a.md", "b.md"),
        ("superseded_by", 2, "b.md", "a.md"),
        ("superseded", 1, "b.md", "a.md"),
        ("superseded", 1, "c.md", "a.md"),
        ("superseded", 2, "a.md", "b.md"),
    ]
    assert [e.record.id for e in h.in_trash] == ["1"]
