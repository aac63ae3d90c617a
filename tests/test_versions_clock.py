"""The version store's retention under a wrong wall clock: a version goes only once memoryd
has watched it ended for versions.keep_days (the boot clock, the clock record the trash's
retention keeps), never on one reading of the wall clock."""

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from memoryd.indexing.scan import scan_dir
from memoryd.runtime import Runtime
from memoryd.versions import kept, listing, prune
from tests.conftest import Env
from tests.conftest import write_lesson as _mem

DAY = 86400.0


def _daemon_start(env: Env, wall: float) -> Runtime:
    """What a daemon's start does to the store (it prunes at once), its wall clock at `wall`:
    the boot clock is the machine's, as for a real process whose clock is wrong."""
    rt = replace(env.runtime(), clock=lambda: wall)
    with kept.keeping(rt, daemon=True):
        pass
    return rt


def _listed(cli: Any, folder: Path) -> list[str]:
    doc = json.loads(cli("trash", "list", folder, "--json").out)
    return [d["file"] for d in doc["deleted_outside"]]


def test_a_daemon_start_with_the_clock_a_month_fast_prunes_no_deleted_memory(
    env: Env, cli: Any
) -> None:
    """A memory deleted outside memoryd is listed by `trash list`; one daemon start with the
    wall clock 31 days fast (fixed a minute later) pruned its only copy for good: `history`
    said "bytes pruned: not restorable". It stays listed and restorable, byte for byte."""
    folder = env.home / "mem"
    folder.mkdir()
    folder = folder.resolve()
    gone = _mem(folder, "a.md", "the only copy of a lesson")
    _mem(folder, "b.md", "another lesson")
    assert cli("index", folder).code == 0
    (folder / "a.md").unlink()
    assert cli("index", folder).code == 0
    assert _listed(cli, folder) == ["a.md"]
    _daemon_start(env, time.time() + 31 * DAY)
    _daemon_start(env, time.time())  # the clock fixed: the next start
    history = cli("history", folder / "a.md")
    assert "not restorable" not in history.out, history.out
    assert _listed(cli, folder) == ["a.md"]
    back = cli("trash", "restore", "a.md", folder)
    assert back.code == 0, back.err
    assert (folder / "a.md").read_bytes() == gone


def test_a_deletion_seen_while_the_clock_was_a_year_slow_outlives_the_clock_put_right(
    env: Env,
) -> None:
    """A deletion (and a rewrite) seen by a process whose clock was a year slow (a machine
    booting before its clock syncs) were pruned at the first prune once the clock was right:
    their log lines said a year ago. Memoryd watched them ended for minutes: both stay."""
    folder = env.home / "mem"
    folder.mkdir()
    folder = folder.resolve()
    now = time.time()
    slow = kept.VersionStore(env.state, clock=lambda: now - 365 * DAY)
    deleted = _mem(folder, "a.md", "deleted while the clock was slow")
    first = _mem(folder, "b.md", "rewritten while the clock was slow")
    with kept.using(slow):
        cache = scan_dir(folder, versions=slow).files
        (folder / "a.md").unlink()
        _mem(folder, "b.md", "its new text")
        scan_dir(folder, cache, versions=slow)
    right = kept.VersionStore(env.state)  # the clock put right, in the daemon's prune
    result = prune.prune(right)
    assert result.removed == []
    assert [d.name for d in listing.deleted(right, folder)] == ["a.md"]
    assert right.read_object(listing.versions_of(right, folder, "a.md")[-1].sha256) == deleted
    older = listing.versions_of(right, folder, "b.md")[0]
    assert older.stored and right.read_object(older.sha256) == first
