"""The dream pass as a pure decision: memories in, a plan of moves and reasons out (DESIGN §4)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memoryd.config import DreamConfig
from memoryd.dream.facts import Facts
from memoryd.dream.kinds import FlagKind, MoveReason, PairKind
from memoryd.dream.refs import Classification, RefCheck, RefChecker, Scope, Status, classify
from memoryd.dream.similar import find_similar_pairs


@dataclass(frozen=True, slots=True, kw_only=True)
class Item(Facts):
    """One memory as the planner sees it: its facts (no body), references checked, age."""

    filename: str
    sha256: str
    age_ts: float  # newest of mtime and a frontmatter `modified`/`last_verified` date
    checks: tuple[RefCheck, ...]
    classification: Classification

    @property
    def missing(self) -> list[str]:
        return [
            c.ref for c in self.checks if c.scope is Scope.VERIFIABLE and c.status is Status.MISSING
        ]


def make_item(filename: str, sha256: str, mtime: float, facts: Facts, checker: RefChecker) -> Item:
    checks = checker.check(facts.refs)
    return Item(
        *(getattr(facts, f) for f in Facts.__slots__),
        filename=filename,
        sha256=sha256,
        age_ts=max(mtime, facts.modified_ts),
        checks=checks,
        classification=classify(checks),
    )


@dataclass(frozen=True, slots=True)
class Guard:
    name: str
    holds: bool
    detail: str


def guards_for(
    item: Item, now: float, t: DreamConfig, consult: str | None, restored: str | None = None
) -> list[Guard]:
    """Every prune guard of DESIGN §4.4 with whether it holds (all listed, for `explain`).
    `restored`: what the pin of a memory a person restored says (memoryd.trash.restored)."""
    # The type guards go by the protective reading (memfile.protective_type); where Claude
    # Code reads the type otherwise, the detail says which reading keeps the memory.
    differs = (
        f" (read as {item.type} by the protective reading; Claude Code reads "
        f"{item.agent_type or 'no type'})"
        if item.type != item.agent_type
        else ""
    )

    def by_type(name: str, types: tuple[str, ...], why: str) -> Guard:
        held = item.type in types
        return Guard(name, held, why + (differs if held else ""))

    return [
        Guard("restored", restored is not None, restored or "not restored by a person"),
        by_type("type_user", ("user",), "user memories are never pruned as stale"),
        by_type(
            "type_feedback_or_reference",
            ("feedback", "reference"),
            "the lesson outlives its example paths",
        ),
        Guard(
            "recently_changed",
            now - item.age_ts < t.guard_recent,
            f"changed {(now - item.age_ts) / 86400:.1f} days ago",
        ),
        Guard(
            "prohibition",
            bool(item.prohibition),
            f"the body says '{item.prohibition}'" if item.prohibition else "no prohibition",
        ),
        Guard("consulted", consult is not None, consult or "no consult in the window"),
    ]


@dataclass(frozen=True, slots=True)
class Move:
    filename: str
    sha256: str
    reason: MoveReason
    detail: str
    duplicate_of: str | None = None
    superseded_by: str | None = None
    overlap: float | None = None


@dataclass(frozen=True, slots=True)
class Flag:
    filename: str
    classification: Classification
    missing: tuple[str, ...]
    guard: str  # the guard that kept it, or "" for a partially stale memory

    @property
    def kind(self) -> FlagKind:
        return FlagKind.KEPT_BY_GUARD if self.guard else FlagKind.PARTIALLY_STALE


@dataclass(slots=True)
class Plan:
    items: dict[str, Item]
    moves: list[Move] = field(default_factory=list)
    flagged: list[Flag] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    refused: str = ""  # why the circuit breaker stopped the moves
    limit: int = 0
    similar: list[tuple[str, str, float]] = field(default_factory=list)


def newer(a: Item, b: Item) -> bool:
    """Is `a` the newer of two memories? Ties go to the later file name, so it is deterministic."""
    return (a.age_ts, a.filename) > (b.age_ts, b.filename)


def opposing(a: Item, b: Item) -> frozenset[str]:
    """What one memory tells to do and the other not to do (DESIGN §4.7): the objects of
    their opposing directives. Two such memories contradict each other however many words
    they share: the older is superseded by the newer, never merged into it as a duplicate."""
    return (a.positives & b.negatives) | (a.negatives & b.positives)


def pair_kind(a: Item, b: Item, score: float, t: DreamConfig) -> PairKind:
    """How the pass reads two memories of one type at `score` overlap (at least
    `t.contradiction_threshold`): a contradiction, a duplicate or only a contradiction candidate."""
    if opposing(a, b):
        return PairKind.CONTRADICTION
    return PairKind.DUPLICATE if score >= t.duplicate_threshold else PairKind.CANDIDATE


def plan_pass(
    items: Sequence[Item],
    now: float,
    t: DreamConfig,
    consults: Mapping[str, str | None],
    restored: Mapping[str, str] | None = None,
) -> Plan:
    """Decide every move and every flag; each decision carries its reason.

    `restored`: the memories a person restored (file -> what its pin says): they take part in
    no move, neither as the one moved nor as the newer one that sends another to the trash
    (DESIGN §5, "Restores are final"); a fully stale one is kept by the guard `restored`."""
    pins = restored or {}
    plan = Plan(items={i.filename: i for i in items})
    neighbours = _neighbours(items, t, plan)
    # Newest first: a memory loses to its newest duplicate that survives itself.
    newest_first = sorted(items, key=lambda i: (i.age_ts, i.filename), reverse=True)
    moved: dict[str, Move] = {}
    _duplicates(newest_first, neighbours, plan.items, pins, t, moved)
    _contradictions(newest_first, neighbours, plan.items, pins, moved)
    _staleness(plan, now, t, consults, pins, moved)
    plan.moves = sorted(moved.values(), key=lambda m: m.filename)
    plan.limit = max(t.breaker_min, int(t.breaker_fraction * len(items)))
    if len(plan.moves) > plan.limit:
        plan.refused = (
            f"would move {len(plan.moves)} of {len(items)} memories, more than the "
            f"limit of {plan.limit} (max({t.breaker_min}, "
            f"{t.breaker_fraction:.0%})); nothing was moved"
        )
    return plan


Neighbours = dict[str, list[tuple[str, float]]]


def _neighbours(items: Sequence[Item], t: DreamConfig, plan: Plan) -> Neighbours:
    """Each memory's same-type memories at or above the contradiction threshold (also put in
    `plan.similar`). Paired by the type the agent reads (memfile.agent_type): two memories
    Claude Code files under different types are no duplicates of each other to it."""
    ordered = sorted(items, key=lambda i: i.filename)
    pairs = find_similar_pairs(
        [(i.agent_type, i.words) for i in ordered], t.contradiction_threshold
    )
    neighbours: Neighbours = {}
    for pair in pairs:
        a, b = ordered[pair.a].filename, ordered[pair.b].filename
        neighbours.setdefault(a, []).append((b, pair.overlap))
        neighbours.setdefault(b, []).append((a, pair.overlap))
        plan.similar.append((a, b, pair.overlap))
    return neighbours


def _duplicates(
    newest_first: Sequence[Item],
    neighbours: Neighbours,
    by_name: Mapping[str, Item],
    pins: Mapping[str, str],
    t: DreamConfig,
    moved: dict[str, Move],
) -> None:
    for item in newest_first:
        if item.filename in pins:
            continue
        winners = [
            (by_name[other], score)
            for other, score in neighbours.get(item.filename, [])
            if score >= t.duplicate_threshold
            and newer(by_name[other], item)
            and other not in moved
            and other not in pins
            and not opposing(item, by_name[other])
        ]
        if winners:
            winner, score = max(winners, key=lambda w: (w[0].age_ts, w[0].filename))
            moved[item.filename] = Move(
                item.filename,
                item.sha256,
                MoveReason.DUPLICATE,
                f"{score:.0%} of its significant words are in the newer {winner.filename}",
                duplicate_of=winner.filename,
                overlap=score,
            )


def _contradictions(
    newest_first: Sequence[Item],
    neighbours: Neighbours,
    by_name: Mapping[str, Item],
    pins: Mapping[str, str],
    moved: dict[str, Move],
) -> None:
    """Same type, overlap of at least the contradiction threshold, opposite directives on one
    object: the older goes, superseded by the newer."""
    for item in newest_first:
        if item.filename in moved or item.filename in pins:
            continue
        for other, score in sorted(neighbours.get(item.filename, [])):
            rival = by_name[other]
            if other in moved or other in pins or not newer(rival, item):
                continue
            objects = opposing(item, rival)
            if objects:
                what = ", ".join(sorted(objects))
                moved[item.filename] = Move(
                    item.filename,
                    item.sha256,
                    MoveReason.CONTRADICTION,
                    f"the newer {rival.filename} says the opposite about {what}",
                    superseded_by=rival.filename,
                    overlap=score,
                )
                break


def _staleness(
    plan: Plan,
    now: float,
    t: DreamConfig,
    consults: Mapping[str, str | None],
    pins: Mapping[str, str],
    moved: dict[str, Move],
) -> None:
    """FULLY_STALE goes unless a guard holds; the guards protect stale memories only."""
    for item in sorted(plan.items.values(), key=lambda i: i.filename):
        plan.counts[item.classification.value] = plan.counts.get(item.classification.value, 0) + 1
        if item.filename in moved:
            continue
        if item.classification is Classification.PARTIALLY_STALE:
            plan.flagged.append(Flag(item.filename, item.classification, tuple(item.missing), ""))
        elif item.classification is Classification.FULLY_STALE:
            guards = guards_for(item, now, t, consults.get(item.filename), pins.get(item.filename))
            guard = next((g.name for g in guards if g.holds), "")
            if guard:
                plan.flagged.append(
                    Flag(item.filename, item.classification, tuple(item.missing), guard)
                )
            else:
                moved[item.filename] = Move(
                    item.filename,
                    item.sha256,
                    MoveReason.STALE,
                    "every path it names is gone: " + ", ".join(item.missing),
                )


def kept_by_guard(plan: Plan) -> list[Flag]:
    return [f for f in plan.flagged if f.guard]
