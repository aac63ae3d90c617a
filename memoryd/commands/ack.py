"""`memoryd ack FILE...`: a person saw a memory's flag for review; do not list it again until
it changes (memoryd.acked). Writes memoryd's own record in the state dir, never the file."""

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memoryd.display import shown
from memoryd.errors import MemorydError

if TYPE_CHECKING:
    from memoryd.runtime import Runtime

EXIT_OK, EXIT_FINDINGS = 0, 1


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "ack",
        description="Record that a person saw the flag on each memory (partially stale, or "
        "fully stale and kept by a guard): dream reports do not list it again until its "
        "bytes or its references' status change. The record is memoryd's, in its state dir; "
        "the memory file is never touched.",
    )
    p.add_argument(
        "files", nargs="+", type=Path, metavar="FILE|NAME", help="flagged memories: paths or names"
    )


def _checked(file: Path) -> Path:
    file = file.expanduser().absolute()
    if file.is_symlink():
        raise MemorydError(f"{file}: a symlink, which memoryd never follows (name its target)")
    if not file.is_file():
        raise MemorydError(f"{file}: no such memory file (name a *.md file in a memory dir)")
    return file


def run(args: argparse.Namespace, rt: "Runtime", out: TextIO) -> int:
    from memoryd import acked
    from memoryd.commands.resolve import is_path, resolve
    from memoryd.discover import MemoryDir, memory_dir_of
    from memoryd.dream.plan import plan_pass
    from memoryd.dream.run import (
        Listing,
        RepoCache,
        consult_map,
        consult_sources,
        inventory,
        probe_ownership,
        restored_pins,
        thresholds,
    )
    from memoryd.restored import now_iso

    by_dir: dict[Path, tuple[MemoryDir, list[Path]]] = {}
    for given in args.files:  # a path, or a name as memoryd.commands.resolve finds it
        file = _checked(given if is_path(str(given)) else resolve(rt, str(given)).path)
        md = memory_dir_of(file, rt.config)
        by_dir.setdefault(md.real_path, (md, []))[1].append(file)
    repos = RepoCache.of(rt)
    failed = False
    for real_path, (md, files) in by_dir.items():
        with rt.store.lock(real_path), rt.store.reading(real_path):
            # The flag as a pass sees it now (what the person was shown may be older).
            _, scan = probe_ownership(rt, md)
            listing = Listing.of(scan) if scan is not None else None
            inv = inventory(md, rt, repos.checker(md.repo_root), listing=listing)
            now = rt.clock()
            since = now - rt.config.dream.consult_window
            consults = consult_map(inv.items, consult_sources(md, rt, save=False), since)
            plan = plan_pass(inv.items, now, thresholds(rt), consults, restored_pins(rt, md, inv))
            flagged = {f.filename for f in plan.flagged}
            acks = []
            for file in files:
                item = plan.items.get(file.name)
                if item is None:
                    out.write(f"{shown(file)}: not a memory memoryd reads; nothing recorded\n")
                    failed = True
                elif file.name not in flagged:
                    out.write(f"{shown(file)}: not flagged for review; nothing to acknowledge\n")
                    failed = True
                else:
                    acks.append(
                        acked.Ack(file.name, item.sha256, acked.refs_digest(item), now_iso(now))
                    )
            if acks:
                acked.record(rt.store, real_path, acks)
            for ack in acks:
                rt.audit.write("flag.acknowledged", dir=md.path, file=ack.file, sha256=ack.sha256)
                out.write(
                    f"acknowledged {shown(md.path / ack.file)}: not listed for review again until "
                    "its bytes or its references' status change\n"
                )
    return EXIT_FINDINGS if failed else EXIT_OK
