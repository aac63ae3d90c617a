"""A secret in a memory reaches no output and no file memoryd keeps: `show`, `search`, their
--json, the MCP tools, the search index's file on disk, `history --diff`. All pass through
the one masking step (memoryd.model.secrets.mask)."""

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Env, Result, write_memory
from tests.secret_samples import POSITIVES

KINDS = ("GitHub token", "AWS access key id", "AWS secret access key", "Anthropic API key")


def _values() -> dict[str, str]:
    """kind -> the planted value of that kind (the first of each), and an OpenSSH key."""
    out: dict[str, str] = {}
    for kind, value, _ in POSITIVES:
        if kind in KINDS:
            out.setdefault(kind, value)
    out["private key"] = next(v for k, v, _ in POSITIVES if "OPENSSH" in v and k == "private key")
    return out


def _pieces(value: str) -> list[str]:
    """What must not appear: the value, and each line of a multi-line one (a key's rows)."""
    return [value] + [line for line in value.splitlines()[1:-1] if len(line) > 20]


def _plant(folder: Path) -> dict[str, str]:
    values = _values()
    body = (
        "Deploy credentials for the staging cluster.\n"
        f"export GH_TOKEN={values['GitHub token']}\n"
        f"AWS pair: {values['AWS access key id']} with\n"
        f"aws_secret_access_key = {values['AWS secret access key']}\n"
        f"Claude key {values['Anthropic API key']} for the bot.\n"
        f"Bastion key:\n{values['private key']}\n"
    )
    write_memory(folder, "staging_creds.md", description="staging deploy credentials", body=body)
    write_memory(folder, "other.md", description="unrelated", body="Nothing secret here.\n")
    return values


def _assert_clean(text: str, values: dict[str, str], where: str) -> None:
    for kind, value in values.items():
        for piece in _pieces(value):
            assert piece not in text, f"{kind} shown in {where}"


@pytest.fixture
def folder(env: Env) -> Path:
    return env.claude / "projects" / "-p" / "memory"


def test_show_and_search_mask_every_secret_in_text_and_json(
    env: Env, folder: Path, cli: Callable[..., Result]
) -> None:
    values = _plant(folder)
    path = folder / "staging_creds.md"
    outputs = {
        "show": cli("show", path),
        "show --json": cli("show", path, "--json"),
        "search": cli("search", "staging credentials"),
        "search --json": cli("search", "staging credentials", "--json"),
        "search for a word beside a key": cli("search", "bastion", "--json"),
    }
    for where, result in outputs.items():
        assert result.code == 0, (where, result.err)
        _assert_clean(result.out + result.err, values, where)
    shown = json.loads(outputs["show --json"].out)
    for kind in (*KINDS, "private key"):
        assert f"[secret: {kind}]" in shown["text"]
    assert "Deploy credentials for the staging cluster." in shown["text"]
    found = json.loads(outputs["search --json"].out)["results"]
    assert [Path(r["file"]).name for r in found] == ["staging_creds.md"]
    assert any(f.startswith("holds a secret (line ") for f in found[0]["flags"])
    assert "holds a secret" in outputs["search"].out


def test_the_search_index_file_on_disk_holds_no_secret_and_zeroes_what_it_frees(
    env: Env, folder: Path, cli: Callable[..., Result]
) -> None:
    """The index, its WAL and shared memory hold the masked text only; a memory's text
    changed or forgotten leaves nothing behind in a free page (secure_delete)."""
    import sqlite3

    values = _plant(folder)
    assert cli("search", "staging").code == 0
    files = sorted((env.state / "recall").glob("*.sqlite*"))
    assert files
    on_disk = b"".join(p.read_bytes() for p in files)
    assert b"Deploy credentials for the staging cluster" in on_disk  # the text is there...
    for value in values.values():
        for piece in _pieces(value):
            assert piece.encode() not in on_disk  # ... masked
    # A body over a page: its text goes to overflow pages, freed when the memory goes. The
    # index's tokens are lowered: the marker as written is only in the text the index holds.
    body = "".join(f"ZQXWVUTS-{n} line of text to forget.\n" for n in range(600))
    (folder / "other.md").write_text(
        f"---\nname: other\ndescription: unrelated\ntype: project\n---\n{body}"
    )
    assert cli("search", "zqxwvuts").code == 0
    (folder / "other.md").unlink()
    assert cli("search", "staging").code == 0
    db = next(p for p in files if p.suffix == ".sqlite")
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.close()
    assert b"ZQXWVUTS" not in db.read_bytes()


@pytest.mark.timeout(120)
def test_the_mcp_tools_give_the_model_masked_text_and_flag_the_secret(
    env: Env, folder: Path
) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is not installed")
    from tests.helpers import mcp_drive, mcp_server, mcp_structured

    values = _plant(folder)
    calls = [
        ("search_memories", {"query": "staging credentials"}),
        ("read_memory", {"file": str(folder / "staging_creds.md")}),
        ("read_memory", {"file": "staging_creds"}),
    ]
    _, _, answers = asyncio.run(mcp_drive(mcp_server(env, folder), calls))
    found = mcp_structured(answers[0])["results"]
    assert [Path(r["file"]).name for r in found] == ["staging_creds.md"]
    assert any(f.startswith("holds a secret (line ") for f in found[0]["flags"])
    for number, answer in enumerate(answers):
        data = mcp_structured(answer)
        _assert_clean(json.dumps(data), values, calls[number][0])
    read = mcp_structured(answers[1])
    assert "[secret: GitHub token]" in read["text"]
    assert any(f.startswith("holds a secret") for f in read["memory"]["flags"])


def test_history_diff_of_a_kept_version_masks_its_secrets(
    env: Env, folder: Path, cli: Callable[..., Result]
) -> None:
    values = _plant(folder)
    path = folder / "staging_creds.md"
    assert cli("index", folder).code == 0
    path.write_text(path.read_text().replace("Deploy credentials", "Credentials"))
    assert cli("index", folder).code == 0
    diff = cli("history", path, "--diff", "1")
    assert diff.code == 0, diff.err
    assert "-Deploy credentials" in diff.out
    _assert_clean(diff.out, values, "history --diff")


def test_a_secret_in_a_memorys_name_or_description_is_masked_in_the_search_index(
    env: Env, folder: Path, cli: Callable[..., Result]
) -> None:
    """The search index keeps the name and description it shows as masked as the body."""
    values = _values()
    token = values["GitHub token"]
    write_memory(folder, "ci_token.md", name=f"ci token {token}",
                 description=f"the CI token is {values['Anthropic API key']}",
                 body="Rotate it monthly.\n")  # fmt: skip
    found = json.loads(cli("search", "rotate", "--json").out)["results"]
    assert found and token not in json.dumps(found)
    on_disk = b"".join(p.read_bytes() for p in sorted((env.state / "recall").glob("*.sqlite*")))
    assert b"Rotate it monthly" in on_disk
    for value in (token, values["Anthropic API key"]):
        assert value.encode() not in on_disk
