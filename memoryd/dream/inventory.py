"""What a pass reads of one dir: every memory file read and hashed, its facts derived (or
taken from the content-keyed cache), its references checked, its secrets and links found."""

import contextlib
import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from memoryd.discover.found import MemoryDir
from memoryd.dream.budget import PassBudget
from memoryd.dream.facts import Facts, FactsCache, derive, load_saved
from memoryd.dream.plan import Item, make_item
from memoryd.dream.refs import RefChecker
from memoryd.indexing.scan import DirScan, scan_dir
from memoryd.model import links as memory_links
from memoryd.model.index import ARCHIVE_NAME, INDEX_NAME
from memoryd.model.links import Dangling, links_in
from memoryd.model.memfile import Memory, parse_memory
from memoryd.model.secrets import Finding, find, find_bytes
from memoryd.runtime import DreamMemo, Runtime
from memoryd.storage import fsops


@dataclass(slots=True)
class Inventory:
    items: list[Item]
    unparseable: list[str]
    conflicts: list[str]
    # file -> the secrets it holds (line and kind, never the value): flagged, never moved.
    secrets: dict[str, list[Finding]] = field(default_factory=dict)
    # The content hash of each file in `secrets` that is no memory (its said-once key).
    other_shas: dict[str, str] = field(default_factory=dict)
    # file -> the names it links to as `[[name]]` (memoryd.model.links), for files with any.
    links: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def dangling(self, moved: Iterable[str] = ()) -> list[Dangling]:
        """The `[[name]]` links no memory answers to once `moved` are in the trash."""
        names = {i.filename: i.name for i in self.items}
        others = [*self.unparseable, *self.conflicts]
        return memory_links.dangling(self.links, names, others, moved)


def _facts_of(memo: DreamMemo) -> FactsCache:
    """The memo's facts (made here: memo.py may not import the facts module)."""
    if memo.facts is None:
        memo.facts = FactsCache()
    return memo.facts


INDEX_FILES = (INDEX_NAME, ARCHIVE_NAME)


@dataclass(frozen=True, slots=True)
class Listing:
    """The names a scan found, without the scan (~90 MB at 100,000 memories)."""

    memories: list[str]  # in name order
    problems: list[str]
    conflicts: list[str]
    # Notes (no frontmatter) and the index files: looked at for secrets only.
    others: list[str] = field(default_factory=lambda: list(INDEX_FILES))

    @classmethod
    def of(cls, scan: DirScan) -> "Listing":
        notes = sorted(n for n, s in scan.files.items() if s.kind == "note")
        return cls(
            sorted(scan.memories), sorted(scan.problems), list(scan.conflicts),
            [*INDEX_FILES, *notes],
        )  # fmt: skip


def scan_of(rt: Runtime, md: MemoryDir) -> DirScan:
    """A scan of the dir by the config's parse limits, from the state dir's scan cache."""
    return scan_dir(
        md.real_path,
        rt.store.load_cache(md.real_path),
        max_file_bytes=rt.config.parse.max_file_bytes,
        max_frontmatter_bytes=rt.config.parse.max_frontmatter_bytes,
        versions=rt.versions,
    )


def inventory(
    md: MemoryDir,
    rt: Runtime,
    checker: RefChecker,
    *,
    listing: Listing | None = None,
    save: bool = False,
    budget: PassBudget | None = None,
    read: Mapping[str, str | None] | None = None,
) -> Inventory:
    """Read and hash every memory file (a pass decides from the bytes as they are now); derive
    its facts unless held, or saved in the state dir by the dir's last saving pass.

    `listing`: the names a scan just found (the ownership probe's). `save` (no dry run): write
    the facts back when the contents changed. `budget`: checked after each file. `read`: the
    index files' texts as the pass read them (None: missing), looked at for secrets.
    """
    limits = rt.config.parse.max_file_bytes, rt.config.parse.max_frontmatter_bytes
    if listing is None:
        listing = Listing.of(scan_of(rt, md))
    memo = rt.dream
    with memo.facts_lock, fsops.open_dir(md.real_path) as dir_fd:
        reader = _Reader(rt, md, checker, limits, _facts_of(memo), dir_fd)
        reader.inv.unparseable.extend(listing.problems)
        reader.inv.conflicts = listing.conflicts
        reader.facts.begin(limits)
        for name in listing.memories:
            file_started = budget.clock() if budget is not None else 0.0
            reader.take(name)
            if budget is not None:
                budget.check(name, file_started)
        reader.inv.other_shas = _other_secrets(reader, listing.others, read or {})
        used = frozenset(reader.used)
        if save:  # before finish(), which may start the cache afresh
            _save_facts(rt, md, used)
        reader.facts.finish(md.real_path, used)
        memo.secrets[md.real_path] = reader.seen_secrets
    reader.inv.unparseable = sorted(set(reader.inv.unparseable))
    return reader.inv


@dataclass(slots=True)
class _Reader:
    """One inventory's reading of the dir's files, under the facts lock."""

    rt: Runtime
    md: MemoryDir
    checker: RefChecker
    limits: tuple[int, int]
    facts: FactsCache
    dir_fd: int
    inv: Inventory = field(default_factory=lambda: Inventory([], [], []))
    used: set[str] = field(default_factory=set)  # the content hashes of the dir's memories
    seen_secrets: dict[str, tuple[Finding, ...]] = field(default_factory=dict)
    looked: bool = False  # whether the saved facts were looked at

    def take(self, name: str) -> None:
        """Read one memory file into the inventory (or its unparseable list)."""
        try:
            data, st = fsops.read_regular(self.dir_fd, name, self.limits[0])
        except (OSError, ValueError):
            self.inv.unparseable.append(name)
            return
        sha256 = hashlib.sha256(data).hexdigest()
        found = self.secrets_in(sha256, lambda: find_bytes(data))
        if found:
            self.inv.secrets[name] = list(found)
        facts = self.facts_of(name, data, sha256)
        if facts is None:
            self.inv.unparseable.append(name)
            return
        self.used.add(sha256)
        self.inv.items.append(make_item(name, sha256, st.st_mtime, facts, self.checker))
        found_links = links_in(data)
        if found_links:
            self.inv.links[name] = found_links

    def secrets_in(
        self, sha256: str, find_them: Callable[[], Iterable[Finding]]
    ) -> tuple[Finding, ...]:
        """The secrets of a content, looked for once a process (by its hash)."""
        found = self.seen_secrets.get(sha256)
        if found is None:
            found = self.rt.dream.secrets.get(self.md.real_path, {}).get(sha256)
        if found is None:
            found = tuple(find_them())
        self.seen_secrets[sha256] = found
        return found

    def facts_of(self, name: str, data: bytes, sha256: str) -> Facts | None:
        """A content's facts: held, saved by the last pass, or derived (None: no memory)."""
        facts = self.facts.get(sha256)
        if facts is None and not self.looked:
            self.looked = True  # one look at the saved facts, at the first content not held
            _adopt_saved(self.rt, self.md, self.limits)
            facts = self.facts.get(sha256)
        if facts is None:
            parsed = parse_memory(
                name, data, max_file_bytes=self.limits[0], max_frontmatter_bytes=self.limits[1]
            )
            if not isinstance(parsed, Memory):
                return None
            facts = derive(parsed, self.facts.vocabulary)
            self.facts.put(sha256, facts)
        return facts


def _other_secrets(
    reader: _Reader, names: Sequence[str], read: Mapping[str, str | None]
) -> dict[str, str]:
    """Put in the inventory the secrets of the files that are no memories (index files, notes;
    `read`: texts the pass has). Returns the hash of each holding one (of its text, so that a
    file read either way has one key)."""
    out: dict[str, str] = {}
    for name in names:
        if name in read:
            text = read[name]
        else:
            try:
                data, _ = fsops.read_regular(reader.dir_fd, name, reader.limits[0])
            except (OSError, ValueError):
                continue
            text = data.decode("utf-8", "replace")
        if text is None:
            continue
        sha256 = hashlib.sha256(text.encode()).hexdigest()
        found = reader.secrets_in(sha256, functools.partial(find, text))
        if found:
            reader.inv.secrets[name] = list(found)
            out[name] = sha256
    return out


def _adopt_saved(rt: Runtime, md: MemoryDir, limits: tuple[int, int]) -> None:
    """Take the facts the dir's last saving pass saved (under the facts lock)."""
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
