"""Evidence that the agent consulted a memory recently (a prune guard). Reads only.

Sources (`ConsultSource`): the agent's own tool calls on memory files (`RecordedConsults`, from
the session transcripts: `dream.transcripts`), the calls memoryd's MCP server answered
(`dream.consults.served`, in the consult log's format), and the repo's `memory-consult.jsonl`.
Unsure means consulted: a log that exists but cannot be read protects every memory.
"""

import math
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from rapidfuzz import fuzz, process, utils

from memoryd.model import safejson

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


def row_time(row: Mapping[str, object]) -> float | None:
    """A row's time from `ts`, `timestamp` or `time` (epoch s or ms, or ISO 8601), or None."""
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


# A row without a time counts at any `since`.
_ALWAYS = float("inf")
# fuzz.ratio is 2·LCS / (len(a) + len(b)): at the cutoff the longer string is at most this many
# times the shorter, so only strings of lengths in that window are compared.
_LENGTH_SPAN = 200.0 / FUZZY_CUTOFF - 1.0


@dataclass(frozen=True, slots=True)
class _ByLength:
    """Strings grouped by length, each with the text a match of it reports."""

    groups: Mapping[int, tuple[list[str], list[str]]]  # length -> (strings, what to report)

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> "_ByLength":
        groups: dict[int, tuple[list[str], list[str]]] = {}
        for text, shown in pairs:
            strings, shown_as = groups.setdefault(len(text), ([], []))
            strings.append(text)
            shown_as.append(shown)
        return cls(groups)

    def match(self, query: str) -> str | None:
        """What the first string within FUZZY_CUTOFF of ``query`` reports, or None."""
        size = len(query)
        low, high = math.ceil(size / _LENGTH_SPAN - 1e-9), math.floor(size * _LENGTH_SPAN + 1e-9)
        for length in range(low, high + 1):
            group = self.groups.get(length)
            if group is None:
                continue
            found = process.extractOne(
                query, group[0], scorer=fuzz.ratio, processor=None, score_cutoff=FUZZY_CUTOFF
            )
            if found is not None:
                return group[1][found[2]]
        return None


@dataclass(frozen=True, slots=True)
class _Window:
    """The log's names and query words of rows at or after one `since`, ready to match."""

    since: float
    names: frozenset[str]
    fuzzy_names: _ByLength  # each name as `utils.default_process` leaves it
    words: _ByLength


@dataclass(slots=True)
class ConsultLog:
    """`<repo>/.claude/logs/memory-consult.jsonl`: rows with `names` and/or a `query`, kept as
    their distinct names and query words with the newest time of each: a pass is linear in the
    log, not the log times the memories (a 4 MB log took a 20-memory pass 8 s)."""

    path: Path
    unreadable: str = ""  # why the log could not be read; then everything counts as consulted
    names: dict[str, float] = field(default_factory=dict)  # lower-cased name -> newest time
    words: dict[str, float] = field(default_factory=dict)  # query word -> newest time
    _window: _Window | None = None

    shown: str = ""  # how evidence names the log (default: its file name)

    @classmethod
    def load(cls, repo_root: Path | None) -> "ConsultLog | None":
        """The repo's log; None when there is none (no evidence either way)."""
        return None if repo_root is None else cls.read(repo_root / CONSULT_LOG)

    @classmethod
    def read(cls, path: Path) -> "ConsultLog | None":
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
                row = safejson.loads(raw)
            except ValueError:
                continue  # torn or foreign rows are skipped
            if isinstance(row, dict):
                log.add(row)
        return log

    def add(self, row: Mapping[str, object]) -> None:
        """Take one row (`ts`, `names` and/or `query`); one with neither says nothing."""
        names = row.get("names") or []
        query = row.get("query")
        if not (isinstance(names, list) and names) and not isinstance(query, str):
            return
        when = row_time(row)
        newest = _ALWAYS if when is None else when
        if isinstance(names, list):
            for name in names:
                _keep_newest(self.names, str(name).lower(), newest)
        if isinstance(query, str):
            for word in _tokens(query):
                _keep_newest(self.words, word, newest)

    def evidence(self, subject: Subject, since: float) -> str | None:
        if self.unreadable:
            return f"{self.path} exists but cannot be read ({self.unreadable}): unsure means kept"
        window = self._window
        if window is None or window.since != since:
            window = self._window = self._window_at(since)
        keys = {subject.stem.lower(), subject.name.lower(), subject.filename.lower()} - {""}
        for key in sorted(keys):
            if key in window.names:
                return f"named in {self.shown or self.path.name}: {key}"
        for key in sorted(keys):
            found = window.fuzzy_names.match(utils.default_process(key))
            if found is not None:
                return f"named in {self.shown or self.path.name}: {found}"
        for token in sorted(set(_tokens(subject.name) + _tokens(subject.stem.replace("_", " ")))):
            found = window.words.match(token)
            if found is not None:
                return f"query word '{found}' in {self.shown or self.path.name}"
        return None

    def _window_at(self, since: float) -> _Window:
        names = [name for name, when in self.names.items() if when >= since]
        words = [word for word, when in self.words.items() if when >= since]
        return _Window(
            since,
            frozenset(names),
            _ByLength.of((utils.default_process(name), name) for name in names),
            _ByLength.of((word, word) for word in words),
        )


SERVED_SHOWN = "memoryd's MCP server log"


def _keep_newest(seen: dict[str, float], key: str, when: float) -> None:
    if seen.get(key, -_ALWAYS) < when:
        seen[key] = when


@dataclass(frozen=True, slots=True)
class Seen:
    """One recorded consult of a memory by the agent: the newest one known for that file."""

    when: float
    session: str
    tool: str  # Read, Edit, Bash...
    where: str  # the record it was found in (a transcript, relative to `projects/`)

    def row(self) -> list[object]:
        return [self.when, self.session, self.tool, self.where]

    @classmethod
    def of(cls, row: object) -> "Seen | None":
        """From `row()`'s form; None for anything else (a foreign or damaged state file)."""
        if not isinstance(row, list) or len(row) != 4:
            return None
        when, session, tool, where = row
        if isinstance(when, bool) or not isinstance(when, int | float):
            return None
        if not all(isinstance(v, str) for v in (session, tool, where)):
            return None
        return cls(float(when), session, tool, where)

    def describe(self) -> str:
        stamp = datetime.fromtimestamp(self.when, UTC).isoformat(timespec="seconds")
        return (
            f"{self.tool} by the agent at {stamp.replace('+00:00', 'Z')} in session "
            f"{self.session or '(unknown)'} (transcript {self.where})"
        )


@dataclass(frozen=True, slots=True)
class RecordedConsults:
    """The agent's tool calls on one memory dir's files (file -> newest), as recorded.
    `unsure`: why recent calls may be missing (transcripts not read to the end): then every
    memory counts as consulted."""

    seen: Mapping[str, Seen]
    unsure: str = ""

    def evidence(self, subject: Subject, since: float) -> str | None:
        found = self.seen.get(subject.filename)
        if found is not None and found.when >= since:
            return found.describe()
        return self.unsure or None


def consulted(sources: Iterable[ConsultSource], subject: Subject, since: float) -> str | None:
    return next((found for s in sources if (found := s.evidence(subject, since))), None)
