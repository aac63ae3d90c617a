"""JSONL record stores in `search` and `recall`: only active records (not superseded,
confirmed within 90 days), by the store's scope semantics (`--scope`, exact entries); the
store is never written."""

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.conftest import Env, Result


def _iso(days_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days_ago)).isoformat().replace("+00:00", "Z")


def _rec(rid: str, scope: list[str], rule: str, **over: Any) -> str:
    row = {
        "id": rid,
        "scope": scope,
        "rule": rule,
        "because": f"because {rid} broke once",
        "evidence": f"PR {rid}",
        "createdAt": _iso(200),
        "lastConfirmedAt": _iso(3),
        **over,
    }
    return json.dumps(row)


def _plant(repo: Path) -> Path:
    store = repo / ".agent" / "memory.jsonl"
    store.parent.mkdir()
    lines = [
        _rec("r-deploy", ["deploy", "ci"], "Run the deploys from the release branch only"),
        _rec("r-old", ["deploy"], "Deploy from main", supersededBy="r-deploy"),
        _rec("r-stale", ["deploy"], "Deploy on Fridays", lastConfirmedAt=_iso(120)),
        _rec("r-api", ["api"], "Version every api route"),
        "{broken",
    ]
    store.write_text("\n".join(lines) + "\n")
    return store


def test_search_serves_active_records_by_scope(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    store = _plant(repo)
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    found = json.loads(cli("search", "deploys", str(repo), "--json").out)["results"]
    records = [r for r in found if r["tier"] == "record"]
    assert [r["name"] for r in records] == ["r-deploy"]  # not superseded, not unconfirmed
    assert records[0]["file"] == f"{store}:1" and records[0]["type"] == "record"
    scoped = json.loads(cli("search", "deploy", str(repo), "--scope", "api", "--json").out)
    assert not [r for r in scoped["results"] if r["tier"] == "record"]  # scope shares nothing
    typed = json.loads(cli("search", "deploy", str(repo), "--type", "user", "--json").out)
    assert not [r for r in typed["results"] if r["tier"] == "record"]
    text = cli("search", "deploys", str(repo)).out
    assert "r-deploy — Run the deploys from the release branch only" in text
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before


def test_recall_serves_records_whose_scope_the_task_shares(
    env: Env, repo: Path, cli: Callable[..., Result]
) -> None:
    _plant(repo)
    by_scope = cli("recall", str(repo), "--symbol", "nothing_here", "--scope", "ci", "--json")
    names = [r["name"] for r in json.loads(by_scope.out)["results"] if r["tier"] == "record"]
    assert names == ["r-deploy"]
    by_symbol = cli("recall", str(repo), "--symbol", "api", "--json")
    names = [r["name"] for r in json.loads(by_symbol.out)["results"] if r["tier"] == "record"]
    assert names == ["r-api"]
