"""Evidence that the agent consulted a memory recently (a prune guard). Reads only.

Two sources plug in through `ConsultSource`: the repo's `memory-consult.jsonl` log, and read
events the daemon records. Unsure means consulted: a log that exists but cannot be read protects
every memory.
"""

import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from rapidfuzz import fuzz, process, utils

CONSULT_LOG = Path(".claude") / "logs" / "memory-consult.jsonl"
MAX_LOG_BYTES = 32 * 1024 * 1024
FUZZY_CUTOFF = 88.0
_WORD = re.compile(r"[A-Za-z0-9\u0080-\uffff]+")


@dataclass(frozen=True, slots=True)
class Subject:
    """What a consult signal is matched against: a memory's file name and name."""

    filename: str
    name: str

    @property
    def stem(self) -> str:
        return self.filename.removesuffix(".md")


class ConsultSource(Protocol):
    def evidence(self, subject: Subject, since: float) -> str | None:
        """A one-line description of a consult at or after `since`, or None."""


def _tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if len(w) > 2]


def _row_time(row: Mapping[str, object]) -> float | None:
    for key in ("ts", "timestamp", "time"):
        value = row.get(key)
        if isinstance(value, int | float):
            return float(value) / (1000.0 if value > 1e11 else 1.0)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


@dataclass(slots=True)
class ConsultLog:
    """`<repo>/.claude/logs/memory-consult.jsonl`: rows with `names` and/or a `query`."""

    path: Path
    unreadable: str = ""  # why the log could not be read; then everything counts as consulted
    rows: list[tuple[float | None, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)

    @classmethod
    def load(cls, repo_root: Path | None) -> "ConsultLog | None":
        """None when there is no log (no evidence either way)."""
        if repo_root is None:
            return None
        path = repo_root / CONSULT_LOG
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as error:
            return cls(path, unreadable=error.strerror or "cannot stat")
        if not stat.S_ISREG(st.st_mode):
            return cls(path, unreadable="not a regular file")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as handle:
                data = handle.read(MAX_LOG_BYTES)
        except OSError as error:
            return cls(path, unreadable=error.strerror or "cannot read")
        log = cls(path)
        for raw in data.split(b"\n"):
            try:
                row = json.loads(raw)
            except ValueError:
                continue  # torn or foreign rows are skipped
            if not isinstance(row, dict):
                continue
            names = row.get("names") or []
            names = tuple(str(n).lower() for n in names) if isinstance(names, list) else ()
            query = row.get("query")
            words = tuple(_tokens(query)) if isinstance(query, str) else ()
            if names or words:
                log.rows.append((_row_time(row), names, words))
        return log

    def evidence(self, subject: Subject, since: float) -> str | None:
        if self.unreadable:
            return f"{self.path} exists but cannot be read ({self.unreadable}): unsure means kept"
        keys = {subject.stem.lower(), subject.name.lower(), subject.filename.lower()} - {""}
        tokens = sorted(set(_tokens(subject.name) + _tokens(subject.stem.replace("_", " "))))
        for when, names, words in self.rows:
            if when is not None and when < since:
                continue
            for name in names:
                if name in keys or process.extractOne(
                    name,
                    keys,
                    scorer=fuzz.ratio,
                    processor=utils.default_process,
                    score_cutoff=FUZZY_CUTOFF,
                ):
                    return f"named in {self.path.name}: {name}"
            for word in words:
                if tokens and process.extractOne(
                    word, tokens, scorer=fuzz.ratio, score_cutoff=FUZZY_CUTOFF
                ):
                    return f"query word '{word}' in {self.path.name}"
        return None


@dataclass(slots=True)
class ReadEvents:
    """Reads of memory files by other processes, recorded by the daemon: file -> last time."""

    last_read: Mapping[str, float]

    def evidence(self, subject: Subject, since: float) -> str | None:
        when = self.last_read.get(subject.filename)
        if when is not None and when >= since:
            return (
                f"read by the agent at {datetime.fromtimestamp(when).isoformat(timespec='seconds')}"
            )
        return None


def consulted(sources: Iterable[ConsultSource], subject: Subject, since: float) -> str | None:
    for source in sources:
        found = source.evidence(subject, since)
        if found:
            return found
    return None
