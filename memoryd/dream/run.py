"""Run one dream pass over one memory dir: read, plan, check the breaker, journal, move, index."""

import contextlib
import functools
import hashlib
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd import acked, fsops, journal, restored, trash
from memoryd import links as memory_links
from memoryd.discover import MemoryDir, claude_lock
from memoryd.dream import refused, transcripts
from memoryd.dream.budget import PassBudget, PassStopped
from memoryd.dream.consult import (
    SERVED_SHOWN,
    ConsultLog,
    ConsultSource,
    ReadEvents,
    RecordedConsults,
    Subject,
    consulted,
    served_log,
)
from memoryd.dream.facts import FactsCache, derive, load_saved
from memoryd.dream.memo import DreamMemo
from memoryd.dream.plan import (
    Flag,
    Item,
    Move,
    Plan,
    Thresholds,
    kept_by_guard,
    make_item,
    plan_pass,
)
from memoryd.dream.refs import RefChecker
from memoryd.dream.repo import RepoIndex, dump_sources, load_sources
from memoryd.errors import MemorydError
from memoryd.indexing.outcome import IndexOutcome, IndexStatus
from memoryd.indexing.passes import index_after_dream, ownership_for_dream
from memoryd.indexing.read import Basis, IndexKeeper, IndexText, index_file_again
from memoryd.indexing.scan import DirScan, scan_dir
from memoryd.links import Dangling, links_in
from memoryd.memfile import Memory, parse_memory
from memoryd.model.index import (
    ARCHIVE_NAME,
    INDEX_NAME,
    Ownership,
    Place,
    pointer_lines,
    pointer_places,
)
from memoryd.runtime import Runtime
from memoryd.secrets import Finding, find, find_bytes
from memoryd.state import DirState, StateStore
from memoryd.trash import TrashRecord


@dataclass(slots=True)
class DreamResult:
    dir: MemoryDir
    pass_id: str
    status: str  # completed | dry_run | refused | skipped | unmanaged | failed
    plan: Plan | None = None
    moved: list[TrashRecord] = field(default_factory=list)
    skipped_moves: list[tuple[str, str]] = field(default_factory=list)  # file, why
    # A skipped move's file put back under another name (a new file took its own meanwhile).
    kept_as: dict[str, str] = field(default_factory=dict)
    index: IndexOutcome | None = None
    message: str = ""
    repo_note: str = ""
    duration_ms: int = 0
    files: int = 0
    unparseable: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    merge_conflicts: list[str] = field(default_factory=list)  # files with git's markers
    # Flagged memories a person acknowledged as they are now (memoryd.acked): not listed.
    acknowledged: set[str] = field(default_factory=set)
    secrets: dict[str, list[Finding]] = field(default_factory=dict)  # file -> found
    dangling: list[Dangling] = field(default_factory=list)  # `[[name]]` links left naming none
    # MEMORY.md's text as the ownership probe read it (None: not read), see `index_text`.
    probed_index: str | None = None

    @property
    def index_text(self) -> str | None:
        """MEMORY.md's text as the pass left it, for what looks at it after the pass (the
        promotion candidates) instead of reading it again: the index update's text when it
        wrote or checked the index, else the probe's when no update ran (a dry run, an
        unmanaged dir); None when the pass holds no current text (a failed update)."""
        outcome = self.index
        if outcome is None:
            return self.probed_index
        current = outcome.status in (IndexStatus.UPDATED, IndexStatus.UNCHANGED)
        return outcome.edit.main if current and outcome.edit is not None else None

    def counts(self) -> dict[str, int]:
        """What the pass did; for a dry run, what it would do (its planned moves)."""
        plan = self.plan
        moved_by = {"stale": 0, "duplicate": 0, "contradiction": 0}
        reasons = (
            [m.reason for m in plan.moves]
            if self.status == "dry_run" and plan
            else [r.reason for r in self.moved]
        )
        for reason in reasons:
            moved_by[reason] = moved_by.get(reason, 0) + 1
        classes = plan.counts if plan else {}
        kept = len(kept_by_guard(plan)) if plan else 0
        listed = len(self.flags_listed)
        return {
            "files": self.files,
            "stale_pruned": moved_by["stale"],
            "duplicates_merged": moved_by["duplicate"],
            "contradictions_resolved": moved_by["contradiction"],
            "partially_stale_kept": classes.get("partially_stale", 0),
            "evergreen": classes.get("evergreen", 0),
            "fresh": classes.get("fresh", 0),
            "kept_by_guard": kept,
            "surviving": self.files - len(reasons),
            "flagged": listed,
            "acknowledged": (len(plan.flagged) if plan else 0) - listed,
        }

    @property
    def flags_listed(self) -> list[Flag]:
        """The flags the report lists for review: every flag of the plan but those a person
        acknowledged as the memory is now. A dry run lists exactly what its pass would."""
        plan = self.plan
        return [f for f in plan.flagged if f.filename not in self.acknowledged] if plan else []

    @property
    def flags_acknowledged(self) -> list[Flag]:
        plan = self.plan
        return [f for f in plan.flagged if f.filename in self.acknowledged] if plan else []


class RepoCache:
    """One repo snapshot, with its reference checker, per repo root per run (not per dir).

    Snapshots outlive the run in `memo` (the Runtime's): the next run rebuilds from the held
    one, reading only the sources whose stat changed, and keeps the checker (with every
    reference it already checked) when nothing did. A process that holds none starts from the
    token cache saved in `store`'s state dir. Without a memo, nothing outlives the run.
    """

    def __init__(self, store: StateStore | None = None, memo: DreamMemo | None = None) -> None:
        self._built: dict[Path, RefChecker] = {}
        self._store = store
        self._memo = memo if memo is not None else DreamMemo()

    @classmethod
    def of(cls, rt: Runtime) -> "RepoCache":
        """The cache a command's run uses: the Runtime's memo and state dir."""
        return cls(rt.store, rt.dream)

    def get(self, root: Path | None) -> RepoIndex | None:
        return self.checker(root).repo

    def checker(self, root: Path | None, *, save: bool = False) -> RefChecker:
        """`save`: write the token cache back when it changed (never for a dry run, which
        writes nothing at all)."""
        if root is None:
            return RefChecker(None)
        if root not in self._built:
            self._built[root] = _snapshot(self._memo, root, self._store, save=save)
        elif save:
            with self._memo.repo_lock:
                _snapshot_saved(self._memo, root, self._built[root], self._store)
        return self._built[root]


_HELD_ROOTS = 8  # repo snapshots kept between runs (the least recently used goes first)


def _snapshot(memo: DreamMemo, root: Path, store: StateStore | None, *, save: bool) -> RefChecker:
    with memo.repo_lock:
        held = memo.snapshots.pop(root, None)
        if not root.is_dir():
            return RefChecker(None)
        previous = held.repo.sources if held is not None and held.repo is not None else None
        if previous is None and store is not None:
            previous = load_sources(root, store.load_repo_tokens(root))
            if previous is not None:
                memo.on_disk[root] = previous
        repo = RepoIndex.build(root, previous=previous)
        if held is None or held.repo is None or not _same_tree(held.repo, repo):
            held = RefChecker(repo)
        elif held.repo.sources is not repo.sources:
            # The same tree, but sources read again (racy ones, say): keep the checks made,
            # and hand the new sources to the next build.
            held.repo = repo
        memo.snapshots[root] = held
        while len(memo.snapshots) > _HELD_ROOTS:
            gone = next(iter(memo.snapshots))
            del memo.snapshots[gone]
            memo.on_disk.pop(gone, None)
        if save:
            _snapshot_saved(memo, root, held, store)
        return held


def _same_tree(a: RepoIndex, b: RepoIndex) -> bool:
    """Whether every reference check made against ``a`` holds against ``b``: the same names,
    kinds and stats (the signature: a file that is no source, a folder, a link count too),
    and the same tokens (sources read again, racy ones say, may have changed unseen)."""
    return a.signature == b.signature and (a.sources is b.sources or a.tokens == b.tokens)


def _snapshot_saved(
    memo: DreamMemo, root: Path, checker: RefChecker, store: StateStore | None
) -> None:
    """Write the snapshot's token cache to the state dir unless it is what is there (under
    the memo's repo lock)."""
    sources = checker.repo.sources if checker.repo is not None else None
    if store is None or sources is None or memo.on_disk.get(root) is sources:
        return
    with contextlib.suppress(OSError):  # a cache: no pass needs it
        store.save_repo_tokens(root, dump_sources(root, sources))
        memo.on_disk[root] = sources


def thresholds(rt: Runtime) -> Thresholds:
    d = rt.config.dream
    return Thresholds(
        d.duplicate_threshold,
        d.contradiction_threshold,
        d.guard_recent,
        d.consult_window,
        d.breaker_min,
        d.breaker_fraction,
    )


@dataclass(slots=True)
class Inventory:
    items: list[Item]
    unparseable: list[str]
    conflicts: list[str]
    memories: dict[str, Memory]  # kept only when asked (explain)
    # file -> the secrets it holds (line and kind, never the value): flagged, never moved.
    secrets: dict[str, list[Finding]] = field(default_factory=dict)
    # The content hash of each file in `secrets` that is no memory (its said-once key).
    other_shas: dict[str, str] = field(default_factory=dict)
    # file -> the names it links to as `[[name]]` (memoryd.links), for files with any.
    links: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def dangling(self, moved: Iterable[str] = ()) -> list[Dangling]:
        """The `[[name]]` links no memory answers to once `moved` are in the trash."""
        names = {i.filename: i.name for i in self.items}
        others = [*self.unparseable, *self.conflicts]
        return memory_links.dangling(self.links, names, others, moved)


def _facts_of(memo: DreamMemo) -> FactsCache:
    """The memo's facts (made here, not with the memo: this module is the one that may)."""
    if memo.facts is None:
        memo.facts = FactsCache()
    return memo.facts


INDEX_FILES = (INDEX_NAME, ARCHIVE_NAME)


@dataclass(frozen=True, slots=True)
class Listing:
    """The names a scan found, without what it holds per file (which a pass would keep alive
    with the scan: ~90 MB at 100,000 memories)."""

    memories: list[str]  # in name order
    problems: list[str]
    conflicts: list[str]
    # Notes (no frontmatter) and the index files: looked at for secrets only. MEMORY.md is
    # what the agent loads every session, and a note in the dir is as readable as a memory.
    others: list[str] = field(default_factory=lambda: list(INDEX_FILES))

    @classmethod
    def of(cls, scan: DirScan) -> "Listing":
        notes = sorted(n for n, s in scan.files.items() if s.kind == "note")
        return cls(
            sorted(scan.memories), sorted(scan.problems), list(scan.conflicts),
            [*INDEX_FILES, *notes],
        )  # fmt: skip


def inventory(
    md: MemoryDir,
    rt: Runtime,
    checker: RefChecker,
    *,
    keep: bool = False,
    listing: Listing | None = None,
    save: bool = False,
    budget: PassBudget | None = None,
    read: Mapping[str, str | None] | None = None,
) -> Inventory:
    """Read every memory file; parse it and derive its facts unless its content was seen before.

    `listing`: what a scan of the dir just made found (the ownership probe's), so the listing
    is not made twice. Each file is still read and hashed here (and re-hashed by apply): a pass
    decides from the bytes as they are now, not from the scan's stat-keyed cache. `keep` (explain)
    parses every file, to hand back each Memory. Facts this process does not hold are looked
    up in those the dir's last saving pass left in the state dir; `save` (not for a dry run)
    writes them back when the dir's contents changed. `budget`: checked after each file.
    `read`: the index files' texts as the pass already read them (None: missing), looked at
    for secrets without reading them again.
    """
    limits = rt.config.parse.max_file_bytes, rt.config.parse.max_frontmatter_bytes
    if listing is None:
        listing = Listing.of(
            scan_dir(
                md.real_path,
                rt.store.load_cache(md.real_path),
                max_file_bytes=limits[0],
                max_frontmatter_bytes=limits[1],
                versions=rt.versions,
            )
        )
    items: list[Item] = []
    kept: dict[str, Memory] = {}
    unparseable = list(listing.problems)
    used: set[str] = set()
    held_secrets: dict[str, list[Finding]] = {}
    links: dict[str, tuple[str, ...]] = {}
    looked = False
    memo = rt.dream
    known_secrets = memo.secrets.get(md.real_path, {})
    seen_secrets: dict[str, tuple[Finding, ...]] = {}
    with memo.facts_lock, fsops.open_dir(md.real_path) as dir_fd:
        facts_cache = _facts_of(memo)
        facts_cache.begin(limits)
        for name in listing.memories:
            file_started = budget.clock() if budget is not None else 0.0
            try:
                data, st = fsops.read_regular(dir_fd, name, limits[0])
            except (OSError, ValueError):
                unparseable.append(name)
                continue
            sha256 = hashlib.sha256(data).hexdigest()
            found_secrets = known_secrets.get(sha256)
            if found_secrets is None:
                found_secrets = tuple(find_bytes(data))
            seen_secrets[sha256] = found_secrets
            if found_secrets:
                held_secrets[name] = list(found_secrets)
            facts = None if keep else facts_cache.get(sha256)
            if facts is None and not keep and not looked:
                looked = True  # one look at the saved facts, at the first content not held
                _adopt_saved(rt, md, limits)
                facts = facts_cache.get(sha256)
            if facts is None:
                parsed = parse_memory(
                    name, data, max_file_bytes=limits[0], max_frontmatter_bytes=limits[1]
                )
                if not isinstance(parsed, Memory):
                    unparseable.append(name)
                    continue
                facts = derive(parsed, facts_cache.vocabulary)
                facts_cache.put(sha256, facts)
                if keep:
                    kept[name] = parsed
            used.add(sha256)
            items.append(make_item(name, sha256, st.st_mtime, facts, checker))
            found_links = links_in(data)
            if found_links:
                links[name] = found_links
            if budget is not None:
                budget.check(name, file_started)
        other_shas = _other_secrets(
            dir_fd, listing.others, limits[0], seen_secrets, held_secrets, read or {}
        )
        if save:  # before finish(), which may start the cache afresh
            _save_facts(rt, md, frozenset(used))
        facts_cache.finish(md.real_path, frozenset(used))
        memo.secrets[md.real_path] = seen_secrets
    return Inventory(
        items, sorted(set(unparseable)), listing.conflicts, kept, held_secrets, other_shas, links
    )


def _adopt_saved(rt: Runtime, md: MemoryDir, limits: tuple[int, int]) -> None:
    """Take the facts the dir's last saving pass left in the state dir (under the facts lock)."""
    saved = load_saved(rt.store.load_facts(md.real_path), limits)
    if saved is None:
        return
    memo = rt.dream
    try:
        memo.saved_facts[md.real_path] = _facts_of(memo).adopt(saved)
    except (TypeError, ValueError, LookupError, OverflowError):
        # A row that passed its frame's checksum but is not what a pass writes: the rows
        # before it were taken, the rest are derived again (and the file written anew).
        memo.saved_facts.pop(md.real_path, None)


def _save_facts(rt: Runtime, md: MemoryDir, used: frozenset[str]) -> None:
    memo = rt.dream
    if memo.saved_facts.get(md.real_path) == used:
        return
    with contextlib.suppress(OSError):  # a cache: no pass needs it
        rt.store.save_facts(md.real_path, _facts_of(memo).dump(sorted(used)))
        memo.saved_facts[md.real_path] = used


def restored_pins(rt: Runtime, md: MemoryDir, inv: "Inventory") -> dict[str, str]:
    """The dir's memories a person restored that still hold the restored bytes -> what their
    pin says (memoryd.restored): no pass moves them."""
    found = restored.pinned(
        restored.load(rt.store, md.real_path), ((i.filename, i.sha256) for i in inv.items)
    )
    return {name: pin.detail for name, pin in found.items()}


def consult_sources(
    md: MemoryDir, rt: Runtime, extra: Sequence[ConsultSource] = (), *, save: bool = True
) -> list[ConsultSource]:
    """The agent's tool calls on the dir's files in the session transcripts (read on from
    where the last scan stopped; `save`: keep how far, never for a dry run), the consult
    log of the dir's repo, and the reads the daemon recorded when the config opts in."""
    since = rt.clock() - rt.config.dream.consult_window
    known = {md.real_path, *(_real(p) for p in rt.config.paths.extra_memory_dirs)}
    found = transcripts.harvest(
        rt.config.paths.claude_home, rt.paths.state_dir, since=since, known=known, save=save
    )
    unsure = ""
    if found.unread:
        left = sum(found.unread.values())
        unsure = (
            f"{len(found.unread)} session transcript(s) not read to the end yet ({left} bytes "
            "left, read by the next passes): unsure means kept"
        )
    sources: list[ConsultSource] = [
        *extra,
        RecordedConsults(found.evidence_for(md.real_path), unsure),
    ]
    # What memoryd's MCP server answered the agent about this dir (memoryd.mcp_server).
    served = ConsultLog.load_file(served_log(rt.paths.state_dir, md.real_path), SERVED_SHOWN)
    if served is not None:
        sources.append(served)
    log = ConsultLog.load(md.repo_root)
    if log is not None:
        sources.append(log)
    if rt.config.watch.reads_count:
        sources.append(ReadEvents(rt.store.load(md.real_path).reads))
    return sources


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def consult_map(
    items: Sequence[Item],
    sources: Sequence[ConsultSource],
    since: float,
    budget: PassBudget | None = None,
) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i in items:
        out[i.filename] = consulted(sources, Subject(i.filename, i.name), since)
        if budget is not None:
            budget.check(f"the consult evidence of {i.filename}")
    return out


def _index_lines(
    md: MemoryDir,
    wanted: Set[str],
    known: Basis | None = None,
    versions: IndexKeeper | None = None,
) -> tuple[dict[str, str], dict[str, Place]]:
    """The pointer line of each of `wanted` in MEMORY.md or the archive, and where it sits in
    MEMORY.md (index.Place), to give back on restore where it was. `known`: the index files as
    the pass's probe read them, taken while they are still those files.

    Only the pointer lines of the archive are looked at, one regex scan of its text (the
    archive of a 100,000-memory dir holds 100,000 lines: split into objects they cost ~100
    MB); MEMORY.md, which the agent loads, is read line by line for the headings."""
    out: dict[str, str] = {}
    places: dict[str, Place] = {}
    texts: dict[str, IndexText | None] = {
        INDEX_NAME: known.main if known is not None else None,
        ARCHIVE_NAME: known.archive_text() if known is not None else None,
    }
    with fsops.open_dir(md.real_path) as fd:
        for name in (INDEX_NAME, ARCHIVE_NAME):
            text = index_file_again(fd, name, texts[name], versions).text or ""
            for found in pointer_lines(text):
                if found.target in wanted:
                    out.setdefault(found.target, found.content)
            if name == INDEX_NAME and text:
                places = pointer_places(text, wanted)
    return out, places


def _record(
    move: Move,
    md: MemoryDir,
    pass_id: str,
    day: str,
    stored: str,
    index_line: str | None,
    missing: list[str],
    place: Place | None = None,
) -> TrashRecord:
    return TrashRecord(
        id=trash.new_id(),
        original_name=move.filename,
        stored_name=stored,
        day=day,
        sha256=move.sha256,
        size=0,
        reason=move.reason,
        pass_id=pass_id,
        time=datetime.now().astimezone().isoformat(timespec="seconds"),
        duplicate_of=move.duplicate_of,
        superseded_by=move.superseded_by,
        index_line=index_line,
        index_place=place.to_json() if place is not None and index_line is not None else None,
        details={
            "detail": move.detail,
            "missing": missing,
            **({"overlap": round(move.overlap, 3)} if move.overlap is not None else {}),
        },
    )


def dream_dir(
    rt: Runtime,
    md: MemoryDir,
    *,
    repos: RepoCache,
    dry_run: bool = False,
    trigger: str = "command",
    extra_sources: Sequence[ConsultSource] = (),
    wait_lock: bool = True,
    before_move: Callable[[str], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
) -> DreamResult:
    """One pass; every decision, including each decision not to act, is logged. A real pass
    holds the dir's writer lock throughout (its moves, journal and index update are one
    piece of work); `wait_lock=False` (the daemon) skips the pass when another process has it.
    `before_move`: see trash.Mover (a test's concurrent writer).
    Past `dream.file_budget` or `dream.pass_budget` (by `clock`), or once `stop()` (the
    daemon's SIGTERM), the pass stops before its first move: it fails and moves nothing.
    """
    budget = PassBudget(rt.config.dream.file_budget, rt.config.dream.pass_budget, stop, clock)
    run = functools.partial(
        _dream_dir, rt, md, repos=repos, dry_run=dry_run, trigger=trigger,
        extra_sources=extra_sources, before_move=before_move, budget=budget,
    )  # fmt: skip
    with rt.store.reading(md.real_path):
        if dry_run:
            return run()
        with rt.store.lock(md.real_path, wait=wait_lock) as locked:
            if locked:
                return run()
    result = DreamResult(md, "-", "skipped")
    result.message = "another memoryd process is working on this dir"
    rt.audit.write("dream.skipped", dir=md.path, why=result.message)
    return result


def _dream_dir(
    rt: Runtime,
    md: MemoryDir,
    *,
    repos: RepoCache,
    dry_run: bool,
    trigger: str,
    extra_sources: Sequence[ConsultSource],
    before_move: Callable[[str], None] | None,
    budget: PassBudget,
) -> DreamResult:
    started = time.monotonic()
    pass_id = datetime.now().strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    result = DreamResult(md, pass_id, "completed")
    now = rt.clock()
    audit = rt.audit
    # The daemon's pass leaves a just-written file its grace for the agent's own pointer, as
    # the daemon's index updates do; a pass on the command line indexes it at once.
    grace = 0.0 if trigger == "command" else rt.config.index.new_file_grace
    lock = claude_lock(md, now)
    if lock is not None and lock.held:
        result.status = "skipped"
        result.message = f"{lock.why}: Claude Code is consolidating this dir itself"
        if not dry_run:
            audit.write("dream.skipped", dir=md.path, why=result.message)
        return result
    if not dry_run:
        # A command's pass is at debug level: a rerun that finds nothing to do leaves no row
        # above debug (DESIGN §2.6); a pass the daemon starts on its own is news.
        audit.write(
            "dream.started",
            dir=md.path,
            pass_id=pass_id,
            trigger=trigger,
            level="debug" if trigger == "command" else "info",
        )
    try:
        budget.check("the start")
        checker = repos.checker(md.repo_root, save=not dry_run)
        repo = checker.repo
        budget.check("the repo snapshot")
        if md.repo_root is None:
            result.repo_note = f"no repo root ({md.repo_reason}): every reference is unverifiable"
        elif repo is None:
            result.repo_note = (
                f"repo root {md.repo_root} is missing: every reference is unverifiable"
            )
        # Ownership is decided by the index code; a pass may not move files whose pointer
        # lines it is not allowed to remove.
        try:
            probe = probe_index(rt, md)
        except IndexBeingWritten as busy:
            # MEMORY.md is blank because a program is writing it: what it will hold decides
            # whether this pass may move anything. Next time.
            result.status = "skipped"
            result.message = str(busy)
            if not dry_run:
                audit.write("dream.skipped", dir=md.path, why=result.message)
            return result
        ownership, scan = probe.ownership, probe.scan
        if probe.snapshot is not None:
            result.probed_index = probe.snapshot.main.text
        managed = bool(ownership and ownership.managed)
        listing = Listing.of(scan) if scan is not None else None
        if scan is not None:
            result.merge_conflicts = sorted(
                n for n, f in scan.problems.items() if f.problem_kind == "conflict"
            )
        # Of the scan, the pass keeps only names: the listing, and what its own index update
        # needs (see Basis: with the index files as the probe read them, not read again). Nor
        # does the store hold the parse cache past here (a full index pass, when one is needed
        # after all, reads it again).
        basis = (
            Basis.of(scan, rt.store.load(md.real_path).seen, probe.snapshot)
            if scan is not None and managed and not dry_run
            else None
        )
        # The index files as the probe read them: looked at for secrets, not read again.
        read = {} if probe.snapshot is None else {n: i.text for n, i in probe.snapshot.texts}
        del scan, probe
        rt.store.release_cache(md.real_path)
        inv = inventory(
            md, rt, checker, listing=listing, save=not dry_run, budget=budget, read=read
        )
        del listing
        result.files = len(inv.items)
        result.unparseable = inv.unparseable
        result.conflicts = inv.conflicts
        result.secrets = inv.secrets
        sources = consult_sources(md, rt, extra_sources, save=not dry_run)
        consults = consult_map(inv.items, sources, now - rt.config.dream.consult_window, budget)
        plan = plan_pass(inv.items, now, thresholds(rt), consults, restored_pins(rt, md, inv))
        budget.check("the plan")
        result.plan = plan
        result.acknowledged = acked.acknowledged(acked.load(rt.store, md.real_path), plan)
        # What was already said lives in the dir's state: loaded once and saved once, not per
        # row (a save per kept memory was most of a 10,000-memory pass).
        said = None if dry_run else rt.store.load(md.real_path)
        if said is not None:
            for flag in plan.flagged:
                signature = f"{plan.items[flag.filename].sha256}:{flag.guard}"
                if flag.guard and said.report_once(f"dream:kept:{flag.filename}", signature):
                    audit.write(
                        "dream.kept",
                        dir=md.path,
                        file=flag.filename,
                        guard=flag.guard,
                        reason="fully stale, kept by a guard",
                        # A count, not the paths: they are memory text (DESIGN §2.8).
                        missing=len(flag.missing),
                    )
        if said is not None:
            report_secrets(rt, md, said, inv)
        if not managed:
            result.status = "unmanaged"
            reason = ownership.reason if ownership else "the index could not be read"
            result.message = reason + "; the pass reports and moves nothing"
            # As an index pass says it (DESIGN §3: once, with the reason).
            if said is not None and said.report_once("unmanaged", re.sub(r"\d+", "N", reason)):
                audit.write("index.unmanaged", dir=md.path, reason=reason)
        elif plan.refused:
            result.status = "refused"
            result.message = plan.refused
            if not dry_run:  # kept for a person to apply after review (`dream --apply`)
                refused.save(rt.paths.state_dir, md.real_path, pass_id, plan)
            signature = ",".join(f"{m.filename}:{m.sha256[:12]}" for m in plan.moves)
            if said is not None and said.report_once("dream:refused", signature):
                audit.write(
                    "dream.refused",
                    dir=md.path,
                    pass_id=pass_id,
                    would_move=len(plan.moves),
                    limit=plan.limit,
                    plan=[
                        {"file": m.filename, "reason": m.reason, "detail": _logged_detail(m, plan)}
                        for m in plan.moves
                    ],
                )
                for move in plan.moves:
                    audit.write(
                        "dream.move_skipped", dir=md.path, file=move.filename, why="circuit breaker"
                    )
        if said is not None:
            rt.store.save(md.real_path, said)
        if managed and not plan.refused:
            if dry_run:
                result.status = "dry_run"
            elif plan.moves:
                budget.check("the first move")
                _apply(rt, md, plan, result, basis, grace, before_move)
        if not dry_run and managed and result.index is None:
            result.index = index_after_dream(rt, md, frozenset(), basis, grace=grace)
        moved = (
            [m.filename for m in plan.moves]
            if result.status == "dry_run"
            else [r.original_name for r in result.moved]
        )
        result.dangling = inv.dangling(moved)
        if result.index is not None and result.index.status in INDEX_NOT_UPDATED:
            raise IndexNotWritten(_index_failure(md, result))
    except (MemorydError, OSError) as error:
        result.status = "failed"
        result.message = str(error)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        if not dry_run:
            audit.write("dream.failed", dir=md.path, error=str(error), **_summary(result))
            if isinstance(error, PassStopped) and error.budget:
                # Counted as a pass for `dream.min_interval`: the daemon must not spend the
                # whole budget again at its next look.
                state = rt.store.load(md.real_path)
                state.last_dream_ts, state.last_dream_result = now, result.status
                rt.store.save(md.real_path, state)
        return result
    result.duration_ms = int((time.monotonic() - started) * 1000)
    if not dry_run:
        # A pass someone asked for by piling up changes is news; a rerun with nothing to do
        # from the command line is not (DESIGN §2.6).
        acted = bool(result.moved or result.skipped_moves) or trigger != "command"
        audit.write(
            "dream.completed",
            dir=md.path,
            level="info" if acted else "debug",
            pass_id=pass_id,
            status=result.status,
            **_summary(result),
        )
        state = rt.store.load(md.real_path)
        state.last_dream_ts = now
        state.last_dream_result = result.status
        state.last_dream_flagged = result.counts()["flagged"]
        state.changed_since_dream = []
        rt.store.save(md.real_path, state)
    return result


def _other_secrets(
    dir_fd: int,
    names: Sequence[str],
    limit: int,
    seen: dict[str, tuple[Finding, ...]],
    held: dict[str, list[Finding]],
    read: Mapping[str, str | None],
) -> dict[str, str]:
    """Put in `held` the secrets of the dir's files that are no memories (MEMORY.md, the
    archive, notes), found by content as the memories' are (`seen`); a missing file holds
    none. `read`: texts the pass already read (not read again). Returns the content hash of
    each file that holds one (of its text, so that a file read either way has one key)."""
    out: dict[str, str] = {}
    for name in names:
        if name in read:
            text = read[name]
        else:
            try:
                data, _ = fsops.read_regular(dir_fd, name, limit)
            except (OSError, ValueError):
                continue
            text = data.decode("utf-8", "replace")
        if text is None:
            continue
        sha256 = hashlib.sha256(text.encode()).hexdigest()
        found = seen.get(sha256)
        if found is None:
            found = seen[sha256] = tuple(find(text))
        if found:
            held[name] = list(found)
            out[name] = sha256
    return out


def report_secrets(rt: Runtime, md: MemoryDir, said: DirState, inv: Inventory) -> None:
    """`memory.secret_found` for each secret (file, line, kind: never the value), said once
    per file version: a file is said again only once its bytes change and still hold one."""
    sha = {i.filename: i.sha256 for i in inv.items} | inv.other_shas
    current = set()
    for name, found in sorted(inv.secrets.items()):
        key = f"secret:{name}"
        current.add(key)
        if said.report_once(key, sha.get(name, "?")):
            for finding in found:
                rt.audit.write(
                    "memory.secret_found", dir=md.path, file=name, line=finding.line,
                    kind=finding.kind,
                )  # fmt: skip
    said.forget_reports("secret:", current)
    # The files that may hold a secret now: those the pass found one in, and those it could
    # not read as memories (looked at by the purge itself); every other file holds none.
    _purge_cleaned(rt, md, {*inv.secrets, *inv.unparseable, *inv.conflicts})


def _purge_cleaned(rt: Runtime, md: MemoryDir, holding: set[str]) -> None:
    """The kept versions holding a secret no current file holds any more (taken out by
    hand) are removed (memoryd.purge), each with a `versions.purged` row. Each kept version
    is read once a process: those with no secret are remembered in the dream memo.
    `holding`: the only files of the dir that may hold a secret now (read again for its
    value's fingerprint; the pass keeps none)."""
    from memoryd import purge, versions

    store = rt.versions or versions.for_runtime(rt)
    with contextlib.suppress(OSError):
        purge.purge_gone_secrets(
            store, md.real_path, rt.audit.write, clean=rt.dream.secretless, holding=holding
        )


def _logged_detail(move: Move, plan: Plan) -> str:
    """A move's detail as the audit log may carry it: names and counts, never the paths or
    words of the memory's body that the report shows (DESIGN §2.8)."""
    if move.reason == "stale":
        return f"all {len(plan.items[move.filename].missing)} paths it names are gone"
    if move.superseded_by:
        return f"the newer {move.superseded_by} says the opposite"
    return move.detail  # a duplicate: an overlap and the newer file's name


def probe_ownership(rt: Runtime, md: MemoryDir) -> tuple[Ownership | None, DirScan | None]:
    """Whether memoryd manages the dir's index, and the scan made to find out.

    The index edit is not made (indexing.passes.ownership_for_dream stops once ownership is decided:
    the edit was a tenth of a 10,000-memory pass), and only these two are kept. Raises
    IndexBeingWritten when MEMORY.md stays blank while a program writes it.
    """
    probe = probe_index(rt, md)
    return probe.ownership, probe.scan


def probe_index(rt: Runtime, md: MemoryDir) -> IndexOutcome:
    """probe_ownership's outcome whole: also the index files as it read them (`snapshot`), for
    a pass that moves files to take instead of reading them again."""
    probe = ownership_for_dream(rt, md)
    if probe.status is IndexStatus.SETTLING:
        raise IndexBeingWritten(probe.message)
    return probe


class IndexBeingWritten(MemorydError):
    """The dir's index is being written by another program (see indexing.read.settles_at)."""


def _summary(result: DreamResult) -> dict[str, Any]:
    c = result.counts()
    return {
        "saved": c["surviving"],
        "deleted": len(result.moved),
        "flagged": c["flagged"],
        "kept": c["kept_by_guard"],
        "duration_ms": result.duration_ms,
    }


def _trash_records(
    plan: Plan,
    md: MemoryDir,
    pass_id: str,
    folder: Path,
    missing: Mapping[str, list[str]] | None = None,
    known: Basis | None = None,
    versions: IndexKeeper | None = None,
) -> list[TrashRecord]:
    """One manifest record per planned move, each with a free name in the day folder.
    `missing`: each move's missing references, for a plan without its items (a stored one).
    `known`: the index files as the pass's probe read them."""
    lines, places = _index_lines(md, {move.filename for move in plan.moves}, known, versions)
    records: list[TrashRecord] = []
    taken: set[str] = set()
    for move in plan.moves:
        stored = trash.free_name(folder, move.filename, taken)  # never one name for two moves
        taken.add(stored)
        records.append(
            _record(
                move,
                md,
                pass_id,
                folder.name,
                stored,
                lines.get(move.filename),
                missing[move.filename]
                if missing is not None
                else plan.items[move.filename].missing,
                places.get(move.filename),
            )
        )
    return records


def _apply(
    rt: Runtime,
    md: MemoryDir,
    plan: Plan,
    result: DreamResult,
    basis: Basis | None,
    grace: float,
    before_move: Callable[[str], None] | None = None,
    missing: Mapping[str, list[str]] | None = None,
) -> None:
    """Journal the moves, then make each one whose file is still what was planned."""
    # The date is taken once: a pass running over midnight keeps one day folder.
    with trash.Mover(
        md.real_path, rt.today(), before_move=before_move, versions=rt.versions
    ) as mover:
        records = _trash_records(
            plan, md, result.pass_id, mover.folder, missing, basis, rt.versions
        )
        entry = _move_all(rt, md, mover, records, result)
    # The moves are on disk (the mover synced them): the index, then the journal's end.
    moved = {r.original_name for r in result.moved}
    result.index = index_after_dream(rt, md, moved, basis, grace=grace)
    if not result.index.write_failed:
        journal.commit(entry)
    # Else the journal stays: the next memoryd command recovers the pass, which removes the
    # moved files' pointers once the index can be written (DirState.gone says so too, but
    # the state dir may be on the disk that is full).


# Index outcomes after which the pass's pointer edits are not on disk: a failed pass. (Its
# moved files' pointers go at a later pass: DirState.gone, and the journal for a failed write.)
INDEX_NOT_UPDATED = (IndexStatus.ERROR, IndexStatus.CONFLICT, IndexStatus.SETTLING)


class IndexNotWritten(MemorydError):
    """The pass's index update failed: the pass failed, whatever it moved."""


def _index_failure(md: MemoryDir, result: DreamResult) -> str:
    index = result.index
    assert index is not None
    what = index.message or "the index update failed"
    if not result.moved:
        return f"{md.path / INDEX_NAME} was not updated: {what}"
    return (
        f"{len(result.moved)} file(s) were moved to the trash, but {md.path / INDEX_NAME} "
        f"could not be updated: {what}. Their pointer lines go at the next `memoryd index` "
        "or `dream` that can write it"
    )


def _move_all(
    rt: Runtime, md: MemoryDir, mover: trash.Mover, records: list[TrashRecord], result: DreamResult
) -> journal.Journal:
    """Journal the records, then move each file that is still what was planned (the mover
    checks it, and checks what it moved)."""
    entry = journal.begin(rt.paths.state_dir, result.pass_id, md.real_path, records)
    for record in records:
        outcome = mover.move(record)
        if isinstance(outcome, trash.Unmoved):
            result.skipped_moves.append((record.original_name, outcome.why))
            kept = {"kept_as": outcome.kept_as} if outcome.kept_as else {}
            if outcome.kept_as:
                result.kept_as[record.original_name] = outcome.kept_as
            rt.audit.write(
                "dream.move_skipped", dir=md.path, file=record.original_name, why=outcome.why,
                **kept,
            )  # fmt: skip
            continue
        journal.mark_done(entry, record.id)
        result.moved.append(outcome)
        rt.audit.write(
            "trash.moved",
            dir=md.path,
            file=record.original_name,
            id=record.id,
            reason=record.reason,
            sha256=record.sha256,
            duplicate_of=record.duplicate_of,
            superseded_by=record.superseded_by,
            stored=trash.stored_label(md.real_path, record.day, record.stored_name),
        )
    return entry


class PlanChanged(MemorydError):
    """A refused plan's files are not what it was made from: it is not applied."""


def apply_refused(
    rt: Runtime,
    md: MemoryDir,
    pass_id: str,
    *,
    before_move: Callable[[str], None] | None = None,
) -> DreamResult:
    """Apply exactly the plan a refused pass kept (memoryd.dream.refused), after a person's
    review: the same journalled, checked moves and index update as a pass's, under the dir's
    writer lock. Nothing moves unless every file the plan rests on still holds the bytes it
    was planned from (PlanChanged names those that do not), and the dir's index is still
    memoryd's. The plan is removed once applied."""
    started = time.monotonic()
    with rt.store.reading(md.real_path), rt.store.lock(md.real_path):
        stored = refused.load(rt.paths.state_dir, md.real_path, pass_id)
        probe = probe_index(rt, md)
        ownership, scan = probe.ownership, probe.scan
        if not (ownership and ownership.managed) or scan is None:
            why = ownership.reason if ownership else "its index cannot be read"
            raise MemorydError(
                f"{md.path}: memoryd does not manage this dir's index now ({why}); the plan "
                f"{pass_id} is not applied and nothing moved"
            )
        changed = _changed_since(rt, md, stored.files)
        if changed:
            raise PlanChanged(
                f"{md.path}: the plan {pass_id} is not applied, nothing moved: "
                + "; ".join(f"{name} {why}" for name, why in changed)
                + ". Run `memoryd dream` for a plan of the files as they are now"
            )
        result = DreamResult(md, pass_id, "completed")
        plan = Plan(items={}, moves=stored.as_moves())
        result.plan = plan
        result.files = len(scan.memories)
        basis = Basis.of(scan, rt.store.load(md.real_path).seen, probe.snapshot)
        del scan, probe
        rt.audit.write("dream.started", dir=md.path, pass_id=pass_id, trigger="apply")
        _apply(rt, md, plan, result, basis, 0.0, before_move, stored.missing())
        refused.remove(rt.paths.state_dir, md.real_path, pass_id)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        if result.index is not None and result.index.status in INDEX_NOT_UPDATED:
            result.status = "failed"
            result.message = _index_failure(md, result)
            rt.audit.write("dream.failed", dir=md.path, error=result.message, **_summary(result))
            return result
        rt.audit.write(
            "dream.completed",
            dir=md.path,
            pass_id=pass_id,
            status=result.status,
            applied="refused plan",
            **_summary(result),
        )
        state = rt.store.load(md.real_path)
        state.last_dream_ts, state.last_dream_result = rt.clock(), result.status
        rt.store.save(md.real_path, state)
    return result


def _changed_since(rt: Runtime, md: MemoryDir, files: Mapping[str, str]) -> list[tuple[str, str]]:
    """The files of a stored plan that no longer hold the bytes it was made from."""
    out = []
    with fsops.open_dir(md.real_path) as fd:
        for name, sha256 in sorted(files.items()):
            try:
                data, _ = fsops.read_regular(fd, name, rt.config.parse.max_file_bytes)
            except FileNotFoundError:
                out.append((name, "is gone"))
                continue
            except (OSError, ValueError):
                out.append((name, "cannot be read"))
                continue
            if hashlib.sha256(data).hexdigest() != sha256:
                out.append((name, "changed since the plan"))
    return out
