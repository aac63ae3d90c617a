"""Recovery at start-up: finish or roll back every pass a crash left unfinished (DESIGN §2.3)."""

from memoryd import journal
from memoryd.discover import explicit_dirs
from memoryd.errors import MemorydError
from memoryd.indexer import index_dir
from memoryd.runtime import Runtime


def recover(rt: Runtime) -> list[journal.Recovery]:
    """Finish or roll back every pass a crash left unfinished; log each as `pass.recovered`."""
    done = []
    for path in journal.pending(rt.paths.state_dir):
        entry = journal.load(path)
        if entry is None:
            rt.audit.write(
                "pass.recovered", journal=str(path), outcome="unreadable journal set aside"
            )
            path.rename(path.with_suffix(".unreadable"))
            continue
        if not entry.committed and entry.dir.is_dir():
            recovery = journal.settle(entry)
            try:
                md = explicit_dirs(entry.dir, rt.config)[0]
            except MemorydError:
                md = None
            if md is not None:
                index_dir(rt, md, forget={r.original_name for r in recovery.moved})
            rt.audit.write(
                "pass.recovered", dir=entry.dir, journal=path.name, outcome=recovery.outcome
            )
            done.append(recovery)
            if recovery.unrecorded:
                continue  # kept: the next command writes the missing manifest records
        path.unlink()
    return done
