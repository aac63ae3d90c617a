"""What one dir's dream pass did (or, for a dry run, would do): the report's source."""

from collections import Counter
from dataclasses import dataclass, field

from memoryd.discover.found import MemoryDir
from memoryd.dream.kinds import MoveReason, PassStatus
from memoryd.dream.plan import Flag, Plan, kept_by_guard
from memoryd.dream.refs import Classification
from memoryd.indexing.outcome import IndexOutcome, IndexStatus
from memoryd.model.links import Dangling
from memoryd.model.secrets import Finding
from memoryd.trash.store import TrashRecord


@dataclass(slots=True)
class DreamResult:
    dir: MemoryDir
    pass_id: str
    status: PassStatus
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
    # Flagged memories a person acknowledged as they are now (memoryd.dream.acked): not listed.
    acknowledged: set[str] = field(default_factory=set)
    secrets: dict[str, list[Finding]] = field(default_factory=dict)  # file -> found
    dangling: list[Dangling] = field(default_factory=list)  # `[[name]]` links left naming none
    # MEMORY.md's text as the ownership probe read it (None: not read), see `index_text`.
    probed_index: str | None = None

    @property
    def index_text(self) -> str | None:
        """MEMORY.md's text as the pass left it (for the promotion candidates): the index
        update's when it wrote or checked it, the probe's when none ran; None after a failed one."""
        outcome = self.index
        if outcome is None:
            return self.probed_index
        current = outcome.status in (IndexStatus.UPDATED, IndexStatus.UNCHANGED)
        return outcome.edit.main if current and outcome.edit is not None else None

    def counts(self) -> dict[str, int]:
        """What the pass did; for a dry run, what it would do (its planned moves)."""
        plan = self.plan
        reasons = (
            [m.reason for m in plan.moves]
            if self.status is PassStatus.DRY_RUN and plan
            else [r.reason for r in self.moved]
        )
        moved_by = Counter(reasons)
        classes = plan.counts if plan else {}
        kept = len(kept_by_guard(plan)) if plan else 0
        listed = len(self.flags_listed)
        return {
            "files": self.files,
            "stale_pruned": moved_by[MoveReason.STALE],
            "duplicates_merged": moved_by[MoveReason.DUPLICATE],
            "contradictions_resolved": moved_by[MoveReason.CONTRADICTION],
            "partially_stale_kept": classes.get(Classification.PARTIALLY_STALE, 0),
            "evergreen": classes.get(Classification.EVERGREEN, 0),
            "fresh": classes.get(Classification.FRESH, 0),
            "kept_by_guard": kept,
            "surviving": self.files - len(reasons),
            "flagged": listed,
            "acknowledged": (len(plan.flagged) if plan else 0) - listed,
        }

    @property
    def flags_listed(self) -> list[Flag]:
        """The plan's flags but those a person acknowledged as the memory is now."""
        plan = self.plan
        return [f for f in plan.flagged if f.filename not in self.acknowledged] if plan else []

    @property
    def flags_acknowledged(self) -> list[Flag]:
        plan = self.plan
        return [f for f in plan.flagged if f.filename in self.acknowledged] if plan else []
