"""`memoryd dream` over every real folder of the corpus (copied): safe, reversible, idempotent."""

import json
from pathlib import Path

import pytest

from tests.conftest import CORPUS, LEVEL_ORDER, Env, copy_corpus, needs_corpus, tree_digest

pytestmark = needs_corpus

REPOS = (
    sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and p.name != "_alt_versions")
    if CORPUS
    else []
)


@pytest.mark.parametrize("repo", REPOS)
def test_dream_over_a_corpus_repo(env: Env, cli, tmp_path: Path, repo: str) -> None:
    """Dry run writes nothing; a pass moves only what it reports, all restorable; rerun no-op."""
    root = copy_corpus(tmp_path / "corpus") / repo
    if not any(root.iterdir()):
        pytest.skip(f"{repo} holds no files in the corpus")
    before = tree_digest(root)

    dry = cli("--config", "/dev/null", "dream", "--dry-run", "--json", root)
    assert dry.code in (0, 1), dry.err
    assert tree_digest(root) == before, "--dry-run wrote something"
    assert not list(root.rglob(".trash"))
    assert not env.state.exists() and not env.audit_path.exists()
    planned = {
        (d["dir"], p["file"])
        for d in json.loads(dry.out)["dirs"]
        for p in d["planned"]
        if d["status"] not in ("refused", "unmanaged")
    }

    real = cli("--config", "/dev/null", "dream", "--json", root)
    assert real.code in (0, 1), real.err
    report = json.loads(real.out)
    moved = {(d["dir"], c["file"]) for d in report["dirs"] for c in d["changes"]}
    assert moved == planned, "the pass moved something other than what the dry run reported"
    after = tree_digest(root)
    gone = {k for k in before if k not in after}
    assert {Path(k).name for k in gone} == {f for _, f in moved}
    for key in gone:  # every moved file is in a trash folder, byte-identical
        name = Path(key).name
        trashed = [k for k in after if "/.trash/" in f"/{k}" and Path(k).name == name]
        assert any(after[t][0] == before[key][0] for t in trashed), f"{key} not in the trash"
    for key, (sha, _) in before.items():
        if key in after and not Path(key).name.startswith("MEMORY") and key.endswith(".md"):
            assert after[key][0] == sha, f"{key} changed"

    rows_before = list(env.audit_rows())
    second = cli("--config", "/dev/null", "dream", root)
    assert second.code in (0, 1), second.err
    assert tree_digest(root) == after, "a second pass changed the folder"
    new_rows = env.audit_rows()[len(rows_before) :]
    loud = [r for r in new_rows if LEVEL_ORDER[str(r["level"])] > LEVEL_ORDER["debug"]]
    assert loud == [], f"the second pass logged {[r['event'] for r in loud]}"

    for d in report["dirs"]:
        for change in d["changes"]:
            result = cli("--config", "/dev/null", "trash", "restore", change["id"], root)
            assert result.code == 0, result.err
    restored = tree_digest(root)
    for key, (sha, _) in before.items():
        if key.endswith(".md") and not Path(key).name.startswith(("MEMORY", ".")):
            assert restored.get(key, ("",))[0] == sha, f"{key} did not come back intact"
