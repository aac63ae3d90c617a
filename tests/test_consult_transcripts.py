"""Consult evidence from Claude Code's session transcripts: the agent's own tool calls."""

import json
import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memoryd.config import build_config
from memoryd.discover.slugs import slugify
from memoryd.dream import transcripts
from memoryd.dream.repocache import RepoCache
from memoryd.dream.run import dream_dir
from tests.conftest import Env
from tests.helpers import (
    DAY,
    dream,
    explain,
    filler,
    make_subfolder_repo,
    mem,
    memory_dir,
    moved,
    state_rows,
)

pytestmark = pytest.mark.repo_tree.with_args(make_subfolder_repo)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tool_row(
    path: str,
    *,
    cwd: Path,
    when: float,
    session: str = "s-1",
    tool: str = "Read",
    args: dict[str, object] | None = None,
) -> str:
    """An assistant row as Claude Code 2.1.332 writes it (see notes/claude_facts.md)."""
    return json.dumps(
        {
            "parentUuid": "p",
            "isSidechain": False,
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": tool,
                        "input": args if args is not None else {"file_path": path},
                    }
                ],
                "stop_reason": "tool_use",
            },
            "type": "assistant",
            "uuid": "u",
            "timestamp": _iso(when),
            "cwd": str(cwd),
            "sessionId": session,
            "version": "2.1.332",
        }
    )


def plant(env: Env, cwd: Path, name: str, *rows: str, raw: bytes = b"") -> Path:
    """Rows appended to `<claude_home>/projects/<slug of cwd>/<name>`."""
    folder = env.claude / "projects" / slugify(str(cwd))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("ab") as handle:
        handle.write("".join(r + "\n" for r in rows).encode() + raw)
    return path


NOISE = json.dumps(
    {
        "type": "user",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x" * 200}],
        },
    }
)


def test_a_read_in_a_transcript_keeps_a_stale_memory_and_explain_names_it(
    env: Env, cli, repo: Path
) -> None:
    """A Read of the memory by the agent 3 days ago: the consult guard holds, and `explain`
    names the session, time, tool and transcript."""
    folder = repo / ".claude" / "memory"
    kept = mem(repo, "payment_flow.md", "Lived in `src/removed_one.py`.")
    mem(repo, "refund_flow.md", "Lived in `src/removed_two.py`.")
    filler(repo)
    when = time.time() - 3 * DAY
    plant(
        env,
        repo,
        "sess-a.jsonl",
        NOISE,
        tool_row(str(kept), cwd=repo, when=when, session="efc9a09f-1"),
        NOISE,
    )
    info = explain(cli, kept)
    assert "efc9a09f-1" in info["consult"] and "Read" in info["consult"]
    assert _iso(when)[:19] in info["consult"]
    assert f"{slugify(str(repo))}/sess-a.jsonl" in info["consult"]
    report = dream(cli, repo)
    assert moved(report) == {"refund_flow.md": "stale"}
    assert {f["file"]: f["guard"] for f in report["flagged"]} == {"payment_flow.md": "consulted"}
    assert folder.joinpath("payment_flow.md").exists()


def test_a_subfolder_sessions_transcript_counts_for_the_repos_memory_dir(
    env: Env, cli, repo: Path
) -> None:
    """A session started in a subfolder writes under the subfolder's slug; its Read of the
    repo's memory (a path relative to that cwd, through a symlink) still counts."""
    mem(repo, "payment_flow.md", "Lived in `src/removed_one.py`.")
    mem(repo, "refund_flow.md", "Lived in `src/removed_two.py`.")
    filler(repo)
    (repo / "pkg" / "mem-link").symlink_to(repo / ".claude" / "memory")
    sub = repo / "pkg" / "sub"
    plant(
        env,
        sub,
        "sess-b.jsonl",
        tool_row("../mem-link/payment_flow.md", cwd=sub, when=time.time() - DAY),
    )
    report = dream(cli, repo)
    assert moved(report) == {"refund_flow.md": "stale"}
    assert {f["file"]: f["guard"] for f in report["flagged"]} == {"payment_flow.md": "consulted"}


def test_which_tool_calls_count(env: Env, repo: Path) -> None:
    """Read, Edit, Write, a Grep of one file and a `cat` count; a Grep or Glob over the
    dir, a file elsewhere and another row type do not."""
    folder = repo / ".claude" / "memory"
    now = time.time()
    rows = [
        tool_row(str(folder / "a.md"), cwd=repo, when=now),
        tool_row(str(folder / "b.md"), cwd=repo, when=now, tool="Edit"),
        tool_row(".claude/memory/c.md", cwd=repo, when=now, tool="Write"),
        tool_row(
            "",
            cwd=repo,
            when=now,
            tool="Grep",
            args={"pattern": "deploy", "path": str(folder / "d.md")},
        ),
        tool_row(
            "",
            cwd=repo,
            when=now,
            tool="Bash",
            args={"command": f"cd /tmp && head -n 30 {folder}/e.md | wc -l"},
        ),
        tool_row(
            "", cwd=repo, when=now, tool="Grep", args={"pattern": "f.md", "path": str(folder)}
        ),
        tool_row(
            "", cwd=repo, when=now, tool="Glob", args={"pattern": "*.md", "path": str(folder)}
        ),
        tool_row("", cwd=repo, when=now, tool="Bash", args={"command": f"grep -r g.md {folder}"}),
        tool_row(str(repo / "docs" / "h.md"), cwd=repo, when=now),
        json.dumps(
            {
                "type": "api-request-blob",
                "message": {
                    "content": [
                        {
                            "type": "tool_use",
                            "name": "Read",
                            "input": {"file_path": str(folder / "i.md")},
                        }
                    ]
                },
            }
        ),
    ]
    plant(env, repo, "s.jsonl", *rows)
    found = transcripts.harvest(env.claude, env.state, since=now - DAY)
    seen = found.evidence_for(folder.resolve())
    assert {k: v.tool for k, v in seen.items()} == {
        "a.md": "Read",
        "b.md": "Edit",
        "c.md": "Write",
        "d.md": "Grep",
        "e.md": "Bash",
    }


def test_reading_is_incremental_by_offset(env: Env, repo: Path) -> None:
    """A second scan reads only the bytes appended since the first, and none when nothing
    was; the offset kept is the file's size."""
    folder = repo / ".claude" / "memory"
    now = time.time()
    path = plant(
        env, repo, "s.jsonl", *([NOISE] * 2000), tool_row(str(folder / "a.md"), cwd=repo, when=now)
    )
    first = transcripts.harvest(env.claude, env.state, since=now - DAY)
    size = path.stat().st_size
    assert first.bytes_read == size
    assert transcripts.load(env.state).files[f"{path.parent.name}/s.jsonl"][3] == size
    assert transcripts.harvest(env.claude, env.state, since=now - DAY).bytes_read == 0
    added = tool_row(str(folder / "b.md"), cwd=repo, when=now, session="s-2") + "\n"
    plant(env, repo, "s.jsonl", raw=added.encode())
    third = transcripts.harvest(env.claude, env.state, since=now - DAY)
    assert third.bytes_read == len(added.encode())
    assert set(third.evidence_for(folder.resolve())) == {"a.md", "b.md"}


def test_a_truncated_or_replaced_transcript_is_read_from_the_start(env: Env, repo: Path) -> None:
    """A transcript that shrank, or another file in its place, is read again from 0."""
    folder = repo / ".claude" / "memory"
    now = time.time()
    path = plant(env, repo, "s.jsonl", *([NOISE] * 50))
    transcripts.harvest(env.claude, env.state, since=now - DAY)
    path.write_text(tool_row(str(folder / "a.md"), cwd=repo, when=now) + "\n")  # truncated
    found = transcripts.harvest(env.claude, env.state, since=now - DAY)
    assert set(found.evidence_for(folder.resolve())) == {"a.md"}
    replacement = path.with_name("new")
    replacement.write_text(
        NOISE + "\n" + tool_row(str(folder / "b.md"), cwd=repo, when=now) + "\n" + NOISE * 3 + "\n"
    )  # larger, another inode
    os.replace(replacement, path)
    found = transcripts.harvest(env.claude, env.state, since=now - DAY)
    assert found.bytes_read == path.stat().st_size
    assert set(found.evidence_for(folder.resolve())) == {"a.md", "b.md"}


def test_a_torn_last_line_is_read_once_it_is_finished(env: Env, repo: Path) -> None:
    """Half a line is not consumed: the offset stays before it, and the finished line counts."""
    folder = repo / ".claude" / "memory"
    now = time.time()
    line = tool_row(str(folder / "a.md"), cwd=repo, when=now)
    path = plant(env, repo, "s.jsonl", NOISE, raw=line[:40].encode())
    found = transcripts.harvest(env.claude, env.state, since=now - DAY)
    assert not found.evidence_for(folder.resolve())
    assert found.files[f"{path.parent.name}/s.jsonl"][3] == len(NOISE) + 1
    with path.open("ab") as handle:
        handle.write(line[40:].encode() + b"\n")
    found = transcripts.harvest(env.claude, env.state, since=now - DAY)
    assert set(found.evidence_for(folder.resolve())) == {"a.md"}
    assert found.files[f"{path.parent.name}/s.jsonl"][3] == path.stat().st_size


def test_the_14_day_window_with_a_fake_clock(env: Env, repo: Path) -> None:
    """A Read 14 days less a minute before `now` keeps a stale memory; one 14 days and a
    minute before does not (the pass's clock is injected)."""
    now = 2_000_000_000.0
    folder = repo / ".claude" / "memory"
    for name in ("inside.md", "outside.md"):
        mem(repo, name, f"Lived in `src/{name[:-3]}_gone.py`.", age=0)
        os.utime(folder / name, (now - 40 * DAY, now - 40 * DAY))
    filler(repo)
    for p in folder.glob("filler_*.md"):
        os.utime(p, (now - 40 * DAY, now - 40 * DAY))
    path = plant(
        env,
        repo,
        "s.jsonl",
        tool_row(str(folder / "inside.md"), cwd=repo, when=now - 14 * DAY + 60),
        tool_row(str(folder / "outside.md"), cwd=repo, when=now - 14 * DAY - 60),
    )
    os.utime(path, (now, now))
    cfg = build_config({"paths": {"claude_home": str(env.claude)}}, "test")
    rt = replace(env.runtime(cfg), clock=lambda: now)
    md = memory_dir(folder, cfg)
    result = dream_dir(rt, md, repos=RepoCache.of(rt), dry_run=True)
    assert result.plan is not None
    assert {m.filename for m in result.plan.moves} == {"outside.md"}
    assert [f.guard for f in result.plan.flagged if f.filename == "inside.md"] == ["consulted"]


def test_a_huge_transcript_is_read_once_within_the_scan_bound(env: Env, repo: Path) -> None:
    """A transcript over the per-scan bound is read over several scans, never past the bound
    and never twice; until it is read to the end, memories count as consulted (unsure). A
    transcript last written before the window is not read at all."""
    folder = repo / ".claude" / "memory"
    now = time.time()
    big = plant(
        env,
        repo,
        "big.jsonl",
        *([NOISE] * 40_000),
        tool_row(str(folder / "a.md"), cwd=repo, when=now),
    )
    size = big.stat().st_size  # ~10 MB
    old = plant(env, repo, "old.jsonl", *([NOISE] * 4000))
    os.utime(old, (now - 30 * DAY, now - 30 * DAY))
    bound = 3 * 1024 * 1024
    reads = []
    while True:
        found = transcripts.harvest(
            env.claude, env.state, since=now - 14 * DAY, scan_bytes=bound, chunk_bytes=1024 * 1024
        )
        reads.append(found.bytes_read)
        if not found.unread:
            break
        assert f"{big.parent.name}/big.jsonl" in found.unread
        assert len(reads) < 10
    assert max(reads) <= bound
    assert sum(reads) <= size + len(reads) * len(NOISE)  # a cut line is read twice at most
    assert set(found.evidence_for(folder.resolve())) == {"a.md"}
    assert transcripts.harvest(env.claude, env.state, since=now - 14 * DAY).bytes_read == 0


def test_a_line_longer_than_a_read_is_skipped(env: Env, repo: Path) -> None:
    """One 3 MB line (a big tool result) with 1 MB reads: skipped, the next line counts."""
    folder = repo / ".claude" / "memory"
    now = time.time()
    plant(
        env,
        repo,
        "s.jsonl",
        "x" * (3 * 1024 * 1024),
        tool_row(str(folder / "a.md"), cwd=repo, when=now),
    )
    found = transcripts.harvest(env.claude, env.state, since=now - DAY, chunk_bytes=1024 * 1024)
    assert set(found.evidence_for(folder.resolve())) == {"a.md"}


def test_fifos_and_links_among_transcripts_are_never_opened(
    env: Env, repo: Path, tmp_path: Path
) -> None:
    """A FIFO named *.jsonl does not block a scan; a symlink to a transcript is not read."""
    folder = repo / ".claude" / "memory"
    now = time.time()
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(tool_row(str(folder / "a.md"), cwd=repo, when=now) + "\n")
    project = env.claude / "projects" / slugify(str(repo))
    project.mkdir(parents=True)
    os.mkfifo(project / "fifo.jsonl")
    (project / "link.jsonl").symlink_to(elsewhere)
    found = transcripts.harvest(env.claude, env.state, since=now - DAY)
    assert found.bytes_read == 0 and not found.dirs


def test_a_dry_run_saves_no_offsets(env: Env, cli, repo: Path) -> None:
    """`dream --dry-run` and `explain` write nothing, not even the scan's state."""
    kept = mem(repo, "a.md", "Lived in `src/removed_one.py`.")
    plant(env, repo, "s.jsonl", tool_row(str(kept), cwd=repo, when=time.time()))
    dream(cli, repo, "--dry-run")
    explain(cli, kept)
    offsets = "SELECT name FROM consult_transcript"
    assert not state_rows(env.state, offsets)
    dream(cli, repo)
    assert state_rows(env.state, offsets)
