"""A secret a person took out of a memory by hand leaves no kept version holding it: the next
pass removes each, with a `versions.purged` row, and `history --restore` cannot write it
back. A secret still in a current file keeps its versions."""

from collections.abc import Callable
from pathlib import Path

from tests.conftest import Env, Result, write_memory
from tests.secret_samples import POSITIVES

TOKEN = next(v for k, v, _ in POSITIVES if k == "GitHub token")
STRIPE = next(v for k, v, _ in POSITIVES if k == "Stripe live key")


def _kept_bytes(env: Env) -> bytes:
    """Every byte the version store holds (loose objects, packs, temps)."""
    out = b""
    for path in sorted((env.state / "versions").rglob("*")):
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
    history = cli("history", path, "--json")
    assert '"restorable": false' in history.out
    # A secret still in a current file keeps its versions: other.md's is there, untouched.
    assert STRIPE.encode() in _kept_bytes(env)
    assert (folder / "other.md").read_text().count(STRIPE) == 1
