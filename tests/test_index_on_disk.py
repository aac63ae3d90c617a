"""`memoryd index` on real folders: safe writes, bad inputs, concurrency, budget, no-op runs."""

import errno
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import Config, IndexConfig
from memoryd.errors import WriteConflict
from memoryd.indexing import passes, plan
from memoryd.indexing.passes import update
from memoryd.model import index
from memoryd.model.index import ARCHIVE_NAME, decide_ownership
from memoryd.storage import fsops
from tests.conftest import Env, tree_digest, write_memory
from tests.helpers import daemon_pass, memory_dir


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    folder = tmp_path / "repo" / ".claude" / "memory"
    write_memory(folder, "alpha.md", description="first memory")
    write_memory(folder, "beta.md", description="second memory")
    (folder / "MEMORY.md").write_text("# Notes\n\n- [alpha](alpha.md) — first memory\n\nprose\n")
    return folder


def _levels(env: Env) -> list[str]:
    return [f"{r['event']}:{r['level']}" for r in env.audit_rows()]


def test_index_adds_missing_pointer_and_second_run_writes_nothing(
    env: Env, cli, mdir: Path
) -> None:
    """The first run adds what is missing; the second changes no byte, mtime or audit row."""
    result = cli("index", mdir)
    assert result.code == 0, result.err
    assert (mdir / "MEMORY.md").read_text() == (
        "# Notes\n\n- [alpha](alpha.md) — first memory\n- [beta](beta.md) — second memory\n"
        "\nprose\n"
    )
    assert (mdir / ".MEMORY.md.prev").read_text().startswith("# Notes")
    before = tree_digest(mdir)
    rows = len(env.audit_rows())
    again = cli("index", mdir)
    assert again.code == 0 and "in sync" in again.out
    assert tree_digest(mdir) == before
    assert len(env.audit_rows()) == rows
    assert not [p for p in os.listdir(mdir) if fsops.is_own_temp(p)]


def test_check_prints_a_diff_and_exits_1_without_writing(env: Env, cli, mdir: Path) -> None:
    """`index --check` shows the unified diff, exits 1, and leaves every byte as it was."""
    before = tree_digest(mdir)
    result = cli("index", "--check", mdir)
    assert result.code == 1
    assert "+- [beta](beta.md) — second memory" in result.out
    assert tree_digest(mdir) == before
    assert cli("index", mdir).code == 0
    assert cli("index", "--check", mdir).code == 0


def test_deleted_memory_loses_its_pointer_hand_written_lines_stay(
    env: Env, cli, mdir: Path
) -> None:
    """A file memoryd saw and that is gone loses its pointer; every other line stays."""
    assert cli("index", mdir).code == 0
    (mdir / "beta.md").unlink()
    assert cli("index", mdir).code == 0
    assert (mdir / "MEMORY.md").read_text() == (
        "# Notes\n\n- [alpha](alpha.md) — first memory\n\nprose\n"
    )
    updated = [r for r in env.audit_rows() if r["event"] == "index.updated"]
    assert updated[-1]["removed"] == ["beta.md"]


def test_fifo_and_symlink_out_are_never_opened_or_indexed(
    env: Env, cli, mdir: Path, tmp_path: Path
) -> None:
    """A FIFO named x.md and a symlink to a file outside are reported once and left alone."""
    os.mkfifo(mdir / "x.md")
    outside = write_memory(tmp_path / "elsewhere", "secret.md", description="private")
    (mdir / "link.md").symlink_to(outside)
    result = cli("index", mdir)  # would hang forever if the FIFO were opened for reading
    assert result.code == 0, result.err
    text = (mdir / "MEMORY.md").read_text()
    assert "x.md" not in text and "link.md" not in text and "secret" not in text
    problems = {r["file"]: r["kind"] for r in env.audit_rows() if r["event"] == "file.unparseable"}
    assert problems == {"x.md": "not_regular", "link.md": "symlink_out"}
    cli("index", mdir)
    again = [r for r in env.audit_rows() if r["event"] == "file.unparseable"]
    assert len(again) == 2, "each problem is reported once, not every scan"


def test_unparseable_memory_keeps_its_pointer(env: Env, cli, mdir: Path) -> None:
    """A memory whose YAML breaks keeps its file and its index line, and is reported."""
    cli("index", mdir)
    (mdir / "beta.md").write_text("---\nname: [broken\n---\nbody\n")
    result = cli("index", mdir)
    assert result.code == 0
    assert "- [beta](beta.md) — second memory" in (mdir / "MEMORY.md").read_text()
    rows = [r for r in env.audit_rows() if r["event"] == "file.unparseable"]
    assert rows[-1]["file"] == "beta.md" and "YAML" in rows[-1]["problem"]


@pytest.mark.parametrize(
    "filename",
    [
        'quote"d.md',
        "it's.md",
        "with space.md",
        "new\nline.md",
        "-dash.md",
        "paren (1).md",
        "todo: later.md",  # reads as a URL scheme unless encoded
        "dir\\sub.md",  # a backslash is a plain character in a POSIX name
        "what?.md",  # reads as a query unless encoded
        "~notes.md",  # reads as a home path unless encoded
        "zero\u200bwidth.md",  # not printable
    ],
)
def test_odd_names_are_indexed_once_and_resolve(env: Env, cli, mdir: Path, filename: str) -> None:
    """Names with quotes, spaces, a newline, a leading dash, a colon, a backslash... are
    indexed exactly once, however many passes run."""
    assert cli("index", mdir).code == 0
    write_memory(mdir, filename, name="odd one", description="odd")
    for _ in range(3):
        assert cli("index", mdir).code == 0
    assert cli("index", "--check", mdir).code == 0
    from memoryd.model.index import pointer_targets

    targets = pointer_targets((mdir / "MEMORY.md").read_text())
    assert targets.count(filename) == 1


@pytest.mark.parametrize("name", ["foo](x) bar", "a]](b.md)", "[x](y)"])
def test_a_memory_named_with_link_syntax_is_indexed_once(
    env: Env, cli, mdir: Path, name: str
) -> None:
    """A name holding `](` is the pointer's label: it must not make the line point elsewhere,
    which failed verification and added one more pointer on every pass."""
    assert cli("index", mdir).code == 0
    write_memory(mdir, "named.md", name=f'"{name}"', description="odd label")
    for _ in range(3):
        assert cli("index", mdir).code == 0
    assert cli("index", "--check", mdir).code == 0
    from memoryd.model.index import pointer_targets

    targets = pointer_targets((mdir / "MEMORY.md").read_text())
    assert targets.count("named.md") == 1 and len(targets) == len(set(targets))


def test_a_name_no_link_can_carry_is_reported_not_indexed_again_and_again(
    env: Env, cli, mdir: Path
) -> None:
    """A look-alike of `.` in a name would make its link read as a trick: the file is reported
    once with what to do, gets no pointer, and the index stays as it was on every pass."""
    assert cli("index", mdir).code == 0
    write_memory(mdir, "a\uff0eb.md", description="fullwidth dot")
    for _ in range(3):
        assert cli("index", mdir).code == 0
    assert "\uff0e" not in (mdir / "MEMORY.md").read_text()
    assert cli("index", "--check", mdir).code == 0
    rows = [r for r in env.audit_rows() if r["event"] == "file.unparseable"]
    assert len(rows) == 1 and rows[0]["file"] == "a\uff0eb.md" and "rename" in rows[0]["hint"]


def test_traversal_link_in_index_is_kept_and_reported(env: Env, cli, mdir: Path) -> None:
    """`[x](../../.ssh/id_rsa)` is reported as invalid, never opened, never removed."""
    path = mdir / "MEMORY.md"
    path.write_text(path.read_text() + "- [x](../../.ssh/id_rsa)\n")
    assert cli("index", mdir).code == 0
    assert "- [x](../../.ssh/id_rsa)\n" in path.read_text()
    rows = [r for r in env.audit_rows() if r["event"] == "index.invalid_link"]
    assert [r["target"] for r in rows] == ["../../.ssh/id_rsa"]


def test_a_pointer_to_a_file_never_seen_is_kept_and_reported_once(
    env: Env, cli, mdir: Path
) -> None:
    """A dead link (a file memoryd never saw) stays, is reported once, and again only when it
    comes back after being fixed."""
    path = mdir / "MEMORY.md"
    assert cli("index", mdir).code == 0
    path.write_text(path.read_text() + "- [ghost](ghost.md) — never there\n")
    for _ in range(2):
        assert cli("index", mdir).code == 0
    assert "- [ghost](ghost.md) — never there\n" in path.read_text()
    rows = [r for r in env.audit_rows() if r["event"] == "index.dead_link"]
    assert [(r["file"], r["target"]) for r in rows] == [("MEMORY.md", "ghost.md")]


def test_budget_target_demotes_down_to_the_soft_target(env: Env, cli, tmp_path: Path) -> None:
    """`[index] budget = "target"`: MEMORY.md is brought under 17,408 bytes, not just the window."""
    env.config_dir.mkdir(parents=True, exist_ok=True)
    (env.config_dir / "config.toml").write_text('[index]\nbudget = "target"\n')
    folder = tmp_path / "big"
    for i in range(150):
        write_memory(
            folder, f"note_{i:03d}.md", description=f"memory {i} " + "w" * 90, age_days=400 - i
        )
    assert cli("index", folder).code == 0
    from memoryd.model.index import measure

    m = measure((folder / "MEMORY.md").read_text())
    assert m.bytes <= 17_408 and m.lines < 150
    assert "note_000.md" in (folder / "MEMORY-ARCHIVE.md").read_text()
    before = tree_digest(folder)
    assert cli("index", folder).code == 0
    assert tree_digest(folder) == before


def test_crlf_index_without_final_newline_keeps_its_bytes(env: Env, cli, mdir: Path) -> None:
    """A CRLF index without a final newline gains a CRLF pointer and still has no final newline."""
    path = mdir / "MEMORY.md"
    path.write_bytes(b"# Notes\r\n\r\n- [alpha](alpha.md) \xe2\x80\x94 first memory\r\ntail")
    assert cli("index", mdir).code == 0
    assert path.read_bytes() == (
        b"# Notes\r\n\r\n- [alpha](alpha.md) \xe2\x80\x94 first memory\r\n"
        b"- [beta](beta.md) \xe2\x80\x94 second memory\r\ntail"
    )


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "fallback"])
def test_concurrent_rename_over_between_read_and_swap_loses_nothing(
    env: Env, mdir: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    """Someone renames a new MEMORY.md over ours mid-write: their line survives, ours follows."""
    monkeypatch.setattr(fsops, "use_renameat2", exchange and fsops.renameat2_available())
    calls: list[int] = []

    def other_writer(folder: Path, name: str) -> None:
        if name == "MEMORY.md" and not calls:
            calls.append(1)
            tmp = folder / "agent.tmp.123"
            tmp.write_text("# Notes\n\n- [alpha](alpha.md) — first memory\n- [Their line](x.md)\n")
            tmp.replace(folder / "MEMORY.md")

    rt = env.runtime()
    rt = replace(rt, on_own_write=lambda folder, name, _identity: other_writer(folder, name))
    outcome = update(rt, memory_dir(mdir))
    assert outcome.status == "updated"
    text = (mdir / "MEMORY.md").read_text()
    assert "- [Their line](x.md)\n" in text
    assert "- [beta](beta.md) — second memory\n" in text
    assert [r["event"] for r in env.audit_rows()].count("index.conflict") == 1


def test_in_place_truncate_and_write_is_detected(
    env: Env, mdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer truncating and rewriting MEMORY.md in place (same inode) is not clobbered."""
    calls: list[int] = []

    def editor(folder: Path, name: str) -> None:
        if name == "MEMORY.md" and not calls:
            calls.append(1)
            with open(folder / "MEMORY.md", "r+", encoding="utf-8") as handle:
                handle.truncate(0)
                handle.write("# Edited by hand\n- [alpha](alpha.md) — mine now\n")

    rt = env.runtime()
    rt = replace(rt, on_own_write=lambda folder, name, _identity: editor(folder, name))
    outcome = update(rt, memory_dir(mdir))
    assert outcome.status == "updated"
    assert (mdir / "MEMORY.md").read_text() == (
        "# Edited by hand\n- [alpha](alpha.md) — mine now\n- [beta](beta.md) — second memory\n"
    )


def test_full_disk_on_temp_write_leaves_index_untouched(
    env: Env, cli, mdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC while writing the temp file: exit 1, a clear message, old index byte-identical."""
    before = tree_digest(mdir)
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    result = cli("index", mdir)
    assert result.code == 1
    assert "No space left on device" in result.out
    assert "the old file is untouched" in result.out
    assert tree_digest(mdir) == before
    assert [r["event"] for r in env.audit_rows()].count("index.write_failed") == 1


def test_read_only_folder_fails_clearly_and_changes_nothing(
    cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a folder the user cannot write, `index` exits 1 naming the folder; nothing changes."""
    base = Path(tempfile.mkdtemp(prefix="memoryd-ro-"))
    os.chmod(base, 0o755)
    folder = base / "memory"
    write_memory(folder, "a.md")
    write_memory(folder, "b.md")
    (folder / "MEMORY.md").write_text("- [a](a.md) — a memory\n")
    home = base / "home"
    home.mkdir()
    os.chmod(home, 0o777)  # memoryd's own state must stay writable for the unprivileged user
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    for p in (*folder.iterdir(), folder):
        # MEMORY.md keeps its owner's write bit: a read-only MEMORY.md is the person's "do not
        # touch" (test_index_faults), while this is about a folder memoryd cannot write in.
        if p.name != "MEMORY.md":
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
    before = tree_digest(folder)
    # Root ignores permission bits, so act as `nobody` for the run (seteuid is reversible).
    as_root = os.geteuid() == 0
    try:
        if as_root:
            os.seteuid(65534)
        result = cli("index", folder)
    finally:
        if as_root:
            os.seteuid(0)
        for dirpath, _, _ in os.walk(base):
            os.chmod(dirpath, 0o755)
    try:
        assert result.code == 1, result.out + result.err
        assert str(folder) in result.out
        assert "Permission denied" in result.out
        assert tree_digest(folder) == before
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_budget_on_disk_250_memories(env: Env, cli, tmp_path: Path) -> None:
    """250 memories: MEMORY.md fits the window, the archive holds the rest, rerun is a no-op."""
    folder = tmp_path / "big"
    for i in range(250):
        write_memory(
            folder,
            f"note_{i:03d}.md",
            description=f"memory number {i} " + "w" * 70,
            age_days=400 - i,
        )
    assert cli("index", folder).code == 0
    main = (folder / "MEMORY.md").read_text()
    from memoryd.indexing.scan import scan_dir
    from memoryd.model.index import measure, verify

    m = measure(main)
    assert m.lines <= 200 and m.chars <= 25_000
    archive = (folder / "MEMORY-ARCHIVE.md").read_text()
    scan = scan_dir(folder)
    assert verify(main, archive, set(scan.memories), scan.present) == []
    assert "note_000.md" in archive and "note_249.md" in main
    before = tree_digest(folder)
    assert cli("index", folder).code == 0
    assert tree_digest(folder) == before
    events = [r["event"] for r in env.audit_rows()]
    assert "index.demoted" in events and "index.over_budget" in events


def test_a_first_index_does_not_parse_the_archive_it_wrote_again(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 memories over a 200-line window: the pass writes an archive and verifies it by the
    text read back (it must be the planned one) and the links the edit knows its lines hold,
    without parsing the archive's text again. The old verification parsed the archive it had
    just written (at a first index of 10,000 memories, 9,870 lines: a tenth of the pass)."""
    folder = tmp_path / "big"
    for i in range(300):
        write_memory(folder, f"note_{i:03d}.md", description=f"memory {i} " + "w" * 70)
    parsed: list[str] = []

    def spying(real: Any) -> Any:
        def spy(text: str) -> Any:
            parsed.append(text)
            return real(text)

        spy.cache_clear = real.cache_clear  # type: ignore[attr-defined]
        return spy

    for name in ("local_links", "_parse_lines"):
        monkeypatch.setattr(index, name, spying(getattr(index, name)))
    outcome = update(env.runtime(), memory_dir(folder))
    assert outcome.status == "updated" and outcome.problems == []
    archive = (folder / ARCHIVE_NAME).read_text()
    assert archive.count("](note_") >= 100
    assert parsed and archive not in parsed


def test_a_first_index_parses_a_long_memory_md_once(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MEMORY.md of 300 pointer lines (an index of memoryd's before the window): ownership
    and the edit take the one cached line parse of it (`_parse_lines`). The old ownership
    check parsed it with the whole-text pointer scan (`local_links`) as well: at a first
    index of 10,000 memories, a second parse of 10,000 lines."""
    folder = tmp_path / "big"
    lines = ["# big Memory", ""]
    for i in range(300):
        write_memory(folder, f"note_{i:03d}.md", description=f"memory {i}")
        lines.append(f"- [note_{i:03d}](note_{i:03d}.md) — memory {i}")
    main = "\n".join(lines) + "\n"
    (folder / "MEMORY.md").write_text(main)
    parsed: dict[str, list[str]] = {"local_links": [], "_parse_lines": []}

    def spying(name: str) -> Any:
        real = getattr(index, name)

        def spy(text: str) -> Any:
            parsed[name].append(text)
            return real(text)

        spy.cache_clear = real.cache_clear  # type: ignore[attr-defined]
        return spy

    for name in parsed:
        monkeypatch.setattr(index, name, spying(name))
    outcome = update(env.runtime(), memory_dir(folder))
    assert outcome.status == "updated" and outcome.problems == []
    assert outcome.edit is not None and len(outcome.edit.demoted) > 100
    assert main in parsed["_parse_lines"]
    assert main not in parsed["local_links"]


def test_an_index_file_changed_in_place_after_the_swap_fails_verification(
    env: Env, mdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MEMORY.md changed in place just after memoryd's swap, to the same size and mtime (by
    stat still the file memoryd wrote, so no other writer's): the text read back is not the
    planned one, and verification says so. The old verification re-parsed what it read and
    found it consistent (the change is inside a description)."""
    rt = env.runtime()
    real_fsync_dir = fsops.fsync_dir
    changed: list[int] = []

    def then_in_place(dir_fd: int) -> None:
        real_fsync_dir(dir_fd)
        path = mdir / "MEMORY.md"
        data = path.read_bytes() if path.exists() else b""
        if not changed and b"second memory" in data:
            changed.append(1)
            st = path.stat()
            with open(path, "r+b") as f:
                f.write(data.replace(b"second memory", b"second MEMORY"))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    monkeypatch.setattr(fsops, "fsync_dir", then_in_place)
    outcome = update(rt, memory_dir(mdir))
    assert changed
    assert outcome.status == "error"
    assert outcome.problems == ["MEMORY.md on disk is not the text memoryd wrote"]
    assert "index.verify_failed" in [r["event"] for r in env.audit_rows()]


def test_unmanaged_dir_is_byte_identical_and_reported_once(env: Env, cli, tmp_path: Path) -> None:
    """A hand-organised index is left alone: exit 0, `unmanaged` said once, bytes unchanged."""
    folder = tmp_path / "tree"
    for i in range(4):
        write_memory(folder, f"leaf_{i}.md")
    (folder / "MEMORY.md").write_text("# Work log\n\nSee leaf files by topic.\n")
    before = tree_digest(folder)
    assert cli("index", folder).code == 0
    assert cli("index", "--check", folder).code == 0
    assert cli("index", folder).code == 0
    assert tree_digest(folder) == before
    assert [r["event"] for r in env.audit_rows()].count("index.unmanaged") == 1
    (folder / "MEMORY.md").write_text("# Work log\n<!-- memoryd: manage -->\n")
    assert cli("index", folder).code == 0
    assert "leaf_3.md" in (folder / "MEMORY.md").read_text()


def test_new_memory_dir_without_index_gets_one_private(env: Env, cli, tmp_path: Path) -> None:
    """A new MEMORY.md is created 0600 with a heading; memoryd's own folders are 0700."""
    folder = tmp_path / "proj" / ".claude" / "agent-memory" / "reviewer"
    write_memory(folder, "a.md")
    assert cli("index", folder).code == 0
    path = folder / "MEMORY.md"
    assert path.read_text().startswith("# reviewer Memory\n\n- [a](a.md)")
    assert path.stat().st_mode & 0o777 == 0o600
    assert env.state.stat().st_mode & 0o777 == 0o700
    assert env.audit_path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "fallback"])
def test_held_pass_detects_a_same_size_same_mtime_edit_in_place(
    env: Env, mdir: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    """The daemon's pass after a change checks the index it holds by stat, then swaps; a writer
    who rewrites MEMORY.md in place with the same size and mtime is caught by the bytes the
    swap took out (or, without the exchange, by a read before the rename): nothing is lost."""
    monkeypatch.setattr(fsops, "use_renameat2", exchange and fsops.renameat2_available())
    rt = env.runtime()
    first = daemon_pass(rt, memory_dir(mdir))
    assert first.status == "updated" and first.held is not None
    write_memory(mdir, "alpha.md", description="revised memory")
    calls: list[int] = []

    def same_size_editor(folder: Path, name: str) -> None:
        if name != "MEMORY.md" or calls:
            return
        calls.append(1)
        path = folder / "MEMORY.md"
        st = path.stat()
        text = path.read_text()
        with open(path, "r+", encoding="utf-8") as handle:
            handle.write(text.replace("prose", "PROSE"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    rt = replace(rt, on_own_write=lambda folder, name, _identity: same_size_editor(folder, name))
    outcome = daemon_pass(
        rt, memory_dir(mdir), previous=first.held.scan, held=first.held, changed={"alpha.md"}
    )
    assert outcome.status == "updated"
    text = (mdir / "MEMORY.md").read_text()
    assert "\nPROSE\n" in text
    assert "- [alpha](alpha.md) — revised memory\n" in text
    assert [r["event"] for r in env.audit_rows()].count("index.conflict") == 1


@pytest.mark.parametrize("held", [False, True], ids=["full", "held"])
def test_another_writer_right_after_our_swap_is_not_a_failed_verification(
    env: Env, mdir: Path, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """Someone replaces MEMORY.md just after memoryd's swap: the read-back finds their file,
    which is not a write of ours gone wrong: no index.verify_failed, and their text stays."""
    rt = env.runtime()
    first = daemon_pass(rt, memory_dir(mdir))
    assert first.held is not None
    write_memory(mdir, "alpha.md", description="revised memory")
    real_fsync_dir = fsops.fsync_dir
    calls: list[int] = []

    def then_another_writer(dir_fd: int) -> None:
        real_fsync_dir(dir_fd)
        if not calls and (mdir / "MEMORY.md").exists():
            calls.append(1)
            tmp = mdir / "agent.tmp.1"
            tmp.write_text("# Theirs\n\nwritten just after\n")
            tmp.replace(mdir / "MEMORY.md")

    monkeypatch.setattr(fsops, "fsync_dir", then_another_writer)
    if held:
        outcome = daemon_pass(
            rt, memory_dir(mdir), previous=first.held.scan, held=first.held, changed={"alpha.md"}
        )
    else:
        outcome = update(rt, memory_dir(mdir))
    assert calls and outcome.status == "updated", outcome.problems
    assert (mdir / "MEMORY.md").read_text() == "# Theirs\n\nwritten just after\n"
    assert "index.verify_failed" not in [r["event"] for r in env.audit_rows()]


def test_held_pass_with_nothing_to_do_writes_nothing(env: Env, mdir: Path) -> None:
    """The daemon's pass after a change that moves no index line (a body edited): nothing is
    written in the memory dir, no temp file, no new mtime, no audit row (§2.6)."""
    rt = env.runtime()
    first = daemon_pass(rt, memory_dir(mdir))
    assert first.held is not None
    rows = len(env.audit_rows())
    write_memory(mdir, "beta.md", description="second memory", body="Another body.\n")
    before = {k: v for k, v in tree_digest(mdir).items() if k != "beta.md"}
    outcome = daemon_pass(
        rt, memory_dir(mdir), previous=first.held.scan, held=first.held, changed={"beta.md"}
    )
    assert outcome.status == "unchanged" and outcome.held is not None
    assert {k: v for k, v in tree_digest(mdir).items() if k != "beta.md"} == before
    assert len(env.audit_rows()) == rows


# --- a file written from pieces (the daemon's held archive lines) -------------------------------
def _pieces(n: int) -> list[bytes]:
    # Lines of uneven length, empty ones (the held index's tombstones) and non-ASCII among them,
    # enough of them to span several writev batches and compare blocks.
    return [
        b"" if k % 7 == 3 else f"- [note {k} \u00e9t\u00e9](m{k}.md) {'x' * (k % 50)}\n".encode()
        for k in range(n)
    ]


def test_replace_file_from_pieces_writes_their_concatenation(tmp_path: Path) -> None:
    pieces = _pieces(5000)
    (tmp_path / "A.md").write_bytes(b"old\n")
    with fsops.open_dir(tmp_path) as fd:
        found = fsops.identity_of(fd, "A.md")
    assert found is not None
    identity = fsops.replace_file(tmp_path, "A.md", pieces, found[1])
    assert (tmp_path / "A.md").read_bytes() == b"".join(pieces)
    assert identity.sha256 == __import__("hashlib").sha256(b"".join(pieces)).hexdigest()
    # And back, with the old content given as held pieces (compared, not hashed).
    fsops.replace_file(tmp_path, "A.md", b"new\n", identity, expected_data=pieces)
    assert (tmp_path / "A.md").read_bytes() == b"new\n"


def test_holds_compares_every_byte_of_the_pieces(tmp_path: Path) -> None:
    pieces = _pieces(3000)
    data = b"".join(pieces)
    path = tmp_path / "A.md"
    path.write_bytes(data)
    ino = path.stat().st_ino
    with fsops.open_dir(tmp_path) as fd:
        assert fsops.holds(fd, "A.md", ino, pieces)
        assert fsops.holds(fd, "A.md", ino, data)
        assert not fsops.holds(fd, "A.md", ino + 1, pieces)  # another file
        assert not fsops.holds(fd, "A.md", ino, pieces[:-2])  # shorter
        assert not fsops.holds(fd, "missing.md", ino, pieces)
        for at in (0, len(data) // 2, len(data) - 1):  # one byte changed, size kept
            changed = bytearray(data)
            changed[at] ^= 0x01
            with open(path, "r+b") as handle:
                handle.write(bytes(changed))
            assert not fsops.holds(fd, "A.md", ino, pieces)
        path.write_bytes(data)
        assert fsops.holds(fd, "A.md", ino, pieces)


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "fallback"])
def test_a_failed_look_at_the_old_file_is_a_conflict_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    """After the exchange our temp name holds what was under the index's name: if looking
    at it fails (a symlink swapped in, say), it is exchanged back, never unlinked; without
    the exchange, nothing is renamed. Either way: a conflict, their file in place."""
    if exchange and not fsops.renameat2_available():
        pytest.skip("no renameat2 here")
    monkeypatch.setattr(fsops, "use_renameat2", exchange)
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"theirs\n")
    with fsops.open_dir(tmp_path) as fd:
        found = fsops.identity_of(fd, "MEMORY.md")
    assert found is not None

    def looking_fails(*args: object) -> bool:
        raise OSError(errno.ELOOP, "too many levels of symbolic links")

    monkeypatch.setattr(fsops, "_is_expected", looking_fails)
    with pytest.raises(WriteConflict):
        fsops.replace_file(tmp_path, "MEMORY.md", b"ours\n", found[1])
    assert path.read_bytes() == b"theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["MEMORY.md"]


def test_temp_files_a_killed_memoryd_left_are_removed_and_nothing_else(
    env: Env, cli, mdir: Path
) -> None:
    """A kill -9 between writing a temp and swapping it in leaves the temp behind: the next
    full pass removes it once its writer is gone and it is an hour old; a live writer's, a
    fresh one, a symlink and someone else's file with a similar name all stay."""
    import subprocess
    import sys

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(gone.stdout)
    old = time.time() - 2 * 3600

    def temp(pid: int, *, age: float = old, link: bool = False) -> str:
        name = f".MEMORY.md{fsops.TEMP_MARK}{pid}-{os.urandom(4).hex()}.tmp"
        if link:
            (mdir / name).symlink_to(mdir / "alpha.md")
        else:
            (mdir / name).write_bytes(b"half a write")
            os.utime(mdir / name, (age, age))
        return name

    stray = temp(dead)
    kept = {
        temp(os.getpid()),  # ours: a write in progress
        temp(1),  # a live process
        temp(dead, age=time.time()),  # too fresh to say
        temp(dead, link=True),  # not a regular file
    }
    (mdir / ".MEMORY.md.memoryd-notes.tmp").write_text("no pid")
    kept.add(".MEMORY.md.memoryd-notes.tmp")
    assert cli("index", mdir).code == 0
    names = set(os.listdir(mdir))
    assert stray not in names and kept <= names
    (row,) = [r for r in env.audit_rows() if r["event"] == "index.temp_removed"]
    assert row["files"] == [stray]


def test_held_pass_counts_only_changed_files_as_new_while_seen_is_its_own(
    env: Env, mdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ownership in the daemon's pass after a change looks only at the changed files for
    memory files memoryd had not seen, and only while the saved state is the one the last
    pass wrote: after another process saved it, every file is looked at again."""
    from memoryd.indexing import read
    from memoryd.storage.state import StateStore

    rt = env.runtime()
    first = daemon_pass(rt, memory_dir(mdir))
    assert first.held is not None
    given: list[object] = []
    real = decide_ownership  # the function the pass's modules imported, and call by its name

    def spy(*args, **kwargs):
        last = args[5] if len(args) > 5 else kwargs.get("last")
        given.append(last.arrived if last is not None else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(read, "decide_ownership", spy)  # the held read's and the full read's
    write_memory(mdir, "gamma.md", description="third memory")
    second = daemon_pass(
        rt, memory_dir(mdir), previous=first.held.scan, held=first.held, changed={"gamma.md"}
    )
    assert second.status == "updated" and second.held is not None
    assert given == [{"gamma.md"}]
    # Another process rewrites the state, forgetting a file: its word is not taken on trust.
    other = StateStore(env.state)
    theirs = other.load(mdir.resolve())
    theirs.seen.pop("alpha.md")
    other.save(mdir.resolve(), theirs, seen_changed={"alpha.md"})
    write_memory(mdir, "delta.md", description="fourth memory")
    third = daemon_pass(
        rt, memory_dir(mdir), previous=second.held.scan, held=second.held, changed={"delta.md"}
    )
    assert third.status == "updated" and third.held is not None
    assert given[1:] == [None]
    assert "- [delta](delta.md)" in (mdir / "MEMORY.md").read_text()
    # The pass that began from their `seen` does not vouch for it either: the next pass
    # looks at every file too, until a full pass makes `seen` and the files agree again.
    write_memory(mdir, "eps.md", description="fifth memory")
    fourth = daemon_pass(
        rt, memory_dir(mdir), previous=third.held.scan, held=third.held, changed={"eps.md"}
    )
    assert fourth.status == "updated" and given[2:] == [None]
    full = daemon_pass(rt, memory_dir(mdir))
    assert full.held is not None and set(rt.store.load(mdir.resolve()).seen) == set(
        full.held.memories
    )
    write_memory(mdir, "zeta.md", description="sixth memory")
    daemon_pass(rt, memory_dir(mdir), previous=full.held.scan, held=full.held, changed={"zeta.md"})
    assert given[4:] == [{"zeta.md"}]  # after the full pass's own look at every file


def test_an_index_that_cannot_be_replaced_is_an_error_naming_it(
    env: Env, cli, mdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An immutable MEMORY.md (chattr +i) refuses the swap with EPERM: a clear error naming
    the file and what to do, the file untouched, no temp file left behind."""
    assert cli("index", mdir).code == 0
    write_memory(mdir, "gamma.md", description="third memory")
    before = (mdir / "MEMORY.md").read_bytes()

    def immutable(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(fsops, "renameat2", immutable)
    result = cli("index", mdir)
    said = result.out + result.err
    assert result.code == 1 and "Traceback" not in said
    assert f"{mdir.resolve() / 'MEMORY.md'}: could not be replaced" in said and "chattr -i" in said
    assert (mdir / "MEMORY.md").read_bytes() == before
    assert [p.name for p in mdir.iterdir() if p.name.startswith(".") and "prev" not in p.name] == []


def test_the_line_memoryd_added_stays_its_own_across_a_restart_and_loses_to_the_agents(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's pass over one new file (the held, incremental edit) records the pointer
    it adds as memoryd's; a new process reads that record back, so when the agent adds its
    own line for the file later, memoryd's goes, though it no longer looks like the template
    (the separator setting changed meanwhile)."""
    folder = tmp_path / "repo" / ".claude" / "memory"
    write_memory(folder, "a.md", description="first")
    (folder / "MEMORY.md").write_text("# Notes\n\n- [a](a.md) — first\n")
    rt = env.runtime()
    md = memory_dir(folder)
    first = daemon_pass(rt, md)
    assert first.status == "unchanged" and first.held is not None
    taken: list[object] = []
    real = passes._index_changed

    def spy(*args, **kwargs):
        taken.append(made := real(*args, **kwargs))
        return made

    monkeypatch.setattr(passes, "_index_changed", spy)
    write_memory(folder, "x.md", description="new one")
    assert daemon_pass(rt, md, held=first.held, changed={"x.md"}).status == "updated"
    assert taken and taken[0] is not None  # the held edit wrote it, not a full pass
    assert (folder / "MEMORY.md").read_text() == (
        "# Notes\n\n- [a](a.md) — first\n- [x](x.md) — new one\n"
    )
    with (folder / "MEMORY.md").open("a") as handle:
        handle.write("- [X, as I put it](x.md) -- mine\n")
    later = update(env.runtime(Config(index=IndexConfig(separator=" -- "))), md)
    assert later.status == "updated" and later.edit is not None
    assert later.edit.collapsed == ["x.md"]
    assert (folder / "MEMORY.md").read_text() == (
        "# Notes\n\n- [a](a.md) — first\n- [X, as I put it](x.md) -- mine\n"
    )


def test_own_writes_are_told_to_the_runtime_that_wrote_them(env: Env, mdir: Path) -> None:
    """The writer tells its caller's callback (the daemon's runtime) the identity MEMORY.md has
    after the swap, and no other runtime's: there is no process-wide hook to leak."""
    told: list[tuple[str, tuple[int, int, int]]] = []
    _other = replace(  # a runtime made, never told: nothing leaks to it
        env.runtime(), on_own_write=lambda _folder, name, identity: told.append(("other", identity))
    )
    rt = replace(
        env.runtime(), on_own_write=lambda _folder, name, identity: told.append((name, identity))
    )
    assert update(rt, memory_dir(mdir)).status == "updated"
    st = (mdir / "MEMORY.md").stat()
    assert told == [("MEMORY.md", (st.st_ino, st.st_size, st.st_mtime_ns))]


def test_a_repo_folder_named_with_a_line_break_gets_a_one_line_heading(env: Env, cli) -> None:
    """A new MEMORY.md's heading is the repo folder's name: a line break in it must not put
    lines of its own (here a pointer) into the index. (Not a git work tree: in one, the
    heading is the dir's path in the repo, the same in every clone.)"""
    repo = env.home / "two\n- [ghost](ghost.md)"
    folder = repo / ".claude" / "memory"
    write_memory(folder, "a.md", description="one")
    assert cli("index", folder).code == 0
    text = (folder / "MEMORY.md").read_text()
    assert text.splitlines()[0] == "# two - [ghost](ghost.md) Memory"
    from memoryd.model.index import pointer_targets

    assert pointer_targets(text) == ["a.md"]


def _visible_and_archived(folder: Path) -> tuple[set[str], set[str], set[str]]:
    """The memories whose pointer the agent loads, those past its window, and the archived."""
    from memoryd.model.agentview import ViewKind, agent_view
    from memoryd.model.index import local_links, split_lines

    main = (folder / "MEMORY.md").read_text()
    view = agent_view(main, ViewKind.PLAIN)
    seen: set[str] = set()
    hidden: set[str] = set()
    for number, line in enumerate(split_lines(main)):
        if line.link is not None:
            (seen if view.hidden(number) is None else hidden).add(line.link.target)
    archive = folder / ARCHIVE_NAME
    archived = {ln.target for ln in local_links(archive.read_text())} if archive.exists() else set()
    return seen, hidden, archived


def test_memories_newer_than_keep_recent_are_demoted_rather_than_left_outside_the_window(
    env: Env, cli, tmp_path: Path
) -> None:
    """260 memories written over two days (all within keep_recent): no pointer is left past
    line 200; the oldest went to the archive, the newest stay where the agent loads them.
    Under `budget = "target"` the recent ones go only for the window, not the soft target."""
    folder = tmp_path / "busy"
    for i in range(260):
        write_memory(folder, f"n{i:03d}.md", description=f"memory {i}", age_days=2 - i / 130)
    assert cli("index", folder).code == 0
    seen, hidden, archived = _visible_and_archived(folder)
    assert hidden == set()
    assert seen | archived == {f"n{i:03d}.md" for i in range(260)} and not seen & archived
    assert "n259.md" in seen and "n000.md" in archived
    assert max(archived) < min(seen), "the oldest go first"
    before = tree_digest(folder)
    assert cli("index", folder).code == 0
    assert tree_digest(folder) == before

    target = tmp_path / "target"
    env.config_dir.mkdir(parents=True, exist_ok=True)
    (env.config_dir / "config.toml").write_text('[index]\nbudget = "target"\n')
    for i in range(150):  # 150 lines of ~130 bytes: within the window, over 17,408 bytes
        write_memory(target, f"t{i:03d}.md", description=f"m{i} " + "w" * 110, age_days=1)
    assert cli("index", target).code == 0
    seen, hidden, archived = _visible_and_archived(target)
    assert hidden == set() and archived == set() and len(seen) == 150


def test_pointers_on_lone_cr_lines_past_the_window_go_to_the_archive(
    env: Env, cli, tmp_path: Path
) -> None:
    """A MEMORY.md whose 250 pointers end in lone CRs (Claude Code counts each as a line:
    2.1.328 left 51 of them past its line 200): after `memoryd index` every memory's pointer
    is within the first 200 lines, counting any line break, or in the archive; the rerun
    writes nothing."""
    import re

    folder = tmp_path / "repo" / ".claude" / "memory"
    names = [f"n{i:03}.md" for i in range(250)]
    for i, name in enumerate(names):
        write_memory(folder, name, description=f"note {i}", age_days=300 - i)
    pointers = "\r".join(f"- [{n[:-3]}]({n}) — note {int(n[1:4])}" for n in names)
    (folder / "MEMORY.md").write_bytes(f"# proj Memory\r\r{pointers}\r".encode())
    assert cli("index", folder).code == 0
    lines = re.split(r"\r\n|\r|\n", (folder / "MEMORY.md").read_bytes().decode())
    loaded = "\n".join(lines[:200])
    archive = (folder / ARCHIVE_NAME).read_text()
    for name in names:
        assert f"]({name})" in loaded or f"]({name})" in archive, name
    assert "n000.md" in archive and "n249.md" in loaded
    before = tree_digest(folder)
    assert cli("index", folder).code == 0
    assert tree_digest(folder) == before


def test_an_index_that_cannot_fit_the_window_settles(
    env: Env, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """230 `user` memories (never demoted) keep MEMORY.md over the window: the first index
    says so; a rerun with nothing changed plans nothing again (it re-planned all of
    MEMORY.md at every run: 0.6 s at 10,000) and says the same; a new memory is still
    indexed by the next one."""
    from memoryd.indexing.outcome import IndexStatus

    folder = tmp_path / "repo" / ".claude" / "memory"
    for i in range(230):
        write_memory(folder, f"u{i:03}.md", description=f"who I am {i}", type_="user")
    assert cli("index", folder).code == 0
    with (folder / "MEMORY.md").open("a") as index_file:
        index_file.write("- [gone](never.md) — a pointer the agent wrote before its file\n")
    first = cli("index", folder, "-v")
    assert first.code == 0 and "still over the agent's load window" in first.out, first.out
    assert "never.md" in first.out
    rt, md = env.runtime(), memory_dir(folder)
    planned: list[str] = []
    changed = passes._index_changed

    def spy(*args: Any, **kw: Any) -> Any:
        planned.append("held edit")
        return changed(*args, **kw)

    monkeypatch.setattr(passes, "_index_changed", spy)
    monkeypatch.setattr(plan, "update_index", lambda *a, **k: pytest.fail("a full pass"))
    before = tree_digest(folder)
    for _ in range(2):
        again = passes.update(rt, md)
        assert again.status is IndexStatus.UNCHANGED and again.edit is not None
        assert not again.edit.fits_window and again.edit.dead_links == ["never.md"]
    assert planned == [] and tree_digest(folder) == before
    assert cli("index", folder, "-v").out == first.out
    write_memory(folder, "new.md", description="a new one", type_="user")
    assert passes.update(rt, md).status is IndexStatus.UPDATED
    assert planned and "](new.md)" in (folder / "MEMORY.md").read_text()
    monkeypatch.undo()
    assert cli("index", folder).code == 0
    os.chmod(folder / "MEMORY.md", 0o444)  # settled, a person's "do not touch" is still heard
    assert "MEMORY.md is read-only" in cli("index", folder).out
