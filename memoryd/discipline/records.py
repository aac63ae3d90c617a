"""JSONL record stores (`.agent/memory.jsonl`): parse, validate and query, never write (pure).

Some agents keep memory as JSON lines, one record a line: `id`, `scope` (a list of strings),
`rule`, `because`, `evidence`, `createdAt` and `lastConfirmedAt` (ISO times), and an optional
`supersededBy` (another record's id). `parse` gives the valid records and each problem with its
line; `active` is what recall serves; `report` what `dirs` and `explain STORE` show. All linear
in the store's size; the caller reads the file (bounded, never a FIFO: discipline.findings).

Semantics, decided once here:
- A record is *superseded* when its `supersededBy` names another valid record of the store and
  the supersession is not part of a cycle. An unknown id or a cycle is a problem, and the
  records involved count as not superseded: no rule is lost from recall by a broken link.
- *Confirmed within 90 days*: `now - lastConfirmedAt <= 90 days` (the boundary is still
  confirmed); later than that it is *unconfirmed*. A time without a zone is UTC.
- *Scope*: a record matches a task's scope when the two lists share at least one entry,
  compared exactly (as strings).
- *Duplicates*: two active records whose `rule` + `because` significant words overlap by at
  least the dream pass's duplicate threshold (memoryd.dream.similar, the same rule and engine),
  and whose scopes share an entry (as the dream pass pairs only memories of one type).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from memoryd.model import safejson

MAX_STORE_BYTES: Final = 16 << 20  # the most of a store memoryd reads
MAX_LINE_BYTES: Final = 256 << 10  # a longer line is reported, never parsed
UNCONFIRMED_AFTER: Final = 90 * 86400.0
REQUIRED: Final = ("id", "scope", "rule", "because", "evidence", "createdAt", "lastConfirmedAt")


@dataclass(frozen=True, slots=True)
class Record:
    line: int
    id: str
    scope: tuple[str, ...]
    rule: str
    because: str
    evidence: Any  # a string or a list, as the agent wrote it
    created_at: float  # epoch seconds
    last_confirmed_at: float
    superseded_by: str | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """A line memoryd cannot use as it stands (`line` 0: the store as a whole)."""

    line: int
    kind: str  # bad_json | not_object | missing_fields | bad_field | too_long | duplicate_id
    #            | unknown_superseded_by | cycle | cut
    message: str

    def to_json(self) -> dict[str, object]:
        return {"line": self.line, "kind": self.kind, "message": self.message}


@dataclass(slots=True)
class Store:
    records: list[Record] = field(default_factory=list)  # valid ones, in line order
    problems: list[Problem] = field(default_factory=list)  # in line order
    # id -> the id that supersedes it, for supersessions that hold (see the module's rules)
    superseded: dict[str, str] = field(default_factory=dict)

    def by_id(self) -> dict[str, Record]:
        return {r.id: r for r in self.records}


def _time(value: object) -> float | None:
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _strings(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def _record(number: int, row: dict[str, Any]) -> Record | Problem:
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        return Problem(number, "missing_fields", f"missing {', '.join(missing)}")
    bad: list[str] = []
    for key in ("id", "rule", "because"):
        if not isinstance(row[key], str) or not row[key].strip():
            bad.append(f"{key} is not a non-empty string")
    scope = _strings(row["scope"])
    if scope is None:
        bad.append("scope is not a list of strings")
    evidence = row["evidence"]
    if not isinstance(evidence, str) and _strings(evidence) is None:
        bad.append("evidence is not a string or a list of strings")
    created, confirmed = _time(row["createdAt"]), _time(row["lastConfirmedAt"])
    if created is None:
        bad.append("createdAt is not an ISO time")
    if confirmed is None:
        bad.append("lastConfirmedAt is not an ISO time")
    by = row.get("supersededBy")
    if by is not None and (not isinstance(by, str) or not by.strip()):
        bad.append("supersededBy is not an id")
    if bad:
        return Problem(number, "bad_field", "; ".join(bad))
    assert scope is not None and created is not None and confirmed is not None
    return Record(
        number, row["id"], scope, row["rule"], row["because"], evidence, created, confirmed, by
    )


def _lines(data: bytes, max_line: int) -> Iterable[tuple[int, bytes | None]]:
    """(number, line) of the data; None for a line over `max_line`."""
    number, start, size = 0, 0, len(data)
    while start < size:
        end = data.find(b"\n", start)
        end = size if end < 0 else end
        number += 1
        yield number, data[start:end] if end - start <= max_line else None
        start = end + 1


def parse(data: bytes, *, cut: bool = False, max_line: int = MAX_LINE_BYTES) -> Store:
    """Every valid record and every problem of a store's bytes. `cut`: the reader stopped at
    MAX_STORE_BYTES (the rest is not read, and said so). Blank lines are no records."""
    store = Store()
    seen: dict[str, int] = {}
    for number, raw in _lines(data, max_line):
        if raw is None:
            store.problems.append(
                Problem(number, "too_long", f"the line is over {max_line} bytes; not read")
            )
            continue
        if not raw.strip():
            continue
        try:
            row = safejson.loads(raw.decode("utf-8", "replace"))
        except ValueError as error:
            store.problems.append(Problem(number, "bad_json", f"not JSON ({error.args[0]})"))
            continue
        if not isinstance(row, dict):
            store.problems.append(Problem(number, "not_object", "not a JSON object"))
            continue
        found = _record(number, row)
        if isinstance(found, Problem):
            store.problems.append(found)
            continue
        if found.id in seen:
            store.problems.append(
                Problem(number, "duplicate_id", f"id {found.id!r} is line {seen[found.id]}'s too")
            )
            continue
        seen[found.id] = number
        store.records.append(found)
    if cut:
        store.problems.append(
            Problem(0, "cut", f"the store is over {MAX_STORE_BYTES} bytes: the rest is not read")
        )
    _links(store)
    store.problems.sort(key=lambda p: p.line)
    return store


def _links(store: Store) -> None:
    """Check every supersededBy (known id, no cycle) and keep those that hold. Linear: one link
    out of each record, so each coloured walk leaves a record once."""
    by_id = store.by_id()
    nxt: dict[str, str] = {}
    for r in store.records:
        if r.superseded_by is None:
            continue
        if r.superseded_by not in by_id:
            store.problems.append(
                Problem(
                    r.line,
                    "unknown_superseded_by",
                    f"supersededBy {r.superseded_by!r} names no record of this store",
                )
            )
            continue
        nxt[r.id] = r.superseded_by
    state: dict[str, int] = {}  # 1: on the current walk, 2: done
    in_cycle: set[str] = set()
    for start in nxt:
        path: list[str] = []
        node: str | None = start
        while node is not None and node in nxt and state.get(node) is None:
            state[node] = 1
            path.append(node)
            node = nxt[node]
        if node is not None and state.get(node) == 1:  # came back onto this walk: a cycle
            loop = path[path.index(node) :]
            in_cycle.update(loop)
            lines = ", ".join(str(by_id[i].line) for i in loop)
            first = by_id[loop[0]]
            store.problems.append(
                Problem(
                    min(by_id[i].line for i in loop),
                    "cycle",
                    f"supersededBy goes round in a cycle ({' -> '.join([*loop, first.id])}; "
                    f"lines {lines}): none of them counts as superseded",
                )
            )
        for visited in path:
            state[visited] = 2
    store.superseded = {k: v for k, v in nxt.items() if k not in in_cycle}


def _shares(a: Sequence[str], b: Iterable[str]) -> bool:
    return not set(a).isdisjoint(b)


def confirmed(record: Record, now: float) -> bool:
    """Confirmed within 90 days (the boundary included)."""
    return now - record.last_confirmed_at <= UNCONFIRMED_AFTER


def active(store: Store, scope: Iterable[str] | None, now: float) -> list[Record]:
    """What recall serves from a store for a task: records not superseded, confirmed within
    90 days, whose scope shares at least one entry with `scope` (None: any scope; an empty
    scope shares nothing). In line order."""
    wanted = None if scope is None else list(scope)
    return [
        r
        for r in store.records
        if r.id not in store.superseded
        and confirmed(r, now)
        and (wanted is None or _shares(r.scope, wanted))
    ]


@dataclass(frozen=True, slots=True)
class Chain:
    """A record that holds (`head`, not superseded) and those it supersedes, directly or
    through others, nearest first."""

    head: Record
    superseded: tuple[Record, ...]


def chains(store: Store) -> list[Chain]:
    """Every head with what it supersedes, transitively (linear: depths are memoised)."""
    by_id = store.by_id()
    head_of: dict[str, str] = {}
    depth: dict[str, int] = {}

    def resolve(start: str) -> None:
        path: list[str] = []
        node = start
        while node in store.superseded and node not in head_of:
            path.append(node)
            node = store.superseded[node]
        head = head_of.get(node, node)
        base = depth.get(node, 0)
        for n, visited in enumerate(reversed(path), 1):
            head_of[visited] = head
            depth[visited] = base + n

    for rid in store.superseded:
        resolve(rid)
    grouped: dict[str, list[str]] = {}
    for rid, head in head_of.items():
        grouped.setdefault(head, []).append(rid)
    return [
        Chain(by_id[head], tuple(by_id[i] for i in sorted(ids, key=lambda i: (depth[i], i))))
        for head, ids in sorted(grouped.items(), key=lambda kv: by_id[kv[0]].line)
    ]


@dataclass(frozen=True, slots=True)
class Duplicate:
    a: Record
    b: Record
    overlap: float


def duplicates(store: Store, now: float, threshold: float) -> list[Duplicate]:
    """Pairs of active records that say the same: the dream pass's overlap rule on `rule` +
    `because`, among records whose scopes share an entry. Copies of one word set are paired
    with its first only (n - 1 findings, not n²/2); distinct sets by prefix filtering."""
    # Here: the similarity module imports numpy, which `memoryd search` would pay for.
    from memoryd.dream.prefix_pairs import pairs_sharing_a_key
    from memoryd.dream.similar import Vocabulary, significant_words

    live = active(store, None, now)
    vocabulary = Vocabulary()
    groups: dict[tuple[int, ...], list[Record]] = {}
    for r in live:
        ids = tuple(sorted(set(vocabulary.ids(significant_words(f"{r.rule} {r.because}")))))
        if ids:
            groups.setdefault(ids, []).append(r)
    out = []
    keys = list(groups)
    for members in groups.values():
        out += [
            Duplicate(members[0], m, 1.0) for m in members[1:] if _shares(members[0].scope, m.scope)
        ]
    for pair in pairs_sharing_a_key([(groups[k][0].scope, k) for k in keys], threshold):
        out.append(Duplicate(groups[keys[pair.a]][0], groups[keys[pair.b]][0], pair.overlap))
    out.sort(key=lambda d: (d.a.line, d.b.line))
    return out


@dataclass(frozen=True, slots=True)
class Report:
    """What `dirs` and `explain STORE` show of one store: findings only, nothing acted on."""

    records: int
    active: int
    problems: list[Problem]
    unconfirmed: list[Record]  # not superseded, last confirmed more than 90 days ago
    chains: list[Chain]
    duplicates: list[Duplicate]

    def findings(self) -> int:
        return len(self.problems) + len(self.unconfirmed) + len(self.duplicates)

    def to_json(self) -> dict[str, Any]:
        def ref(r: Record) -> dict[str, Any]:
            return {"line": r.line, "id": r.id}

        return {
            "records": self.records,
            "active": self.active,
            "problems": [p.to_json() for p in self.problems],
            "unconfirmed": [
                {**ref(r), "last_confirmed_at": _iso(r.last_confirmed_at)} for r in self.unconfirmed
            ],
            "chains": [
                {"head": ref(c.head), "superseded": [ref(r) for r in c.superseded]}
                for c in self.chains
            ],
            "duplicates": [
                {"a": ref(d.a), "b": ref(d.b), "overlap": round(d.overlap, 3)}
                for d in self.duplicates
            ],
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def report(store: Store, now: float, threshold: float) -> Report:
    unconfirmed = [
        r for r in store.records if r.id not in store.superseded and not confirmed(r, now)
    ]
    return Report(
        records=len(store.records),
        active=len(active(store, None, now)),
        problems=list(store.problems),
        unconfirmed=unconfirmed,
        chains=chains(store),
        duplicates=duplicates(store, now, threshold),
    )


def render(report: Report) -> list[str]:
    """The report as lines for a person (indented by the caller)."""
    out = [f"records: {report.records}, active: {report.active}"]
    for p in report.problems:
        where = f"line {p.line}" if p.line else "store"
        out.append(f"{where}: {p.kind} — {p.message}")
    for r in report.unconfirmed:
        out.append(
            f"line {r.line}: {r.id!r} unconfirmed for over 90 days "
            f"(last confirmed {_iso(r.last_confirmed_at)})"
        )
    for c in report.chains:
        older = ", ".join(f"{r.id!r} (line {r.line})" for r in c.superseded)
        out.append(f"line {c.head.line}: {c.head.id!r} supersedes {older}")
    for d in report.duplicates:
        out.append(
            f"lines {d.a.line} and {d.b.line}: {d.a.id!r} and {d.b.id!r} say the same "
            f"(overlap {d.overlap:.2f})"
        )
    return out
