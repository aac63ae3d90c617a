"""What dream passes keep for later passes in the same process: repo snapshots and facts.
One lives in each Runtime (no module global: two Runtimes never see each other's)."""

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # not imported at run time: the facts module pulls in numpy
    from memoryd.dream.facts import FactsCache
    from memoryd.dream.refs import RefChecker
    from memoryd.dream.repo import SourceTokens
    from memoryd.model.secrets import Finding


@dataclass(eq=False)
class DreamMemo:
    # Repo snapshots with the reference checks made against them, per repo root, the least
    # recently used first; and the sources last read from or written to the state dir.
    snapshots: "dict[Path, RefChecker]" = field(default_factory=dict)
    on_disk: "dict[Path, SourceTokens]" = field(default_factory=dict)
    repo_lock: threading.Lock = field(default_factory=threading.Lock)
    # Each memory's derived facts by content hash (made by the first pass that needs them);
    # per dir, the contents whose facts the state dir holds as this process last read or
    # wrote them, so a pass over the same contents does not write them again.
    facts: "FactsCache | None" = None
    saved_facts: dict[Path, frozenset[str]] = field(default_factory=dict)
    facts_lock: threading.Lock = field(default_factory=threading.Lock)
    # Per dir, the secrets of each content hash the last pass read (a scan costs a read).
    secrets: "dict[Path, dict[str, tuple[Finding, ...]]]" = field(default_factory=dict)
    # The kept versions (sha256) found to hold no secret: versions.purge reads each once.
    secretless: set[str] = field(default_factory=set)

    def release_facts(self) -> None:
        """Forget the facts kept for later passes (~2.3 KB a memory): the daemon dreams now and
        then and should not hold 23 MB at 10,000 memories in between."""
        with self.facts_lock:
            if self.facts is not None:
                self.facts.clear()
            self.secrets.clear()
