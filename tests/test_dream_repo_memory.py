"""Memory dirs inside a repo are no evidence about its code: the repo snapshot leaves them out
(files, folders, tokens), and `explain` names the file each found symbol was seen in."""

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memoryd.config import Config
from memoryd.discover.dirs import nested_dirs, repo_dirs
from memoryd.discover.found import Found, MemoryDir
from memoryd.dream import repo as repo_module
from memoryd.dream.refs import RefChecker, Refs, Scope, Status
from memoryd.dream.repo import RepoIndex, SourceTokens
from tests.conftest import CORPUS, Env, Result, needs_corpus, write_memory
from tests.helpers import MEMORY_PLACES, make_repo_of_memory_places, write_file

pytestmark = pytest.mark.repo_tree.with_args(make_repo_of_memory_places)

Cli = Callable[..., Result]


def signature(repo: Path) -> int:
    """What a snapshot of the tree as it is now says of it (names, kinds, source stats)."""
    return RepoIndex.build(repo).signature


def test_no_memory_dir_is_in_the_snapshot(repo: Path) -> None:
    """Files, folders, names and tokens of every memory dir (and trash, and logs) are left
    out; the rest of the tree, `.claude/` itself included, is still there."""
    index = RepoIndex.build(repo)
    assert index.tokens.isdisjoint(MEMORY_PLACES.values())
    assert {"live_helper", "load_settings", "docs_only_token", "permissions"} <= index.tokens
    assert index.files == {
        "src/app.py",
        "src/settings.py",
        "README.md",
        "docs/index.md",
        "notes/plan.md",
        ".claude/settings.json",
    }
    assert {".claude", "notes", "pkg/web/.claude", "tools"} <= index.dirs
    assert "notes/team" not in index.dirs and ".claude/memory" not in index.dirs
    assert "review.md" not in index.by_basename and "MEMORY.md" not in index.by_basename
    assert index.memory_dirs == {
        ".claude/agent-memory", ".claude/agent-memory-local", ".claude/memory", ".claude/logs",
        "notes/team", "pkg/web/.claude/agent-memory", "tools/.trash",
    }  # fmt: skip


def test_every_memory_dir_discovery_finds_is_left_out(repo: Path) -> None:
    """The snapshot's notion of a memory dir covers discovery's: each repo-scope dir it finds
    (and each nested one) is a memory dir of the snapshot or lies inside one."""
    config = Config()
    found: list[Found] = []
    for md in repo_dirs(repo, config):
        assert isinstance(md, MemoryDir), md  # the fixture's dirs all lie inside the repo
        found += [md, *nested_dirs(md, config)]
    assert len(found) >= 4
    index = RepoIndex.build(repo)
    for md in found:
        rel = md.path.relative_to(repo).as_posix()
        assert index.in_memory_dir(rel), rel


def test_a_memory_dir_at_agent_memory_itself_and_as_a_symlink(tmp_path: Path) -> None:
    """`.claude/agent-memory/` holding a MEMORY.md itself, and `.claude/agent-memory` as a
    link to a folder elsewhere in the repo: neither the link nor its target is evidence."""
    root = tmp_path / "app"
    write_file(root, ".claude/agent-memory/MEMORY.md", "- [A](a.md) — flat_dir_token\n")
    other = tmp_path / "other"
    write_file(other, "memory-src/review/review.md", "linked_memory_token\n")
    (other / ".claude").mkdir()
    (other / ".claude/agent-memory").symlink_to("../memory-src", target_is_directory=True)
    flat, linked = RepoIndex.build(root), RepoIndex.build(other)
    assert "flat_dir_token" not in flat.tokens and flat.memory_dirs == {".claude/agent-memory"}
    assert ".claude/agent-memory" not in linked.files
    assert linked.in_memory_dir(".claude/agent-memory/review/review.md")
    # Named as memory, whether the checkout holds them or not (logs are rarely committed).
    assert flat.in_memory_dir(".claude/logs/spawns.jsonl") and flat.in_memory_dir(".claude/memory")
    assert flat.in_memory_dir("src/.trash/2026-01-02/x.md")
    assert not flat.in_memory_dir(".claude/settings.json") and not flat.in_memory_dir("memory/a.md")
    (check,) = RefChecker(flat).check(Refs(paths=(".claude/logs/spawns.jsonl",), symbols=()))
    assert (check.scope, check.status) == (Scope.UNVERIFIABLE, Status.UNCHECKED)
    # The link's target is a plain folder of the tree (discovery does not look for it there).
    assert "linked_memory_token" in linked.tokens


def test_paths_inside_memory_dirs_are_unverifiable(repo: Path) -> None:
    """A path that exists only as memory is neither found nor missing, nor a move target."""
    index = RepoIndex.build(repo)
    refs = Refs(
        paths=(
            ".claude/agent-memory/reviewer/review.md",  # exists, but as memory
            ".claude/agent-memory/reviewer/",
            ".claude/memory/gone.md",
            "notes/team/decisions.md",
            "docs/review.md",  # its basename exists only as memory: no move target
            "notes/plan.md",
            ".claude/settings.json",
        ),
        symbols=(),
    )
    checks = {c.ref: (c.scope, c.status) for c in RefChecker(index).check(refs)}
    unverifiable = (Scope.UNVERIFIABLE, Status.UNCHECKED)
    assert checks == {
        ".claude/agent-memory/reviewer/review.md": unverifiable,
        ".claude/agent-memory/reviewer/": unverifiable,
        ".claude/memory/gone.md": unverifiable,
        "notes/team/decisions.md": unverifiable,
        "docs/review.md": (Scope.VERIFIABLE, Status.MISSING),
        "notes/plan.md": (Scope.VERIFIABLE, Status.FOUND),
        ".claude/settings.json": (Scope.VERIFIABLE, Status.FOUND),
    }


def test_token_file_is_the_first_code_source_then_markup_then_prose(tmp_path: Path) -> None:
    """The file shown for a token: walk order, code before markup and data before prose;
    whole identifiers only."""
    write_file(tmp_path, "README.md", "shared_name prose_only page_name\n")
    write_file(tmp_path, "a/page.html", "<p>shared_name page_name</p>\n")
    write_file(tmp_path, "a/z.py", "shared_name = other_name\n")
    write_file(tmp_path, "b/a.py", "shared_name = 1\nprefixed_name_tail = 2\n")
    write_file(tmp_path, "b/conf.yaml", "page_name: 1\n")
    write_file(tmp_path, "docs/guide.md", "prose_only later_prose\n")
    write_file(tmp_path, "x.txt", "name_tail\n")
    index = RepoIndex.build(tmp_path)
    assert index.token_file("shared_name") == "a/z.py"  # README.md, a/page.html come first
    assert index.token_file("page_name") == "a/page.html"
    assert index.token_file("prose_only") == "README.md"
    assert index.token_file("later_prose") == "docs/guide.md"
    assert index.token_file("name_tail") == "x.txt"  # not b/a.py's prefixed_name_tail
    assert index.token_file("absent_name") is None
    assert index.token_file("héllo") is None


def test_walk_signature_ignores_what_happens_inside_memory_dirs(repo: Path) -> None:
    """A dream pass moving memories to the trash changes no snapshot; a folder that gains a
    MEMORY.md (and so becomes a memory dir) does."""
    before = signature(repo)
    trash = repo / ".claude/memory/.trash/2026-02-03"
    trash.mkdir(parents=True)
    (repo / ".claude/memory/project.md").rename(trash / "project.md")
    write_file(repo, ".claude/agent-memory/reviewer/new.md", "new_memory_token\n")
    assert signature(repo) == before
    write_file(repo, "notes/MEMORY.md", "- [Plan](plan.md) — plan\n")
    changed = RepoIndex.build(repo)
    assert signature(repo) != before and changed.signature != before
    assert "notes" in changed.memory_dirs and "notes/plan.md" not in changed.files


def test_a_token_cache_saved_with_memory_files_in_it_is_not_trusted(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache saved before memory dirs were left out holds their files and tokens: the next
    build sees other sources and derives the tokens again (no format change needed)."""
    monkeypatch.setattr(repo_module, "_RACY_NS", 0)
    old = time.time() - 3600
    for dirpath, _, names in os.walk(repo):
        for name in names:
            os.utime(Path(dirpath) / name, (old, old))
    built = RepoIndex.build(repo)
    assert built.sources is not None
    stamp = next(iter(built.sources.files.values()))[0]
    as_before = SourceTokens(
        built.sources.max_bytes,
        built.sources.tokens | {"agent_memory_token"},
        {
            **built.sources.files,
            ".claude/agent-memory/reviewer/review.md": (stamp, b"agent_memory_token"),
        },
    )
    again = RepoIndex.build(repo, previous=as_before)
    assert "agent_memory_token" not in again.tokens and again == RepoIndex.build(repo)


# --- the dream pass and explain, through the CLI ----------------------------------------------


def _memories(repo: Path) -> Path:
    folder = repo / ".claude" / "agent-memory" / "reviewer"
    write_memory(
        folder,
        "review_helpers.md",
        body=(
            "Review note: the retry logic lives in `src/retry.py` (see `retry_with_backoff()`),\n"
            "and the flow is described in `docs/review_helpers.md`.\n"
        ),
        age_days=60,
    )
    write_memory(
        folder,
        "live_code.md",
        body="Startup goes through `src/app.py`: live_helper() calls load_settings().\n",
        age_days=60,
    )
    return folder


def test_a_repo_scope_memory_citing_vanished_code_is_fully_stale(
    env: Env, cli: Cli, repo: Path
) -> None:
    """The memory's own text names `retry_with_backoff` and a file of its own name: neither
    is evidence, so it is fully stale and the pass would move it; the live one stays fresh."""
    folder = _memories(repo)
    stale = json.loads(cli("explain", "--json", folder / "review_helpers.md").out)
    assert stale["classification"] == "fully_stale"
    assert {r["ref"]: r["status"] for r in stale["refs"]} == {
        "src/retry.py": "missing",
        "docs/review_helpers.md": "missing",
        "retry_with_backoff": "missing",
    }
    assert stale["decision"].startswith("move to trash — stale")
    fresh = json.loads(cli("explain", "--json", folder / "live_code.md").out)
    assert fresh["classification"] == "fresh"
    result = cli("dream", "--dry-run", "--json", folder)
    assert result.code == 0, result.err
    [report] = json.loads(result.out)["dirs"]
    assert report["status"] == "dry_run" and report["counts"]["fresh"] == 1
    assert [(c["file"], c["reason"]) for c in report["planned"]] == [("review_helpers.md", "stale")]


def test_explain_names_the_file_each_symbol_was_found_in(env: Env, cli: Cli, repo: Path) -> None:
    folder = _memories(repo)
    data = json.loads(cli("explain", "--json", folder / "live_code.md").out)
    where = {r["ref"]: r.get("found_in") for r in data["refs"]}
    # README.md also names live_helper, and comes first in the walk: code is shown first.
    assert where == {"src/app.py": None, "live_helper": "src/app.py", "load_settings": "src/app.py"}
    text = cli("explain", folder / "live_code.md").out
    assert "symbol live_helper: verifiable, found in src/app.py" in text
    write_memory(folder, "own.md", body="See `.claude/agent-memory/reviewer/live_code.md`.\n")
    [ref] = json.loads(cli("explain", "--json", folder / "own.md").out)["refs"]
    assert ref["scope"] == "unverifiable" and "memory dir" in ref["note"]


# --- opt-in: a real repo ----------------------------------------------------------------------

ORCHESTKIT = os.environ.get("MEMORYD_ORCHESTKIT")
ORCHESTKIT_COMMIT = "7c4f5aa8453eab32ccfeb2b08b77fe4c31fc6256"
# A copy of a real review memory of that repo, about a helper module its history removed
# (src/hooks/src/lib/monorepo-advisory.ts, deleted in 6a26db042): text from the module's own
# comments, nothing of it left in the tree.
PLANTED = """---
name: review-monorepo-advisory
description: Findings from the review of the shared monorepo sparsePaths advisory (#2335)
metadata:
  type: project
---

## Monorepo advisory review (2026-06-10)
Shared by the WorktreeCreate provisioner (#2335) and the worktree lifecycle logger; extracted
from the logger so both consumers share one implementation.

- `detectMonorepo()` in `src/hooks/src/lib/monorepo-advisory.ts:40` — heuristic: more than
  MONOREPO_DIR_THRESHOLD (15) top-level dirs, or a workspace marker file.
- `getSparsePaths()` reads the worktree sparse-paths key from project settings (CC 2.1.76+).
- `maybeEmitMonorepoAdvisory()` writes the advisory once per worktree.
"""


@pytest.mark.skipif(
    not ORCHESTKIT,
    reason=f"set MEMORYD_ORCHESTKIT to a yonatangross/orchestkit checkout at {ORCHESTKIT_COMMIT}",
)
def test_a_real_repo_flags_the_memory_citing_removed_code_and_no_other(
    env: Env, cli: Cli, tmp_path: Path
) -> None:
    import shutil
    import subprocess

    source = Path(str(ORCHESTKIT))
    head = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert head == ORCHESTKIT_COMMIT, f"MEMORYD_ORCHESTKIT is at {head or 'no commit'}"
    # Hard links: the test only adds a file, and a dry run writes nothing in the tree.
    root = tmp_path / "orchestkit"
    shutil.copytree(
        source, root, symlinks=True, copy_function=os.link, ignore=shutil.ignore_patterns(".git")
    )
    reviewer = root / ".claude/agent-memory/ork-code-quality-reviewer"
    planted = reviewer / "review-monorepo-advisory.md"
    planted.unlink(missing_ok=True)  # a link to the checkout's file, were there one
    planted.write_text(PLANTED, encoding="utf-8")
    then = time.time() - 60 * 86400
    os.utime(planted, (then, then))
    dirs = sorted(
        [*root.glob(".claude/agent-memory/*"), *root.glob("docs/site/.claude/agent-memory/*")]
    )
    result = cli("dream", "--dry-run", "--json", *dirs)
    assert result.code == 0, result.err
    reports = json.loads(result.out)["dirs"]
    assert [(p["file"], p["reason"]) for d in reports for p in d["planned"]] == [
        ("review-monorepo-advisory.md", "stale")
    ]
    # The one other memory flagged names three files that never existed in the repo's history.
    assert [f["file"] for d in reports for f in d["flagged"]] == [
        "release_notes_player_v2_design.md"
    ]
    # The review of PR #835 names two helpers that PR removed: only the memory's own text held
    # them. Each symbol found is shown in a file of the code, never in a memory dir.
    data = json.loads(cli("explain", "--json", reviewer / "review-v7-hooks-pr835.md").out)
    symbols = {r["ref"]: r for r in data["refs"] if r["kind"] == "symbol"}
    assert {s for s, r in symbols.items() if r["status"] == "missing"} == {
        "_splitCompound",
        "normalizeCommandLegacy",
    }
    for ref in symbols.values():
        if ref["status"] == "found":
            assert (root / ref["found_in"]).is_file() and "agent-memory" not in ref["found_in"]
    # The files it reviews are all still there, but two helpers it names are not: kept, flagged.
    assert data["classification"] == "partially_stale"


REVIEW_PR835 = (
    "yonatangross__orchestkit/.claude/agent-memory/ork-code-quality-reviewer/"
    "review-v7-hooks-pr835.md"
)
GONE_IN_PR835 = {"_splitCompound", "normalizeCommandLegacy"}


@needs_corpus
def test_the_real_review_citing_two_removed_helpers_is_partially_stale(
    env: Env, cli: Cli, tmp_path: Path
) -> None:
    """The corpus's review of PR #835 in a tree holding every file it cites and every symbol
    but the two helpers that PR removed (as the repo is at the corpus's commit): flagged, kept."""
    root = tmp_path / "orchestkit"
    folder = root / ".claude/agent-memory/ork-code-quality-reviewer"
    folder.mkdir(parents=True)
    memory = folder / "review-v7-hooks-pr835.md"
    memory.write_bytes((Path(str(CORPUS)) / REVIEW_PR835).read_bytes())
    write_file(root, "src/hooks/package.json", "{}")  # `src` a top-level entry: paths verifiable
    cited = json.loads(cli("explain", "--json", memory).out)["refs"]
    for ref in cited:
        if ref["kind"] == "path" and ref["scope"] == "verifiable":
            write_file(root, ref["ref"], "export {};\n")
    symbols = sorted({r["ref"] for r in cited if r["kind"] == "symbol"})
    assert set(symbols) >= GONE_IN_PR835
    kept = [s for s in symbols if s not in GONE_IN_PR835]
    write_file(root, "src/hooks/src/lib/kept.ts", "".join(f"export const {s} = 1;\n" for s in kept))
    data = json.loads(cli("explain", "--json", memory).out)
    assert {r["ref"] for r in data["refs"] if r["status"] == "missing"} == GONE_IN_PR835
    assert data["classification"] == "partially_stale"
    result = cli("dream", "--dry-run", "--json", folder)
    [report] = json.loads(result.out)["dirs"]
    assert report["planned"] == []
    [flag] = report["flagged"]
    assert flag["file"] == memory.name and set(flag["missing"]) == GONE_IN_PR835
