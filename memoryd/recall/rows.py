"""The rows of one memory in a search index: its `files` row, its full text, its references.

A reference is a `refs` row once, however many memories cite it (`cites`; see store._INDEXES).
"""

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memoryd.recall.records import RefRow, path_refs_of, path_row, stem_words, symbol_row

if TYPE_CHECKING:
    from memoryd.dream.refs import Refs

# A reference put in once, and found by what it is; one no memory cites now.
_REF = "INSERT OR IGNORE INTO refs(kind, ref, norm, base) VALUES (?, ?, ?, ?)"
_REF_WITH_ID = "INSERT INTO refs(rid, kind, ref, norm, base) VALUES (?, ?, ?, ?, ?)"
_REF_ID = "SELECT rid FROM refs WHERE kind = ? AND ref = ?"
_ORPHAN = "DELETE FROM refs WHERE rid = ? AND NOT EXISTS (SELECT 1 FROM cites WHERE rid = ?)"


class RefIds:
    """A first build's reference ids, given here by kind and reference (0: no row), the
    refs table being empty: no lookup per citation."""

    __slots__ = ("ids", "last")

    def __init__(self) -> None:
        self.ids: dict[str, dict[str, int]] = {"path": {}, "symbol": {}}
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


def delete_doc(conn: sqlite3.Connection, doc_id: int) -> None:
    row = conn.execute(
        "SELECT name, description, body, stem FROM docs WHERE rowid = ?", (doc_id,)
    ).fetchone()
    if row is not None:
        # The words table keeps no text of its own: a delete hands it the text it took.
        conn.execute(
            "INSERT INTO words(words, rowid, text) VALUES ('delete', ?, ?)",
            (doc_id, "\n".join(row)),
        )
        conn.execute("DELETE FROM docs WHERE rowid = ?", (doc_id,))
    rids = conn.execute("DELETE FROM cites WHERE id = ? RETURNING rid", (doc_id,)).fetchall()
    # A reference no other memory cites goes with it.
    conn.executemany(_ORPHAN, [(rid, rid) for (rid,) in rids])
    conn.execute("DELETE FROM files WHERE id = ?", (doc_id,))


def insert_record(
    conn: sqlite3.Connection, values: dict[str, Any], first_build: "RefIds | None"
) -> None:
    """Put one file's record (records.read_record) in the index."""
    name = values["file"]
    body = values.pop("body", None)
    refs = values.pop("refs", None)
    columns = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    cursor = conn.execute(
        f"INSERT INTO files({columns}) VALUES ({marks})",  # noqa: S608 - our own column names
        tuple(values.values()),
    )
    doc_id = int(cursor.lastrowid or 0)
    if body is not None and refs is not None:
        texts = (values["name"], values["description"], body, stem_words(name))
        conn.execute(
            "INSERT INTO docs(rowid, name, description, body, stem) VALUES (?, ?, ?, ?, ?)",
            (doc_id, *texts),
        )
        conn.execute("INSERT INTO words(rowid, text) VALUES (?, ?)", (doc_id, "\n".join(texts)))
        cite(conn, doc_id, refs, first_build)


def cite(conn: sqlite3.Connection, doc_id: int, refs: "Refs", first_build: "RefIds | None") -> None:
    """A memory's references (the dream pass's extraction): each a `refs` row once,
    cited by the memory in `cites`. `first_build`: the ids a first build gives (the table
    was empty), else None."""
    cited: dict[int, None] = {}
    if first_build is None:
        for row in path_refs_of(refs):
            conn.execute(_REF, row)
            cited[conn.execute(_REF_ID, row[:2]).fetchone()[0]] = None
    else:
        # A first build: the ids are given here, and each distinct reference is made a
        # row once (the table was empty).
        kinds: tuple[tuple[str, Sequence[str], Callable[[str], RefRow | None]], ...] = (
            ("path", refs.paths, path_row),
            ("symbol", refs.symbols, symbol_row),
        )
        for kind, refs_of_kind, row_of in kinds:
            ids = first_build.ids[kind]
            for ref in refs_of_kind:
                rid = ids.get(ref)
                if rid is None:
                    made = row_of(ref)
                    rid = ids[ref] = 0 if made is None else first_build.next()
                    if made is not None:
                        conn.execute(_REF_WITH_ID, (rid, *made))
                if rid:
                    cited[rid] = None
    conn.executemany("INSERT INTO cites(id, rid) VALUES (?, ?)", [(doc_id, r) for r in cited])
