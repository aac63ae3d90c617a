"""Consult evidence from memoryd's MCP server: every answer the agent got is a row in the
state store (the `consult_served` table), in the format of the dream skill's
`memory-consult.jsonl` (`ts`, `tool`, `names`, `query`), which the dream pass's consult guard
reads (`served`). Nothing is written in the user's repo or memory dirs."""

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from memoryd.dream.consult import SERVED_SHOWN, ConsultLog
from memoryd.model import safejson
from memoryd.storage.state import dir_key
from memoryd.storage.statedb import Schema, StateDB

# Past this many rows a dir keeps its newer half (rows older than any consult window matter to
# no guard; the newest rows are the ones that do).
MAX_ROWS = 40_000
SCHEMA = Schema(
    "consult_served",
    1,
    """CREATE TABLE consult_served (dir TEXT NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT,
                                    ts TEXT NOT NULL, tool TEXT NOT NULL, names TEXT NOT NULL,
                                    query TEXT NOT NULL);
       CREATE INDEX consult_served_by_dir ON consult_served (dir, seq)""",
    ("consult_served",),
)


def record(
    state_dir: Path,
    real_path: Path,
    *,
    tool: str,
    names: Sequence[str],
    query: str,
    now: float,
) -> None:
    """Add one row (`ts`, `tool`, `names`, `query`) for the dir."""
    stamp = datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    db = StateDB.in_state_dir(state_dir)
    db.ensure(SCHEMA)
    key = dir_key(real_path)
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO consult_served(dir, ts, tool, names, query) VALUES (?, ?, ?, ?, ?)",
            (key, stamp, tool, json.dumps(sorted(set(names)), ensure_ascii=True), query),
        )
        (count,) = conn.execute("SELECT count(*) FROM consult_served WHERE dir = ?", (key,))
        if count[0] > MAX_ROWS:
            conn.execute(
                "DELETE FROM consult_served WHERE dir = ? AND seq <= (SELECT seq FROM "
                "consult_served WHERE dir = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (key, key, MAX_ROWS // 2),
            )


def served(state_dir: Path, real_path: Path) -> ConsultLog | None:
    """What memoryd's MCP server answered about the dir, as a consult log; None when it
    answered nothing (no evidence either way)."""
    db = StateDB.in_state_dir(state_dir)
    conn = db.reader(SCHEMA)
    if conn is None:
        return None  # nothing was ever answered
    sql = "SELECT ts, names, query FROM consult_served WHERE dir = ? ORDER BY seq"
    rows = conn.execute(sql, (dir_key(real_path),)).fetchall()
    if not rows:
        return None
    log = ConsultLog(db.path, shown=SERVED_SHOWN)
    for ts, names, query in rows:
        log.add({"ts": ts, "names": safejson.loads(names), "query": query})
    return log
