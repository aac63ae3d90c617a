"""The read and plan half of a dream pass, the one that `dream`, `dream explain` and `ack` share:
the repo snapshot, the ownership probe (with its scan), the inventory, the consult evidence,
then the pure plan with its circuit breaker. Nothing here moves a file or writes the index."""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from memoryd.discover.found import MemoryDir
from memoryd.discover.look import resolved
from memoryd.dream import transcripts
from memoryd.dream.budget import PassBudget
from memoryd.dream.consult import (
    ConsultLog,
    ConsultSource,
    RecordedConsults,
    Subject,
    consulted,
)
from memoryd.dream.inventory import Inventory, Listing, inventory
from memoryd.dream.plan import Item, Plan, plan_pass
from memoryd.dream.refs import RefChecker
from memoryd.dream.repocache import RepoCache
from memoryd.errors import MemorydError
from memoryd.indexing.outcome import IndexOutcome, IndexStatus
from memoryd.indexing.passes import ownership_for_dream
from memoryd.indexing.read import Basis
from memoryd.model.index import Ownership
from memoryd.runtime import Runtime
from memoryd.trash import restored


@dataclass(slots=True)
class Reading:
    """What one read of a dir found, and the plan made from it (of the probe's scan, names)."""

    now: float  # the pass's time (rt.clock): the plan's guards and consult window go by it
    checker: RefChecker
    ownership: Ownership | None
    inv: Inventory
    consults: dict[str, str | None]
    pins: dict[str, str]  # restored memories -> what their pin says
    plan: Plan
    basis: Basis | None = None
    probed_index: str | None = None  # MEMORY.md's text as the probe read it
    merge_conflicts: list[str] = field(default_factory=list)  # files with git's markers

    @property
    def managed(self) -> bool:
        return bool(self.ownership and self.ownership.managed)

    @property
    def why_unmanaged(self) -> str:
        return self.ownership.reason if self.ownership else "the index could not be read"


def read_and_plan(
    rt: Runtime,
    md: MemoryDir,
    repos: RepoCache,
    *,
    save: bool = False,
    budget: PassBudget | None = None,
) -> Reading:
    """Read the dir as it is now and plan its pass. `save` (no dry run): keep the repo token
    cache, the facts and how far the transcripts were read, and make the index update's basis
    (for a managed dir). `budget`: checked between steps and after each file. Raises
    IndexBeingWritten while a program writes MEMORY.md."""
    budget = budget or PassBudget(math.inf, math.inf)
    now = rt.clock()
    budget.check("the start")
    checker = repos.checker(md.repo_root, save=save)
    budget.check("the repo snapshot")
    # A pass may not move files whose pointer lines it may not remove: the index code decides.
    probe = probe_index(rt, md)
    ownership, scan = probe.ownership, probe.scan
    managed = bool(ownership and ownership.managed)
    texts = {} if probe.snapshot is None else {n: i.text for n, i in probe.snapshot.texts}
    listing = Listing.of(scan) if scan is not None else None
    merge_conflicts = sorted(
        n for n, f in (scan.problems.items() if scan else ()) if f.problem_kind == "conflict"
    )
    basis = (
        Basis.of(scan, rt.store.load(md.real_path).seen, probe.snapshot)
        if scan is not None and managed and save
        else None
    )
    probed = probe.snapshot.main.text if probe.snapshot is not None else None
    del scan, probe  # nor is the parse cache held past here (an index pass reads it again)
    rt.store.release_cache(md.real_path)
    inv = inventory(md, rt, checker, listing=listing, save=save, budget=budget, read=texts)
    del listing
    sources = consult_sources(md, rt, save=save)
    consults = consult_map(inv.items, sources, now - rt.config.dream.consult_window, budget)
    pins = restored_pins(rt, md, inv)
    plan = plan_pass(inv.items, now, rt.config.dream, consults, pins)
    budget.check("the plan")
    return Reading(
        now, checker, ownership, inv, consults, pins, plan, basis, probed, merge_conflicts
    )


def probe_index(rt: Runtime, md: MemoryDir) -> IndexOutcome:
    """Whether memoryd manages the dir's index, the scan made to find out, and the index files
    as read (`snapshot`); no edit is made. Raises IndexBeingWritten when MEMORY.md stays blank
    while a program writes it."""
    probe = ownership_for_dream(rt, md)
    if probe.status is IndexStatus.SETTLING:
        raise IndexBeingWritten(probe.message)
    return probe


class IndexBeingWritten(MemorydError):
    """The dir's index is being written by another program (see indexer.settles_at)."""


def restored_pins(rt: Runtime, md: MemoryDir, inv: Inventory) -> dict[str, str]:
    """The memories a person restored, still as restored -> what their pin says."""
    found = restored.pinned(
        restored.load(rt.store, md.real_path), ((i.filename, i.sha256) for i in inv.items)
    )
    return {name: pin.detail for name, pin in found.items()}


def consult_sources(md: MemoryDir, rt: Runtime, *, save: bool = True) -> list[ConsultSource]:
    """The agent's tool calls on the dir's files in the transcripts (`save`: keep how far they
    were read), memoryd's MCP server's answers about the dir, and the repo's consult log."""
    since = rt.clock() - rt.config.dream.consult_window
    known = {md.real_path, *(resolved(p) for p in rt.config.paths.extra_memory_dirs)}
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
    from memoryd.dream.consults import served

    logs = served(rt.paths.state_dir, md.real_path), ConsultLog.load(md.repo_root)
    recorded = RecordedConsults(found.evidence_for(md.real_path), unsure)
    return [recorded, *(log for log in logs if log is not None)]


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
