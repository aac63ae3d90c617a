"""A secret a person took out of a memory by hand leaves no kept version holding it: the next
pass removes each, with a `versions.purged` row, and `history --restore` cannot write it
back. A secret still in a current file keeps its versions."""

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Env, Result, write_memory
from tests.secret_samples import POSITIVES

TOKEN = next(v for k, v, _ in POSITIVES if k == "GitHub token")
STRIPE = next(v for k, v, _ in POSITIVES if k == "Stripe live key")


def _kept_bytes(env: Env) -> bytes:
    """Every byte of the state store's files (state.sqlite, its WAL): a purged secret is in
    none of them, not even in a free page or an old frame."""
    out = b""
    for path in sorted(env.state.glob("state.sqlite*")):
        if path.is_file() and not path.is_symlink():
            out += path.read_bytes()
    return out


def _memory(folder: Path, body: str) -> Path:
    return write_memory(folder, "deploy.md", type_="user", description="deploy", body=body)


def test_kept_versions_of_a_secret_removed_by_hand_are_purged_with_an_audit_row(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    folder = repo / ".claude" / "memory"
    write_memory(folder, "other.md", type_="user", body=f"Stripe: {STRIPE}\n")
    path = _memory(folder, f"Deploy with the bot.\nexport GH_TOKEN={TOKEN}\n")
    assert cli("index", folder).code == 0
    assert cli("dream", repo).code == 0  # the secret is said
    assert TOKEN.encode() in _kept_bytes(env)  # kept, as every version is
    path.write_text(path.read_text().replace(f"export GH_TOKEN={TOKEN}", "export GH_TOKEN=(vault)"))
    assert cli("index", folder).code == 0
    dream = cli("dream", repo)
    assert dream.code == 0, dream.err
    assert TOKEN.encode() not in _kept_bytes(env)
    rows = [r for r in env.audit_rows() if r["event"] == "versions.purged"]
    assert [(r["file"], r["version"], r["kind"]) for r in rows] == [
        ("deploy.md", 1, "GitHub token")
    ]
    assert all(TOKEN not in str(r) for r in env.audit_rows())
    restore = cli("history", path, "--restore", "1")
    assert restore.code != 0
    assert TOKEN not in path.read_text()
    history = json.loads(cli("history", path, "--json").out)["versions"]["versions"]
    assert [v["restorable"] for v in history] == [False, True]
    # A secret still in a current file keeps its versions: other.md's is there, untouched.
    assert STRIPE.encode() in _kept_bytes(env)
    assert (folder / "other.md").read_text().count(STRIPE) == 1


def _state_bytes(env: Env) -> bytes:
    """Every byte of memoryd's state dir (versions, search index, caches)."""
    out = b""
    for path in sorted(env.state.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out += path.read_bytes()
    return out


def _forgettable(folder: Path) -> Path:
    for n in range(6):
        write_memory(folder, f"project_m{n}.md", description=f"memory {n}", body=f"topic{n}\n")
    path = write_memory(
        folder, "project_zorb.md", description="zorb tool", body="Use ZORBLAX-ONE for builds.\n"
    )
    lines = "".join(f"- [m{n}](project_m{n}.md) — memory {n}\n" for n in range(6))
    (folder / "MEMORY.md").write_text(
        f"# app Memory\n\n{lines}- [zorb](project_zorb.md) — zorb tool\n"
    )
    return path


def test_forget_purge_removes_a_memory_from_everything_memoryd_keeps_but_the_trash(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """Two kept versions, the search index and the dream facts cache hold the memory's
    text; after `forget --purge --yes` none of the state dir does, each version has its
    `versions.purged` row, and the trash copy (the person's) still holds it."""
    folder = repo / ".claude" / "memory"
    path = _forgettable(folder)
    assert cli("index", folder).code == 0
    path.write_text(path.read_text().replace("ZORBLAX-ONE", "ZORBLAX-ONE and ZORBLAX-TWO"))
    assert cli("index", folder).code == 0
    assert cli("dream", repo).code == 0  # the facts cache
    assert cli("search", "zorblax", folder).code == 0  # the search index
    assert b"ZORBLAX-TWO" in _state_bytes(env) and b"ZORBLAX-ONE for" in _state_bytes(env)
    refused = cli("forget", "--purge", path)  # no terminal, no --yes: nothing happens
    assert refused.code != 0 and path.exists()
    done = cli("forget", "--purge", "--yes", path)
    assert done.code == 0, done.out + done.err
    assert "purged: 2 kept version(s)" in done.out
    assert not path.exists()
    kept = _state_bytes(env)
    assert b"ZORBLAX" not in kept and b"zorblax" not in kept
    rows = [r for r in env.audit_rows() if r["event"] == "versions.purged"]
    assert sorted((r["file"], r["version"], r["kind"]) for r in rows) == [
        ("project_zorb.md", 1, "forgotten"),
        ("project_zorb.md", 2, "forgotten"),
    ]
    in_trash = list((folder / ".trash").rglob("project_zorb.md*"))
    assert len(in_trash) == 1 and "ZORBLAX-TWO" in in_trash[0].read_text()
    assert cli("search", "zorblax", folder).code == 1
    assert cli("search", "topic3", folder).code == 0  # the rest of the index is intact


def test_forget_without_purge_keeps_the_versions(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    folder = repo / ".claude" / "memory"
    path = _forgettable(folder)
    assert cli("index", folder).code == 0
    assert cli("forget", "--yes", path).code == 0
    assert b"ZORBLAX-ONE" in _kept_bytes(env)
    assert not [r for r in env.audit_rows() if r["event"] == "versions.purged"]


def test_a_secret_never_said_is_purged_and_one_still_held_elsewhere_is_kept(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    """The secret came and went between two dream passes (never said): its version goes all
    the same. A secret taken out of one file but still in another keeps its versions."""
    folder = repo / ".claude" / "memory"
    path = _memory(folder, f"token {TOKEN}\n")
    moved = write_memory(folder, "billing.md", type_="user", body=f"Stripe: {STRIPE}\n")
    write_memory(folder, "billing_copy.md", type_="user", body=f"Stripe again: {STRIPE}\n")
    assert cli("index", folder).code == 0
    path.write_text(path.read_text().replace(TOKEN, "(vault)"))
    moved.write_text(moved.read_text().replace(STRIPE, "(vault)"))
    assert cli("index", folder).code == 0
    assert cli("dream", repo).code == 0
    kept = _kept_bytes(env)
    assert TOKEN.encode() not in kept
    assert STRIPE.encode() in kept
    history = json.loads(cli("history", moved, "--json").out)["versions"]["versions"]
    assert [v["restorable"] for v in history] == [True, True]  # its first version stays
    rows = [r for r in env.audit_rows() if r["event"] == "versions.purged"]
    assert [(r["file"], r["version"]) for r in rows] == [("deploy.md", 1)]
