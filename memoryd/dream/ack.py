"""`memoryd ack`: record that a person saw a memory's flag for review, as a pass sees it now
(memoryd.dream.acked). Writes memoryd's own record, never the file."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memoryd.discover.finder import memory_dir_of
from memoryd.discover.found import MemoryDir
from memoryd.dream import acked
from memoryd.dream.read import read_and_plan
from memoryd.dream.repocache import RepoCache
from memoryd.runtime import Runtime
from memoryd.trash.restored import now_iso


@dataclass(slots=True)
class Acknowledged:
    done: list[Path] = field(default_factory=list)  # recorded
    refused: list[tuple[Path, str]] = field(default_factory=list)  # not recorded: why


def acknowledge(rt: Runtime, files: Sequence[Path]) -> Acknowledged:
    """Acknowledge each flagged memory of `files` (absolute paths of regular files), each
    dir under its writer lock; a file that is no memory, or not flagged, is refused."""
    by_dir: dict[Path, tuple[MemoryDir, list[Path]]] = {}
    for file in files:
        md = memory_dir_of(file, rt.config)
        by_dir.setdefault(md.real_path, (md, []))[1].append(file)
    repos = RepoCache.of(rt)
    out = Acknowledged()
    for real_path, (md, in_dir) in by_dir.items():
        with rt.store.lock(real_path):
            _acknowledge_in(rt, md, in_dir, repos, out)
    return out


def _acknowledge_in(
    rt: Runtime, md: MemoryDir, files: list[Path], repos: RepoCache, out: Acknowledged
) -> None:
    # The flag as a pass sees it now (what the person was shown may be older).
    reading = read_and_plan(rt, md, repos)
    plan = reading.plan
    flagged = {f.filename for f in plan.flagged}
    acks = []
    for file in files:
        item = plan.items.get(file.name)
        if item is None:
            out.refused.append((file, "not a memory memoryd reads; nothing recorded"))
        elif file.name not in flagged:
            out.refused.append((file, "not flagged for review; nothing to acknowledge"))
        else:
            acks.append(
                acked.Ack(file.name, item.sha256, acked.refs_digest(item), now_iso(reading.now))
            )
    if acks:
        acked.record(rt.store, md.real_path, acks)
    for ack in acks:
        rt.audit.write("flag.acknowledged", dir=md.path, file=ack.file, sha256=ack.sha256)
        out.done.append(md.path / ack.file)
