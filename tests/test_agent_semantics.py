"""memoryd reads a memory dir as Claude Code does (issue 13): its scan of memory files, the
archive it picks on demand, memory types, `.consolidate-lock`, lone-CR indexes."""

import hashlib
import json
import os
import subprocess
import sys
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest

from memoryd.model import memfile
from memoryd.model.index import pointer_targets, verify
from memoryd.trash import manifest as trash_manifest
from memoryd.trash import store as trash
from tests.conftest import Env, write_memory
from tests.helpers import (
    dream,
    entry,
    explain,
    filler,
    make_planted_repo,
    many_entries,
    mem,
    memory_dir,
    moved,
    plant_day,
    run,
)

pytestmark = pytest.mark.repo_tree.with_args(make_planted_repo)


def claude_scan(folder: Path) -> list[str]:
    """The memory files Claude Code 2.1.197 lists: every `*.md` below the memory dir,
    recursively, dot-folders included, other than MEMORY.md (relative paths)."""
    out = []
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            path = Path(dirpath, name)
            if name.endswith(".md") and path != folder / "MEMORY.md":
                out.append(path.relative_to(folder).as_posix())
    return sorted(out)


# --- 1. trashed files are invisible to every Claude Code version's scan ---------------------
def test_a_trashed_file_is_no_memory_to_claudes_scan_and_comes_back_whole(
    env: Env, cli, repo: Path
) -> None:
    """A pass's move leaves no `*.md` in `.trash/` (2.1.197 would list it as a live memory);
    `trash list` shows it, and a restore by its name brings the same bytes back under the
    same name."""
    folder = repo / ".claude" / "memory"
    path = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    original = path.read_bytes()
    filler(repo)
    before = claude_scan(folder)
    assert moved(dream(cli, repo)) == {"stale.md": "stale"}
    assert claude_scan(folder) == [n for n in before if n != "stale.md"]
    [row] = json.loads(cli("trash", "list", "--json", folder).out)["trash"]
    assert row["file"] == "stale.md" and row["path"].endswith(".trashed")
    assert cli("trash", "restore", "stale.md", folder).code == 0
    assert path.read_bytes() == original and claude_scan(folder) == before


def test_trash_of_the_older_plain_naming_lists_restores_and_purges(
    env: Env, cli, repo: Path
) -> None:
    """Day folders an older memoryd wrote (`<name>.md` stored as is) still list, restore (by
    name, by id and by their stored path) and purge: no migration needed."""
    folder = repo / ".claude" / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    today = date.today()
    day = plant_day(folder, today, datetime.now(), "one.md")
    plant_day(folder, today, datetime.now(), "two.md")
    planted = {n: (day / n).read_bytes() for n in ("one.md", "two.md")}
    rows = json.loads(cli("trash", "list", "--json", folder).out)["trash"]
    assert sorted(r["file"] for r in rows) == ["one.md", "two.md"]
    assert cli("trash", "restore", "one.md", folder).code == 0
    assert cli("trash", "restore", f".trash/{today.isoformat()}/two.md", folder).code == 0
    assert {n: (folder / n).read_bytes() for n in planted} == planted
    old = plant_day(folder, today - timedelta(days=400), datetime.now() - timedelta(days=400))
    assert [e.record.stored_name for e in trash_manifest.entries(folder) if not e.restored_as] == [
        "old.md"
    ]
    assert cli("trash", "purge", "--older-than", "0d", folder).code == 0
    assert old.exists()  # memoryd has not watched it yet: retention rests on what it saw


def test_a_stored_name_never_ends_in_md_and_fits_the_name_limit(tmp_path: Path) -> None:
    """Names at the 255-byte limit (ASCII, and multi-byte characters) get a stored name that
    fits, ends in `.md.trashed`, is valid to the manifest reader, and never repeats."""
    folder = tmp_path / "day"
    folder.mkdir()
    for name in ("a" * 252 + ".md", "é" * 125 + "xy.md", "日" * 84 + ".md"):
        assert len(os.fsencode(name)) == 255
        taken: set[str] = set()
        for _ in range(3):
            stored = trash.free_name(folder, name, taken)
            assert stored.endswith(".md.trashed") and len(os.fsencode(stored)) <= 255
            assert trash_manifest.stored_problem(stored) is None, stored
            assert stored not in taken
            taken.add(stored)
            (folder / stored).write_bytes(b"x")
    assert trash_manifest.stored_problem("x.md") is None  # the older naming
    for bad in ("manifest.jsonl", ".x.md.trashed", "x.trashed", "MEMORY.md.trashed"):
        assert trash_manifest.stored_problem(bad) is not None, bad


def test_a_long_name_moves_and_restores(env: Env, cli, repo: Path) -> None:
    """A memory whose name is 255 bytes goes to the trash under a shorter stored name and
    comes back under its own."""
    name = "s" * 252 + ".md"
    path = mem(repo, name, "Lived in `src/removed.py`.")
    original = path.read_bytes()
    filler(repo)
    folder = repo / ".claude" / "memory"
    assert moved(dream(cli, repo)) == {name: "stale"}
    (entry,) = trash_manifest.entries(folder)
    assert entry.record.stored_name != name and not path.exists()
    assert hashlib.sha256(entry.stored_path.read_bytes()).hexdigest() == entry.record.sha256
    assert cli("trash", "restore", entry.record.id, folder).code == 0
    assert path.read_bytes() == original


# --- 2. the archive chosen on demand ---------------------------------------------------------
def claude_frontmatter(text: str) -> dict[str, object]:
    """The fields Claude Code's memory scan reads from a file's text (its `K0` rule)."""
    region = memfile._agent_region(text.removeprefix("\ufeff"))
    return memfile._fields_of(region) if region is not None else {}


def test_a_new_archive_names_what_it_holds_to_claudes_scan() -> None:
    """The archive a demotion starts has a description for Claude Code's scan (which lists it
    as a memory), memoryd reads none of its frontmatter as a pointer, and a second pass
    changes nothing."""
    mems = many_entries(250)
    first = run(None, mems)
    assert first.archive is not None and first.demoted
    fields = claude_frontmatter(first.archive)
    assert str(fields["description"]).startswith("Archived index entries for proj: ")
    assert "search here" in str(fields["description"]).lower()
    assert sorted(pointer_targets(first.archive)) == sorted(first.demoted)
    names = {e.filename for e in mems}
    assert verify(first.main or "", first.archive, names, names) == []
    seen = {e.filename: (e.name, e.description) for e in mems}
    again = run(first.main, mems, archive=first.archive, seen=seen)
    assert (again.main, again.archive) == (first.main, first.archive)


@pytest.mark.parametrize("heading", ["a---b: #c", 'say "hi" \\ there', "x\ny"])
def test_the_archive_description_survives_any_project_name(heading: str) -> None:
    """A project name with `---` (which would end Claude Code's frontmatter early), `: #`,
    quotes, a backslash or a newline still gives one description naming it."""
    from memoryd.model.index_edit import archive_frontmatter

    lines = archive_frontmatter(heading, "\n")
    fields = claude_frontmatter("".join(line.text for line in lines) + "# x\n")
    assert "Archived index entries for " in str(fields["description"])
    assert "---" not in str(fields["description"])


def test_an_archive_without_frontmatter_is_upgraded_once(env: Env, cli, tmp_path: Path) -> None:
    """An archive an older memoryd wrote gets the frontmatter at its top, every line of it
    kept byte for byte below; the next `index` writes nothing."""
    folder = tmp_path / "mem"
    folder.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        write_memory(folder, name)
    (folder / "MEMORY.md").write_text("# p Memory\n\n- [a](a.md) — d\n")
    old = (
        "# p Memory Archive\r\n\r\n## Moved from MEMORY.md 2026-01-02 (2)\r\n"
        "- [b](b.md) — d\r\n- [c](c.md) — mine\r\n"
    )
    archive = folder / "MEMORY-ARCHIVE.md"
    archive.write_bytes(old.encode())
    assert cli("index", folder).code == 0
    data = archive.read_bytes().decode()
    assert data.endswith(old) and data.startswith("---\r\n")
    assert "Archived index entries for " in str(claude_frontmatter(data)["description"])
    stamp = archive.stat().st_mtime_ns
    assert cli("index", "--check", folder).code == 0
    assert cli("index", folder).code == 0
    assert archive.stat().st_mtime_ns == stamp and archive.read_bytes().decode() == data


# --- 3. types as the agent reads them --------------------------------------------------------
@pytest.mark.parametrize(
    ("front", "agent", "guards"),
    [
        ("type: project\nmetadata:\n  type: reference\n", "reference", "reference"),
        ("type: project\nmetadata:\n  type: user\n", "user", "user"),
        ("metadata:\n  type: feedback\n", "feedback", "feedback"),
        ("type: Project\n", "", "project"),
        ("type: User\n", "", "user"),
        ("type: user\nmetadata:\n  type: Project\n", "", "user"),
        ("type: user\nmetadata:\n  type: project\n", "project", "user"),
        ("description: a --- b\ntype: feedback\n", "", "feedback"),
        ("type: project\n", "project", "project"),
    ],
)
def test_the_agents_type_and_the_guards_type(front: str, agent: str, guards: str) -> None:
    """Claude Code's reading (metadata over the top level, exact names, the block ends at the
    first `---`) and the guards' reading (the most protective of it and the lenient ones)."""
    parsed = memfile.parse_memory("m.md", f"---\nname: m\n{front}---\nBody.\n".encode())
    assert isinstance(parsed, memfile.Memory)
    assert (parsed.agent_type, parsed.type) == (agent, guards)


def test_a_dots_line_closes_nothing_for_the_agent() -> None:
    """`...` ends YAML for memoryd, not the frontmatter for Claude Code: its block runs to the
    next `---` (here a rule in the body), so the type it reads is the body's."""
    text = "---\nname: m\ntype: project\n...\nBody.\n\n---\ntype: user\n"
    parsed = memfile.parse_memory("m.md", text.encode())
    assert isinstance(parsed, memfile.Memory)
    assert parsed.agent_type == "" and parsed.type == "project"  # the block holds `...` lines
    alone = memfile.parse_memory("m.md", b"---\nname: m\ntype: reference\n...\nBody.\n")
    assert isinstance(alone, memfile.Memory) and alone.agent_type == ""
    assert alone.type == "reference"


def test_duplicates_pair_only_within_the_type_the_agent_reads(env: Env, cli, repo: Path) -> None:
    """Two near-identical memories, both `type: project` at the top level, one with
    `metadata.type: reference`: Claude Code files them under different types, so they are
    no duplicates; `Project` is no type to it, so it pairs with no `project` either."""
    deploy = (
        "Deploy staging by running the release script with the canary flag enabled "
        "first then promote production after verification checks complete"
    )
    mem(
        repo, "dup_old.md", deploy + " successfully", age=50, extra="metadata:\n  type: reference\n"
    )
    mem(repo, "dup_new.md", deploy + " fine", age=20)
    mem(
        repo,
        "cap_old.md",
        "Rotate the signing keys every quarter using the vault rotation "
        "runbook and record the new fingerprints in the audit sheet today",
        type_="Project",
        age=50,
    )
    mem(
        repo,
        "cap_new.md",
        "Rotate the signing keys every quarter using the vault rotation "
        "runbook and record the new fingerprints in the audit sheet now",
        age=20,
    )
    filler(repo)
    report = dream(cli, repo)
    assert moved(report) == {}, report
    data = explain(cli, repo / ".claude" / "memory" / "dup_new.md")
    assert data["similar"] == []


def test_a_guard_takes_the_protective_reading_and_explain_says_so(
    env: Env, cli, repo: Path
) -> None:
    """A fully stale `type: User` memory (no type to Claude Code) and a `type: project` one
    with `metadata.type: user` are kept as user memories; `explain` gives both readings."""
    folder = repo / ".claude" / "memory"
    mem(repo, "caps.md", "Lived in `src/removed.py`.", type_="User")
    mem(repo, "nested.md", "Lived in `src/gone.py`.", extra="metadata:\n  type: user\n")
    filler(repo)
    assert moved(dream(cli, repo)) == {}
    data = explain(cli, folder / "caps.md")
    assert (data["type"], data["guard_type"]) == (None, "user")
    [guard] = [g for g in data["guards"] if g["guard"] == "type_user"]
    assert guard["holds"] and "Claude Code reads no type" in guard["detail"]
    text = cli("explain", folder / "caps.md").out
    assert (
        "type: none (as Claude Code reads it); the guards take the protective reading: user" in text
    )
    nested = explain(cli, folder / "nested.md")
    assert (nested["type"], nested["guard_type"]) == ("user", "user")
    assert [g["holds"] for g in nested["guards"] if g["guard"] == "type_user"] == [True]


# --- 4. the lock as Claude Code means it -----------------------------------------------------
@pytest.mark.parametrize(
    ("body", "age", "alive", "pid", "held"),
    [
        ("4242", 10, True, 4242, True),
        ("4242", 10, False, 4242, False),  # a dead PID holds nothing
        ("4242", 3601, True, 4242, False),  # an hour old: stale, whoever lives
        ("  4242\n1764590000000\n", 10, True, 4242, True),  # the pid + timestamp form
        ("4242abc", 10, True, 4242, True),  # parseInt's leading digits
        ("garbage", 10, True, None, False),
        ("", 10, True, None, False),  # what a rolled-back dream leaves
        ("1", 10, True, 1, False),  # init is never a holder
        ("-5", 10, True, -5, False),
    ],
)
def test_the_lock_is_held_only_fresh_and_with_a_live_pid(
    tmp_path: Path, body: str, age: float, alive: bool, pid: int | None, held: bool
) -> None:
    from memoryd.discover.locks import claude_lock, lock_is_fresh

    folder = tmp_path / "memory"
    write_memory(folder, "a.md")  # a folder of memories is a memory dir
    lock = folder / ".consolidate-lock"
    lock.write_text(body)
    now = 1_800_000_000.0
    os.utime(lock, (now - age, now - age))
    asked: list[int] = []

    def liveness(p: int) -> bool:
        asked.append(p)
        return alive

    found = claude_lock(memory_dir(folder), now, liveness)
    assert found is not None and (found.pid, found.held, found.mtime) == (pid, held, now - age)
    assert lock_is_fresh(memory_dir(folder), now, liveness) is held
    assert set(asked) <= {4242}


def test_a_lock_that_is_no_regular_file_holds_nothing(tmp_path: Path) -> None:
    """A FIFO is never opened (it would block), a symlink never followed."""
    from memoryd.discover.locks import claude_lock

    folder = tmp_path / "memory"
    write_memory(folder, "a.md")  # a folder of memories is a memory dir
    os.mkfifo(folder / ".consolidate-lock")
    assert claude_lock(memory_dir(folder), 0.0, lambda p: True) is None
    (folder / ".consolidate-lock").unlink()
    (tmp_path / "elsewhere").write_text(str(os.getpid()))
    (folder / ".consolidate-lock").symlink_to(tmp_path / "elsewhere")
    assert claude_lock(memory_dir(folder), 0.0, lambda p: True) is None


def test_pid_liveness_of_real_processes() -> None:
    """A running child is alive; once reaped, its PID is dead."""
    from memoryd.discover.locks import pid_alive

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid) and pid_alive(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may signal every process: no EPERM")
def test_a_process_of_another_user_counts_alive() -> None:
    """EPERM from kill(1, 0): the process exists; memoryd defers (Claude Code would not)."""
    from memoryd.discover.locks import pid_alive

    assert pid_alive(1)


def test_a_pass_defers_to_a_live_holder_only_and_dirs_shows_the_last_consolidation(
    env: Env, cli, repo: Path
) -> None:
    """A fresh lock naming a live child process defers the pass; the same lock once that
    process is gone (Claude Code's dream done, the file left as its timestamp) does not, and
    `dirs` reports its mtime as Claude Code's last consolidation."""
    folder = repo / ".claude" / "memory"
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    lock = folder / ".consolidate-lock"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(str(child.pid))
        report = dream(cli, repo)
        assert report["status"] == "skipped"
        listed = json.loads(cli("dirs", "--json", folder).out)["dirs"][0]
        assert listed["claude_lock_held"] is True
    finally:
        child.kill()
        child.wait()
    stamp = lock.stat().st_mtime
    assert moved(dream(cli, repo)) == {"stale.md": "stale"}
    [row] = json.loads(cli("dirs", "--json", folder).out)["dirs"]
    when = datetime.fromisoformat(row["claude_consolidated"]).timestamp()
    assert abs(when - stamp) < 1 and row["claude_lock_held"] is False
    assert "Claude Code's last consolidation: " in cli("dirs", folder).out
    assert f"PID {child.pid}" in report["message"]  # the skip named the holder


# --- 5. lone CR ----------------------------------------------------------------------------
LONE_CR = "- [a](a.md) — d\r- [b](b.md) — d\r- [c](c.md) — d\r"


def test_a_lone_cr_index_is_one_window_line_whose_pointers_the_agent_reads() -> None:
    """No comment: memoryd's parser keeps it one line, but the window counts each lone-CR
    piece as a line (as Claude Code 2.1.328 does: the CRs become newlines), and the agent gets
    every piece as a line: each pointer indexes its memory, so memoryd adds none again and
    verify finds each once."""
    from memoryd.model.agentview import ViewKind, agent_view
    from memoryd.model.index import split_lines, visible_local_links

    view = agent_view(LONE_CR, ViewKind.AUTO)
    assert (view.lines, view.visible, view.warned) == (3, frozenset({0}), False)
    assert len(split_lines(LONE_CR)) == 1
    assert pointer_targets(view.loaded) == ["a.md", "b.md", "c.md"]
    assert [x.target for x in visible_local_links(LONE_CR, ViewKind.AUTO)] == [
        "a.md",
        "b.md",
        "c.md",
    ]
    mems = [entry(n) for n in ("a.md", "b.md", "c.md")]
    edit = run(LONE_CR, mems)
    assert edit.added == [] and edit.main == LONE_CR
    names = {e.filename for e in mems}
    assert verify(LONE_CR, None, names, names) == []


def test_a_lone_cr_index_on_disk_is_in_sync(env: Env, cli, tmp_path: Path) -> None:
    """On disk, with and without a comment line after it: managed (every memory has its
    pointer) and in sync; `dirs` measures a line for each lone-CR piece, as the window does."""
    folder = tmp_path / "mem"
    for name in ("a.md", "b.md", "c.md"):
        write_memory(folder, name)
    index = folder / "MEMORY.md"
    index.write_bytes(LONE_CR.encode())
    assert cli("index", "--check", folder).code == 0
    [row] = json.loads(cli("dirs", "--json", folder).out)["dirs"]
    assert row["mode"] == "managed" and row["in_sync"] and row["index"]["lines"] == 3
    index.write_bytes((LONE_CR + "\n<!-- memoryd: manage -->\n").encode())
    before = index.read_bytes()
    assert cli("index", folder).code == 0 and index.read_bytes() == before


def test_lone_cr_pieces_after_a_comment_are_read_and_pieces_inside_it_are_not() -> None:
    """A comment starting a lone-CR line hides that line from memoryd's model, but only its
    own pieces from the agent: the pointers after it index their memories; a pointer inside
    a comment that spans pieces gets a visible one."""
    from memoryd.model.agentview import ViewKind
    from memoryd.model.index import visible_local_links

    mems = [entry(n) for n in ("a.md", "b.md", "c.md")]
    after = "<!-- memoryd: manage -->\r" + LONE_CR
    edit = run(after, mems)
    assert edit.added == [] and edit.main == after
    assert [x.target for x in visible_local_links(after, ViewKind.AUTO)] == ["a.md", "b.md", "c.md"]
    inside = "<!-- note\r- [a](a.md) — d\r-->\r- [b](b.md) — d\r- [c](c.md) — d\r"
    edit = run(inside, mems)
    assert edit.added == ["a.md"]
    assert [x.target for x in visible_local_links(inside, ViewKind.AUTO)] == ["b.md", "c.md"]
