"""The index update that ends a dream pass: the held edit of a settled index gives exactly what
a full index pass gives, and a dream pass takes it only while the index is what memoryd left."""

import collections
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.config import Config, IndexConfig
from memoryd.dream.read import probe_index
from memoryd.dream.repocache import RepoCache
from memoryd.dream.run import dream_dir
from memoryd.indexing import passes, read
from memoryd.indexing.outcome import IndexStatus
from memoryd.indexing.passes import index_after_dream, update
from memoryd.indexing.read import Basis
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.runtime import Runtime
from tests.conftest import (
    Env,
    copy_corpus,
    corpus_memory_dirs,
    needs_corpus,
    tree_digest,
    write_memory,
)
from tests.helpers import daemon_pass, index_pass, memory_dir, state_rows

NAMES = [f"m{i:02d}.md" for i in range(16)]
# A budget small enough that the older memories are demoted into the archive.
CONFIG = Config(index=IndexConfig(max_lines=8, keep_recent=86400.0))


def _index_files(path: Path) -> tuple[bytes | None, bytes | None]:
    def read(name: str) -> bytes | None:
        return (path / name).read_bytes() if (path / name).exists() else None

    return read(INDEX_NAME), read(ARCHIVE_NAME)


class Spy:
    """Whether index_after_dream took the held edit (the settled index) or a full pass."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[bool] = []
        real = read.read_settled

        def spy(*args: Any) -> Any:
            made = real(*args)
            self.paths.append(made is not None)
            return made

        monkeypatch.setattr(passes, "read_settled", spy)


def _make_twins(
    rt: Runtime,
    tmp: str,
    before: dict[str, tuple[str, int, str]],
    changes: list[str],
    new: set[str],
    hand_edit: str,
    young: set[str],
    ghost: bool,
) -> tuple[list[Path], list[str], bool]:
    """Twin dirs, indexed (new files left in their grace, as the daemon leaves them), then
    changed alike; the dirs, the memories' names, and whether the archive was edited by hand."""
    # Auto-memory dirs (`projects/<slug>/memory`): the agent strips comments from them.
    twins = [Path(tmp) / side / "projects" / "proj" / "memory" for side in ("held", "full")]
    for path in twins:
        if ghost:  # a pointer to a file never written: a dead link, reported and kept
            path.mkdir(parents=True)
            (path / INDEX_NAME).write_text(
                "# proj\n<!-- memoryd: manage -->\n\n- [ghost](ghost.md) — not yet\n",
                encoding="utf-8",
            )
            (path / ARCHIVE_NAME).write_text("- [far](far.md) — not yet\n", encoding="utf-8")
            _written_earlier(path / INDEX_NAME)
            _written_earlier(path / ARCHIVE_NAME)
        for name, (type_, age, desc) in sorted(before.items()):
            write_memory(path, name, description=desc, type_=type_, age_days=age)
        for _ in range(2):
            update(rt, memory_dir(path, CONFIG))
        for name in sorted(young):  # seen, but left in their grace by the daemon's pass
            write_memory(path, name, description="just written", age_days=None)
        if young:
            assert update(rt, memory_dir(path, CONFIG), grace=60.0).edit.waiting  # type: ignore[union-attr]
    names = sorted(before)
    edited = False  # the archive edited by someone else
    for path in twins:
        for name, what in zip(names, changes, strict=False):
            if what == "delete":
                (path / name).unlink()
            elif what in ("redescribe", "rename"):
                type_, age, desc = before[name]
                write_memory(
                    path,
                    name,
                    name="renamed" if what == "rename" else None,
                    description=desc if what == "rename" else desc + " (updated)",
                    type_=type_,
                    age_days=age,
                )
        for name in sorted(new):
            write_memory(path, name, description="arrived since", age_days=None)
        index = path / INDEX_NAME  # the agent's (or a person's) edits to MEMORY.md
        text = index.read_text(encoding="utf-8")
        if hand_edit == "prose":
            text += "a line a person added\n"
        elif hand_edit == "pointer again":  # a second line for a file indexed already
            text += f"- [again]({names[0]}) in the agent's own words\n"
        elif hand_edit == "drop pointer":
            lines = text.splitlines(keepends=True)
            at = next((i for i, ln in enumerate(lines) if ln.startswith("- [")), None)
            text = "".join(lines[:at] + lines[at + 1 :]) if at is not None else text
        elif hand_edit == "own pointer" and new:
            text += f"- [{min(new)}]({min(new)}) — the agent wrote its pointer\n"
        elif hand_edit == "comment pointer":  # a person comments a pointer out
            lines = text.splitlines(keepends=True)
            at = next((i for i, ln in enumerate(lines) if ln.startswith("- [")), None)
            if at is not None:
                lines[at : at + 1] = ["<!--\n", lines[at], "-->\n"]
            text = "".join(lines)
        elif hand_edit == "comment new" and new:  # the only pointer, hidden
            text += f"<!-- - [{min(new)}]({min(new)}) — hidden\n-->\n"
        if text != index.read_text(encoding="utf-8"):
            index.write_text(text, encoding="utf-8")
            _written_earlier(index)
        unpointed = [n for n, w in zip(names, changes, strict=False) if w == "unpoint"]
        archive = path / ARCHIVE_NAME
        if unpointed and archive.exists():  # pointer lines gone by hand, files kept
            lines = archive.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [ln for ln in lines if not any(f"({n})" in ln for n in unpointed)]
            if kept != lines:
                edited = True
                archive.write_text("".join(kept), encoding="utf-8")
                _written_earlier(archive)
    return twins, names, edited


memory = st.tuples(
    st.sampled_from(["user", "project", "feedback", "reference"]),
    st.integers(0, 60),  # age in days
    st.sampled_from(["alpha", "beta", "gamma — with a dash", "naïve café"]),
)
change = st.sampled_from(["keep", "keep", "keep", "delete", "redescribe", "rename", "unpoint"])


# What a person may do to MEMORY.md between two passes (applied in _make_twins).
HAND_EDITS = [
    "none", "prose", "pointer again", "drop pointer", "own pointer", "comment pointer",
    "comment new",
]  # fmt: skip


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.dictionaries(st.sampled_from(NAMES), memory, min_size=1, max_size=14),
    changes=st.lists(change, min_size=16, max_size=16),
    new=st.sets(st.sampled_from([f"new{i}.md" for i in range(4)]), max_size=3),
    moved_picks=st.lists(st.booleans(), min_size=20, max_size=20),
    hand_edit=st.sampled_from(HAND_EDITS),
    young=st.sets(st.sampled_from(["young0.md", "young1.md"])),
    ghost=st.booleans(),
)
def test_held_update_after_moves_gives_what_a_full_pass_gives(
    env: Env,
    monkeypatch: pytest.MonkeyPatch,
    before: dict[str, tuple[str, int, str]],
    changes: list[str],
    new: set[str],
    moved_picks: list[bool],
    hand_edit: str,
    young: set[str],
    ghost: bool,
) -> None:
    """Twin dirs, indexed (new files left in their grace, as the daemon leaves them), then
    changed alike (files deleted, redescribed, renamed, added; MEMORY.md edited by hand; pointer
    lines removed from the archive) and a dream's moves made: one gets index_after_dream, the
    other a full pass. Their index files and `seen` must come out identical."""
    rt = env.runtime(CONFIG)
    spy = Spy(monkeypatch)
    with tempfile.TemporaryDirectory(dir=env.home) as tmp:
        twins, _, edited = _make_twins(rt, tmp, before, changes, new, hand_edit, young, ghost)
        held, full = twins
        md_held, md_full = memory_dir(held, CONFIG), memory_dir(full, CONFIG)
        probe = probe_index(rt, md_held)
        ownership, scan = probe.ownership, probe.scan
        assert ownership is not None and scan is not None
        probe_full = probe_index(rt, md_full).ownership
        assert probe_full is not None and probe_full.managed == ownership.managed
        if not ownership.managed:
            return
        basis = Basis.of(scan, rt.store.load(md_held.real_path).seen)
        present = sorted(n for n in os.listdir(held) if n.endswith(".md") and "MEMORY" not in n)
        moved = {n for n, pick in zip(present, moved_picks, strict=False) if pick}
        for path in twins:
            for name in moved:
                (path / name).unlink()
        spy.paths.clear()
        got = index_after_dream(rt, md_held, moved, basis)
        want = index_pass(rt, md_full, forget=moved, mode="manage")  # as the pass's probe found
        assert _index_files(held) == _index_files(full)
        assert rt.store.load(md_held.real_path).seen == rt.store.load(md_full.real_path).seen
        assert (got.status, got.problems) == (want.status, want.problems)
        assert got.edit is not None and want.edit is not None
        assert set(got.edit.dead_links) == set(want.edit.dead_links)
        reported = [rt.store.load(md.real_path).reported for md in (md_held, md_full)]
        assert reported[0] == reported[1]
        assert not got.problems
        # Someone else's edit to the archive means a full pass; else the held edit ran (it
        # reads all of MEMORY.md whatever happened to it).
        assert spy.paths == [not edited]
        # And a full pass over the result changes nothing: the update left the index settled.
        assert update(rt, md_held).status == "unchanged"
        assert rt.store.load(md_held.real_path).settled


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.dictionaries(st.sampled_from(NAMES), memory, min_size=1, max_size=14),
    changes=st.lists(change, min_size=16, max_size=16),
    new=st.sets(st.sampled_from([f"new{i}.md" for i in range(4)]), max_size=3),
    hand_edit=st.sampled_from(HAND_EDITS),
    young=st.sets(st.sampled_from(["young0.md", "young1.md"])),
    ghost=st.booleans(),
    broken=st.booleans(),
)
def test_a_one_shot_update_of_a_settled_index_gives_what_a_full_pass_gives(
    env: Env,
    before: dict[str, tuple[str, int, str]],
    changes: list[str],
    new: set[str],
    hand_edit: str,
    young: set[str],
    ghost: bool,
    broken: bool,
) -> None:
    """Twin dirs changed alike (as above, and a memory file that cannot be parsed): one gets
    `memoryd index`'s update (the held edit of the files changed since its last verified
    pass, while the archive is the one it left), the other a full pass. Their index files,
    state and audit rows must come out identical."""
    rt = env.runtime(CONFIG)
    with tempfile.TemporaryDirectory(dir=env.home) as tmp:
        twins, _, edited = _make_twins(rt, tmp, before, changes, new, hand_edit, young, ghost)
        if broken:
            for path in twins:
                (path / "broken.md").write_text("---\nname: [unclosed\n---\nbody\n")
                _written_earlier(path / "broken.md")
        held, full = twins
        md_held, md_full = memory_dir(held, CONFIG), memory_dir(full, CONFIG)
        rows = len(env.audit_rows())
        got = update(rt, md_held)
        got_rows = env.audit_rows()[rows:]
        want = update(rt, md_full)
        want_rows = env.audit_rows()[rows + len(got_rows) :]
        assert _index_files(held) == _index_files(full)
        states = [rt.store.load(md.real_path) for md in (md_held, md_full)]
        for field in ("seen", "own", "reported", "changed_since_dream", "managed"):
            assert getattr(states[0], field) == getattr(states[1], field), field
        assert states[0].gone.keys() == states[1].gone.keys()  # (the values are when)
        assert (got.status, got.problems, got.message) == (want.status, want.problems, want.message)
        assert got.ownership is not None and want.ownership is not None
        assert got.ownership.reason == want.ownership.reason  # (`index --json` shows it)
        if got.edit is not None and want.edit is not None:
            assert set(got.edit.dead_links) == set(want.edit.dead_links)

        def kinds(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
            return sorted(
                (r["event"], str(r.get("file")), str(r.get("target")), str(r.get("added")))
                for r in rows
            )

        assert kinds(got_rows) == kinds(want_rows)
        if got.status is IndexStatus.UNMANAGED:
            return
        # The held edit ran unless someone else edited the archive.
        if not edited:
            assert got.held_edit
        assert update(rt, md_held).status == "unchanged"


def _written_earlier(path: Path) -> None:
    """Date a hand edit a few seconds back: it was made between passes, not while one runs
    (an index changed within the last moments is being written, and a pass waits for it)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**10))


def _duplicates_repo(tmp_path: Path, old: str = "dup-old.md", new: str = "dup-new.md") -> Path:
    """A repo whose memory dir holds two duplicates (`old` the older); the memory dir."""
    repo = tmp_path / "repo"
    mem = repo / ".claude" / "memory"
    (repo / ".git").mkdir(parents=True)
    body = "Always run the integration suite with the docker compose stack before merging.\n"
    write_memory(mem, old, description="integration suite", body=body, age_days=40)
    write_memory(mem, new, description="integration suite again", body=body, age_days=30)
    return mem


def test_a_dream_pass_over_a_settled_index_takes_the_held_update(
    env: Env, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted: an indexed dir, two duplicates; the real pass moves the older one through the
    held update, and its pointer goes while every other line stays."""
    mem = _duplicates_repo(tmp_path, "old.md", "new.md")
    for i in range(6):
        write_memory(mem, f"other{i}.md", description=f"unrelated {i}", body=f"Topic {i} x{i}.\n")
    assert cli("index", mem).code == 0
    [(fields,)] = state_rows(env.state, "SELECT fields FROM dirstate")
    assert json.loads(fields)["settled"]
    spy = Spy(monkeypatch)
    result = cli("dream", mem, "--json")
    assert result.code == 0, result.err
    assert spy.paths == [True]
    assert not (mem / "old.md").exists()
    text = (mem / INDEX_NAME).read_text(encoding="utf-8")
    assert "(old.md)" not in text and "(new.md)" in text
    assert all(f"(other{i}.md)" in text for i in range(6))
    assert cli("index", "--check", mem).code == 0  # nothing left for a full pass to do


def test_after_the_daemons_own_edit_a_dream_still_takes_the_held_update(
    env: Env, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon keeps the index settled with its held edits (which write without hashing
    what they write): the record they leave must still let a dream pass take the held update."""
    mem = _duplicates_repo(tmp_path)
    rt = env.runtime()
    md = memory_dir(mem, Config())
    first = daemon_pass(rt, md)
    assert first.held is not None
    write_memory(mem, "later.md", description="written later", body="Use uv for envs.\n")
    after = daemon_pass(rt, md, held=first.held, changed={"later.md"})
    assert after.status == "updated" and after.held is not None  # the held edit wrote it
    spy = Spy(monkeypatch)
    assert cli("dream", mem).code == 0
    assert spy.paths == [True] and not (mem / "dup-old.md").exists()
    assert "(dup-old.md)" not in (mem / INDEX_NAME).read_text(encoding="utf-8")
    assert cli("index", "--check", mem).code == 0


@pytest.mark.parametrize("settled", [True, False])
def test_moves_that_leave_fewer_than_half_indexed_still_take_their_pointers_along(
    env: Env, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: bool
) -> None:
    """The probe found the index managed (3 of 6 files pointed to; 3 more in their grace
    after the daemon's last pass); the pass moves one of the three. The update must not then
    call the index hand-organised and leave a pointer to a file in the trash."""
    mem = _duplicates_repo(tmp_path)
    write_memory(mem, "keep.md", description="something else", body="Tabs, not spaces.\n")
    rt = env.runtime()
    md = memory_dir(mem, Config())
    assert update(rt, md).status == "updated"
    for i, topic in enumerate(("Prefer ripgrep over grep.", "Releases go out on Tuesdays.",
                               "The staging cluster lives in eu-west.")):  # fmt: skip
        write_memory(mem, f"young{i}.md", description=f"fresh {i}", body=topic, age_days=None)
    assert update(rt, md, grace=60.0).status == "unchanged"  # they wait for their pointers
    if not settled:
        monkeypatch.setattr(passes, "read_settled", lambda *args: None)
    result = cli("dream", mem, "--json")
    assert result.code == 0, result.err
    assert [c["file"] for d in json.loads(result.out)["dirs"] for c in d["changes"]] == [
        "dup-old.md"
    ]
    text = (mem / INDEX_NAME).read_text(encoding="utf-8")
    assert "(dup-old.md)" not in text
    for name in ("dup-new.md", "keep.md", "young0.md", "young1.md", "young2.md"):
        assert f"({name})" in text
    assert cli("index", "--check", mem).code == 0


@needs_corpus
def test_dream_over_the_corpus_gives_the_same_index_either_way(
    env: Env, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every corpus repo, indexed, then dreamt over twice: once as it comes (the held update
    wherever the index is settled), once with full passes only. Same files everywhere."""
    roots = [copy_corpus(tmp_path / side / "corpus") for side in ("held", "full")]
    repos = sorted(p.name for p in roots[0].iterdir() if p.is_dir())
    body = "Run the migration check with the staging database snapshot before each deploy.\n"
    for root in roots:
        for folder in corpus_memory_dirs(root):  # a duplicate pair in each: the older one goes
            if not folder.is_symlink() and not folder.parent.is_symlink():
                write_memory(folder, "planted-a.md", description="deploy check", body=body,
                             age_days=40)  # fmt: skip
                write_memory(folder, "planted-b.md", description="deploy check", body=body,
                             age_days=30)  # fmt: skip
        for repo in repos:
            cli("--config", "/dev/null", "index", root / repo)
    spy = Spy(monkeypatch)
    moved = 0
    for repo in repos:
        report = json.loads(cli("--config", "/dev/null", "dream", "--json", roots[0] / repo).out)
        moved += sum(len(d["changes"]) for d in report["dirs"])
    # Every managed dir's update was the held one (none was touched since its index pass).
    assert moved >= 10 and len(spy.paths) >= 10 and all(spy.paths)
    monkeypatch.setattr(passes, "read_settled", lambda *args: None)
    for repo in repos:
        cli("--config", "/dev/null", "dream", roots[1] / repo)
    held, full = (
        {k: sha for k, (sha, _) in tree_digest(root).items() if "/.trash/" not in f"/{k}"}
        for root in roots
    )
    assert held == full


def test_an_archive_rewritten_in_place_with_its_stat_kept_gets_a_full_pass(
    env: Env, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record trusts the archive's inode, size and mtime. A writer that keeps all three
    while putting bytes that are not UTF-8 in it is not trusted blindly: the held update
    declines, and the full pass says what is wrong with the file, losing nothing."""
    mem = _duplicates_repo(tmp_path)
    for i in range(3):
        write_memory(mem, f"other{i}.md", description=f"unrelated {i}", body=f"Topic {i} x{i}.\n")
    config = Config(index=IndexConfig(max_lines=4, keep_recent=86400.0))
    rt = env.runtime(config)
    md = memory_dir(mem, config)
    update(rt, md)
    archive = mem / ARCHIVE_NAME
    st = archive.stat()
    data = archive.read_bytes()
    with archive.open("r+b") as f:  # same inode, same size
        f.write(b"\xff" + data[1:])
    os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns))
    spy = Spy(monkeypatch)
    ownership = probe_index(rt, md).ownership
    assert ownership is not None and not ownership.managed  # a pass would not even move
    memories = set(os.listdir(mem))
    got = index_after_dream(rt, md, frozenset(), Basis(frozenset(), frozenset(), frozenset()))
    assert spy.paths == [False]
    assert got.status == "unmanaged" and "not UTF-8" in got.message
    assert set(os.listdir(mem)) == memories and archive.read_bytes()[1:] == data[1:]


DUPLICATE = "The staging deploy runs from the release branch after the nightly build passes.\n"


@pytest.mark.parametrize("settled", [True, False], ids=["held-edit", "full-pass"])
def test_a_daemon_pass_keeps_a_new_files_grace(
    env: Env, monkeypatch: pytest.MonkeyPatch, settled: bool
) -> None:
    """A pass the daemon starts (a pile-up) moves a duplicate, then updates the index: a
    memory written 6 s before (by the injected clock) is inside the 10 s grace, so it gets no
    pointer yet (it waits, with a time to look again); once out of it, the daemon's next
    update adds it. The same pass from the command line indexes it at once."""
    from dataclasses import replace

    from memoryd.dream.repocache import RepoCache
    from memoryd.dream.run import dream_dir

    now = 2_000_000_000.0
    results = {}
    spy = Spy(monkeypatch)
    for trigger in ("pile-up", "command"):
        rt = replace(env.runtime(), clock=lambda: now)
        path = env.home / trigger / "proj" / "memory"
        write_memory(path, "deploy.md", body=DUPLICATE, age_days=None)
        write_memory(path, "deploy-again.md", body=DUPLICATE, age_days=None)
        write_memory(
            path, "other.md", body="Unrelated words about the font cache.\n", age_days=None
        )
        for name, age in (("deploy.md", 40), ("deploy-again.md", 30), ("other.md", 20)):
            os.utime(path / name, (now - age * 86400, now - age * 86400))
        if settled:
            for _ in range(2):
                update(rt, memory_dir(path, Config()))
        write_memory(path, "fresh.md", description="just written", age_days=None)
        os.utime(path / "fresh.md", (now - 6, now - 6))
        result = dream_dir(rt, memory_dir(path, Config()), repos=RepoCache.of(rt), trigger=trigger)
        assert [r.original_name for r in result.moved] == ["deploy.md"], result.message
        assert result.index is not None and result.index.status == "updated"
        results[trigger] = (rt, path, result.index)
        assert spy.paths[-1] is settled  # the held edit of a settled index, or a full pass
    rt, path, outcome = results["pile-up"]
    assert "fresh.md" not in (path / INDEX_NAME).read_text()
    assert outcome.edit is not None and outcome.edit.waiting == ["fresh.md"]
    assert outcome.retry_after == pytest.approx(now - 6 + 10)
    assert "deploy-again.md" in (path / INDEX_NAME).read_text()
    later = replace(rt, clock=lambda: now + 5)  # out of its grace: the daemon's next look
    update(later, memory_dir(path, Config()), grace=later.config.index.new_file_grace)
    assert "fresh.md" in (path / INDEX_NAME).read_text()
    _, path, outcome = results["command"]
    assert "fresh.md" in (path / INDEX_NAME).read_text()
    assert outcome.edit is not None and outcome.edit.waiting == []


# --- a dream pass reads each file of the dir at most once ----------------------------------------
# The index files as its ownership probe read them serve the moves' trash records and the index
# update after them; the probe's scan of MEMORY.md's targets serves the held update.
READS_CONFIG = Config(index=IndexConfig(max_lines=6, keep_recent=86400.0))
BODY = "Always run the integration suite with the docker compose stack before merging.\n"
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT

# The opens for reading the audit hook saw while `_watching` names a dir, by file version: its
# name and the identity it had when opened (the index files a pass writes are new files, which
# its verification reads). An audit hook cannot be removed: outside these tests it only checks
# the one global.
_watching: list[Path] = []
_opened: collections.Counter[tuple[str, tuple[int, int, int] | None]] = collections.Counter()


def _on_audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _watching or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
    mode = args[1] if isinstance(args[1], str) else ""
    if flags & WRITES or any(c in mode for c in "wax+"):
        return
    path = Path(os.fsdecode(args[0]))
    # Relative: opened by name under a descriptor of the memory dir (fsops.read_regular).
    if path.is_absolute() and path.parent != _watching[0]:
        return
    try:
        st = os.stat(_watching[0] / path.name, follow_symlinks=False)
    except OSError:
        _opened[path.name, None] += 1
    else:
        _opened[path.name, (st.st_ino, st.st_size, st.st_mtime_ns)] += 1


sys.addaudithook(_on_audit)


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[collections.Counter[tuple[str, Any]]]:
    _opened.clear()
    yield _opened
    _watching.clear()


def _reads_repo(tmp_path: Path, moves: bool) -> Path:
    """A repo's memory dir of twelve unrelated memories and one that has a duplicate when
    `moves` (the older one, which a dream pass moves); the memory dir."""
    repo = tmp_path / "repo"
    mem = repo / ".claude" / "memory"
    (repo / ".git").mkdir(parents=True)
    write_memory(mem, "dup-new.md", description="integration suite again", body=BODY)
    if moves:
        write_memory(mem, "dup-old.md", description="integration suite", body=BODY, age_days=40)
    for i in range(12):
        write_memory(mem, f"m{i:02d}.md", description=f"unrelated {i}", body=f"Topic {i} x{i}.\n")
    return mem


@pytest.mark.parametrize("moves", [True, False], ids=["moves", "no-moves"])
@pytest.mark.parametrize("settled", [True, False], ids=["held-update", "full-pass"])
def test_a_dream_pass_reads_each_file_at_most_once(
    env: Env,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opened: collections.Counter[tuple[str, Any]],
    settled: bool,
    moves: bool,
) -> None:
    """An indexed dir with an archive (and two duplicates: the older one is moved): the pass
    opens MEMORY.md, MEMORY-ARCHIVE.md and each memory file at most once for reading (each
    version of it: what the pass writes, it verifies), through the held update of a settled
    index and through a full pass alike. The old code read both index files again for the
    moves' records and for the update, and each memory MEMORY.md points to again for the held
    update."""
    mem = _reads_repo(tmp_path, moves)
    rt = env.runtime(READS_CONFIG)
    md = memory_dir(mem, READS_CONFIG)
    assert update(rt, md).status is IndexStatus.UPDATED
    assert (mem / ARCHIVE_NAME).exists() and "(m" in (mem / INDEX_NAME).read_text()
    if not settled:
        monkeypatch.setattr(passes, "read_settled", lambda *args: None)
    names = set(os.listdir(mem))
    _watching.append(mem.resolve())
    result = dream_dir(rt, md, repos=RepoCache.of(rt))
    _watching.clear()
    assert result.status == "completed", result.message
    assert [r.original_name for r in result.moved] == (["dup-old.md"] if moves else [])
    assert result.index is not None
    assert result.index.status is (IndexStatus.UPDATED if moves else IndexStatus.UNCHANGED)
    assert ("(dup-old.md)" in (mem / INDEX_NAME).read_text()) is False
    # The file moved is read once more by the mover, which checks its bytes just before the
    # rename (trash.Mover.move): that is the move's own check, not a read of the pass.
    allowed = {name: 2 if name == "dup-old.md" else 1 for name in names}
    read_again = {key: n for key, n in opened.items() if n > allowed.get(key[0], 1)}
    assert read_again == {}
    assert {name for name, _ in opened} >= {INDEX_NAME, ARCHIVE_NAME}


@pytest.mark.parametrize("moves", [True, False], ids=["moves", "no-moves"])
def test_a_dream_command_reads_each_file_at_most_once(
    env: Env,
    cli: Any,
    tmp_path: Path,
    opened: collections.Counter[tuple[str, Any]],
    moves: bool,
) -> None:
    """`memoryd dream DIR` as a whole, its housekeeping included: each version of MEMORY.md,
    of the archive and of each memory file is opened at most once for reading. The old code
    read MEMORY.md again for the promotion candidates (`housekeeping.promotion_candidates`),
    after the pass had read it (the probe) or written and verified it (the update)."""
    mem = _reads_repo(tmp_path, moves)
    assert cli("index", mem).code == 0
    names = set(os.listdir(mem))
    _watching.append(mem.resolve())
    result = cli("dream", "--json", mem)
    _watching.clear()
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert [c["file"] for c in report["dirs"][0]["changes"]] == (["dup-old.md"] if moves else [])
    assert any("promotion candidates" in line for line in report["housekeeping"])
    # The mover's own check of the file it moves reads it once more (as above). Folders
    # (`.trash`, opened to list it) are no file versions.
    allowed = {name: 2 if name == "dup-old.md" else 1 for name in names}
    read_again = {
        key: n
        for key, n in opened.items()
        if key[0] in names and not (mem / key[0]).is_dir() and n > allowed[key[0]]
    }
    assert read_again == {}
    assert {name for name, _ in opened} >= {INDEX_NAME}
