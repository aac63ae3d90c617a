"""JSONL record stores in `search` and `recall`: their active records as results.

A store (`.agent/memory.jsonl`, memoryd.discipline.records) is read, never written, and serves
only what `records.active` gives: records not superseded, confirmed within 90 days, whose scope
shares an entry with the task's scope (`--scope TERM…`; exact string match, as the store's agents
mean it). A record matches a query when every query word is a word of its id, rule, because or
scope (a trailing plural `s` ignored), the rule a store's agents follow; the results carry the
fields memory results carry, with tier `record`."""

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memoryd.discipline.records import Record
    from memoryd.discover.found import MemoryDir
    from memoryd.runtime import Runtime

DAY = 86400.0
_WORD = re.compile(r"\w+")


def _forms(text: str) -> set[str]:
    """The words of a text, lower case, each also without a trailing plural `s`."""
    words = {w.lower() for w in _WORD.findall(text)}
    return words | {w[:-1] for w in words if len(w) > 3 and w.endswith("s")}


def matches(record: "Record", query: str) -> bool:
    """Every word of the query (or its singular) is a word of the record."""
    wanted = [w.lower() for w in _WORD.findall(query)]
    have = _forms(" ".join((record.id, record.rule, record.because, *record.scope)))
    return all(w in have or (w.endswith("s") and w[:-1] in have) for w in wanted)


def _result(path: Path, origin: str, record: "Record", now: float) -> dict[str, Any]:
    from memoryd.model.secrets import mask

    age = max(0, int((now - record.last_confirmed_at) // DAY))
    when = datetime.fromtimestamp(record.last_confirmed_at, UTC).date().isoformat()
    return {
        "file": f"{path}:{record.line}",
        "dir": origin,
        "dir_path": str(path),
        "name": record.id,
        "description": mask(record.rule),
        "type": "record",
        "tier": "record",
        "line": record.line,
        "date": when,
        "age_days": age,
        "unconfirmed": False,  # records.active serves only confirmed ones
        "snippet": mask(record.because),
        "flags": [f"scope: {', '.join(record.scope)}"],
    }


def results(
    rt: "Runtime",
    dirs: Sequence["MemoryDir"],
    named: Iterable[Path],
    *,
    query: str | None,
    scope: Sequence[str] | None,
    within: tuple[float | None, float | None] = (None, None),
) -> list[dict[str, Any]]:
    """The active records of every store of these dirs' repos (and `paths.record_stores`)
    that match `query` (any, when None) and were last confirmed `within` [since, until) (a
    time frame; open ends when None), in store and line order. A store that cannot be read
    or parsed serves nothing here (`memoryd dirs` says why)."""
    from memoryd.discipline import findings

    now = rt.clock()
    since, until = within
    out: list[dict[str, Any]] = []
    for file in findings.store_files(rt.config, dirs, named):
        read = findings.read_store(file)
        if read.data is None:
            continue
        from memoryd.discipline import records  # a repo with a store is the rare one

        store = records.parse(read.data, cut=read.cut)
        for record in records.active(store, scope, now):
            when = record.last_confirmed_at
            if (since is not None and when < since) or (until is not None and when >= until):
                continue
            if query is None or matches(record, query):
                out.append(_result(file.path, file.origin, record, now))
    return out
