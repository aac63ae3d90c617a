"""Consult evidence from memoryd's MCP server: every answer the agent got is a row in the
dir's served log (`memoryd.dream.consult.served_log`, in the state dir), in the format of the
dream skill's `memory-consult.jsonl`, which the dream pass's consult guard reads. Nothing is
written in the user's repo or memory dirs."""

import contextlib
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from memoryd.dream.consult import served_log
from memoryd.paths import ensure_private_dir

# Past this size the log keeps its newer half (rows older than any consult window matter to
# no guard; the newest rows are the ones that do).
MAX_LOG_BYTES = 4 * 1024 * 1024
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def record(
    state_dir: Path,
    real_path: Path,
    *,
    tool: str,
    names: Sequence[str],
    query: str,
    now: float,
) -> Path:
    """Append one row (`ts`, `tool`, `names`, `query`) to the dir's served log, 0600."""
    path = served_log(state_dir, real_path)
    ensure_private_dir(path.parent)
    stamp = datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    row = {"ts": stamp, "tool": tool, "names": sorted(set(names)), "query": query}
    line = (json.dumps(row, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")
    fd = os.open(path, _APPEND, 0o600)
    try:
        st = os.fstat(fd)
        if st.st_size + len(line) > MAX_LOG_BYTES:
            _keep_newer_half(path)
            os.close(fd)
            fd = os.open(path, _APPEND, 0o600)
        os.write(fd, line)  # one write of one line: O_APPEND keeps concurrent rows whole
    finally:
        os.close(fd)
    return path


def _keep_newer_half(path: Path) -> None:
    from memoryd import fsops
    from memoryd.paths import read_bounded

    with contextlib.suppress(OSError):
        data = read_bounded(path, MAX_LOG_BYTES * 2, follow=False)
        cut = data.find(b"\n", len(data) // 2)
        fsops.write_private(path, data[cut + 1 :] if cut >= 0 else b"", durable=False)
