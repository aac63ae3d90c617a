"""The dream pass's named outcomes, as string enums (the JSON and the audit rows carry the words;
a comparison with the plain word holds)."""

from enum import StrEnum


class PassStatus(StrEnum):
    """How one dir's pass ended."""

    COMPLETED = "completed"
    DRY_RUN = "dry_run"
    REFUSED = "refused"  # the circuit breaker stopped the moves
    SKIPPED = "skipped"  # another process or Claude Code holds the dir, or MEMORY.md settles
    UNMANAGED = "unmanaged"  # memoryd does not manage the index: nothing moves
    FAILED = "failed"


class MoveReason(StrEnum):
    """Why the plan sends a memory to the trash (DESIGN §4)."""

    STALE = "stale"
    DUPLICATE = "duplicate"
    CONTRADICTION = "contradiction"


class PairKind(StrEnum):
    """How the pass reads two memories of one type at or above the contradiction threshold."""

    CONTRADICTION = "contradiction"
    DUPLICATE = "duplicate"
    CANDIDATE = "contradiction candidate"


class FlagKind(StrEnum):
    """Why a memory is listed for review instead of moved."""

    PARTIALLY_STALE = "partially_stale"  # some of the paths it names are gone
    KEPT_BY_GUARD = "kept_by_guard"  # fully stale, but a prune guard holds
