"""The dream pass on planted cases: each classification, guard, duplicate and contradiction rule."""

import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Env, lock_held_elsewhere, tree_digest, write_memory
from tests.helpers import (
    DAY,
    daemon_pass,
    dream,
    explain,
    filler,
    make_planted_repo,
    mem,
    memory_dir,
    moved,
)

pytestmark = pytest.mark.repo_tree.with_args(make_planted_repo)


def test_each_classification(env: Env, cli, repo: Path) -> None:
    """Evergreen, fresh, partially stale and fully stale, as `explain` and the pass see them."""
    ever = mem(repo, "ever.md", "Prefer small commits and clear messages.")
    fresh = mem(repo, "fresh.md", "The app starts in `src/app.py` and calls handle_request().")
    part = mem(repo, "part.md", "See `src/app.py` and `src/removed.py:12` for the flow.")
    full = mem(repo, "full.md", "Old flow lived in `src/removed.py` and `src/gone.py`.")
    filler(repo)
    assert explain(cli, ever)["classification"] == "evergreen"
    assert explain(cli, fresh)["classification"] == "fresh"
    assert explain(cli, part)["classification"] == "partially_stale"
    assert explain(cli, full)["classification"] == "fully_stale"
    report = dream(cli, repo)
    assert moved(report) == {"full.md": "stale"}
    flagged = {f["file"]: f for f in report["flagged"]}
    assert flagged["part.md"]["missing"] == ["src/removed.py"]
    assert flagged["part.md"]["guard"] is None


def test_a_missing_symbol_with_every_path_found_is_partially_stale(
    env: Env, cli, repo: Path
) -> None:
    """FRESH needs every reference found: a gone symbol beside found paths flags, never moves."""
    gone = mem(repo, "gone_sym.md", "`src/app.py` calls `_splitCompound()` and handle_request().")
    only_sym = mem(repo, "only_sym.md", "The parser calls `_splitCompound()` for compounds.")
    filler(repo)
    data = explain(cli, gone)
    assert data["classification"] == "partially_stale"
    assert data["decision"] == "keep — partially stale: flagged for review"
    assert explain(cli, only_sym)["classification"] == "evergreen"  # symbols alone: never stale
    report = dream(cli, repo)
    assert moved(report) == {}
    flagged = {f["file"]: f for f in report["flagged"]}
    assert flagged["gone_sym.md"]["missing"] == ["_splitCompound"]
    assert "only_sym.md" not in flagged


def test_unverifiable_references_never_count(env: Env, cli, repo: Path) -> None:
    """~/, absolute, $VAR, URL and unknown-first-segment paths are recorded, never counted."""
    body = (
        "Config in `~/.claude/settings.json`, logs at `/var/app/x.py`, `$HOME/y.py`, "
        "https://example.com/z.py and `vendor/thing/w.py`."
    )
    path = mem(repo, "unv.md", body)
    data = explain(cli, path)
    scopes = {r["ref"]: r["scope"] for r in data["refs"] if r["kind"] == "path"}
    assert set(scopes.values()) == {"unverifiable"}
    assert data["classification"] == "evergreen"


def test_moved_file_counts_as_found(env: Env, cli, repo: Path) -> None:
    """A missing path whose basename exists elsewhere in the repo is MOVED, not missing."""
    path = mem(repo, "moved.md", "The helper is in `lib/moved_here.py`.")
    data = explain(cli, path)
    [ref] = [r for r in data["refs"] if r["kind"] == "path"]
    assert ref["status"] == "moved" and ref["moved_to"] == "lib/deep/moved_here.py"
    assert data["classification"] == "fresh"


_DAYS_AGO_3 = (datetime.date.today() - datetime.timedelta(days=3)).isoformat()


@pytest.mark.parametrize(
    ("guard", "kwargs"),
    [
        ("type_user", {"type_": "user"}),
        ("type_feedback_or_reference", {"type_": "feedback"}),
        ("type_feedback_or_reference", {"type_": "reference"}),
        ("recently_changed", {"age": 3}),
        ("recently_changed", {"extra": "modified: 2099-01-01\n"}),
        # Verified three days ago, modified long before: the newer date counts.
        ("recently_changed", {"extra": f"modified: 2024-01-01\nlast_verified: {_DAYS_AGO_3}\n"}),
        ("recently_changed", {"extra": f"last_verified: {_DAYS_AGO_3}\nmodified: 2024-01-01\n"}),
        ("prohibition", {"body_extra": " Do not run it on Fridays."}),
    ],
)
def test_each_guard_keeps_a_fully_stale_memory(
    env: Env, cli, repo: Path, guard: str, kwargs: dict[str, Any]
) -> None:
    """A fully stale memory under a guard stays, is flagged with the guard, and is logged."""
    body = "Old flow lived in `src/removed.py`." + kwargs.pop("body_extra", "")
    mem(repo, "stale.md", body, **kwargs)
    filler(repo)
    report = dream(cli, repo)
    assert moved(report) == {}
    flag = {f["file"]: f for f in report["flagged"]}["stale.md"]
    assert flag["guard"] == guard
    kept = [r for r in env.audit_rows() if r["event"] == "dream.kept"]
    assert kept and kept[0]["guard"] == guard and kept[0]["file"] == "stale.md"


def test_consult_log_inside_and_outside_the_window(env: Env, cli, repo: Path) -> None:
    """A consult within 14 days keeps a stale memory; an older one does not."""
    logs = repo / ".claude" / "logs"
    logs.mkdir(parents=True)
    now = time.time()
    rows: list[dict[str, object] | str] = [
        {"ts": now - 2 * DAY, "names": ["payment_flow"]},
        {"ts": now - 30 * DAY, "names": ["billing_notes"]},
        {"ts": now - 1 * DAY, "query": "how does the refund handling work"},
        "torn",
    ]
    (logs / "memory-consult.jsonl").write_text(
        "\n".join(json.dumps(r) if isinstance(r, dict) else r for r in rows)
    )
    bodies = {
        "payment_flow.md": "Payments go through `src/removed_payments.py` nightly.",
        "billing_notes.md": "Invoices were rendered by `src/removed_invoices.py` once.",
        "refund_handling.md": "Refund approvals sit in `src/removed_refunds.py` queues.",
    }
    for name, body in bodies.items():
        mem(repo, name, body)
    filler(repo)
    report = dream(cli, repo)
    assert moved(report) == {"billing_notes.md": "stale"}
    guards = {f["file"]: f["guard"] for f in report["flagged"]}
    assert guards == {"payment_flow.md": "consulted", "refund_handling.md": "consulted"}


def test_unreadable_consult_log_means_consulted(env: Env, cli, repo: Path) -> None:
    """A consult log that exists but cannot be read protects every memory (unsure = kept)."""
    logs = repo / ".claude" / "logs"
    logs.mkdir(parents=True)
    os.mkfifo(logs / "memory-consult.jsonl")  # exists, cannot be read as a log
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    report = dream(cli, repo)
    assert moved(report) == {}
    assert report["flagged"][0]["guard"] == "consulted"


DEPLOY = (
    "Deploy staging by running the release script with the canary flag enabled first then "
    "promote production after verification checks complete"
)


def test_duplicates_newer_wins_and_near_duplicate_kept(env: Env, cli, repo: Path) -> None:
    """Overlap >= 0.6 in one type: the older moves with duplicate_of; below 0.6 both stay."""
    mem(repo, "old.md", DEPLOY + " successfully", age=50)
    mem(repo, "new.md", DEPLOY + " fine", age=20)
    near = (
        "Deploy staging by running the release script then wait for the monitoring "
        "dashboards alerts pager rotation escalation policy documentation review"
    )
    mem(repo, "near.md", near, age=60)
    mem(repo, "other_type.md", DEPLOY + " successfully", type_="reference", age=70)
    filler(repo)
    report = dream(cli, repo)
    assert moved(report) == {"old.md": "duplicate"}
    [change] = report["changes"]
    assert change["duplicate_of"] == "new.md"
    listed = json.loads(cli("trash", "list", "--json", repo / ".claude" / "memory").out)["trash"]
    assert listed[0]["duplicate_of"] == "new.md"


def test_a_link_to_a_memory_the_pass_moves_is_reported_dangling(env: Env, cli, repo: Path) -> None:
    """`[[deploy-staging-old]]` in release.md after the pass moved that memory, and a link that
    never named a memory: both listed (dry run and pass, text and JSON); a link by frontmatter
    name, file name or `name|label` that still resolves is not."""
    mem(repo, "deploy-staging-old.md", DEPLOY + " successfully", age=50)
    mem(repo, "deploy-staging.md", DEPLOY + " fine", age=20)
    mem(repo, "release.md", "Before a release see [[deploy-staging-old]], [[Deploy-Staging]], "
        "[[filler_0|the anchor note]] and [[never-written]].", age=30)  # fmt: skip
    filler(repo)
    expected = [
        {
            "file": "release.md",
            "link": "deploy-staging-old",
            "why": "deploy-staging-old.md is moved to the trash by this pass",
        },
        {
            "file": "release.md",
            "link": "never-written",
            "why": "no memory of this dir has that name or file name",
        },
    ]
    assert dream(cli, repo, "--dry-run")["dangling_links"] == expected
    text = cli("dream", "--dry-run", repo / ".claude" / "memory").out
    assert "Dangling links" in text and "release.md: [[deploy-staging-old]] — " in text
    report = dream(cli, repo)
    assert moved(report) == {"deploy-staging-old.md": "duplicate"}
    assert report["dangling_links"] == expected
    # The next pass moves nothing: the link still names no memory, and is said so.
    [gone, never] = dream(cli, repo)["dangling_links"]
    assert gone["link"] == "deploy-staging-old" and "no memory" in gone["why"]
    assert never["link"] == "never-written"
    folder = repo / ".claude" / "memory"
    [row] = json.loads(cli("dirs", "--json", folder).out)["dirs"]
    assert row["dangling_links"] == [gone, never]
    text = cli("dirs", folder).out
    assert "dangling link: release.md: [[deploy-staging-old]] — no memory" in text
    assert "dangling link: release.md: [[never-written]] — no memory" in text


def test_user_type_duplicate_is_merged(env: Env, cli, repo: Path) -> None:
    """Guards protect stale memories only: a user-type duplicate still goes (the newer keeps it)."""
    mem(repo, "me_old.md", DEPLOY + " successfully", type_="user", age=50)
    mem(repo, "me_new.md", DEPLOY + " fine", type_="user", age=10)
    filler(repo)
    assert moved(dream(cli, repo)) == {"me_old.md": "duplicate"}


# Ten shared significant words; with `use` and the object, two memories of 21 words each
# share 12 (same object, 0.57) or 11 (different objects, 0.52): the contradiction band.
BASE = "installing packages across monorepo workspace lockfile registry cache offline mirror"
OWN_A = "alpha bravo charlie delta echo foxtrot golf hotel india"
OWN_B = "juliet kilo lima mike november oscar papa quebec romeo"


def test_contradiction_on_the_same_object_is_resolved(env: Env, cli, repo: Path) -> None:
    """`always use pnpm` vs `never use pnpm` at overlap in [0.4, 0.6): the older is superseded."""
    mem(repo, "pkg_old.md", f"Always use pnpm {BASE} {OWN_A}", age=50)
    mem(repo, "pkg_new.md", f"Never use pnpm {BASE} {OWN_B}", age=5)
    filler(repo)
    data = explain(cli, repo / ".claude" / "memory" / "pkg_old.md")
    [sim] = data["similar"]
    assert 0.4 <= sim["overlap"] < 0.6 and sim["opposing_directives"] == ["pnpm"]
    report = dream(cli, repo)
    assert moved(report) == {"pkg_old.md": "contradiction"}
    assert report["changes"][0]["superseded_by"] == "pkg_new.md"


def test_opposing_directives_are_a_contradiction_whatever_the_overlap(
    env: Env, cli, repo: Path
) -> None:
    """`always use uv` vs `never use uv` sharing 70% of their words: superseded, no duplicate."""
    shared = "installing python packages across monorepo workspace lockfile"
    mem(repo, "uv_old.md", f"Always use uv {shared} alpha bravo", age=50)
    mem(repo, "uv_new.md", f"Never use uv {shared} charlie delta", age=5)
    filler(repo)
    data = explain(cli, repo / ".claude" / "memory" / "uv_old.md")
    [sim] = data["similar"]
    # `uv` has two letters, no significant word: the object is the next one (DESIGN §4.7).
    assert sim["overlap"] >= 0.6 and sim["opposing_directives"] == ["installing"]
    assert sim["kind"] == "contradiction"
    assert data["decision"].startswith("move to trash — contradiction")
    report = dream(cli, repo)
    assert moved(report) == {"uv_old.md": "contradiction"}
    [change] = report["changes"]
    assert change["superseded_by"] == "uv_new.md" and change.get("duplicate_of") is None


def test_opposite_directives_on_different_objects_are_not_a_contradiction(
    env: Env, cli, repo: Path
) -> None:
    """`always use pnpm` vs `never use yarn` oppose nothing: both stay."""
    mem(repo, "pkg_old.md", f"Always use pnpm {BASE} {OWN_A}", age=50)
    mem(repo, "pkg_new.md", f"Never use yarn {BASE} {OWN_B}", age=5)
    filler(repo)
    assert moved(dream(cli, repo)) == {}


def test_circuit_breaker_moves_nothing_and_reports_the_plan(env: Env, cli, repo: Path) -> None:
    """More than max(3, 20%) planned moves: nothing moves, dream.refused, the plan printed."""
    for i in range(5):
        mem(repo, f"stale_{i}.md", f"Lived in `src/removed_{i}.py`.")
    mem(repo, "keep.md", "Nothing to check here.")
    before = tree_digest(repo / ".claude" / "memory")
    result = cli("dream", repo / ".claude" / "memory")
    assert result.code == 1
    assert "Plan (not applied" in result.out and "stale_4.md" in result.out
    after = tree_digest(repo / ".claude" / "memory")
    assert {k: v for k, v in after.items() if k.startswith("stale")} == {
        k: v for k, v in before.items() if k.startswith("stale")
    }
    refused = [r for r in env.audit_rows() if r["event"] == "dream.refused"]
    assert refused and refused[0]["would_move"] == 5 and refused[0]["limit"] == 3


def test_modified_since_plan_is_skipped(env: Env, cli, repo: Path, monkeypatch) -> None:
    """A file that changes between plan and apply is not moved, and that is reported."""
    from memoryd.trash import journal

    target = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    real_begin = journal.begin

    def agent_edits_meanwhile(*args, **kwargs):
        target.write_text(target.read_text() + "\nA new line from the agent.\n")
        return real_begin(*args, **kwargs)

    monkeypatch.setattr(journal, "begin", agent_edits_meanwhile)
    report = dream(cli, repo)
    assert moved(report) == {}
    assert report["skipped_moves"] == [{"file": "stale.md", "why": "modified since plan"}]
    assert target.exists()
    assert [r["why"] for r in env.audit_rows() if r["event"] == "dream.move_skipped"] == [
        "modified since plan"
    ]


def test_fresh_consolidate_lock_skips_the_pass(env: Env, cli, repo: Path) -> None:
    """Claude Code's own fresh .consolidate-lock, naming a live PID (this process), means the
    pass is skipped and logged."""
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    (repo / ".claude" / "memory" / ".consolidate-lock").write_text(str(os.getpid()))
    report = dream(cli, repo)
    assert report["status"] == "skipped" and moved(report) == {}
    assert [r["event"] for r in env.audit_rows()].count("dream.skipped") == 1


def test_moves_update_the_index_and_restore_brings_the_line_back(env: Env, cli, repo: Path) -> None:
    """A moved memory's pointer leaves MEMORY.md; restore brings file and hand-written line back."""
    folder = repo / ".claude" / "memory"
    stale = mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    assert cli("index", folder).code == 0
    index = folder / "MEMORY.md"
    index.write_text(
        index.read_text().replace("- [stale](stale.md) — d", "- [My own words about it](stale.md)")
    )
    original = stale.read_bytes()
    report = dream(cli, repo)
    assert moved(report) == {"stale.md": "stale"}
    assert "stale.md" not in index.read_text()
    assert cli("index", "--check", folder).code == 0
    [change] = report["changes"]
    completed = [r for r in env.audit_rows() if r["event"] == "dream.completed"]
    assert [(r["saved"], r["deleted"], r["kept"]) for r in completed] == [(12, 1, 0)]
    assert completed[0]["flagged"] >= 0 and completed[0]["duration_ms"] >= 0
    assert cli("trash", "restore", change["id"]).code == 0
    assert stale.read_bytes() == original
    assert "- [My own words about it](stale.md)\n" in index.read_text()
    restored = [r for r in env.audit_rows() if r["event"] == "trash.restored"]
    assert [(r["file"], r["id"], r["as"]) for r in restored] == [
        ("stale.md", change["id"], "stale.md")
    ]
    assert cli("trash", "restore", change["id"]).code == 1  # once only
    assert cli("trash", "restore", "0000000000").code == 1  # unknown ids are refused


def test_restore_under_a_taken_name(env: Env, cli, repo: Path) -> None:
    """If the name is taken again, the file comes back as <stem>.restored-1.md."""
    folder = repo / ".claude" / "memory"
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    [change] = dream(cli, repo)["changes"]
    write_memory(folder, "stale.md", description="a new one")
    assert cli("trash", "restore", change["id"]).code == 0
    assert (folder / "stale.restored-1.md").read_text().endswith("Lived in `src/removed.py`.\n")
    assert "stale.restored-1.md" in (folder / "MEMORY.md").read_text()


def test_unmanaged_dir_reports_and_moves_nothing(env: Env, cli, repo: Path) -> None:
    """In a dir whose index memoryd does not manage, the pass moves nothing."""
    folder = repo / ".claude" / "memory"
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    (folder / "MEMORY.md").write_text("# Hand-organised\n<!-- memoryd: off -->\n")
    before = tree_digest(folder)
    report = dream(cli, repo)
    assert report["status"] == "unmanaged" and moved(report) == {}
    assert [p["file"] for p in report["planned"]] == ["stale.md"]
    assert tree_digest(folder) == before
    # Said once, as an index pass says it; the dry run and explain promise no move either.
    rows = [r for r in env.audit_rows() if r["event"] == "index.unmanaged"]
    assert len(rows) == 1 and "memoryd: off" in rows[0]["reason"]
    dream(cli, repo)
    assert [r["event"] for r in env.audit_rows()].count("index.unmanaged") == 1
    dry = cli("dream", "--dry-run", folder)
    assert "Would move: stale.md" not in dry.out
    assert "Would move, if memoryd managed this index (nothing is moved):" in dry.out
    told = explain(cli, folder / "stale.md")
    assert told["decision"].startswith("keep — it would move") and "not manage" in told["decision"]
    assert told["index"].startswith("not managed")
    assert tree_digest(folder) == before


def test_a_dir_that_vanishes_before_the_pass_is_a_failed_pass(
    env: Env, cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever stops a pass before its inventory (the dir gone, the repo unreadable) ends in
    `dream.failed` with the error, and the other dirs of the run still get their pass."""
    from memoryd.dream import read as read_module

    mem(repo, "a.md", "Lived in `src/removed.py`.")
    other = repo.parent / "other"
    write_memory(other, "b.md", body="Plain words.\n")

    def gone(rt, md):
        if md.path.name == "memory":
            raise FileNotFoundError(2, "No such file or directory", str(md.path))
        return real(rt, md)

    real = read_module.probe_index
    monkeypatch.setattr(read_module, "probe_index", gone)
    result = cli("dream", "--json", repo / ".claude" / "memory", other)
    assert result.code == 1, result.err
    statuses = {Path(d["dir"]).name: d["status"] for d in json.loads(result.out)["dirs"]}
    assert statuses == {"memory": "failed", "other": "completed"}
    failed = [r for r in env.audit_rows() if r["event"] == "dream.failed"]
    assert len(failed) == 1 and "No such file" in failed[0]["error"]
    assert {"saved", "deleted", "flagged", "kept", "duration_ms"} <= failed[0].keys()


def test_dry_run_prints_would_move_and_writes_nothing(env: Env, cli, repo: Path) -> None:
    """`--dry-run` prints [DRY RUN] Would move lines and writes nothing anywhere."""
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    before = tree_digest(repo)
    result = cli("dream", "--dry-run", repo / ".claude" / "memory")
    assert result.code == 0
    assert "[DRY RUN] Would move: stale.md" in result.out
    assert tree_digest(repo) == before
    assert not env.state.exists() and not env.audit_path.exists()


def test_no_repo_root_means_nothing_is_stale(env: Env, cli, tmp_path: Path) -> None:
    """Without a repo root every reference is unverifiable and nothing is pruned as stale."""
    folder = tmp_path / "loose"
    write_memory(folder, "a.md", body="Lived in `src/removed.py`.\n")
    result = cli("dream", "--json", folder)
    report = json.loads(result.out)["dirs"][0]
    assert report["changes"] == [] and "no repo root" in report["repo_note"]


def test_repo_root_option_overrides(env: Env, cli, repo: Path, tmp_path: Path) -> None:
    """`--repo-root` checks references against the given tree instead."""
    folder = tmp_path / "loose"
    write_memory(folder, "a.md", body="Lived in `src/removed.py` and `src/gone.py`.\n")
    for word in ("apples", "bridges", "copper", "dunes"):
        write_memory(folder, f"{word}.md", body=f"{word}\n")
    result = cli("dream", "--json", "--repo-root", repo, folder)
    report = json.loads(result.out)["dirs"][0]
    assert [c["file"] for c in report["changes"]] == ["a.md"]


def test_promotion_candidates_count_projects_not_dirs(env: Env, cli, tmp_path: Path) -> None:
    """A topic in the indexes of 2+ other *projects* is listed; two agent dirs of one repo are
    one project; other projects' dirs count when the run names one dir; `promotion:
    declined` opts out; the count is in the totals."""
    repo = tmp_path / "x"
    (repo / "src").mkdir(parents=True)
    a, b = repo / ".claude" / "agent-memory" / "a", repo / ".claude" / "agent-memory" / "b"
    for folder in (a, b):
        write_memory(folder, "testing.md", body="Run the suite before pushing.\n")
        assert cli("index", folder).code == 0
    report = json.loads(cli("dream", "--json", a, b).out)
    assert report["promotion_candidates"] == [] and report["totals"]["promotion_candidates"] == 0
    skipped = "needs memory dirs of 3 or more projects; found 1"
    assert any(skipped in line for line in report["housekeeping"])
    for slug, filename in (("p1", "feedback_testing.md"), ("p2", "project-testing.md")):
        folder = env.home / ".claude" / "projects" / slug / "memory"
        write_memory(folder, filename, body="Tests first.\n")
        write_memory(folder, "deploy.md", body="Deploy on Tuesdays.\n")
        assert cli("index", folder).code == 0
    declined = write_memory(a, "deploy.md", body="Deploy from main.\n")
    declined.write_text(
        declined.read_text().replace("type: project\n", "type: project\npromotion: declined\n")
    )
    assert cli("index", a).code == 0
    report = json.loads(cli("dream", "--json", a).out)  # one dir named; the others discovered
    assert report["promotion_candidates"] == [
        {"dir": str(a), "file": "testing.md", "other_projects": 2}
    ]
    assert report["totals"]["promotion_candidates"] == 1
    text = cli("dream", a).out
    assert "promotion candidates" in text and "testing.md (topic in 2 other projects)" in text


def test_a_dry_run_counts_what_the_pass_would_do(env: Env, cli, repo: Path) -> None:
    mem(repo, "stale.md", "Lived in `src/removed.py`.")
    filler(repo)
    dry = json.loads(cli("dream", "--json", "--dry-run", repo / ".claude" / "memory").out)
    real = json.loads(cli("dream", "--json", repo / ".claude" / "memory").out)
    assert dry["totals"]["stale_pruned"] == real["totals"]["stale_pruned"] == 1
    assert dry["totals"]["surviving"] == real["totals"]["surviving"] == 12


def test_a_dir_another_process_works_on_is_left_to_it(
    env: Env, cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another memoryd holds a dir, the daemon's index pass says "busy" (and when to
    look again), its dream pass is skipped and said, and recovery leaves that pass's journal
    alone."""

    from memoryd.dream.repocache import RepoCache
    from memoryd.dream.run import dream_dir
    from memoryd.trash import journal
    from memoryd.trash.recovery import recover

    folder = repo / ".claude" / "memory"
    mem(repo, "a.md", "Plain words.")
    rt = env.runtime()
    md = memory_dir(folder)
    live = journal.begin(rt.paths.state_dir, "p1", md.real_path, [])
    with lock_held_elsewhere(rt.paths.state_dir, md.real_path):
        outcome = daemon_pass(rt, md)
        assert outcome.status == "busy" and outcome.retry_after is not None
        assert not (folder / "MEMORY.md").exists()
        result = dream_dir(rt, md, repos=RepoCache(), trigger="pile-up")  # the daemon's: no wait
        assert result.status == "skipped"
        assert recover(rt) == [] and journal.pending(rt.paths.state_dir) == [live.pass_id]
    skipped = [r for r in env.audit_rows() if r["event"] == "dream.skipped"]
    assert [r["why"] for r in skipped] == ["another memoryd process is working on this dir"]
    assert daemon_pass(rt, md).status == "updated"


def test_a_project_dir_no_transcript_tells_of_is_unknown_not_checked(
    env: Env, cli, tmp_path: Path
) -> None:
    """Of four project memory dirs, one's folder exists, one's is gone and two have no
    transcript naming theirs: the hint lists the gone one and says the two are unknown (why,
    which), never that all four were checked."""
    from memoryd.discover.slugs import slugify

    here, gone = tmp_path / "here", tmp_path / "gone"
    here.mkdir()
    for cwd in (here, gone, tmp_path / "quiet1", tmp_path / "quiet2"):
        project = env.claude / "projects" / slugify(str(cwd))
        write_memory(project / "memory", "note.md")
        if cwd.name in ("here", "gone"):
            (project / "s.jsonl").write_text(json.dumps({"cwd": str(cwd)}) + "\n")
    text = cli("dream", "--dry-run").out
    [line] = [x.strip() for x in text.splitlines() if "orphaned project dirs" in x]
    assert line.startswith("orphaned project dirs (hint only, nothing removed): ")
    assert f"{slugify(str(gone))}/memory (the project folder {gone} no longer exists)" in line
    assert "; unknown for 2, their project folder not known: " in line
    assert line.count("no session transcripts") == 2 and "quiet" in line
    (env.claude / "projects" / slugify(str(gone))).rename(tmp_path / "aside")
    [line] = [x.strip() for x in cli("dream", "--dry-run").out.splitlines() if "orphaned" in x]
    assert line.startswith("orphaned project dirs: none (1 checked); unknown for 2")
