"""Whole-process work of the commands a person or an agent hook runs, as step counts and the
modules they load (never timings): what each command skips must stay skipped."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import Env, write_memory


def _probe(words: list[str], watched: tuple[str, ...]) -> tuple[list[str], str, int]:
    """Run `memoryd WORDS` in a fresh interpreter: which of `watched` it imported, its output
    and its exit code."""
    probe = ("import io, json, sys\nfrom memoryd.cli import main\n"
             "out = io.StringIO()\n"
             f"code = main({words!r}, out=out)\n"
             f"print(json.dumps([sorted(m for m in {watched!r} if m in sys.modules), "
             "out.getvalue(), code]))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False, env=os.environ.copy())  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded, out, code = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded, out, code


def test_status_of_a_stopped_daemon_counts_files_without_the_scan_machinery(
    env: Env, cli  # type: ignore[no-untyped-def]
) -> None:
    """`status` with no daemon gives each dir's memory count from its parse cache without
    importing the scanner (and with it YAML and the parsers) or making an entry per file.
    The old one loaded the whole cache through memoryd.scan just to count it."""
    folder = env.claude / "agent-memory" / "reviewer"
    for name in ("a.md", "b.md", "c.md"):
        write_memory(folder, name)
    (folder / "notes.txt").write_text("not a memory\n")
    assert cli("index", folder).code == 0
    loaded, out, code = _probe(["status", "--json"], ("memoryd.scan", "memoryd.memfile", "yaml"))
    assert code == 1 and loaded == []
    (row,) = json.loads(out)["dirs"]
    assert row["path"] == str(folder) and row["files"] == 3


def test_status_cache_header_is_the_scanners() -> None:
    """statusview reads the scan cache by its header, spelled out: it must be scan's."""
    from memoryd import scan, statusview

    assert statusview.SCAN_CACHE_HEADER == scan._CACHE_HEADER


def test_status_counts_nothing_from_a_damaged_cache(env: Env, cli) -> None:  # type: ignore[no-untyped-def]
    """A damaged cache is no count (as scan.load_cache takes it as no cache), not an error."""
    folder = env.claude / "agent-memory" / "reviewer"
    write_memory(folder, "a.md")
    assert cli("index", folder).code == 0
    (cache,) = Path(env.state).rglob("*.cache")
    cache.write_bytes(cache.read_bytes()[:-3])
    (row,) = json.loads(cli("status", "--json").out)["dirs"]
    assert row["files"] is None


def test_status_shows_alarms_without_the_version_store(env: Env) -> None:
    """`status` reads the version store's alarms file itself: it shows a mass change of the
    last day without importing memoryd.versions (and through it the index machinery). The
    old one went through cmd_versions, which imports both."""
    import time

    from memoryd import versions

    alarms = versions.for_runtime(env.runtime()).root / versions.ALARMS
    alarms.parent.mkdir(parents=True)
    rows = [{"dir": "/x/old", "t": time.time() - 2 * 86400, "deleted": 9, "rewritten": 0},
            {"dir": "/x/new", "t": time.time() - 60, "deleted": 5, "rewritten": 1}]  # fmt: skip
    alarms.write_text(json.dumps(rows))
    watched = ("memoryd.versions", "memoryd.cmd_versions", "memoryd.index", "yaml")
    loaded, out, _ = _probe(["status"], watched)
    assert loaded == []
    assert "ALARM /x/new: 5 memory files deleted and 1 rewritten" in out
    assert "/x/old" not in out


def test_held_archive_split_is_the_line_split() -> None:
    """index_held's split is the lookbehind split it replaced (after each "\\n", no empty
    chunk) on every mix of endings: CR alone, CRLF, a missing final newline, blank lines,
    nothing at all."""
    import itertools
    import re

    from memoryd.index_held import split_after_newlines

    old = re.compile(rb"(?<=\n)")
    pieces = (b"", b"a", b"\n", b"\r", b"\r\n", b"\n\n", b"- [x](x.md) \xe2\x80\x94 d")
    for combo in itertools.product(pieces, repeat=4):
        data = b"".join(combo)
        assert split_after_newlines(data) == [c for c in old.split(data) if c], data
