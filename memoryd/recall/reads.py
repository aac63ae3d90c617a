"""Searching the index of one memory dir: what it returns (`Row`), and the queries.

`Searches` is DirIndex's reading half (memoryd.recall.store keeps the index up to date);
`Vocabulary` holds the dir's words for fuzzy matching.
"""

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from memoryd.model import safejson

RANK_ALL = 1000  # see Searches.match
VOCABULARY_PIECE = 256  # see Vocabulary
VOCABULARY_CHUNK = 2048
# Column weights for bm25: a word in the name counts most, then the file's stem, the
# description and the body.
WEIGHTS = (10.0, 4.0, 1.0, 8.0)  # name, description, body, stem


class Row(NamedTuple):
    """One memory as the index returns it."""

    id: int
    file: str
    name: str
    description: str
    type: str
    date: float
    flags: tuple[str, ...]
    tier: str  # index | archive | unindexed
    line: int  # the pointer's line in its index file (1-based), 0 when unindexed
    score: float = 0.0  # bm25: lower is better
    snippet: str = ""
    why: str = ""  # for recall: what matched
    # Why the agent does not see the memory's MEMORY.md pointer in what it loads (past line
    # 200, in a comment, ...: agentview.Hidden's words); "" when it sees one, or has none.
    hidden: str = ""


class Excluded(NamedTuple):
    """A file in the memory dir that is not searched, and why."""

    file: str
    kind: str  # note | problem
    why: str


@dataclass(frozen=True, slots=True)
class Filters:
    """Which memories a search looks at: of a type, in a time frame (`until` excluded)."""

    type_: str | None = None
    since: float | None = None
    until: float | None = None

    def sql(self) -> tuple[str, list[object]]:
        """The WHERE clause's tail (on `files f`) and its arguments."""
        sql, args = "", list[object]()
        if self.type_:
            sql += " AND f.type = ?"
            args.append(self.type_)
        if self.since is not None:
            sql += " AND f.date >= ?"
            args.append(self.since)
        if self.until is not None:
            sql += " AND f.date < ?"
            args.append(self.until)
        return sql, args


class Searches:
    """The searches of a DirIndex (see store.DirIndex, which supplies the connection and the
    retry on damage)."""

    _vocab: "tuple[tuple[int, int], Vocabulary] | None"
    _writes: int

    @property
    def conn(self) -> sqlite3.Connection:
        raise NotImplementedError

    def _retrying(self, step: Callable[[], Any], *, rebuild: bool = True) -> Any:
        raise NotImplementedError

    _SELECT = (
        "SELECT f.id, f.file, f.name, f.description, f.type, f.date, f.flags, "
        "COALESCE(p.tier, 'unindexed'), COALESCE(p.line, 0), COALESCE(p.hidden, '')"
    )

    def match(
        self,
        expression: str,
        *,
        type_: str | None = None,
        since: float | None = None,
        until: float | None = None,
        stale_before: float = 0.0,
        limit: int = 20,
    ) -> list[Row]:
        """Memories matching an FTS5 expression, confirmed ones first, then by bm25.

        bm25 costs about a microsecond per matching memory. A query matching more than
        RANK_ALL of them (words nearly every memory holds) ranks by bm25 only the matches in
        the fields that weigh most: name and file name, with the description too when those
        are still few enough; and fills up to `limit` with the most recently indexed of the other
        matches (mostly the newest files, as a changed file is indexed again: read in rowid
        order, which stops after `limit` rows instead of sorting every match)."""
        args = (Filters(type_, since, until), stale_before, limit)
        if self.matches(expression, RANK_ALL + 1) <= RANK_ALL:
            return self._match(expression, *args)
        best = ""  # the widest fields whose matches are still few enough to rank
        for fields in ("{name stem}", "{name description stem}"):
            narrowed = f"{fields} : ({expression})"
            if self.matches(narrowed, RANK_ALL + 1) > RANK_ALL:
                break
            best = narrowed
        ranked = self._match(best, *args) if best else []
        if len(ranked) >= limit:
            return ranked
        rest = self._match(expression, *args, newest=True, skip=ranked)
        # Scores after every bm25 score (those are negative), in the order found.
        rest = [row._replace(score=float(n)) for n, row in enumerate(rest, 1)]
        return ranked + rest[: limit - len(ranked)]

    def _match(
        self,
        expression: str,
        filters: "Filters",
        stale_before: float,
        limit: int,
        *,
        newest: bool = False,
        skip: Sequence[Row] = (),
    ) -> list[Row]:
        where, args = filters.sql()
        if skip:
            where += f" AND f.id NOT IN ({', '.join(str(r.id) for r in skip)})"
        score = "0.0" if newest else f"bm25(docs, {', '.join(map(str, WEIGHTS))})"
        order = "docs.rowid DESC" if newest else "(f.date < ?), score"
        sql = (
            f"{self._SELECT}, {score} AS score, "
            "snippet(docs, -1, char(1), char(2), '…', 14) "
            "FROM docs JOIN files f ON f.id = docs.rowid "
            "LEFT JOIN pointers p ON p.file = f.file "
            f"WHERE docs MATCH ?{where} ORDER BY {order} LIMIT ?"
        )
        values = (expression, *args, *(() if newest else (stale_before,)), limit)
        rows = self._retrying(lambda: self.conn.execute(sql, values).fetchall())
        return [_row(r, score=r[10], snippet=r[11]) for r in rows]

    def matches(self, expression: str, at_most: int | None = None) -> int:
        """How many memories match an FTS5 expression, counting no further than `at_most`
        (no ranking: cheap, and it stops there)."""
        sql = "SELECT count(*) FROM docs WHERE docs MATCH ?"
        args: tuple[object, ...] = (expression,)
        if at_most is not None:
            sql = "SELECT count(*) FROM (SELECT rowid FROM docs WHERE docs MATCH ? LIMIT ?)"
            args = (expression, at_most)
        return int(self._retrying(lambda: self.conn.execute(sql, args).fetchone()[0]))

    def has(self, expression: str) -> bool:
        """Whether any memory matches an FTS5 expression."""
        sql = "SELECT 1 FROM docs WHERE docs MATCH ? LIMIT 1"
        return bool(self._retrying(lambda: self.conn.execute(sql, (expression,)).fetchone()))

    def named(self, keys: Sequence[str], **filters: Any) -> list[Row]:
        """Memories whose name or file stem is one of `keys` (lower-cased)."""
        if not keys:
            return []
        marks = ", ".join("?" for _ in keys)
        where, args = Filters(
            filters.get("type_"), filters.get("since"), filters.get("until")
        ).sql()
        sql = (
            f"{self._SELECT} FROM files f LEFT JOIN pointers p ON p.file = f.file "
            f"WHERE f.kind = 'memory' AND (f.key IN ({marks}) OR f.stem IN ({marks})){where} "
            "ORDER BY f.file"
        )
        rows = self._retrying(lambda: self.conn.execute(sql, (*keys, *keys, *args)).fetchall())
        return [_row(r) for r in rows]

    def recent(
        self,
        *,
        type_: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 20,
    ) -> list[Row]:
        """Memories in a time frame, newest first."""
        where, args = Filters(type_, since, until).sql()
        sql = (
            f"{self._SELECT} FROM files f LEFT JOIN pointers p ON p.file = f.file "
            f"WHERE f.kind = 'memory'{where} ORDER BY f.date DESC, f.file LIMIT ?"
        )
        rows = self._retrying(lambda: self.conn.execute(sql, (*args, limit)).fetchall())
        return [_row(r) for r in rows]

    def by_refs(self, kind: str, column: str, values: Sequence[str]) -> list[tuple[Row, str, str]]:
        """Memories with a reference of `kind` whose `column` (norm or base) is one of
        `values`; each with the reference as written and as normalised."""
        assert column in ("norm", "base")
        if not values:
            return []
        marks = ", ".join("?" for _ in values)
        # INDEXED BY: refs_ref's kind would do as well for the planner, which has no stats.
        sql = (
            f"{self._SELECT}, r.ref, r.norm FROM refs r INDEXED BY refs_{column} "
            "JOIN cites c ON c.rid = r.rid JOIN files f ON f.id = c.id "
            "LEFT JOIN pointers p ON p.file = f.file "
            f"WHERE r.kind = ? AND r.{column} IN ({marks}) ORDER BY f.file"
        )
        rows = self._retrying(lambda: self.conn.execute(sql, (kind, *values)).fetchall())
        return [(_row(r), r[10], r[11]) for r in rows]

    def path_refs_under(self, prefixes: Sequence[str]) -> list[tuple[Row, str]]:
        """Memories citing a path that is one of `prefixes` or lies below one."""
        out: list[tuple[Row, str]] = []
        for prefix in prefixes:
            sql = (
                f"{self._SELECT}, r.ref FROM refs r INDEXED BY refs_norm "
                "JOIN cites c ON c.rid = r.rid JOIN files f ON f.id = c.id "
                "LEFT JOIN pointers p ON p.file = f.file "
                "WHERE r.kind = 'path' AND r.norm >= ? AND r.norm < ? ORDER BY f.file"
            )
            low, high = prefix + "/", prefix + "0"  # "0" sorts right after "/"
            rows = self._retrying(lambda: self.conn.execute(sql, (low, high)).fetchall())  # noqa: B023
            out += [(_row(r), r[10]) for r in rows]
        return out

    def row(self, file: str) -> Row | None:
        sql = (
            f"{self._SELECT} FROM files f LEFT JOIN pointers p ON p.file = f.file "
            "WHERE f.file = ? AND f.kind = 'memory'"
        )
        found = self._retrying(lambda: self.conn.execute(sql, (file,)).fetchone())
        return _row(found) if found else None

    def excluded(self) -> list[Excluded]:
        sql = "SELECT file, kind, problem, hint FROM files WHERE kind != 'memory' ORDER BY file"
        rows = self._retrying(lambda: self.conn.execute(sql).fetchall())
        return [Excluded(f, k, p + (f" ({h})" if h else "")) for f, k, p, h in rows]

    def starting(self, prefix: str, limit: int) -> list[str]:
        """Up to `limit` distinct words of the dir's memories (as written, lower-cased) that
        start with `prefix`, in order."""
        sql = "SELECT term FROM words_vocab WHERE term >= ? AND term < ? LIMIT ?"
        args = (prefix, prefix + "\U0010ffff", limit)
        found: list[str] = self._retrying(lambda: [t for (t,) in self.conn.execute(sql, args)])
        return found

    def vocabulary(self) -> "Vocabulary":
        """Every distinct word of the dir's memories, as written (lower-cased), by length,
        for fuzzy matching; kept while the index does not change."""
        conn = self.conn
        generation = (int(conn.execute("PRAGMA data_version").fetchone()[0]), self._writes)
        if self._vocab is not None and self._vocab[0] == generation:
            return self._vocab[1]

        def read() -> Vocabulary:
            # In the vocabulary's order, each word joined into its length's piece as it comes:
            # no sort (SQLite's GROUP BY held every word at once: 6 MB of the MCP server's
            # peak at 110,000 words), and at most VOCABULARY_PIECE words per length pending.
            pending: dict[int, list[str]] = {}
            pieces: dict[int, list[str]] = {}
            for (term,) in conn.execute("SELECT term FROM words_vocab"):
                words = pending.setdefault(len(term), [])
                words.append(term)
                if len(words) == VOCABULARY_PIECE:
                    pieces.setdefault(len(term), []).append("\n".join(words))
                    words.clear()
            for length, words in pending.items():
                if words:
                    pieces.setdefault(length, []).append("\n".join(words))
            return Vocabulary(pieces)

        vocabulary: Vocabulary = self._retrying(read)
        self._vocab = (generation, vocabulary)
        return vocabulary


class Vocabulary:
    """Words by length, kept as strings of VOCABULARY_PIECE words each: 110,000 words held
    as str objects were 8 MB of the MCP server's memory, joined 1 MB. A typo query asks for
    a few lengths, whose words are split out a chunk of at most VOCABULARY_CHUNK at a time:
    split out whole, the most common lengths' words were 12 MB of the server's peak.
    `held_most`: the most words a chunk held, for the tests."""

    __slots__ = ("_pieces", "held_most")

    def __init__(self, pieces: dict[int, list[str]]) -> None:
        self._pieces = pieces
        self.held_most = 0

    def chunks(self, length: int) -> Iterator[list[str]]:
        """The words of this length, in order, at most VOCABULARY_CHUNK at a time."""
        pieces = self._pieces.get(length, [])
        step = max(1, VOCABULARY_CHUNK // VOCABULARY_PIECE)
        for start in range(0, len(pieces), step):
            words = "\n".join(pieces[start : start + step]).split("\n")
            self.held_most = max(self.held_most, len(words))
            yield words

    def __len__(self) -> int:
        return len(self._pieces)


def _row(r: Sequence[Any], *, score: float = 0.0, snippet: str = "") -> Row:
    try:
        flags = tuple(safejson.loads(r[6]))
    except ValueError:
        flags = ()
    return Row(r[0], r[1], r[2], r[3], r[4], r[5], flags, r[7], r[8], score, snippet, hidden=r[9])
