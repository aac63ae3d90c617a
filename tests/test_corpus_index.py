"""`memoryd index` and `memoryd dirs` over every real folder of the shared corpus (copied)."""

import json
from pathlib import Path

import pytest

from memoryd.indexing.scan import scan_dir
from memoryd.model.index import pointer_targets, split_lines
from tests.conftest import CORPUS, Env, copy_corpus, corpus_memory_dirs, needs_corpus, tree_digest

pytestmark = needs_corpus

REPOS = (
    sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and p.name != "_alt_versions")
    if CORPUS
    else []
)


def _memory_hashes(root: Path) -> dict[str, str]:
    return {
        k: v[0]
        for k, v in tree_digest(root).items()
        if k.endswith(".md") and not Path(k).name.startswith(("MEMORY", "."))
    }


@pytest.mark.parametrize("repo", REPOS)
def test_index_over_a_corpus_repo_is_safe_and_idempotent(
    env: Env, cli, tmp_path: Path, repo: str
) -> None:
    """Index twice: memory files untouched, hand-written lines kept in order, second run no-op."""
    root = copy_corpus(tmp_path / "corpus") / repo
    dirs = corpus_memory_dirs(root)
    originals = {d: (d / "MEMORY.md").read_text(encoding="utf-8") for d in dirs}
    memories_before = _memory_hashes(root)
    before = tree_digest(root)

    first = cli("--config", "/dev/null", "index", "--json", root)
    assert first.code == 0, first.out + first.err
    report = {Path(d["dir"]).resolve(): d for d in json.loads(first.out)["dirs"]}
    assert _memory_hashes(root) == memories_before, "a memory file's bytes changed"

    for folder in dirs:
        entry = report[folder.resolve()]
        original = originals[folder]
        now = (folder / "MEMORY.md").read_text(encoding="utf-8")
        if not entry["managed"]:
            assert entry["status"] == "unmanaged"
            assert now == original
            continue
        archive_path = folder / "MEMORY-ARCHIVE.md"
        archive = archive_path.read_text(encoding="utf-8") if archive_path.exists() else ""
        kept = [ln.content for ln in split_lines(now)]
        lines_after = iter(kept)
        for line in split_lines(original):
            if line.link is None:
                assert any(line.content == a for a in lines_after), (
                    f"{folder}: hand-written line lost or reordered: {line.content!r}"
                )
        original_lines = {ln.content for ln in split_lines(original)}
        surviving = set(kept) | {ln.content for ln in split_lines(archive)}
        removed = set(entry["removed"]) | set(entry["collapsed"])
        for line in split_lines(original):
            if line.content not in surviving:
                assert line.link is not None and line.link.target in removed, (
                    f"{folder}: original line lost: {line.content!r}"
                )
        assert original_lines  # the corpus index is not empty
        memories = set(scan_dir(folder).memories)
        targets = pointer_targets(now) + pointer_targets(archive)
        for name in memories:
            assert targets.count(name) == 1, f"{folder}: {name} indexed {targets.count(name)}x"

    after_first = tree_digest(root)
    second = cli("--config", "/dev/null", "index", root)
    assert second.code == 0, second.out + second.err
    assert tree_digest(root) == after_first, "the second run wrote something"
    changed = {k for k in before if before[k] != after_first.get(k)}
    assert all(
        Path(k).name in ("MEMORY.md", "MEMORY-ARCHIVE.md", ".MEMORY.md.prev")
        for k in changed | (set(after_first) - set(before))
    )


def test_dirs_lists_every_corpus_folder(env: Env, cli, tmp_path: Path) -> None:
    """`memoryd dirs` lists every memory folder of the corpus, the symlinked one included."""
    root = copy_corpus(tmp_path / "corpus")
    before = tree_digest(root)
    result = cli(
        "--config",
        "/dev/null",
        "dirs",
        "--json",
        *[root / r for r in REPOS if any((root / r).iterdir())],
    )
    assert result.code == 0, result.err
    listed = {Path(d["real_path"]) for d in json.loads(result.out)["dirs"]}
    expected = {d.resolve() for d in corpus_memory_dirs(root)}
    assert expected <= listed
    linked = [d for d in json.loads(result.out)["dirs"] if d["via_symlink"]]
    assert linked and linked[0]["real_path"].endswith("agent-memory-src")
    text = cli("--config", "/dev/null", "dirs", root / "y0ngha__siglens")
    assert text.code == 0 and "review-agent" in text.out
    assert tree_digest(root) == before, "`dirs` must not write"
